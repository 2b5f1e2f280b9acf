#!/usr/bin/env bash
# Regenerates the Go code beside every .proto under api/ with pinned tools, so
# the checked-in files are reproducible byte for byte.
#
#   bash api/gen.sh           regenerate in place
#   bash api/gen.sh --check   regenerate into a temp dir; fail, listing the
#                             files, if anything checked in differs
#
# The protoc version is part of every generated header, so it is pinned too:
# Debian 12's protobuf-compiler (3.21.12).
set -euo pipefail

PROTOC_VERSION="3.21.12"
PROTOC_GEN_GO_VERSION="v1.36.12"      # matches google.golang.org/protobuf in api/go.mod
PROTOC_GEN_GO_GRPC_VERSION="v1.5.1"
PROTOC_GEN_GRPC_GATEWAY_VERSION="v2.32.0" # matches grpc-gateway/v2 in api/go.mod
# Fast marshal, size and unmarshal methods (MarshalVT, SizeVT, UnmarshalVT,
# UnmarshalVTUnsafe) beside protobuf's reflective ones, for the messages of
# inference/ that every request encodes and decodes (pkg/infercodec).
PROTOC_GEN_GO_VTPROTO_VERSION="v0.6.1-0.20240319094008-0393e58bdf10"   # the version go.mod files already resolve (through gRPC)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
api="$root/api"
bin="$root/bin"

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# protoc: the pinned version, installed from apt when missing and we are root.
if ! command -v protoc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "gen.sh: installing protobuf-compiler" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler >&2 ||
      { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y protobuf-compiler >&2; }
  else
    echo "gen.sh: protoc not found; install protobuf-compiler $PROTOC_VERSION" >&2
    exit 1
  fi
fi
got="$(protoc --version | awk '{print $2}')"
if [ "$got" != "$PROTOC_VERSION" ]; then
  echo "gen.sh: protoc $got found, $PROTOC_VERSION required (generated headers record it)" >&2
  exit 1
fi

# Plugins: pinned versions in a repo-local ./bin, reinstalled only when the
# version there is not the pinned one.
mkdir -p "$bin"
plugin() { # name module version want-version-output
  local name=$1 mod=$2 ver=$3 want=$4
  if [ ! -x "$bin/$name" ] || [ "$("$bin/$name" --version 2>/dev/null)" != "$want" ]; then
    echo "gen.sh: installing $name $ver into $bin" >&2
    (cd "$root" && GOWORK=off GOBIN="$bin" go install "$mod@$ver")
  fi
}
plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go \
  "$PROTOC_GEN_GO_VERSION" "protoc-gen-go $PROTOC_GEN_GO_VERSION"
plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc \
  "$PROTOC_GEN_GO_GRPC_VERSION" "protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION#v}"
plugin protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway \
  "$PROTOC_GEN_GRPC_GATEWAY_VERSION" "Version ${PROTOC_GEN_GRPC_GATEWAY_VERSION}, commit unknown, built at unknown"
# protoc-gen-go-vtproto has no --version: a stamp beside it records the
# version installed.
vtstamp="$bin/protoc-gen-go-vtproto.version"
if [ ! -x "$bin/protoc-gen-go-vtproto" ] || [ "$(cat "$vtstamp" 2>/dev/null)" != "$PROTOC_GEN_GO_VTPROTO_VERSION" ]; then
  echo "gen.sh: installing protoc-gen-go-vtproto $PROTOC_GEN_GO_VTPROTO_VERSION into $bin" >&2
  (cd "$root" && GOWORK=off GOBIN="$bin" go install "github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@$PROTOC_GEN_GO_VTPROTO_VERSION")
  echo "$PROTOC_GEN_GO_VTPROTO_VERSION" >"$vtstamp"
fi

# Sorted, api-relative .proto paths, so output does not depend on find order.
mapfile -t protos < <(cd "$api" && find . -name '*.proto' -not -path './bin/*' | sed 's|^\./||' | LC_ALL=C sort)

# REST mappings (grpc-gateway) for the services that have an HTTP rule file
# beside their proto (<name>_http.yaml): the rules live there rather than in
# google.api.http annotations, so no googleapis proto is vendored.
mapfile -t vtprotos < <(printf '%s\n' "${protos[@]}" | grep '^inference/')

generate() { # out-dir
  PATH="$bin:$PATH" protoc -I "$api" \
    --go_out="$1" --go_opt=paths=source_relative \
    --go-grpc_out="$1" --go-grpc_opt=paths=source_relative \
    "${protos[@]}"
  local p rules
  for p in "${protos[@]}"; do
    rules="${p%.proto}_http.yaml"
    [ -e "$api/$rules" ] || continue
    PATH="$bin:$PATH" protoc -I "$api" \
      --grpc-gateway_out="$1" --grpc-gateway_opt=paths=source_relative \
      --grpc-gateway_opt=grpc_api_configuration="$api/$rules" \
      "$p"
  done
  PATH="$bin:$PATH" protoc -I "$api" \
    --go-vtproto_out="$1" \
    --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size+unmarshal_unsafe \
    "${vtprotos[@]}"
}

if [ "$check" = 0 ]; then
  generate "$api"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
generate "$tmp"

stale=()
# Every freshly generated file must exist, identical, in the tree...
while IFS= read -r f; do
  if ! cmp -s "$tmp/$f" "$api/$f"; then stale+=("api/$f"); fi
done < <(cd "$tmp" && find . -name '*.pb.go' -o -name '*.pb.gw.go' | sed 's|^\./||' | LC_ALL=C sort)
# ...and no checked-in generated file may be left without a source.
while IFS= read -r f; do
  [ -e "$tmp/$f" ] || stale+=("api/$f (no longer generated)")
done < <(cd "$api" && find . -name '*.pb.go' -o -name '*.pb.gw.go' | sed 's|^\./||' | LC_ALL=C sort)

if [ "${#stale[@]}" -gt 0 ]; then
  echo "gen.sh: generated code is stale; run 'make proto' (bash api/gen.sh):" >&2
  printf '  %s\n' "${stale[@]}" >&2
  exit 1
fi
echo "gen.sh: generated code is up to date" >&2
