#!/bin/sh
# Builds Lua 5.4 for Windows from Debian's source ($1: the unpacked
# lua5.4 source) into $2: lua54.dll, lua54.exe, and the headers in
# $2/include. Lua's own file list, compiled by MinGW-w64 ($MINGW); Debian's
# makefile builds through libtool for Linux, so it is not used.
set -e
src=$1/src
out=$2
cc=${MINGW:-x86_64-w64-mingw32-gcc}
mkdir -p "$out/include" "$out/obj54"
core="lapi lcode lctype ldebug ldo ldump lfunc lgc llex lmem lobject lopcodes lparser lstate lstring ltable ltm
lundump lvm lzio lauxlib lbaselib lcorolib ldblib liolib lmathlib loadlib loslib lstrlib ltablib lutf8lib linit"
objs=""
for f in $core; do
  "$cc" -O2 -DLUA_COMPAT_5_3 -DLUA_BUILD_AS_DLL -c "$src/$f.c" -o "$out/obj54/$f.o"
  objs="$objs $out/obj54/$f.o"
done
"$cc" -shared -s -o "$out/lua54.dll" $objs -Wl,--out-implib,"$out/obj54/liblua54.a"
"$cc" -O2 -DLUA_COMPAT_5_3 -DLUA_BUILD_AS_DLL -s -o "$out/lua54.exe" "$src/lua.c" "$out/obj54/liblua54.a"
mkdir -p "$out/include/lua5.4"
cp "$src/lua.h" "$src/luaconf.h" "$src/lualib.h" "$src/lauxlib.h" "$out/include/lua5.4/"
