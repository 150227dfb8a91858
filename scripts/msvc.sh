#!/bin/sh
# make windows-msvc: stagehand's C built the way Microsoft's compiler
# builds it, for the Windows runtimes of make windows, into
# build/windows-msvc/: LuaJIT and Lua 5.4 (copied) with a stagehand/_core.dll
# each, and the core's C tests, test_core.exe and test_threads.exe.
# (Most Windows engines, and LuaRocks installs set up with Visual Studio,
# compile with cl.exe, which takes code paths of ours that MinGW never
# does: the Interlocked atomics, __assume, the bit scans.)
#
# No cl.exe runs here: clang compiles in MSVC's dialect and ABI
# (-target x86_64-pc-windows-msvc). It defines _MSC_VER, _WIN32 and _M_X64
# as cl.exe does, and with __clang__ taken away neither __GNUC__ nor
# __clang__, so of our #if branches it takes those cl.exe takes. (It is not
# Microsoft's front end: its own gaps in C99 are not checked here.)
# The C runtime is Microsoft's UCRT (ucrtbase.dll, what cl.exe links since
# Visual Studio 2015) through wine's headers and import libraries
# (libwine-dev); the DLLs import only lua51.dll or lua54.dll (from import
# libraries made of those DLLs' exports), ucrtbase, kernel32 and ws2_32.
# Built as the rockspec builds it on Windows (SH_BUILDING_DLL), _core.dll
# exports the core's functions beside luaopen_stagehand__core, and
# LuaJIT reaches them through the FFI.
# Usage (the Makefile's lists): WARN=... WIN_CORE_SRC=... MODULE_SRC=...
# TEST_SRC=... THREADS_TEST=... sh scripts/msvc.sh
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
win=build/windows
out=build/windows-msvc
wine_inc=/usr/include/wine/wine
wine_lib=/usr/lib/x86_64-linux-gnu/wine/x86_64-windows
for f in "$win/luajit.exe" "$win/lua5.4/lua54.exe"; do
  [ -f "$f" ] || { echo "msvc.sh: $f is missing (make windows)" >&2; exit 1; }
done
for f in "$wine_inc/msvcrt/stdio.h" "$wine_lib/libucrtbase.a"; do
  [ -f "$f" ] || { echo "msvc.sh: $f is missing (apt-get install libwine-dev)" >&2; exit 1; }
done
res=$(clang -print-resource-dir)

# clang as cl.exe ($@: -c, flags, a source); msvc_link links what it made
# against the UCRT.
msvc_cc() {
  # shellcheck disable=SC2086 # (WARN: a list of flags)
  clang -target x86_64-pc-windows-msvc -std=c99 -O2 $WARN -Wvla -Werror \
    -nostdinc -isystem "$res/include" -isystem "$wine_inc/msvcrt" -isystem "$wine_inc/windows" \
    -U__clang__ -Wno-builtin-macro-redefined "$@"
}
msvc_link() {
  clang -target x86_64-pc-windows-msvc -fuse-ld=lld -nostdlib "$@" "$wine_lib/libwinecrt0.a" \
    "$wine_lib/libucrtbase.a" "$wine_lib/libkernel32.a" "$wine_lib/libntdll.a" "$wine_lib/libws2_32.a"
}
# Each of $3... compiled into folder $1, with the flags $2.
compile_into() {
  mkdir -p "$1"
  d=$1 flags=$2
  shift 2
  for f in "$@"; do
    # shellcheck disable=SC2086 # (a list of flags)
    msvc_cc $flags -c -o "$d/$(basename "$f" .c).o" "$f"
  done
}

# An import library (what cl.exe links against) of the names a DLL
# exports: $1 the DLL, $2 the .lib to write.
import_lib() {
  {
    echo "LIBRARY $(basename "$1")"
    echo "EXPORTS"
    x86_64-w64-mingw32-objdump -p "$1" |
      awk '/Ordinal\/Name Pointer\] Table/ { t = 1; next } t && /^\t\[/ { print "  " $NF; next } t { t = 0 }'
  } >"$2.def"
  llvm-dlltool -m i386:x86-64 -d "$2.def" -l "$2"
}

rm -rf "$out"
mkdir -p "$out/stagehand" "$out/lua5.4/stagehand"
cp "$win/luajit.exe" "$win/lua51.dll" "$out/"
cp -r "$win/lua" "$out/"
cp "$win/lua5.4/lua54.exe" "$win/lua5.4/lua54.dll" "$out/lua5.4/"
cp -r "$win/lua5.4/lua" "$out/lua5.4/"

import_lib "$win/lua51.dll" "$out/lua51.lib"
import_lib "$win/lua5.4/lua54.dll" "$out/lua54.lib"
# The core once, as the DLLs have it (test_threads.exe links it too); the
# module for each Lua; test_core.exe with the core's invariant checks.
obj=$out/obj
# shellcheck disable=SC2086 # (lists of sources)
{
  compile_into "$obj/core" -DSH_BUILDING_DLL $WIN_CORE_SRC
  compile_into "$obj/luajit" "-DSH_BUILDING_DLL -I$win/include/luajit" $MODULE_SRC
  compile_into "$obj/lua5.4" "-DSH_BUILDING_DLL -I$win/lua5.4/include/lua5.4" $MODULE_SRC
  compile_into "$obj/threads" "" $THREADS_TEST
  msvc_link -shared -Wl,/entry:DllMainCRTStartup -o "$out/stagehand/_core.dll" \
    "$obj"/core/*.o "$obj"/luajit/*.o "$out/lua51.lib"
  msvc_link -shared -Wl,/entry:DllMainCRTStartup -o "$out/lua5.4/stagehand/_core.dll" \
    "$obj"/core/*.o "$obj"/lua5.4/*.o "$out/lua54.lib"
  msvc_link -Wl,/entry:mainCRTStartup -o "$out/test_threads.exe" "$obj"/core/*.o "$obj"/threads/*.o
  compile_into "$obj/test" '-O1 -DSH_DEBUG_CHECKS -DCORPUS_DIR="csrc/test/corpus"' $WIN_CORE_SRC $TEST_SRC
  msvc_link -Wl,/entry:mainCRTStartup -o "$out/test_core.exe" "$obj"/test/*.o
}
rm -rf "$obj" "$out"/*.def "$out"/*.lib "$out"/stagehand/*.lib "$out"/lua5.4/stagehand/*.lib
