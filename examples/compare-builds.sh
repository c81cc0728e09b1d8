#!/usr/bin/env bash
# The main job: measure two builds of a small benchmark suite with `perfctl stat` (20 controlled runs of
# each benchmark, in four rounds of 5 that alternate A and B), then let `perfctl compare` say, per
# benchmark and overall, whether the new build is faster, slower or equivalent, with the confidence it can
# defend, and write the HTML report.
# A is the old build (matmul built with -O0), B the new one (matmul -O2); sort and hashtable are the same
# program in both, as unchanged benchmarks of a suite are. Samples and the report land in examples/results/;
# arguments go to compare (e.g. --format json); the exit code is compare's (docs/statistics.md). PERFCTL
# names another perfctl than .venv's (e.g. .venv-latest/bin/perfctl).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s -C examples
mkdir -p examples/results
rm -f examples/results/A.jsonl examples/results/B.jsonl
perfctl=${PERFCTL:-.venv/bin/perfctl}
measure() {  # SIDE NAME CMD ARGS: 5 more runs, after a warmup, appended to SIDE's file
    local side=$1 name=$2
    shift 2
    "$perfctl" stat -q -r 5 --warmup 1 --name "$name" -o "examples/results/$side.jsonl" -- "$@" >/dev/null
}
# Four rounds of 5 runs, A and B alternating within each: a drift of the machine between blocks (other
# work, frequency, caches) then falls on both sides alike instead of looking like a change of B.
for round in 1 2 3 4; do
    for side in A B; do
        if [ "$side" = A ]; then matmul=examples/bin/matmul-O0; else matmul=examples/bin/matmul; fi
        measure "$side" matmul "$matmul" 200
        measure "$side" sort examples/bin/sort 300000
        measure "$side" hashtable examples/bin/hashtable 300000
    done
done
exec "$perfctl" compare examples/results/A.jsonl examples/results/B.jsonl --html examples/results/report.html "$@"
