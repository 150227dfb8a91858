#!/bin/sh
# make test-x86: stagehand's specs on 32-bit x86 Linux, whose default maths
# is x87's (a sum kept in an 80-bit register, wider than the double it is
# stored as: it once broke a stall clock's invariant). Lua 5.4 from
# Debian's source and stagehand's module, both built by the i686 cross
# compiler into build/x86/, run the specs through scripts/spec_runner.lua
# natively, or under qemu on a kernel that runs no 32-bit programs (where
# wine's 32-bit half cannot run the 32-bit Windows specs either).
# Prints "N passed, N failed".
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
warn=${WARN:?run through make test-x86}
core=${X86_SRC:?run through make test-x86}
cc=${X86_CC:-i686-linux-gnu-gcc}
out=build/x86
sh scripts/win_sources.sh build/windows/src >/dev/null
l54=$(ls -d build/windows/src/lua5.4-*/ | head -1)src
mkdir -p "$out/stagehand" "$out/include"
# (Debian's luaconf.h includes a header its build generates)
echo '#define DEB_HOST_MULTIARCH "i386-linux-gnu"' >"$out/include/lua5.4-deb-multiarch.h"
if [ ! -x "$out/lua5.4" ]; then
  # (Lua's own file list: Debian's makefile builds through libtool)
  files=""
  for f in lapi lcode lctype ldebug ldo ldump lfunc lgc llex lmem lobject lopcodes lparser lstate lstring ltable ltm \
    lundump lvm lzio lauxlib lbaselib lcorolib ldblib liolib lmathlib loadlib loslib lstrlib ltablib lutf8lib linit lua; do
    files="$files $l54/$f.c"
  done
  # shellcheck disable=SC2086
  "$cc" -O2 -DLUA_COMPAT_5_3 -DLUA_USE_LINUX -I"$out/include" -o "$out/lua5.4" $files -Wl,-E -lm -ldl
fi
# shellcheck disable=SC2086
"$cc" -std=c99 -O2 -fPIC $warn $(sh scripts/probe.sh "$cc") -I"$l54" -I"$out/include" -shared -o "$out/stagehand/_core.so" $core \
  -lm -ldl -lpthread
run=""
sh scripts/x86_runs.sh || run=qemu-i386-static
files=""
for f in spec/*_spec.lua; do
  case "$f" in
    # (what checks the source tree or Linux's tools, as on Windows, and
    # LÖVE's and luv's, which have no 32-bit build here)
    spec/docs_spec.lua | spec/module_spec.lua | spec/shape_spec.lua | spec/luv_spec.lua | spec/trace_spec.lua) ;;
    *) files="$files $f" ;;
  esac
done
echo "(32-bit x86 Linux, Lua 5.4, ${run:-natively})"
# shellcheck disable=SC2086
env -u LUA_CPATH_5_4 -u LUA_PATH_5_4 LUA_PATH="$top/lua/?.lua;$top/lua/?/init.lua;$top/?.lua;;" \
  LUA_CPATH="$top/$out/?.so" $run "$out/lua5.4" scripts/spec_runner.lua --lua-dir=/usr/share/lua/5.4 $files
