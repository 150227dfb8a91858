#!/bin/sh
# make check-warnings: the C that ships (the core, both platform layers and
# the Lua bindings, and the example C host) compiles with no warning, and
# the static analyzers (clang's and gcc's) find nothing in it. A warning or
# a finding fails the check, so one added by a change is seen in `make
# test` rather than scrolled past in a build.
#   gcc at -O2 (its flow-based warnings need the optimizer) with its
#     analyzer (-fanalyzer), and clang, the Makefile's warnings and this
#     system's platform defines, with Lua 5.4's headers; the bindings again
#     against LuaJIT's, Lua 5.3's, 5.2's and 5.1's (their #if branches),
#     gcc only;
#   MinGW-w64 (64-bit, and 32-bit where installed): the Win32 layer and the
#     bindings, as make windows builds them, the Win32 layer through gcc's
#     optimizer and analyzer;
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
checks=0

# $1: what is being checked, then the command; its output is the finding.
run() {
  what=$1
  shift
  checks=$((checks + 1))
  if ! out=$("$@" 2>&1) || [ -n "$out" ]; then
    echo "!! $what:"
    echo "$out"
    failed=$((failed + 1))
  fi
}

# (each file once through gcc for its warnings and its analyzer, once
# through clang's analyzer: they follow different paths)
for f in $portable $unix $modules; do
  # shellcheck disable=SC2086 # (flag lists)
  run "gcc $f" gcc -std=c99 -O2 -fanalyzer $warn $plat -Werror $inc -I/usr/include/lua5.4 -c "$f" -o /dev/null
  # shellcheck disable=SC2086
  run "clang's analyzer, $f" clang --analyze -Xclang -analyzer-werror -std=c99 $plat $inc -I/usr/include/lua5.4 "$f" -o /dev/null
done
# (clang's warnings come from its front end, whatever the optimizer does)
# shellcheck disable=SC2086
run "clang, the core and the bindings" clang -std=c99 $warn $plat -Werror $inc -I/usr/include/lua5.4 -fsyntax-only \
  $portable $unix $modules
for lua in /usr/include/luajit-2.1 /usr/include/lua5.3 /usr/include/lua5.2 /usr/include/lua5.1; do
  # shellcheck disable=SC2086
  run "gcc, the bindings against $lua" gcc -std=c99 $warn $plat -Werror $inc -I$lua -fsyntax-only $modules
done
# (the C host an engine programmer starts from, both ways it links: the
# module loaded beside it, and the core linked in, -DSH_LINKED)
host=examples/c_host/host.c
for lua in /usr/include/luajit-2.1 /usr/include/lua5.4 /usr/include/lua5.3; do
  for linked in "" -DSH_LINKED; do
    # shellcheck disable=SC2086
    run "gcc $host $linked against $lua" gcc -std=c99 -O2 $warn $plat $linked -Werror $inc -I$lua -c $host -o /dev/null
    # shellcheck disable=SC2086
    run "clang $host $linked against $lua" clang -std=c99 $warn $plat $linked -Werror $inc -I$lua -fsyntax-only $host
  done
done
for mingw in x86_64-w64-mingw32-gcc i686-w64-mingw32-gcc; do
  command -v $mingw >/dev/null 2>&1 || continue
  # shellcheck disable=SC2086
  run "$mingw, the Win32 layer and the bindings" $mingw -std=c99 $warn -Werror $inc -I/usr/include/lua5.4 \
    -fsyntax-only $portable $win $modules
  # (and the Win32 layer through the optimizer and the analyzer: the rest
  # went through gcc's above)
  # shellcheck disable=SC2086
  run "$mingw -O2 $win" $mingw -std=c99 -O2 -fanalyzer $warn -Werror $inc -c $win -o /dev/null
done
for linked in "" -DSH_LINKED; do
  # shellcheck disable=SC2086
  run "clang's analyzer, $host $linked" clang --analyze -Xclang -analyzer-werror -std=c99 $plat $linked $inc \
    -I/usr/include/luajit-2.1 $host -o /dev/null
done
# shellcheck disable=SC2086
run "clang's analyzer, $win" clang --analyze -Xclang -analyzer-werror --target=x86_64-w64-mingw32 -std=c99 $inc "$win" -o /dev/null

if [ "$failed" -ne 0 ]; then
  echo "$failed of $checks C checks failed"
  exit 1
fi
echo "$checks C checks: no warning from gcc, clang or MinGW-w64 with $warn -Werror, and nothing from clang's or gcc's analyzer"
