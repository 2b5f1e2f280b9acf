#!/usr/bin/env bash
# make images: every Nereid service image, built by Docker Compose v2 from
# deploy/docker/Dockerfile and docker-compose.yml, on an engine that has no
# images and cannot reach a registry.
#
# The compose file and the Dockerfile name the public images users pull
# (golang, debian, nats, redis). Offline, this script first makes local
# equivalents from Debian's packages and passes them in through
# deploy/docker/compose.offline.yml (build arguments and image names only):
#
#   nereid-offline/debian:trixie-slim   debootstrap --variant=minbase trixie, docker import
#   nereid-offline/golang:1.26-trixie   the same plus gcc and libc6-dev, this machine's Go in
#                                       /usr/local/go, and a file module proxy (/opt/gomodproxy)
#                                       holding every module the services' go.sum files name
#   nereid-offline/nats:2.15-alpine     the same plus wget, and nats-server built from its Go
#                                       module at the version pkg/go.mod pins
#   nereid-offline/redis:7.4-alpine     the same plus Debian's redis-server
#   nereid-offline/prometheus:v2.53.4   the same plus Debian's prometheus (the compose file's
#                                       "monitoring" profile)
#
# Module downloads never need the network inside the build: go reads them from
# the builder's file proxy (GOPROXY=file:///opt/gomodproxy), and the
# Dockerfile's cache mounts keep the extracted modules and the build cache
# between builds. Each base image carries a label with the hash of what made it
# (this script, Go's version, the go.sum files); a matching one is reused, so a
# warm run only rebuilds what changed.
#
# It ends by writing .env (scripts/compose-env.sh --offline): COMPOSE_FILE with
# the offline override and the invoking user's NEREID_UID/NEREID_GID, so that
# plain `docker compose ...` commands in this directory use these images.
#
# Docker Compose v2 is used as `docker compose`. When the docker CLI has no
# compose plugin, the pinned version below is built from its Go module into
# bin/compose-<version>/ and installed as ~/.docker/cli-plugins/docker-compose.
#
# Usage: scripts/images.sh [--if-docker]
#   --if-docker  (make test) build only when a Docker engine answers; with none,
#                skip with a notice unless one is required (see docker_required).
# Environment: NEREID_DOCKER=required|auto|off (auto: required when CI=true),
#              NEREID_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#              NEREID_TAG (image tag, default dev, as in docker-compose.yml).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

COMPOSE_VERSION=v2.40.3
SUITE=trixie
MIRROR=${NEREID_DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=$root/bin/offline
OVERRIDE=deploy/docker/compose.offline.yml

log() { echo "images: $*" >&2; }
die() { echo "images: $*" >&2; exit 1; }

# docker_required says whether this machine is meant to have a Docker engine:
# NEREID_DOCKER=required, or CI=true unless NEREID_DOCKER says otherwise.
docker_required() {
	case "${NEREID_DOCKER:-auto}" in
	required) return 0 ;;
	off) return 1 ;;
	auto) [ "${CI:-}" = true ] ;;
	*) die "NEREID_DOCKER=${NEREID_DOCKER}: want required, auto or off" ;;
	esac
}

if [ "${1:-}" = --if-docker ]; then
	if [ "${NEREID_DOCKER:-auto}" = off ]; then
		log "NEREID_DOCKER=off: not building images (the container e2e suite will skip)"
		exit 0
	fi
	if ! docker info >/dev/null 2>&1; then
		if docker_required; then
			die "no Docker engine answers (docker info failed), and this machine must have one (NEREID_DOCKER=${NEREID_DOCKER:-auto}, CI=${CI:-}); start dockerd or set NEREID_DOCKER=off"
		fi
		log "no Docker engine answers: skipping the images (and the container e2e suite)"
		exit 0
	fi
fi
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"

# One run at a time on this engine: the image names are shared by every checkout.
lock=${TMPDIR:-/tmp}/nereid-images.lock
exec 9>"$lock"
if ! flock -n 9; then
	log "waiting for another make images on this machine ($lock)"
	flock 9
fi

# --- Local equivalents of the public images -----------------------------------
NATS_VERSION=$(sed -n 's/^[[:space:]]*github.com\/nats-io\/nats-server\/v2 \(v[^ ]*\).*/\1/p' pkg/go.mod | head -n1)
[ -n "$NATS_VERSION" ] || die "pkg/go.mod pins no nats-server"
GO_VERSION=$(go env GOVERSION)
# The recipe is this section of the script: editing it remakes the images.
base_key=$( { sed -n '/^# --- Local equivalents/,/^# --- Docker Compose/p' "$0"; echo "$SUITE $MIRROR"; } | sha256sum | cut -c1-16)

# label_of prints an image's nereid.offline label, or nothing when it is absent.
label_of() { docker image inspect --format '{{ index .Config.Labels "nereid.offline" }}' "$1" 2>/dev/null || true; }

rootfs=$WORK/rootfs-$SUITE
cleanup_rootfs() { [ -d "$rootfs" ] && rm -rf --one-file-system "$rootfs" || true; }

# base_rootfs makes the minbase root file system once per run (when an image needs it).
base_rootfs() {
	[ -f "$rootfs/.complete" ] && return 0
	command -v debootstrap >/dev/null 2>&1 || {
		[ "$(id -u)" -eq 0 ] || die "debootstrap is missing; apt-get install -y debootstrap (as root)"
		log "installing debootstrap from Debian's packages"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
	}
	[ "$(id -u)" -eq 0 ] || die "debootstrap needs root to make the base image"
	cleanup_rootfs
	mkdir -p "$WORK"
	log "debootstrap --variant=minbase $SUITE from $MIRROR (about a minute)"
	debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
		die "debootstrap failed; see $WORK/debootstrap.log"
	# No service starts inside the chroot while packages are installed.
	printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
	chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
	touch "$rootfs/.complete"
}

# variant copies the base root file system and installs Debian packages into it.
variant() {
	local dir=$1
	shift
	rm -rf --one-file-system "$dir"
	cp -a "$rootfs" "$dir"
	rm -f "$dir/.complete"
	if [ $# -gt 0 ]; then
		cp /etc/resolv.conf "$dir/etc/resolv.conf"
		log "  apt-get install $* (in the $SUITE root file system)"
		chroot "$dir" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
		chroot "$dir" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
		: >"$dir/etc/resolv.conf"
	fi
	rm -f "$dir/usr/sbin/policy-rc.d"
	rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb "$dir"/var/log/*.log "$dir"/tmp/*
}

# import_rootfs makes an image of a directory with docker import.
import_rootfs() {
	local dir=$1 image=$2 key=$3
	shift 3
	local changes=(--change "LABEL nereid.offline=$key")
	for c in "$@"; do changes+=(--change "$c"); done
	tar --numeric-owner -C "$dir" -c . | docker import "${changes[@]}" - "$image" >/dev/null
	rm -rf --one-file-system "$dir"
}

DEBIAN_IMAGE=nereid-offline/debian:$SUITE-slim
GOLANG_BASE=nereid-offline/golang-base:$SUITE
GOLANG_IMAGE=nereid-offline/golang:1.26-$SUITE
NATS_IMAGE=nereid-offline/nats:2.15-alpine
REDIS_IMAGE=nereid-offline/redis:7.4-alpine
PROMETHEUS_IMAGE=nereid-offline/prometheus:v2.53.4

if [ "$(label_of "$DEBIAN_IMAGE")" != "$base_key" ]; then
	log "making $DEBIAN_IMAGE"
	base_rootfs
	variant "$WORK/debian"
	import_rootfs "$WORK/debian" "$DEBIAN_IMAGE" "$base_key" 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' 'CMD ["bash"]'
fi

golang_key=$(echo "$base_key $GO_VERSION" | sha256sum | cut -c1-16)
if [ "$(label_of "$GOLANG_BASE")" != "$golang_key" ]; then
	log "making $GOLANG_BASE ($GO_VERSION from $(go env GOROOT))"
	base_rootfs
	variant "$WORK/golang" gcc libc6-dev ca-certificates
	mkdir -p "$WORK/golang/usr/local/go" "$WORK/golang/go"
	cp -a "$(go env GOROOT)/." "$WORK/golang/usr/local/go/"
	import_rootfs "$WORK/golang" "$GOLANG_BASE" "$golang_key" \
		'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		'ENV GOPATH=/go' 'ENV GOTOOLCHAIN=local' 'WORKDIR /go'
fi

nats_key=$(echo "$base_key $NATS_VERSION $GO_VERSION" | sha256sum | cut -c1-16)
if [ "$(label_of "$NATS_IMAGE")" != "$nats_key" ]; then
	log "making $NATS_IMAGE (nats-server $NATS_VERSION from its Go module)"
	base_rootfs
	variant "$WORK/nats" wget
	(cd pkg && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$WORK/nats/usr/local/bin/nats-server" github.com/nats-io/nats-server/v2)
	import_rootfs "$WORK/nats" "$NATS_IMAGE" "$nats_key" \
		'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		'EXPOSE 4222 8222' 'ENTRYPOINT ["nats-server"]' 'CMD ["--port", "4222", "--http_port", "8222"]'
fi

if [ "$(label_of "$REDIS_IMAGE")" != "$base_key" ]; then
	log "making $REDIS_IMAGE (Debian's redis-server)"
	base_rootfs
	variant "$WORK/redis" redis-server
	mkdir -p "$WORK/redis/data"
	import_rootfs "$WORK/redis" "$REDIS_IMAGE" "$base_key" \
		'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		'WORKDIR /data' 'VOLUME /data' 'EXPOSE 6379' 'CMD ["redis-server"]'
fi
if [ "$(label_of "$PROMETHEUS_IMAGE")" != "$base_key" ]; then
	log "making $PROMETHEUS_IMAGE (Debian's prometheus)"
	base_rootfs
	variant "$WORK/prometheus" prometheus
	# The public image's layout: the TSDB in /prometheus, owned by nobody.
	mkdir -p "$WORK/prometheus/prometheus"
	chown 65534:65534 "$WORK/prometheus/prometheus"
	import_rootfs "$WORK/prometheus" "$PROMETHEUS_IMAGE" "$base_key" \
		'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		'USER 65534' 'WORKDIR /prometheus' 'VOLUME /prometheus' 'EXPOSE 9090' \
		'ENTRYPOINT ["/usr/bin/prometheus"]' \
		'CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]'
fi
cleanup_rootfs

# The module proxy: every module the services' builds need (GOWORK=off, as the
# Dockerfile builds), fetched through this machine's module cache.
mods_key=$( { echo "$golang_key"; cat api/go.sum pkg/go.sum services/*/go.sum; } | sha256sum | cut -c1-16)
if [ "$(label_of "$GOLANG_IMAGE")" != "$mods_key" ]; then
	log "making $GOLANG_IMAGE (the modules of api, pkg and services/* as a file module proxy)"
	modcache=$WORK/gomodcache
	host_cache=$(go env GOMODCACHE)/cache/download
	for m in api pkg services/*/; do
		(cd "$m" && GOWORK=off GOMODCACHE=$modcache GOPROXY="file://$host_cache,$(go env GOPROXY)" go mod download) ||
			die "go mod download in $m failed"
	done
	cid=$(docker create "$GOLANG_BASE" true)
	docker cp "$modcache/cache/download" "$cid:/opt/gomodproxy" >/dev/null
	docker commit \
		--change "LABEL nereid.offline=$mods_key" \
		--change 'ENV GOPROXY=file:///opt/gomodproxy' \
		--change 'ENV GOSUMDB=off' \
		"$cid" "$GOLANG_IMAGE" >/dev/null
	docker rm "$cid" >/dev/null
	chmod -R u+w "$modcache" && rm -rf "$modcache"
fi

# --- Docker Compose v2 -------------------------------------------------------
if ! docker compose version >/dev/null 2>&1; then
	bin=$root/bin/compose-$COMPOSE_VERSION/docker-compose
	if [ ! -x "$bin" ]; then
		log "building Docker Compose $COMPOSE_VERSION from its Go module (once; a few minutes from a cold module cache)"
		src=$(GOFLAGS=-mod=mod go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$src" ] || die "could not download github.com/docker/compose/v2@$COMPOSE_VERSION"
		# Compose's go.mod has exclude directives, so it builds as the main
		# module: from a writable copy of its source.
		tmp=$(mktemp -d)
		trap 'rm -rf "$tmp"' EXIT
		cp -r "$src" "$tmp/src" && chmod -R u+w "$tmp/src"
		(cd "$tmp/src" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath \
			-ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
			-o "$bin.tmp" ./cmd) && mv "$bin.tmp" "$bin"
		rm -rf "$tmp"
		trap - EXIT
	fi
	plugins=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
	mkdir -p "$plugins"
	install -m 0755 "$bin" "$plugins/docker-compose"
	log "installed Docker Compose $COMPOSE_VERSION as $plugins/docker-compose"
fi
docker compose version >/dev/null 2>&1 || die "docker compose does not run"

# --- The service images ---------------------------------------------------------
log "docker compose build (the shipped docker-compose.yml with $OVERRIDE; the standalone image too)"
# The compose build runs on the engine's BuildKit (the Dockerfile's cache mounts).
export DOCKER_BUILDKIT=1
docker compose -f docker-compose.yml -f "$OVERRIDE" --profile standalone build
log "built: $(docker compose -f docker-compose.yml -f "$OVERRIDE" --profile standalone config --images | sort -u | tr '\n' ' ')"

# --- .env ------------------------------------------------------------------------
# Every later `docker compose` command in this directory uses these images (the
# offline override through COMPOSE_FILE) and runs the services as the invoking
# user (shared memory), without flags: scripts/compose-env.sh.
bash scripts/compose-env.sh --offline
