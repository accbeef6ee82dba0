#!/usr/bin/env bash
# Set everything up and run every test. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'
ruff check .
lint-imports                 # the layers' contracts (pyproject.toml [tool.importlinter])
mypy                         # controller, backend and the shared core ([tool.mypy])
for tool in prometheus valgrind; do  # valgrind: `mbds bench fixed-cost --instructions`
  command -v $tool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $tool >/dev/null; }
done
# Both Compose clients are tested: bookworm has docker-compose 1.29; v2 comes from trixie.
docker compose version >/dev/null 2>&1 || bash docker/install-compose-v2.sh >/dev/null
python3 -m pytest "$@"
