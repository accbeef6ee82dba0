#!/usr/bin/env bash
# Set everything up and run the main job: a 2-backend local cluster, the paper's
# database loaded, Table 2 printed (each request's median over 10 runs), then the
# paper's experiments (Tables 3-8) on local clusters of 1, 2 and 4 backends.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check '.[bench]'
data=$(mktemp -d)
port=${MBDS_PORT:-50051}
mbds up --backends "${BACKENDS:-2}" --port "$port" --data-dir "$data" &
up=$!
trap 'kill -TERM $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 100); do mbds health --address "127.0.0.1:$port" >/dev/null 2>&1 && break; sleep 0.3; done
mbds load paper --controller "127.0.0.1:$port" --scale "${SCALE:-1}"
mbds paper table2 --controller "127.0.0.1:$port" --scale "${SCALE:-1}" --runs 10
kill -TERM $up; wait $up 2>/dev/null || true
trap 'rm -rf "$data"' EXIT
# The paper's experiments on the embedded default: 1, 2 and 4 backends, scale 50
# (50,000 records, 5 runs: 3 to 4 minutes), each backend held to a quarter of a CPU
# so that it behaves like its own machine (cgroups need root; without root the
# backends share the cores, and more backends than cores cannot show the improvement).
budget=()
if [ "$(id -u)" = 0 ] && [ -w /sys/fs/cgroup ]; then budget=(--backend-cpus "${BACKEND_CPUS:-0.25}"); fi
mbds bench paper --backends "${BENCH_BACKENDS:-1,2,4}" --scale "${BENCH_SCALE:-50}" \
    --runs "${RUNS:-5}" "${budget[@]}"
