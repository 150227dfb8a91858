#!/bin/sh
# make windows: LuaJIT 2.1 and Lua 5.4 for Windows, cross-built with
# MinGW-w64 from Debian's own source packages, and stagehand's DLL for
# each, laid out in build/windows/ so that, from there,
#   wine luajit.exe FILE.lua              (LuaJIT: both backends)
#   wine lua5.4/lua54.exe FILE.lua       (Lua 5.4)
# find `require "stagehand"` with no environment: LuaJIT's and Lua's own
# search paths look in lua/ and beside the executable, so each runtime has
# its folder of stagehand's Lua files and its stagehand/_core.dll.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
out=build/windows
cc=${MINGW:-x86_64-w64-mingw32-gcc}
# (the Makefile's source list and warnings: make windows passes them)
warn=${WARN:?run through make windows}
core=${WIN_SRC:?run through make windows}
sh scripts/win_sources.sh "$out/src" >/dev/null
lj=$(ls -d "$out"/src/luajit-*/ | head -1)
l54=$(ls -d "$out"/src/lua5.4-*/ | head -1)

# LuaJIT: its own makefile knows the cross build (a 64-bit host compiler
# builds the tools that generate its VM).
if [ ! -f "$out/luajit.exe" ] || [ ! -f "$out/lua51.dll" ]; then
  make -s -C "$lj" -j2 HOST_CC=gcc CROSS="${cc%gcc}" TARGET_SYS=Windows BUILDMODE=dynamic amalg >/dev/null
  cp "$lj/src/luajit.exe" "$lj/src/lua51.dll" "$out/"
fi
mkdir -p "$out/lua/jit" # (jit.* modules, vmdef.lua among them: made by the build)
cp "$lj"/src/jit/*.lua "$out/lua/jit/"
mkdir -p "$out/include/luajit"
cp "$lj/src/lua.h" "$lj/src/lauxlib.h" "$lj/src/luaconf.h" "$lj/src/lualib.h" "$lj/src/luajit.h" "$out/include/luajit/"

# Lua 5.4: Lua's own file list (Debian's makefile builds through libtool).
if [ ! -f "$out/lua5.4/lua54.exe" ]; then
  MINGW=$cc sh scripts/win_lua54.sh "$l54" "$out/lua5.4"
fi

# stagehand's DLLs. Every symbol is exported: the FFI backend finds the
# core's functions in the same DLL the C module is.
mkdir -p "$out/stagehand" "$out/lua5.4/stagehand"
# shellcheck disable=SC2086
"$cc" -std=c99 -O2 $warn -I"$out/include/luajit" -shared -o "$out/stagehand/_core.dll" $core "$out/lua51.dll" \
  -lws2_32 -Wl,--export-all-symbols
# shellcheck disable=SC2086
"$cc" -std=c99 -O2 $warn -I"$out/lua5.4/include/lua5.4" -shared -o "$out/lua5.4/stagehand/_core.dll" $core \
  "$out/lua5.4/obj54/liblua54.a" -lws2_32 -Wl,--export-all-symbols
for dir in "$out" "$out/lua5.4"; do
  rm -rf "$dir/lua/stagehand"
  mkdir -p "$dir/lua"
  cp -r lua/stagehand "$dir/lua/"
done
echo "build/windows: luajit.exe and lua5.4/lua54.exe, each with stagehand"
