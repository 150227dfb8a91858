#!/bin/sh
# Runs spec/fixtures/destroy_and_exit.lua (pools destroyed under the luv
# driver, then the script ends without closing) RUNS times on each runtime
# named, LuaJIT through both backends; fails on any exit but 0, naming it.
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
runs=${RUNS:-20}
bad=0
for rt in "$@"; do
  backends=c
  [ "$rt" = luajit ] && backends="ffi c"
  for backend in $backends; do
    eval "$(sh scripts/env.sh "$rt")"
    i=0
    while [ "$i" -lt "$runs" ]; do
      i=$((i + 1))
      out=$(STAGEHAND_BACKEND=$backend "$rt" spec/fixtures/destroy_and_exit.lua 2>&1)
      rc=$?
      if [ "$rc" -ne 0 ]; then
        echo "$rt ($backend backend), run $i of $runs: exit status $rc"
        echo "$out" | tail -5
        bad=$((bad + 1))
      fi
    done
    echo "$rt ($backend backend): $runs runs that destroy pools and exit without closing"
  done
done
[ "$bad" -eq 0 ]
