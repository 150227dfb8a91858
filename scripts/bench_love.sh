#!/bin/sh
# make bench-love [LOVE_PEERS=DIR]: one loading scene of 64 textures of
# 512x512 (bench/love), headless under Xvfb, three runs each of stagehand
# and, when their sources are in LOVE_PEERS (LOVE_PEERS/love-loader/
# love-loader.lua, LOVE_PEERS/lily/lily.lua: fetch kikito/love-loader and
# MikuAuahDark/lily there, outside this tree), of love-loader and lily,
# interleaved. Prints the medians side by side and the targets.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
eval "$(sh scripts/env.sh luajit)"
peers=${LOVE_PEERS:-}
runs=${RUNS:-3}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
quiet() { grep -v -e "^ALSA lib" -e "^AL lib" -e "^Could not open device" -e "^XIO: " -e "after [0-9]* requests"; }
timeout 600 xvfb-run -a love bench/love prepare 2>&1 | quiet
loaders="stagehand"
threads=$(nproc 2>/dev/null || echo 1)
[ "$threads" -gt 4 ] && threads=4 # (lily starts one thread a core, at most 4: stagehand gets as many)
if [ -n "$peers" ]; then
  [ -f "$peers/love-loader/love-loader.lua" ] && loaders="$loaders love-loader"
  [ -f "$peers/lily/lily.lua" ] && loaders="$loaders lily"
fi
echo "LÖVE $(love --version 2>/dev/null | head -1), $threads worker thread(s) for stagehand and lily; $(nproc) cores"
for r in $(seq "$runs"); do
  for l in $loaders; do
    arg=$peers
    [ "$l" = stagehand ] && arg=$threads
    timeout 300 xvfb-run -a love bench/love "$l" "$arg" 2>&1 | quiet | grep "^result" | tee -a "$out"
  done
done
# (what LÖVE objects add to a request: information, no target)
timeout 300 xvfb-run -a love bench/love objects 2000 2>&1 | quiet | grep "^objects" >>"$out"
luajit scripts/bench_love_report.lua "$out"
