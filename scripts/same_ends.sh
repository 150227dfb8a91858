#!/bin/sh
# same_ends.sh DIR: the files in DIR, each the ends one busted run recorded
# (spec/seeded.lua, record_ends: a line per Handle of each seeded scene:
# chaos, callback and the models'), must hold the same lines. A seed is the
# same scene on every runtime, so a difference is behaviour that hangs on
# the runtime or the backend. Prints a line of what agreed, or the first
# differences.
dir=${1:?usage: same_ends.sh DIR}
set -- "$dir"/*
[ "$#" -ge 2 ] && [ -f "$1" ] || { echo "only $# run(s) recorded their ends in $dir"; exit 1; }
first=$(mktemp)
trap 'rm -f "$first"' EXIT
sort "$1" >"$first"
[ -s "$first" ] || { echo "no ends recorded in $1"; exit 1; }
for other in "$@"; do
  if ! sort "$other" | cmp -s "$first" -; then
    echo "${1##*/} and ${other##*/} differ:"
    sort "$other" | diff "$first" - | head -20
    exit 1
  fi
done
echo "$(wc -l <"$first") Handles of $(cut -d' ' -f1,2 "$first" | sort -u | wc -l) seeded scenes ended alike in $# runs"
