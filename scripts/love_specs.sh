#!/bin/sh
# Runs the LÖVE specs (spec/love: worker pools on love.thread; or the game
# named, as spec/love_pure: the pure-Lua core) headless under Xvfb; their
# last line is "love: N passed, N failed" (love-pure: ...). Fails when LÖVE
# does not get that far (a crash, a hang).
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
eval "$(sh scripts/env.sh luajit)"
game=${1:-spec/love}
out=$(timeout 300 xvfb-run -a love "$game" 2>&1)
rc=$?
echo "$out" | grep -v -e "^ALSA lib" -e "^AL lib" -e "^Could not open device" -e "^XIO: " -e "after [0-9]* requests"
echo "$out" | grep -Eq "^love(-pure)?: [0-9]+ passed, [0-9]+ failed" || { echo "!! LÖVE ended (status $rc) before its summary"; exit 1; }
exit $rc
