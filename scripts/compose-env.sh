#!/usr/bin/env bash
# make compose-env (also run by make images): the .env file next to
# docker-compose.yml, which every `docker compose` command run in this
# directory reads, so that the documented commands need no flags and no
# variables repeated on each call:
#
#   NEREID_UID, NEREID_GID  the user gateway and executors run as: the one who
#                           runs this (the user who ran sudo, under sudo), so
#                           that they can open the shared-memory regions that
#                           user's clients create (mode 0600). Root gives 0:0.
#   COMPOSE_FILE            with --offline (make images): docker-compose.yml plus
#                           deploy/docker/compose.offline.yml, which names the
#                           local base images make images made, so that `up`,
#                           `build` and the rest never pull.
#   NEREID_EXECUTORS        when set in the environment (make compose-env
#                           NEREID_EXECUTORS=3): the executors' scale, which a
#                           plain `docker compose up -d` keeps.
#
# A variable already in .env is left as it is, except NEREID_EXECUTORS when
# one is given: edit .env to change the others (NEREID_UID=65532 for the
# image's own user). Other lines (passwords, NEREID_TAG, ...) are kept.
#
# Usage: scripts/compose-env.sh [--offline]
set -euo pipefail
cd "$(dirname "$0")/.."

env_file=${NEREID_ENV_FILE:-.env}
offline=false
[ "${1:-}" = --offline ] && offline=true

touch "$env_file"

# has KEY: whether .env assigns KEY.
has() { grep -Eq "^[[:space:]]*(export[[:space:]]+)?$1=" "$env_file"; }

# put KEY VALUE: replaces KEY's line, or appends one.
put() {
	local tmp
	tmp=$(mktemp "$env_file.XXXXXX")
	grep -Ev "^[[:space:]]*(export[[:space:]]+)?$1=" "$env_file" >"$tmp" || true
	echo "$1=$2" >>"$tmp"
	cat "$tmp" >"$env_file"
	rm -f "$tmp"
	echo "compose-env: $env_file: $1=$2" >&2
}

if ! has NEREID_UID; then put NEREID_UID "${SUDO_UID:-$(id -u)}"; fi
if ! has NEREID_GID; then put NEREID_GID "${SUDO_GID:-$(id -g)}"; fi
if $offline && ! has COMPOSE_FILE; then
	put COMPOSE_FILE docker-compose.yml:deploy/docker/compose.offline.yml
fi
if [ -n "${NEREID_EXECUTORS:-}" ]; then
	case "$NEREID_EXECUTORS" in
	'' | *[!0-9]*) echo "compose-env: NEREID_EXECUTORS=$NEREID_EXECUTORS: want a number" >&2; exit 1 ;;
	esac
	put NEREID_EXECUTORS "$NEREID_EXECUTORS"
fi
