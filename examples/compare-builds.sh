#!/usr/bin/env bash
# The main job: measure two builds of a small benchmark suite with `perfctl stat` (20 controlled runs of
# each benchmark, after 2 warmups), then let `perfctl compare` say, per benchmark and overall, whether the
# new build is faster, slower or equivalent, with the confidence it can defend, and write the HTML report.
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
measure() {  # SIDE NAME CMD ARGS
    local side=$1 name=$2
    shift 2
    "$perfctl" stat -q -r 20 --warmup 2 --name "$name" -o "examples/results/$side.jsonl" -- "$@" >/dev/null
}
measure A matmul examples/bin/matmul-O0 200
measure B matmul examples/bin/matmul 200
for side in A B; do
    measure "$side" sort examples/bin/sort 300000
    measure "$side" hashtable examples/bin/hashtable 300000
done
exec "$perfctl" compare examples/results/A.jsonl examples/results/B.jsonl --html examples/results/report.html "$@"
