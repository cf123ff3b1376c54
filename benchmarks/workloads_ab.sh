#!/bin/bash
# Alternate two trees, one round each: benchmarks/workloads_ab.sh ROUNDS RUNS BEFORE AFTER
# (each a checkout with benchmarks/workloads.py and flows.py); the venv of the folder it is
# started from (or $PYTHON) runs both.
PY=${PYTHON:-$(pwd)/.venv/bin/python}
for r in $(seq 1 ${1:-5}); do
  for tree in "${3:-/work/before}" "${4:-/work/main}"; do
    echo "== round $r $tree"
    (cd $tree && "$PY" benchmarks/workloads.py --rounds 1 --runs ${2:-1000} --sleepers 1000 --fresh 2000 2>&1 | grep -E "round 1|p50|p99|max " )
  done
done
