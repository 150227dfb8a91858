#!/bin/sh
# make test's check that LuaJIT says why when it ends up on the C module:
# a core built to export nothing but luaopen_stagehand__core (as a Windows
# DLL with a single dllexport does) is found, the FFI backend names the
# first function it lacks, and the C module runs, saying so once.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
dir=build/hidden/stagehand
mkdir -p "$dir"
printf '{ global: luaopen_stagehand__core; local: *; };\n' >build/hidden/exports.map
# shellcheck disable=SC2046
cc -std=c99 -O1 -fPIC $(sh scripts/probe.sh cc) -I/usr/include/luajit-2.1 -shared -o "$dir/_core.so" \
  csrc/core/*.c csrc/lua/*.c csrc/platform/unix/sh_unix.c -Wl,--version-script=build/hidden/exports.map -lm -ldl -lpthread || exit 1
out=$(LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua;;" LUA_CPATH="$top/build/hidden/?.so;;" luajit -e '
  local stagehand = require "stagehand"
  package.loaded["stagehand.core.backend"] = nil
  require "stagehand.core.backend" -- (a second load says nothing more)
  print("backend " .. stagehand.backend)' 2>&1)
echo "$out"
n=$(echo "$out" | grep -c "LuaJIT runs on the C module, not the FFI backend")
[ "$n" -eq 1 ] || { echo "the fall back was said $n times, not once"; exit 1; }
echo "$out" | grep -q "does not export sh_[a-z_]*, which the FFI backend needs" || { echo "no missing symbol named"; exit 1; }
echo "$out" | grep -q "^backend c$" || { echo "not on the C module"; exit 1; }
