#!/usr/bin/env bash
# Set everything up and run every test. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'
ruff check .
lint-imports                 # the layers' contracts (pyproject.toml [tool.importlinter])
mypy                         # controller, backend and the shared core ([tool.mypy])
command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }
python3 -m pytest "$@"
