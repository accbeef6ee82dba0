#!/usr/bin/env bash
# Set everything up and run the main job: a 2-backend local cluster, the paper's database
# loaded, Table 2 printed beside the paper's (each request's median over 10 runs), then the
# paper's experiments (Tables 3-8) on local clusters of 1, 2 and 4 backends with the control
# A×n. Printed within 100 columns: the claims at a glance beside the paper's figures, the
# verdicts, and where the full report and plots are (every table: scripts/run.sh --tables).
# Every cluster it uses is its own, started on free ports and stopped at the end: a cluster
# already running (`mbds up` on 50051, say) is never touched.
# Settings, the environment variables it reads (default):
#   MBDS_PORT (0: a free port)  the client port of the cluster Table 2 is measured on
#   BACKENDS (2)                that cluster's backends
#   SCALE (1)                   the database Table 2 is measured on: 1000 x SCALE records
#   BENCH_SCALE (100)           the experiments' scale: 1000 x BENCH_SCALE records in A
#   RUNS (10)                   the experiments' runs of every request
#   BENCH_BACKENDS (1,2,4)      the experiments' backend counts
#   BACKEND_CPUS (0.25)         each backend's CPU budget in the experiments (root only)
# MBDS_CA, MBDS_TOKEN and MBDS_CONTROLLER, set for a cluster of your own, are not passed
# on; the services' own settings (MBDS_EVENT_LOOP, MBDS_SPLIT_SEARCH_FROM, ...) are.
set -euo pipefail
cd "$(dirname "$0")/.."
tables=()
for arg in "$@"; do
    case $arg in
        --tables) tables=(--tables) ;;
        *) echo "usage: scripts/run.sh [--tables]  (unknown argument: ${arg:0:40})" >&2; exit 2 ;;
    esac
done
# The clusters it starts serve plaintext on loopback, and every command is told its address.
unset MBDS_CA MBDS_TOKEN MBDS_CONTROLLER
budget=()
if [ "$(id -u)" = 0 ] && [ -w /sys/fs/cgroup ]; then
    budget=(--backend-cpus "${BACKEND_CPUS:-0.25}")
    cpus="each backend held to ${BACKEND_CPUS:-0.25} of a CPU (cgroups, as root)"
else
    cpus="none: they need root (cgroups), so the backends share the cores, and more
  backends than cores cannot show the improvement"
fi
echo "scripts/run.sh: Table 2 on a cluster of its own, then the paper's experiments at
  BENCH_SCALE ${BENCH_SCALE:-100} with RUNS ${RUNS:-10} (at the defaults, 100 and 10: 6 to 9
  minutes on 2 cores, plus loading, and the install the first time).
  CPU budgets: $cpus."

# Install with the benchmarks' extras, unless `mbds` imports already from this checkout
# (an editable install) with them. An install found elsewhere is replaced, and named.
here=$(pwd -P)
found=$(cd / && python3 -c "import os, mbds
print(os.path.dirname(os.path.dirname(os.path.realpath(mbds.__file__))))" 2>/dev/null) || found=""
extras=yes
(cd / && python3 -c "import matplotlib, psutil" 2>/dev/null) || extras=no
pip=(python3 -m pip install --quiet --disable-pip-version-check)
if [ "$found" = "$here" ] && [ $extras = yes ]; then
    :
elif [ "$found" = "$here" ]; then
    echo "installing the benchmarks' extras into this checkout's editable install:" \
         "pip install -e '.[bench]'"
    "${pip[@]}" -e '.[bench]'
else
    if [ -z "$found" ]; then
        echo "installing this checkout: pip install '.[bench]'"
    elif [ -f "$found/pyproject.toml" ]; then
        echo "installing this checkout in place of the editable install of $found:" \
             "pip install '.[bench]' (pip install -e $found puts that one back)"
    else
        echo "installing this checkout in place of the mbds installed in $found:" \
             "pip install '.[bench]'"
    fi
    "${pip[@]}" '.[bench]'
fi

data=$(mktemp -d)
# The cluster's own messages (addresses, TLS, metrics) go to a log, shown if it fails.
mbds up --backends "${BACKENDS:-2}" --port "${MBDS_PORT:-0}" --data-dir "$data" \
    >"$data/up.log" 2>&1 &
up=$!
trap 'kill -TERM $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$data"' EXIT
# Ready once it says so; the address is the one it printed, never a default's.
for _ in $(seq 600); do
    grep -q '^ready' "$data/up.log" && break
    kill -0 $up 2>/dev/null || break
    sleep 0.2
done
address=$(sed -n 's/^controller \([^ ]*\) .*/\1/p' "$data/up.log" | head -n 1)
if ! grep -q '^ready' "$data/up.log" || [ -z "$address" ] || ! kill -0 $up 2>/dev/null; then
    echo "scripts/run.sh: its own cluster did not start (mbds up):" >&2
    cat "$data/up.log" >&2
    exit 1
fi
mbds load paper --controller "$address" --scale "${SCALE:-1}"
# Two local backends without a CPU budget: request 1's median here is verdict (c), taken
# in the steady state (each request first run 20 times untimed).
mbds paper table2 --controller "$address" --scale "${SCALE:-1}" --runs 10 \
    --warmup 20 --save "$data/table2.json"
kill -TERM $up; wait $up 2>/dev/null || true
trap 'rm -rf "$data"' EXIT
# The paper's experiments at scale 100 (100,000 records in A; 10 runs: 6 to 9 minutes on
# 2 cores), each backend held to a quarter of a CPU so that it behaves like its own
# machine (cgroups need root; without root the backends share the cores, and more
# backends than cores cannot show the improvement). --control adds A×n, the n one-backend
# clusters that verdict (b) sets C_n against.
mbds bench paper --backends "${BENCH_BACKENDS:-1,2,4}" --scale "${BENCH_SCALE:-100}" \
    --runs "${RUNS:-10}" --control --table2 "$data/table2.json" "${budget[@]}" "${tables[@]}"
