#!/usr/bin/env bash
# The main job: measure two builds of one benchmark with `perfctl stat` (20 controlled runs each, after 2
# warmups, under one benchmark name), then let `perfctl compare` say whether the new build is faster,
# slower or equivalent, with the confidence it can defend. A = matmul built with -O0, B = with -O2.
# Samples land in examples/results/; arguments go to compare (e.g. --format json); the exit code is
# compare's (docs/statistics.md). PERFCTL names another perfctl than .venv's (e.g. .venv-latest/bin/perfctl).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s -C examples
mkdir -p examples/results
rm -f examples/results/A.jsonl examples/results/B.jsonl
perfctl=${PERFCTL:-.venv/bin/perfctl}
"$perfctl" stat -r 20 --warmup 2 --name matmul -o examples/results/A.jsonl -- examples/bin/matmul-O0 200 >/dev/null
"$perfctl" stat -r 20 --warmup 2 --name matmul -o examples/results/B.jsonl -- examples/bin/matmul 200 >/dev/null
exec "$perfctl" compare examples/results/A.jsonl examples/results/B.jsonl "$@"
