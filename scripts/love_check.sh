#!/bin/sh
# Runs examples/love headless (Xvfb) with its screenshot flags, then checks
# that it loaded every texture and that both screenshots hold an image (a
# blank capture holds one colour). Writes build/love-loading.png and
# build/love-scene.png.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
eval "$(sh scripts/env.sh luajit)"
mkdir -p build
rm -f build/love-loading.png build/love-scene.png
out=$(timeout 120 xvfb-run -a love examples/love --screenshot build/love-scene.png \
  --loading-screenshot build/love-loading.png 2>&1)
echo "$out" | grep -v "^$"
fail() { echo "love check: $1"; exit 1; }
echo "$out" | grep -Eq "^loaded 12 of 14 textures \(2 stand-ins\)" || fail "the game did not load every texture"
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
  size=$(wc -c <"build/love-$what.png")
  [ "$size" -gt 2000 ] || fail "build/love-$what.png is only $size bytes"
done
echo "LÖVE ran the loading screen under Xvfb; both screenshots hold an image"
