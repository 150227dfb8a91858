#!/bin/sh
# make test's check of make love-dist: examples/love packaged, then run as
# a player would, from another working directory with no LUA_PATH or
# LUA_CPATH, headless under Xvfb: the .love, and the fused Linux build. Each
# must load every texture on the FFI backend, the first run writing the
# core from the archive to a fresh save directory, and a second run the
# game's core over the stale one an older build left there. A folder without
# main.lua must be refused, saying why.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
fail() { echo "love-dist check: $1"; exit 1; }
out=$(sh scripts/love_dist.sh spec 2>&1) && fail "a folder without main.lua was packaged"
echo "$out" | grep -q "has no main.lua" || fail "no clear error for a folder without main.lua: $out"
sh scripts/love_dist.sh examples/love || fail "make love-dist failed"
save=${XDG_DATA_HOME:-$HOME/.local/share}
packed=build/love-kit/stagehand/native/linux-x64/_core.so # (what love-dist put in the game)
[ -f "$packed" ] || fail "no linux-x64 core in build/love-kit"
for run in "love $top/build/love/love.love" "$top/build/love/love"; do
  case "$run" in love\ *) saved="$save/love/stagehand-love-example" ;; *) saved="$save/stagehand-love-example" ;; esac
  rm -rf "$save/love/stagehand-love-example" "$save/stagehand-love-example"
  # The second run finds the core an older build of the game left in the
  # save directory (a player who updated): it must be replaced, not used.
  for pass in fresh updated; do
    out=$(cd /tmp && env -u LUA_PATH -u LUA_CPATH timeout 120 xvfb-run -a $run --screenshot /tmp/stagehand-dist.png 2>&1)
    echo "$out" | grep -v "^$" | sed 's/^/  /'
    echo "$out" | grep -q "on the ffi backend" || fail "$run ($pass): not on the FFI backend"
    echo "$out" | grep -Eq "^loaded 12 of 14 textures \(2 stand-ins\)" || fail "$run ($pass): did not load every texture"
    cmp -s "$packed" "$saved/stagehand/_core.so" || fail "$run ($pass): the save directory's core is not the game's"
    rm -f /tmp/stagehand-dist.png
    [ "$pass" = fresh ] && printf 'an older build of the core' > "$saved/stagehand/_core.so"
  done
done
echo "build/love/love.love and its fused build ran from /tmp with no environment, on the FFI backend, and again over a stale core"
