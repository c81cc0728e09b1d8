#!/usr/bin/env bash
# A performance history without a fleet (docs/history.md, "Worked example"): examples/work.c built at 12
# "commits" of a project, its blocks made 1.3 times as costly from commit c07, each commit measured with
# `perfctl stat` into one JSON Lines file labelled with its commit; then `perfctl history` finds the commit
# that changed it, with the ratio and its interval, and writes the HTML picture of the series.
# Samples and the report land in examples/results/; arguments go to `perfctl history` (e.g. --format json).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p examples/results/history-build
rm -f examples/results/history.jsonl
perfctl=${PERFCTL:-.venv/bin/perfctl}
for n in $(seq -w 1 12); do
    if [ "$n" -lt 7 ]; then cost=100; else cost=130; fi
    cc -O2 -DBLOCK_COST=$cost -o examples/results/history-build/work examples/work.c
    "$perfctl" stat -q -r 10 --warmup 1 --name work --label commit=c$n --label branch=main \
        -o examples/results/history.jsonl -- examples/results/history-build/work 30 >/dev/null
done
"$perfctl" report --history examples/results/history.jsonl -o examples/results/history.html
exec "$perfctl" history examples/results/history.jsonl "$@"
