#!/bin/sh
# make love-dist GAME=DIR: packages a LÖVE game folder that uses stagehand
# into build/love/NAME.love, and a fused Linux build beside it
# (build/love/NAME: the love executable with the archive appended, as LÖVE
# fuses one). The archive holds the game, stagehand's Lua files (where
# LÖVE's require finds them: stagehand/init.lua...), and the native core
# for each system built here under stagehand/native/OS-ARCH/ (Linux's, and
# Windows' after make windows), which stagehand writes to the save
# directory on the first run, where LÖVE's C loader and the FFI backend
# find it. `love build/love/NAME.love` then runs from any working
# directory with no environment variables.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
game=${1:?usage: make love-dist GAME=DIR}
[ -d "$game" ] || { echo "make love-dist: GAME=$game is not a folder" >&2; exit 1; }
[ -f "$game/main.lua" ] || { echo "make love-dist: GAME=$game has no main.lua: a LÖVE game's folder starts there" >&2; exit 1; }
game=$(cd "$game" && pwd)
name=$(basename "$game")
cd "$top"
core=build/luajit/stagehand/_core.so
[ -f "$core" ] || { echo "make love-dist: $core is missing: run make build" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r "$game"/. "$stage/"
mkdir -p "$stage/stagehand/native/linux-x64"
cp -R lua/stagehand/. "$stage/stagehand/" # (every folder of it: core, engine, rank, wait...)
cp "$core" "$stage/stagehand/native/linux-x64/_core.so"
if [ -f build/windows/stagehand/_core.dll ]; then
  mkdir -p "$stage/stagehand/native/windows-x64"
  cp build/windows/stagehand/_core.dll "$stage/stagehand/native/windows-x64/_core.dll"
fi
mkdir -p build/love
rm -f "build/love/$name.love"
(cd "$stage" && zip -q -9 -r "$top/build/love/$name.love" .)
love_bin=$(readlink -f "$(command -v love)")
cat "$love_bin" "build/love/$name.love" >"build/love/$name"
chmod +x "build/love/$name"
echo "build/love/$name.love, and build/love/$name (fused for Linux)"
