#!/usr/bin/env bash
# Build the images of the MBDS deployment without a container registry.
#
#   mbds-base:bookworm      Debian bookworm (minbase) + python3, made with debootstrap
#                           from the host's Debian mirror and `docker import`ed
#   mbds-prometheus:latest  Debian's prometheus package on top of the base image
#   mbds:latest             the project, installed from a wheelhouse built on the host
#
# Idempotent: an image that already exists is reused unless --rebuild. mbds:latest
# is also rebuilt whenever its inputs changed (project sources, docker/Dockerfile,
# base image): their hash is kept in the image's label mbds.source-hash.
#
# With a registry, BASE_IMAGE=python:3.11-slim-bookworm (any Debian bookworm image
# with python3 and python3-venv) skips debootstrap and builds both images on it.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: docker/build-images.sh [--rebuild]

Builds mbds-base:bookworm (debootstrap), mbds-prometheus:latest and mbds:latest.
  --rebuild   rebuild every image (and the wheelhouse) even if it exists

Environment:
  BASE_IMAGE              base of both Dockerfiles (default: mbds-base:bookworm, built here)
  DEBIAN_MIRROR           mirror for debootstrap (default: the host's apt sources,
                          else http://deb.debian.org/debian)
  DEBIAN_SECURITY_MIRROR  (default: the host's apt sources, else http://deb.debian.org/debian-security)
  PYTHON                  host interpreter whose pip builds the wheelhouse (default: python3)
EOF
}

REBUILD=0
while (($#)); do
  case $1 in
    --rebuild) REBUILD=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
SUITE=bookworm
LOCAL_BASE=mbds-base:$SUITE
BASE_IMAGE=${BASE_IMAGE:-$LOCAL_BASE}
PROM_IMAGE=mbds-prometheus:latest
APP_IMAGE=mbds:latest
WHEELHOUSE=$HERE/.wheelhouse
PYTHON=${PYTHON:-python3}
# The image's interpreter: the wheelhouse holds wheels for it, whatever the host runs.
IMAGE_PY=3.11
IMAGE_GLIBC_MINOR=36 # bookworm's glibc 2.36: manylinux wheels up to manylinux_2_36
# python3-venv for `python3 -m venv`; ca-certificates for TLS; netbase for
# /etc/services and /etc/protocols, which gRPC's resolver reads. grpcio's wheels
# bring their own TLS and need only libc and libstdc++ (in minbase via apt).
BASE_PACKAGES=python3,python3-venv,ca-certificates,netbase,tzdata
IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

WORK=""
cleanup() {
  [[ -n $WORK && -d $WORK ]] || return 0
  if mountpoint -q "$WORK/rootfs/proc" 2>/dev/null; then as_root umount "$WORK/rootfs/proc"; fi
  as_root rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

log() { printf '%s\n' "$*" >&2; }
die() { log "build-images: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

as_root() {
  if ((EUID == 0)); then "$@"; else sudo "$@"; fi
}

# Run one named step and record how long it took (printed again in the summary).
SUMMARY=()
step() {
  local name=$1; shift
  local t0; t0=$(now)
  log ""
  log "==> $name"
  STEP_NOTE=""
  "$@"
  local secs; secs=$(since "$t0")
  log "<== $name: ${secs}s${STEP_NOTE:+ ($STEP_NOTE)}"
  SUMMARY+=("$(printf '%-32s %7ss  %s' "$name" "$secs" "$STEP_NOTE")")
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
needs_build() { ((REBUILD)) || ! image_exists "$1"; }

# ------------------------------------------------------------------ host --

host_tools() {
  command -v docker >/dev/null || die "docker is not installed"
  docker info >/dev/null 2>&1 || die "cannot talk to the Docker daemon (docker info failed)"
  local missing=()
  if [[ $BASE_IMAGE == "$LOCAL_BASE" ]] && needs_build "$LOCAL_BASE"; then
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
  fi
  "$PYTHON" -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
  if ((${#missing[@]})); then
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    log "installing on the host: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    STEP_NOTE="installed ${missing[*]}"
  else
    STEP_NOTE="all present"
  fi
}

# "URI SUITE" for every enabled deb source of the host, one-line and deb822 formats.
host_apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $f ]] || continue
    awk '$1 == "deb" {
           i = 2
           if ($2 ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
           if (i < NF) print $i, $(i + 1)
         }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    awk 'function flush(  n, m, a, b, u, s) {
           if (types ~ /(^| )deb( |$)/ && enabled != "no") {
             n = split(uris, u, " "); m = split(suites, s, " ")
             for (a = 1; a <= n; a++) for (b = 1; b <= m; b++) print u[a], s[b]
           }
           types = uris = suites = enabled = ""
         }
         /^[ \t]*$/ { flush(); next }
         /^#/ { next }
         tolower($1) == "types:" { $1 = ""; types = $0 }
         tolower($1) == "uris:" { $1 = ""; uris = $0 }
         tolower($1) == "suites:" { $1 = ""; suites = $0 }
         tolower($1) == "enabled:" { enabled = tolower($2) }
         END { flush() }' "$f"
  done
}

# The host's mirror for suite $1 (else any .../$2 URI), else $3.
host_mirror() {
  local uri
  uri=$(host_apt_sources | awk -v s="$1" '$2 == s && !found { print $1; found = 1 }')
  [[ -n $uri ]] || uri=$(host_apt_sources | awk -v p="/$2/?\$" '$1 ~ p && !found { print $1; found = 1 }')
  printf '%s\n' "${uri:-$3}"
}

# ------------------------------------------------------------ base image --

in_chroot() {
  as_root chroot "$WORK/rootfs" /usr/bin/env -i PATH="$IMAGE_PATH" LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}

# apt and dpkg settings of the image: no recommends, no docs, no caches left behind,
# services never started by package scripts (there is no init in a container).
configure_rootfs() {
  local rootfs=$1 mirror=$2 security=$3
  as_root rm -f "$rootfs/etc/apt/sources.list"
  as_root tee "$rootfs/etc/apt/sources.list.d/debian.sources" >/dev/null <<EOF
Types: deb
URIs: $mirror
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  as_root tee "$rootfs/etc/apt/apt.conf.d/90mbds-image" >/dev/null <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Acquire::GzipIndexes "true";
Acquire::CompressionTypes::Order:: "gz";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
EOF
  as_root tee "$rootfs/etc/dpkg/dpkg.cfg.d/90mbds-image" >/dev/null <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
EOF
  printf '#!/bin/sh\nexit 101\n' | as_root tee "$rootfs/usr/sbin/policy-rc.d" >/dev/null
  as_root chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
}

# What the path-excludes above keep out of later installs, removed from this one.
trim_rootfs() {
  local rootfs=$1
  as_root rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old \
    "$rootfs"/var/cache/ldconfig/aux-cache \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/lintian
  as_root find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  as_root find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  as_root find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias \
    -exec rm -rf {} +
  as_root find "$rootfs/var/log" -type f -delete
  # Docker provides these at run time.
  as_root truncate -s 0 "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"
}

build_base() {
  if [[ $BASE_IMAGE != "$LOCAL_BASE" ]]; then
    STEP_NOTE="skipped: BASE_IMAGE=$BASE_IMAGE"
    return
  fi
  if ! needs_build "$LOCAL_BASE"; then STEP_NOTE="reused"; return; fi
  local mirror security
  mirror=${DEBIAN_MIRROR:-$(host_mirror "$SUITE" debian http://deb.debian.org/debian)}
  security=${DEBIAN_SECURITY_MIRROR:-$(host_mirror "$SUITE-security" debian-security \
    http://deb.debian.org/debian-security)}
  log "mirror $mirror, security $security"
  WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/mbds-base.XXXXXX")
  local rootfs=$WORK/rootfs
  as_root debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" "$mirror" \
    >"$WORK/debootstrap.log" 2>&1 || {
    tail -n 30 "$WORK/debootstrap.log" >&2
    die "debootstrap failed (log above)"
  }
  configure_rootfs "$rootfs" "$mirror" "$security"
  # debootstrap installs the suite as released; take the point and security updates.
  as_root mount -t proc proc "$rootfs/proc"
  in_chroot apt-get update -qq
  in_chroot apt-get -y -qq -o Dpkg::Use-Pty=0 upgrade >/dev/null
  as_root umount "$rootfs/proc"
  trim_rootfs "$rootfs"
  as_root tar --numeric-owner -C "$rootfs" -c . |
    docker import \
      --change "ENV PATH=$IMAGE_PATH" \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["bash"]' \
      --message "debootstrap --variant=minbase --include=$BASE_PACKAGES $SUITE $mirror" \
      - "$LOCAL_BASE" >/dev/null
  cleanup
  WORK=""
  STEP_NOTE="built from $mirror"
}

# ------------------------------------------------------ prometheus image --

build_prometheus() {
  if ! needs_build "$PROM_IMAGE"; then STEP_NOTE="reused"; return; fi
  # apt inside this build reaches the Debian mirror over Docker's default bridge.
  docker build --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$PROM_IMAGE" \
    -f "$HERE/prometheus/Dockerfile" "$HERE/prometheus"
  STEP_NOTE="built"
}

# ------------------------------------------------------------- mbds image --

# The files the project's wheel is built from: the tree minus what is never packaged.
project_files() {
  (cd "$ROOT" && find . \( -path ./.git -o -path ./.ci -o -path ./docker -o -path ./tests \
    -o -path ./docs -o -path ./dashboards -o -path ./results -o -path ./data -o -path ./build \
    -o -path ./dist -o -path ./.venv -o -path ./venv -o -path ./wheelhouse \
    -o -name __pycache__ -o -name '*.egg-info' -o -name '.*_cache' -o -name .hypothesis \) -prune \
    -o -type f ! -name '*.pyc' ! -name '*.db' ! -name '*.db-*' -print0 | LC_ALL=C sort -z)
}

source_hash() {
  {
    project_files | (cd "$ROOT" && xargs -0 -r sha256sum)
    sha256sum "$HERE/Dockerfile" | cut -d' ' -f1
    docker image inspect -f '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || echo "$BASE_IMAGE"
  } | sha256sum | cut -c1-16
}

# Wheels for the image's CPython $IMAGE_PY on glibc, whatever the host's Python is:
# the project's own wheel is built from a copy of the tree (so the build leaves
# nothing in it), the dependencies are downloaded as binary wheels for the image.
build_wheelhouse() {
  local arch stage platforms=() minor
  arch=$(uname -m)
  for ((minor = IMAGE_GLIBC_MINOR; minor >= 17; minor--)); do
    platforms+=(--platform "manylinux_2_${minor}_$arch")
  done
  platforms+=(--platform "manylinux2014_$arch")
  if ((REBUILD)); then rm -rf "$WHEELHOUSE"; fi
  mkdir -p "$WHEELHOUSE"
  rm -f "$WHEELHOUSE"/mbds-*.whl
  stage=$(mktemp -d "${TMPDIR:-/tmp}/mbds-src.XXXXXX")
  project_files | tar -C "$ROOT" --null -T - -cf - | tar -C "$stage" -xf -
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$PYTHON" -m pip wheel --quiet --no-deps \
    --wheel-dir "$WHEELHOUSE" "$stage" || { rm -rf "$stage"; die "building the mbds wheel failed"; }
  rm -rf "$stage"
  local wheel=("$WHEELHOUSE"/mbds-*.whl)
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$PYTHON" -m pip download --quiet \
    --dest "$WHEELHOUSE" --find-links "$WHEELHOUSE" --only-binary=:all: \
    --implementation cp --python-version "$IMAGE_PY" --abi "cp${IMAGE_PY/./}" "${platforms[@]}" \
    "${wheel[0]}"
  STEP_NOTE="$(find "$WHEELHOUSE" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEELHOUSE" | cut -f1)"
}

build_app() {
  local old
  old=$(docker image inspect -f '{{.Id}}' "$APP_IMAGE" 2>/dev/null || true)
  # Context = the repository, as for docker-compose.yml's build; .dockerignore lets in
  # the sources and the wheelhouse, and pip installs from the wheelhouse alone.
  docker build --build-arg BASE_IMAGE="$BASE_IMAGE" --label "mbds.source-hash=$APP_HASH" \
    --build-arg PIP_INSTALL="--no-index --find-links /src/docker/.wheelhouse mbds" \
    -t "$APP_IMAGE" -f "$HERE/Dockerfile" "$ROOT"
  # The image this one replaces, unless a container still uses it.
  if [[ -n $old && $old != $(docker image inspect -f '{{.Id}}' "$APP_IMAGE") ]]; then
    docker rmi "$old" >/dev/null 2>&1 || true
  fi
  # The venv stage is left as a dangling image; its cache is useless next time
  # (the build only runs when the wheelhouse changed).
  docker image prune --force --filter label=mbds.stage=venv >/dev/null
  STEP_NOTE="built, source-hash $APP_HASH"
}

# ------------------------------------------------------------------ main --

T0=$(now)
# One build at a time (the wheelhouse and the tags are shared): lock this script.
exec 9<"${BASH_SOURCE[0]}"
if ! flock -n 9; then
  log "waiting for another build-images.sh to finish"
  flock 9
fi
step "host tools" host_tools
step "base image $LOCAL_BASE" build_base
step "image $PROM_IMAGE" build_prometheus
APP_HASH=$(source_hash)
if ((REBUILD)) || [[ $(docker image inspect -f '{{index .Config.Labels "mbds.source-hash"}}' \
  "$APP_IMAGE" 2>/dev/null) != "$APP_HASH" ]]; then
  step "wheelhouse" build_wheelhouse
  step "image $APP_IMAGE" build_app
else
  SUMMARY+=("$(printf '%-32s %7ss  %s' "wheelhouse + $APP_IMAGE" 0.0 "reused, source-hash $APP_HASH")")
fi

log ""
log "Steps:"
printf '  %s\n' "${SUMMARY[@]}" >&2
log "  total $(since "$T0")s"
docker image ls --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' |
  grep -E "^  (mbds|mbds-base|mbds-prometheus):" >&2 || true
