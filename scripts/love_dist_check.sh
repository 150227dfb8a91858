#!/bin/sh
# make test's check of make love-dist: examples/love packaged, then run as
# a player would, from another working directory with no LUA_PATH or
# LUA_CPATH, headless under Xvfb: the .love, and the fused Linux build. Each
# must load every texture on the FFI backend, the first run writing the
# core from the archive to a fresh save directory. A folder without
# main.lua must be refused, saying why.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
fail() { echo "love-dist check: $1"; exit 1; }
out=$(sh scripts/love_dist.sh spec 2>&1) && fail "a folder without main.lua was packaged"
echo "$out" | grep -q "has no main.lua" || fail "no clear error for a folder without main.lua: $out"
sh scripts/love_dist.sh examples/love || fail "make love-dist failed"
save=${XDG_DATA_HOME:-$HOME/.local/share}
for run in "love $top/build/love/love.love" "$top/build/love/love"; do
  rm -rf "$save/love/stagehand-love-example" "$save/stagehand-love-example"
  out=$(cd /tmp && env -u LUA_PATH -u LUA_CPATH timeout 120 xvfb-run -a $run --screenshot /tmp/stagehand-dist.png 2>&1)
  echo "$out" | grep -v "^$" | sed 's/^/  /'
  echo "$out" | grep -q "on the ffi backend" || fail "$run: not on the FFI backend"
  echo "$out" | grep -Eq "^loaded 12 of 14 textures \(2 stand-ins\)" || fail "$run: did not load every texture"
  rm -f /tmp/stagehand-dist.png
done
echo "build/love/love.love and its fused build ran from /tmp with no environment, on the FFI backend"
