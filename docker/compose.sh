#!/usr/bin/env bash
# Run Compose on the project's docker-compose.yml with whichever client is here:
# `docker compose` (v2) if available, else `docker-compose` (1.29); MBDS_COMPOSE names
# one of them to use it whatever else is installed.
#
#   docker/compose.sh [GLOBAL OPTIONS] COMMAND [ARGS...]
#
# `up` always runs `down` first (never with -v: the data volume stays), because
# docker-compose 1.29.2 fails to recreate containers on newer Docker engines.
# Everything else is plain Compose: `docker-compose up -d --scale backend=N` works
# the same wherever containers need no recreating (a fresh or a downed project).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if [[ -n ${MBDS_COMPOSE:-} ]]; then
  read -r -a compose <<< "$MBDS_COMPOSE"       # a client chosen by name, e.g. "docker-compose"
  "${compose[@]}" version >/dev/null 2>&1 ||
    { echo "compose.sh: MBDS_COMPOSE='$MBDS_COMPOSE' does not run ('$MBDS_COMPOSE version' failed)" >&2; exit 1; }
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose=(docker-compose)
else
  echo "compose.sh: neither 'docker compose' nor 'docker-compose' is installed" >&2
  exit 1
fi

# Global options (before COMMAND) go to both the down and the up.
global=()
while (($#)) && [[ $1 == -* ]]; do
  case $1 in
    -p | --project-name | -f | --file | --profile | --env-file | --project-directory)
      (($# >= 2)) || { echo "compose.sh: $1 needs a value" >&2; exit 2; }
      global+=("$1" "$2"); shift 2 ;;
    *) global+=("$1"); shift ;;
  esac
done

if [[ ${1:-} == up ]]; then
  "${compose[@]}" "${global[@]}" down --remove-orphans
fi
exec "${compose[@]}" "${global[@]}" "$@"
