#!/bin/sh
# make check-warnings: the C that ships (the core, both platform layers and
# the Lua bindings) compiles with no warning, and clang's static analyzer
# finds nothing in it. A warning or a finding fails the check, so one added
# by a change is seen in `make test` rather than scrolled past in a build.
#   gcc and clang, -O2 (the flow-based warnings need the optimizer), the
#     Makefile's warnings and this system's platform defines, with Lua
#     5.4's headers; the bindings again against LuaJIT's and Lua 5.1's
#     (their #if branches), gcc only;
#   MinGW-w64 (64-bit, and 32-bit where installed): the Win32 layer and the
#     bindings, as make windows builds them;
#   clang --analyze on every shipped file, the Win32 layer with MinGW's
#     headers (clang's own target for it).
# Run through the Makefile, which passes WARN, PLAT and the source lists.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
warn=${WARN:?run through make check-warnings}
plat=${PLAT-}
portable=${PORTABLE:?run through make check-warnings}
modules=${MODULES:?run through make check-warnings}
unix=csrc/platform/unix/sh_unix.c
win=csrc/platform/win/sh_win.c
inc="-Icsrc/core -Icsrc/platform -Icsrc/lua"
failed=0
files=0

# $1: what is being checked, then the command; its output is the finding.
run() {
  what=$1
  shift
  files=$((files + 1))
  if ! out=$("$@" 2>&1) || [ -n "$out" ]; then
    echo "!! $what:"
    echo "$out"
    failed=$((failed + 1))
  fi
}

for f in $portable $unix $modules; do
  for cc in gcc clang; do
    # shellcheck disable=SC2086 # (flag lists)
    run "$cc $f" $cc -std=c99 -O2 $warn $plat -Werror $inc -I/usr/include/lua5.4 -c "$f" -o /dev/null
  done
done
for lua in /usr/include/luajit-2.1 /usr/include/lua5.1; do
  # shellcheck disable=SC2086
  run "gcc, the bindings against $lua" gcc -std=c99 $warn $plat -Werror $inc -I$lua -fsyntax-only $modules
done
for mingw in x86_64-w64-mingw32-gcc i686-w64-mingw32-gcc; do
  command -v $mingw >/dev/null 2>&1 || continue
  for f in $portable $win $modules; do
    # shellcheck disable=SC2086
    run "$mingw $f" $mingw -std=c99 -O2 $warn -Werror $inc -I/usr/include/lua5.4 -c "$f" -o /dev/null
  done
done
for f in $portable $unix $modules; do
  # shellcheck disable=SC2086
  run "clang's analyzer, $f" clang --analyze -Xclang -analyzer-werror -std=c99 $plat $inc -I/usr/include/lua5.4 "$f" -o /dev/null
done
# shellcheck disable=SC2086
run "clang's analyzer, $win" clang --analyze -Xclang -analyzer-werror --target=x86_64-w64-mingw32 -std=c99 $inc "$win" -o /dev/null

if [ "$failed" -ne 0 ]; then
  echo "$failed of $files C checks failed"
  exit 1
fi
echo "$files C checks: no warning from gcc, clang or MinGW-w64 with $warn -Werror, and nothing from clang's analyzer"
