#!/bin/sh
# make tsan-love: the LÖVE specs (spec/love), then the thread soak inside
# LÖVE (spec/soak/love, TSAN_SEEDS seeds from TSAN_FIRST), against a core
# built with ThreadSanitizer in build/tsan-love, LÖVE preloading the
# runtime. Hosted workers, the pools' channels and LÖVE objects crossing
# are C paths only LÖVE reaches.
#
# LÖVE, SDL and LuaJIT are not built for ThreadSanitizer: it cannot see
# their atomics, so it reports races between their own accesses (LÖVE
# freeing a Data that a worker's LuaJIT read, SDL's threads), and their
# stacks, which have no frame pointers, unwind into nonsense. Those
# reports are counted and printed, not failed on: a run fails on a report
# whose access is made by stagehand's core itself (frame #0 or #1 of
# either access in _core.so), on a failed spec or soak, or on a crash.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
eval "$(sh scripts/env.sh luajit)"
export LUA_CPATH="$top/build/tsan-love/?.so;;"
tsan=$(cc -print-file-name=libtsan.so)
first=${TSAN_FIRST:-1}
seeds=${TSAN_SEEDS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rc=0
# $1: a name for the run; the rest: love's arguments. (xvfb-run's own
# shell and X server run without the preload: only LÖVE is preloaded.)
run() {
  name=$1
  shift
  TSAN_OPTIONS="halt_on_error=0:report_signal_unsafe=0:log_path=$out/tsan" \
    timeout 300 xvfb-run -a env LD_PRELOAD="$tsan" love "$@" >"$out/log" 2>&1
  status=$?
  reports=$(cat "$out"/tsan.* 2>/dev/null | grep -c "^WARNING: ThreadSanitizer")
  ours=$(cat "$out"/tsan.* 2>/dev/null | grep -E "^ +#[01] .*\(_core\.so\+" | sort -u)
  summary=$(grep -E "^love: [0-9]+ passed|^soak-love: |^seed [0-9]+: " "$out/log" | tr '\n' ' ')
  if [ -n "$ours" ]; then
    echo "!! $name: ThreadSanitizer reports an access of stagehand's core:"
    cat "$out"/tsan.*
    rc=1
  elif ! grep -qE "^love: [0-9]+ passed, 0 failed|^soak-love: ok" "$out/log"; then
    echo "!! $name failed (status $status):"
    grep -v -e "^ALSA lib" -e "^AL lib" "$out/log" | tail -30
    rc=1
  else
    echo "$name: $summary($reports reports, all inside LÖVE, SDL or LuaJIT)"
  fi
  rm -f "$out"/tsan.*
}
run "spec/love" spec/love
for s in $(seq "$first" $((first + seeds - 1))); do
  run "soak seed $s" spec/soak/love "$s"
done
exit $rc
