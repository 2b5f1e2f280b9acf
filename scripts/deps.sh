#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: redis-server and protoc
# from Debian's packages (as root), and nats-server built from its Go module.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${need[*]}; install them (apt-get install -y ${need[*]}) or run as root" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The real nats-server, pinned by the module graph, built once into bin/.
mkdir -p bin
if [ ! -x bin/nats-server ]; then
	echo "deps: building nats-server"
	(cd pkg && go build -o ../bin/nats-server github.com/nats-io/nats-server/v2)
fi
