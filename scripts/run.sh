#!/usr/bin/env bash
# Set everything up and run the main job: a 2-backend local cluster, the paper's database
# loaded, Table 2 printed beside the paper's (each request's median over 10 runs), then the
# paper's experiments (Tables 3-8) on local clusters of 1, 2 and 4 backends with the control
# A×n. Printed within 100 columns: the claims at a glance beside the paper's figures, the
# verdicts, and where the full report and plots are (every table: scripts/run.sh --tables).
# Settings: BENCH_SCALE (100), RUNS (10), BENCH_BACKENDS (1,2,4), BACKEND_CPUS (0.25).
set -euo pipefail
cd "$(dirname "$0")/.."
tables=()
for arg in "$@"; do
    case $arg in
        --tables) tables=(--tables) ;;
        *) echo "usage: scripts/run.sh [--tables]  (unknown argument: ${arg:0:40})" >&2; exit 2 ;;
    esac
done
# Install with the benchmarks' extras, unless this checkout is installed already (editable).
here=$(pwd)
(cd / && python3 -c "import sys, mbds, matplotlib, psutil
sys.exit(mbds.__file__ != '$here/mbds/__init__.py')" 2>/dev/null) ||
    python3 -m pip install --quiet --disable-pip-version-check '.[bench]'
data=$(mktemp -d)
port=${MBDS_PORT:-50051}
# The cluster's own messages (addresses, TLS, metrics) go to a log, shown if it fails.
mbds up --backends "${BACKENDS:-2}" --port "$port" --data-dir "$data" >"$data/up.log" 2>&1 &
up=$!
trap 'kill -TERM $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 100); do
    mbds health --address "127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.3
done
mbds health --address "127.0.0.1:$port" >/dev/null 2>&1 || { cat "$data/up.log" >&2; exit 1; }
mbds load paper --controller "127.0.0.1:$port" --scale "${SCALE:-1}"
# Two local backends without a CPU budget: request 1's median here is verdict (c), taken
# in the steady state (each request first run 20 times untimed).
mbds paper table2 --controller "127.0.0.1:$port" --scale "${SCALE:-1}" --runs 10 \
    --warmup 20 --save "$data/table2.json"
kill -TERM $up; wait $up 2>/dev/null || true
trap 'rm -rf "$data"' EXIT
# The paper's experiments at scale 100 (100,000 records in A; 10 runs: 6 to 9 minutes on
# 2 cores), each backend held to a quarter of a CPU so that it behaves like its own
# machine (cgroups need root; without root the backends share the cores, and more
# backends than cores cannot show the improvement). --control adds A×n, the n one-backend
# clusters that verdict (b) sets C_n against.
budget=()
if [ "$(id -u)" = 0 ] && [ -w /sys/fs/cgroup ]; then
    budget=(--backend-cpus "${BACKEND_CPUS:-0.25}")
fi
mbds bench paper --backends "${BENCH_BACKENDS:-1,2,4}" --scale "${BENCH_SCALE:-100}" \
    --runs "${RUNS:-10}" --control --table2 "$data/table2.json" "${budget[@]}" "${tables[@]}"
