#!/usr/bin/env bash
# Install the Compose v2 plugin (`docker compose`) where only docker-compose 1.29 is:
# Debian bookworm packages Compose v1 only, so this takes the plugin binary from
# Debian trixie's docker-compose package (v2), without adding trixie to the
# system's apt sources (a private sources list and package lists under a temp dir).
#
#   docker/install-compose-v2.sh [PLUGIN_DIR]   # default /usr/local/lib/docker/cli-plugins
#
# PLUGIN_DIR must be one docker looks in: ~/.docker/cli-plugins, $DOCKER_CONFIG/cli-plugins
# or /usr/local/lib/docker/cli-plugins.
#
# Does nothing if `docker compose version` already works. Needs root for the default dir.
set -euo pipefail

dest=${1:-/usr/local/lib/docker/cli-plugins}
if docker compose version >/dev/null 2>&1; then
  docker compose version
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "deb http://deb.debian.org/debian trixie main" > "$tmp/sources.list"
mkdir -p "$tmp/lists/partial" "$tmp/archives/partial"
apt_opts=(-o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o Dir::State::Lists="$tmp/lists" -o Dir::Cache::Archives="$tmp/archives"
          -o APT::Sandbox::User=root -qq)
apt-get "${apt_opts[@]}" update
(cd "$tmp" && apt-get "${apt_opts[@]}" download docker-compose)
dpkg-deb -x "$tmp"/docker-compose_*.deb "$tmp/x"
plugin="$tmp/x/usr/libexec/docker/cli-plugins/docker-compose"
[[ -x $plugin ]] || { echo "install-compose-v2.sh: no plugin binary in the package" >&2; exit 1; }
install -D -m 0755 "$plugin" "$dest/docker-compose"
docker compose version || {
  echo "install-compose-v2.sh: installed in $dest, where docker does not look for plugins:" \
       "give ~/.docker/cli-plugins, \$DOCKER_CONFIG/cli-plugins or" \
       "/usr/local/lib/docker/cli-plugins" >&2
  exit 1
}
