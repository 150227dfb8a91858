#!/bin/sh
# make soak-love / make soak-windows: spec/soak/threads.lua where games
# ship, seed by seed (SOAK_SEEDS from SOAK_FIRST).
#   love     inside LÖVE under Xvfb (spec/soak/love): the workers and
#            services are LÖVE threads, and LÖVE objects cross too; each
#            seed on the native core, then on the pure-Lua core, whose
#            pools, ports and round barriers are LÖVE channels
#   windows  the Windows runtimes under wine (make windows builds them):
#            LuaJIT through both backends, and Lua 5.4
# Stops at the first seed that fails, printing its output.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
first=${SOAK_FIRST:-1}
seeds=${SOAK_SEEDS:-20}
last=$((first + seeds - 1))
one() { # $1: what runs, then the command
  what=$1
  shift
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -q '^seed [0-9]*: '; then
    echo "!! $what failed (status $rc):"
    printf '%s\n' "$out" | grep -v -e "^ALSA lib" -e "^AL lib" | tail -30
    exit 1
  fi
  echo "$what: $(printf '%s\n' "$out" | grep '^seed [0-9]*: ' | sed 's/^seed [0-9]*: //')"
}
case "$1" in
  love)
    eval "$(sh scripts/env.sh luajit)"
    echo "== threads soak inside LÖVE, seeds $first-$last"
    for s in $(seq "$first" "$last"); do
      one "LÖVE seed $s" timeout 300 xvfb-run -a love spec/soak/love "$s"
      one "LÖVE seed $s, pure-Lua core" env STAGEHAND_BACKEND=lua timeout 300 xvfb-run -a love spec/soak/love "$s"
    done
    ;;
  windows)
    cd build/windows || exit 1
    mkdir -p spec/soak spec/fixtures
    cp "$top/spec/soak/threads.lua" spec/soak/
    cp "$top/spec/seeded.lua" spec/ # (its check of a trace)
    cp "$top"/spec/fixtures/*.lua spec/fixtures/
    export WINEDEBUG=-all
    unset LUA_PATH LUA_CPATH LUA_PATH_5_4 LUA_CPATH_5_4 # (test_windows.sh says why)
    # shellcheck source=scripts/wine_env.sh
    . "$top/scripts/wine_env.sh"
    echo "== threads soak on Windows under wine, seeds $first-$last"
    for s in $(seq "$first" "$last"); do
      one "LuaJIT (FFI) seed $s" env STAGEHAND_BACKEND=ffi timeout 300 "$wine" luajit.exe spec/soak/threads.lua "$s"
      one "LuaJIT (C module) seed $s" env STAGEHAND_BACKEND=c timeout 300 "$wine" luajit.exe spec/soak/threads.lua "$s"
      one "Lua 5.4 seed $s" timeout 300 "$wine" lua5.4/lua54.exe spec/soak/threads.lua "$s"
    done
    ;;
  *)
    echo "usage: sh scripts/soak_platforms.sh love|windows" >&2
    exit 2
    ;;
esac
