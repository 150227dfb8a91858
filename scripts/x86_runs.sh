#!/bin/sh
# Exits 0 when this kernel runs 32-bit x86 Linux programs (the i686 cross
# compiler builds one to try), 1 when it does not: a kernel built without
# IA32 emulation (some cloud VMs) runs neither 32-bit LuaJIT's build tools
# nor wine's 32-bit half. The answer is kept in build/x86_runs.
top=$(cd "$(dirname "$0")/.." && pwd)
mark="$top/build/x86_runs"
if [ -f "$mark" ]; then [ "$(cat "$mark")" = yes ]; exit; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf 'int main(void) { return 42; }\n' >"$dir/t.c"
# (no i686 compiler yet: no answer kept, so that one asked later tries)
i686-linux-gnu-gcc -o "$dir/t" "$dir/t.c" >/dev/null 2>&1 || exit 1
"$dir/t" >/dev/null 2>&1
if [ $? -eq 42 ]; then answer=yes; else answer=no; fi
mkdir -p "$top/build" && echo "$answer" >"$mark"
[ "$answer" = yes ]
