#!/bin/sh
# Runs examples/love headless (Xvfb) with its screenshot flags, then checks
# that it loaded every texture and that both screenshots hold an image (a
# blank capture holds one colour). Writes build/love-loading.png and
# build/love-scene.png. Then runs it again on the pure-Lua core
# (STAGEHAND_BACKEND=lua, as where no native core loads), where it decodes
# on the main thread, held to the same checks (build/love-pure-*.png).
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
eval "$(sh scripts/env.sh luajit)"
mkdir -p build
fail() {
  echo "love check: $1"
  exit 1
}
# $1: the backend (STAGEHAND_BACKEND: empty for the default), $2: the
# screenshots' prefix, $3: how the summary says it decoded
example() {
  rm -f "build/$2-loading.png" "build/$2-scene.png"
  out=$(STAGEHAND_BACKEND=$1 timeout 120 xvfb-run -a love examples/love --screenshot "build/$2-scene.png" \
    --loading-screenshot "build/$2-loading.png" 2>&1)
  echo "$out" | grep -v -e "^ALSA lib" -e "^AL lib" -e "^Could not open device" -e "^$"
  echo "$out" | grep -Eq "^loaded 12 of 14 textures \(2 stand-ins\); decoded $3" ||
    fail "the game did not load every texture, decoded $3"
  echo "$out" | grep -Eq "^stand-in for tile-corrupt.png: Decoding tile-corrupt.png failed: .*tile-corrupt.png" ||
    fail "no reason logged for the corrupt PNG"
  echo "$out" | grep -Eq "^stand-in for missing.png: Decoding missing.png failed: no such file: textures/missing.png" ||
    fail "no reason logged for the missing file"
  # (the visible row, in whatever order its decodes finished)
  first=$(echo "$out" | sed -n 's/^uploaded first: //p' | tr -d ' ' | tr ',' '\n' | sort | tr '\n' ' ')
  [ "$first" = "tile1.png tile2.png tile3.png tile4.png tile5.png tile6.png " ] ||
    fail "the visible row was not uploaded first (first: $first)"
  echo "$out" | grep -Eq "^the bar moved back 0 times" || fail "the loading bar moved back"
  for what in loading scene; do
    line=$(echo "$out" | grep -E "^$what screenshot: ") || fail "no $what screenshot"
    colours=$(echo "$line" | sed -E 's/.*\(([0-9]+) colours\).*/\1/')
    [ "$colours" -gt 1 ] || fail "the $what screenshot is blank ($colours colour)"
    size=$(wc -c <"build/$2-$what.png")
    [ "$size" -gt 2000 ] || fail "build/$2-$what.png is only $size bytes"
  done
}
example "" love "on [0-9]+ LÖVE worker thread"
example lua love-pure "on the main thread, one a frame"
echo "LÖVE ran the loading screen under Xvfb, on worker threads and on the pure-Lua core; the screenshots hold an image"
