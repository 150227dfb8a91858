#!/bin/sh
# A Windows core built for another Lua, found by a program that can also
# find that Lua's DLL (here build/windows, where lua51.dll sits beside
# luajit.exe and is the current directory of lua54.exe): loaded, LuaJIT's
# core would call lua51.dll with Lua 5.4's state and crash the process.
# stagehand must refuse it unloaded, name what it was built for, and (with
# no backend asked for) run on its pure-Lua core. Needs make windows.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top/build/windows" || exit 1
# shellcheck source=scripts/wine_env.sh
. "$top/scripts/wine_env.sh"
export WINEDEBUG=-all
unset LUA_PATH LUA_CPATH LUA_PATH_5_4 LUA_CPATH_5_4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/stagehand"
cpath="Z:$(printf '%s' "$tmp" | tr / '\\')\\?.dll"
# (printf, not echo: the programs' output holds Windows paths, and sh's
# echo reads "\c" in them as "stop here")
fail() { echo "$1"; printf '%s\n' "$2" | head -8; exit 1; }
try() { # $1: exe, $2: backend; prints what the program said
  STAGEHAND_BACKEND=$2 LUA_CPATH=$cpath LUA_PATH='lua\?.lua;lua\?\init.lua' timeout 120 "$wine" "$1" \
    -e 'print("backend " .. require("stagehand").backend)' 2>&1
}
cp stagehand/_core.dll "$tmp/stagehand/_core.dll"
out=$(try lua5.4/lua54.exe c)
printf '%s\n' "$out" | grep -q "Unhandled\|page fault" && fail "LuaJIT's core crashed Lua 5.4" "$out"
printf '%s\n' "$out" | grep -q "_core.dll was built for LuaJIT or Lua 5.1 (it links lua51.dll), not for Lua 5.4" ||
  fail "LuaJIT's core under Lua 5.4 was not refused by name" "$out"
out=$(try lua5.4/lua54.exe "")
printf '%s\n' "$out" | grep -q "^backend lua" || fail "Lua 5.4 did not go on on the pure-Lua core" "$out"
cp lua5.4/stagehand/_core.dll "$tmp/stagehand/_core.dll"
out=$(try luajit.exe c)
printf '%s\n' "$out" | grep -q "_core.dll was built for Lua 5.4 (it links lua54.dll), not for LuaJIT" ||
  fail "Lua 5.4's core under LuaJIT was not refused by name" "$out"
echo "a core built for another Lua is refused unloaded on Windows, named, and the pure-Lua core runs"
