#!/bin/sh
# Runs spec/oom/'s failing-allocator scripts in the hosts make test-oom
# builds (csrc/test/oom_host.c), each on the module built for its host,
# whose C allocations on the main thread fail with Lua's.
#   sh scripts/oom.sh RUNTIME BACKEND SCRIPT   one run (lua5.4|luajit|lua5.1,
#                                              c|ffi|lua, a script in spec/oom/)
#   sh scripts/oom.sh                          every run make test-oom makes
# Each run prints "N passed, 0 failed" or what went wrong, and exits non-zero
# on a failure.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1

one() ( # $1: runtime, $2: backend, $3: script
  case $1 in lua5.4) host=build/oom_host ;; *) host=build/oom_host_$1 ;; esac
  eval "$(sh scripts/env.sh "$1")"
  export LUA_CPATH="$top/build/oom/$1/?.so;;" STAGEHAND_BACKEND="$2"
  # (luv itself loses a handle that Lua's memory ran out under: leak
  # checks off for the luv driver's script; the others check for leaks.
  # On the FFI backend, the leaks its constructors cannot guard, and no
  # other, are suppressed: spec/oom/lsan_ffi.supp says why.)
  case $3 in *luv*) export ASAN_OPTIONS=detect_leaks=0 ;; esac
  [ "$1" = luajit ] && [ -n "$LUAJIT_SKIP" ] && export OOM_SKIP="$LUAJIT_SKIP"
  [ "$2" = ffi ] && export LSAN_OPTIONS="suppressions=$top/spec/oom/lsan_ffi.supp:print_suppressions=0"
  exec "$host" "spec/oom/$3"
)

if [ $# -gt 0 ]; then
  one "$@"
  exit
fi
rc=0 passed=0 failed=0
# LuaJIT's own crash under a failing allocator (spec/oom/luajit_tostring_crash.lua
# says what it is): while the LuaJIT here has it, the scenarios that meet it
# are left out on LuaJIT, and said to be.
LUAJIT_SKIP=
if ! build/oom_host_luajit spec/oom/luajit_tostring_crash.lua >/dev/null 2>&1; then
  LUAJIT_SKIP="in a round"
  echo "(LuaJIT crashes by itself when memory runs out in tostring(number), spec/oom/luajit_tostring_crash.lua:" \
    "on LuaJIT, the scenarios named \"...$LUAJIT_SKIP...\" are left out)"
fi
# (LuaJIT on the pure-Lua core too, as a LÖVE game runs where the kit has
# no native core: its operations only, worker pools need the native core
# outside LÖVE. On Lua 5.1 to 5.4 a call can itself need memory partway
# through the pure core's updates, which the guide says; LuaJIT's calls
# live on its Lua stack.)
for run in "lua5.4 c" "luajit c" "luajit ffi" "luajit lua" "lua5.1 c"; do
  for script in failing_alloc.lua failing_alloc_pools.lua failing_alloc_luv.lua; do
    # shellcheck disable=SC2086
    set -- $run
    [ "$2" = lua ] && [ "$script" != failing_alloc.lua ] && continue
    printf '%s, %s backend, %s: ' "$1" "$2" "$script"
    said=$(one "$1" "$2" "$script" 2>&1) || rc=1
    printf '%s\n' "$said" | grep -v '^\[stagehand.testing\]'
    # (the sums: "N passed, 0 failed", or "F of N failing runs went wrong",
    # or neither, a crash, which counts as one failure)
    p=$(printf '%s\n' "$said" | sed -n 's/^\([0-9]*\) passed, 0 failed.*/\1/p' | tail -1)
    w=$(printf '%s\n' "$said" | sed -n 's/^\([0-9]*\) of \([0-9]*\) failing runs went wrong.*/\1 \2/p' | tail -1)
    if [ -n "$p" ]; then
      passed=$((passed + p))
    elif [ -n "$w" ]; then
      # shellcheck disable=SC2086
      set -- $w
      passed=$((passed + $2 - $1)) failed=$((failed + $1))
    else
      failed=$((failed + 1))
    fi
  done
done
echo "$passed passed, $failed failed (every allocation of each operation in turn, on Lua 5.4, LuaJIT and Lua 5.1)"
[ "$failed" -eq 0 ] || rc=1
exit $rc
