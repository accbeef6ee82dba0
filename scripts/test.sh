#!/usr/bin/env bash
# Set everything up and run every test. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'
ruff check .
python3 -m pytest "$@"
