#!/bin/sh
# make love-dist GAME=DIR: packages a LÖVE game folder that uses stagehand
# into build/love/NAME.love, and a fused Linux build beside it
# (build/love/NAME: the love executable with the archive appended, as LÖVE
# fuses one). The archive holds the game, stagehand's Lua files (where
# LÖVE's require finds them: stagehand/init.lua...), and the native core
# for each system built here under stagehand/native/OS-ARCH/ (the kit's:
# Linux's for x86-64 and 64-bit ARM, and Windows' after make windows),
# which stagehand writes to the save directory on the first run, where
# LÖVE's C loader and the FFI backend find it. `love build/love/NAME.love`
# then runs from any working directory with no environment variables.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
game=${1:?usage: make love-dist GAME=DIR}
[ -d "$game" ] || { echo "make love-dist: GAME=$game is not a folder" >&2; exit 1; }
[ -f "$game/main.lua" ] || { echo "make love-dist: GAME=$game has no main.lua: a LÖVE game's folder starts there" >&2; exit 1; }
game=$(cd "$game" && pwd)
name=$(basename "$game")
cd "$top"
sh scripts/love_kit.sh >/dev/null # (build/love-kit/stagehand: the Lua files and the cores)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r "$game"/. "$stage/"
mkdir -p "$stage/stagehand" # (over a copy the game carries: cores it has for other systems stay)
cp -R build/love-kit/stagehand/. "$stage/stagehand/"
mkdir -p build/love
rm -f "build/love/$name.love"
(cd "$stage" && zip -q -9 -r "$top/build/love/$name.love" .)
love_bin=$(readlink -f "$(command -v love)")
cat "$love_bin" "build/love/$name.love" >"build/love/$name"
chmod +x "build/love/$name"
echo "build/love/$name.love, and build/love/$name (fused for Linux)"
