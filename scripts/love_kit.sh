#!/bin/sh
# make love-kit: stagehand for LÖVE games, ready to drop into a game's
# folder, for a developer who builds nothing (on Windows or macOS as on
# Linux). It makes
#   build/love-kit/stagehand/           the folder a game's folder takes
#   build/stagehand-VERSION-love.zip    the same folder, zipped, with the
#                                       LICENSE, a README.txt, the guide,
#                                       the reference, the LuaLS types and
#                                       the core's sources with src/build.sh
# The folder holds stagehand's Lua files (where LÖVE's require finds them:
# stagehand/init.lua...) and the native core for each system built here
# under stagehand/native/OS-ARCH/: Linux's (x86-64, and 64-bit ARM once
# cross-built: KIT_ARM64=1 asks for it), and Windows' (x86-64 and 32-bit
# x86) after make windows and make windows-x86 (KIT_WINDOWS=1 asks for
# both); one asked for and missing is an error. stagehand
# writes the core for the player's system from there to the save
# directory on the first run, where LÖVE's C loader and the FFI backend
# find it, whether the game runs as a folder (love DIR), as a .love or
# fused. make love-dist packages a game with this same folder.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
version=$(sed -n 's/^M.VERSION = "\([^"]*\)".*/\1/p' lua/stagehand/init.lua)
[ -n "$version" ] || { echo "make love-kit: no M.VERSION in lua/stagehand/init.lua" >&2; exit 1; }
core=build/kit/linux-x64/_core.so # (built to load on older glibc than this one's: the Makefile's KIT_CORE)
[ -f "$core" ] || { echo "make love-kit: $core is missing: run make love-kit" >&2; exit 1; }
arm64=build/kit/linux-arm64/_core.so # (the Makefile's KIT_CORE_ARM64)
if [ "${KIT_ARM64:-0}" = 1 ] && [ ! -f "$arm64" ]; then
  echo "make love-kit: $arm64 is missing: run make love-kit" >&2
  exit 1
fi
dll=build/windows/stagehand/_core.dll
dll32=build/windows-x86/stagehand/_core.dll
if [ "${KIT_WINDOWS:-0}" = 1 ] && [ ! -f "$dll" ]; then
  echo "make love-kit: $dll is missing: run make windows" >&2
  exit 1
fi
if [ "${KIT_WINDOWS:-0}" = 1 ] && [ ! -f "$dll32" ]; then
  echo "make love-kit: $dll32 is missing: run make windows-x86" >&2
  exit 1
fi
kit=build/love-kit
rm -rf "$kit"
mkdir -p "$kit/stagehand"
cp -R lua/stagehand/. "$kit/stagehand/" # (every folder of it: core, engine, rank, wait...)
# add SYSTEM FILE STRIP: the core FILE (when built) as SYSTEM's, stripped:
# what ships to players carries no debug information (a third the size;
# the symbols the FFI backend and Lua's loaders look up stay).
systems=""
add() {
  [ -f "$2" ] || return 0
  to="$kit/stagehand/native/$1/_core.${2##*.}"
  mkdir -p "$(dirname "$to")"
  cp "$2" "$to"
  "$3" --strip-unneeded "$to"
  systems="${systems:+$systems }$1"
}
add linux-x64 "$core" strip
add linux-arm64 "$arm64" "${ARM64_STRIP:-aarch64-linux-gnu-strip}"
add windows-x64 "$dll" "${MINGW_STRIP:-x86_64-w64-mingw32-strip}"
add windows-x86 "$dll32" "${MINGW32_STRIP:-i686-w64-mingw32-strip}"
# (the zip: the folder, the licence, and what to do with them)
zipdir=$(mktemp -d)
trap 'rm -rf "$zipdir"' EXIT
name="stagehand-$version-love"
mkdir -p "$zipdir/$name"
cp -R "$kit/stagehand" "$zipdir/$name/"
cp LICENSE "$zipdir/$name/LICENSE"
mkdir -p "$zipdir/$name/docs" "$zipdir/$name/types"
cp docs/guide.md docs/reference.md docs/platforms.md docs/trace.svg docs/love-loading.png docs/love-scene.png \
  "$zipdir/$name/docs/" # (and the pictures the guide shows)
cp types/stagehand.lua "$zipdir/$name/types/stagehand.lua" # (for the editor: LuaLS completes the API from it)
# (and the core's sources, to build it where the kit has no core: src/build.sh)
mkdir -p "$zipdir/$name/src/csrc/platform" "$zipdir/$name/src/include"
cp -R csrc/core csrc/lua "$zipdir/$name/src/csrc/"
cp -R csrc/platform/unix csrc/platform/sh_platform.h "$zipdir/$name/src/csrc/platform/"
cp scripts/kit_build.sh "$zipdir/$name/src/build.sh"
cp scripts/probe.sh "$zipdir/$name/src/probe.sh"
inc=${LUAJIT_INC:-/usr/include/luajit-2.1}
cp "$inc/lua.h" "$inc/luaconf.h" "$inc/lauxlib.h" "$inc/lualib.h" "$inc/luajit.h" "$zipdir/$name/src/include/"
cp /usr/share/doc/libluajit-5.1-dev/copyright "$zipdir/$name/src/include/COPYRIGHT.LuaJIT"
cat >"$zipdir/$name/README.txt" <<TXT
stagehand $version for LÖVE 11

Put the stagehand folder in your game's folder, beside main.lua:

    mygame/main.lua
    mygame/stagehand/init.lua ...

then require "stagehand" (and "stagehand.love") as usual. It holds the
native core for: $systems. On the first run stagehand
writes the one for the player's system to the game's save directory,
where LÖVE finds it; this works when the game runs as a folder (love
mygame), as a .love, or fused.

On a system not listed (a Mac, a phone, a browser) the game still runs,
on stagehand's pure-Lua core: everything but worker threads, which say
why they cannot start. For the native core there, build it on that
system: "sh src/build.sh" needs only a C compiler (Xcode's command line
tools on a Mac) and adds the core to this kit's folder, as
stagehand/native/SYSTEM/_core.so (on a Mac, one universal core, as both
osx-arm64 and osx-x64); then put the folder in the game. The guide's
"Shipping a game" says more.

docs/guide.md is the guide (its section "Shipping a game" says how each
kind of build finds stagehand), docs/reference.md every public function,
docs/platforms.md what is tested where. types/stagehand.lua describes the
API for an editor that reads LuaLS annotations (VS Code's Lua extension):
add the types folder to its workspace library, not to the game.
TXT
mkdir -p build
rm -f "build/$name.zip"
(cd "$zipdir" && zip -q -9 -r "$top/build/$name.zip" "$name")
echo "build/love-kit/stagehand and build/$name.zip (cores: $systems)"
