#!/bin/sh
# Runs examples/love headless (Xvfb) with its screenshot flags, then checks
# that it loaded every texture and that both screenshots hold an image (a
# blank capture holds one colour). Writes build/love-loading.png and
# build/love-scene.png. Then runs it again on the pure-Lua core
# (STAGEHAND_BACKEND=lua, as where no native core loads), whose pools run
# on LÖVE's threads too, and once more without love.thread, where it
# decodes on the main thread, each held to the same checks
# (build/love-pure-*.png, build/love-nothreads-*.png).
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
eval "$(sh scripts/env.sh luajit)"
mkdir -p build
fail() {
  echo "love check: $1"
  exit 1
}
# shellcheck source=scripts/example_said.sh
. scripts/example_said.sh
# $1: the backend (STAGEHAND_BACKEND: empty for the default), $2: the
# screenshots' prefix, $3: how the summary says it decoded
example() {
  rm -f "build/$2-loading.png" "build/$2-scene.png"
  out=$(STAGEHAND_BACKEND=$1 timeout 120 xvfb-run -a love "${game:-examples/love}" --screenshot "build/$2-scene.png" \
    --loading-screenshot "build/$2-loading.png" 2>&1)
  echo "$out" | grep -v -e "^ALSA lib" -e "^AL lib" -e "^Could not open device" -e "^$"
  example_said "$out" "12 of 14 textures \(2 stand-ins\); decoded $3" corrupt
  for what in loading scene; do
    size=$(wc -c <"build/$2-$what.png")
    [ "$size" -gt 2000 ] || fail "build/$2-$what.png is only $size bytes"
  done
}
example "" love "on [0-9]+ LÖVE worker thread"
example lua love-pure "on [0-9]+ LÖVE worker thread"
# ... and as a copy whose conf.lua turns love.thread off, where no worker
# can run: it decodes on the main thread (as in a web browser).
rm -rf build/love-nothreads
cp -R examples/love build/love-nothreads
cat >>build/love-nothreads/conf.lua <<'CONF'
local conf = love.conf
function love.conf(t)
  conf(t)
  t.modules.thread = false
end
CONF
example_in() { game=build/love-nothreads; example "$@"; }
game=examples/love
example_in lua love-nothreads "on the main thread, one a frame"
echo "LÖVE ran the loading screen under Xvfb, on worker threads (the native core's and the pure-Lua core's), and on"\
  "the main thread without love.thread; the screenshots hold an image"
