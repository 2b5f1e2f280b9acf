# Nereid — make verbs. `make run` serves deploy/model_repository; `make test` runs everything CI runs.
GO        ?= go
BIN       := $(CURDIR)/bin
REPO      ?= deploy/model_repository
TESTFLAGS ?= -count=1 -timeout 12m
BENCHTIME ?= 2s

SERVICES := gateway executor shm-registry sequence-router

.PHONY: all build run test unit e2e bench scale perfdoc proto proto-check lint deps images compose-env compose-config helm-lint clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/nereid ./services/standalone/cmd/nereid
	@for s in $(SERVICES); do $(GO) build -o $(BIN)/nereid-$$s ./services/$$s/cmd/$$s || exit 1; done
	$(GO) build -o $(BIN)/nereidctl ./services/gateway/cmd/nereidctl
	@# The library Triton backends link against; executors find it beside them.
	$(CC) -shared -fPIC -Wl,-soname,libtritonserver.so -o $(BIN)/libtritonserver.so services/executor/internal/cbackend/stub/tritonserver_stub.c

# One process with an embedded NATS server and every service, on Triton's ports.
run: build
	$(BIN)/nereid --model-repository $(REPO) --http-port 8000 --grpc-port 8001 --metrics-port 8002 --allow-client-shm true

# Unit, integration (embedded NATS) and e2e (real binaries, nats-server, redis-server),
# and the container e2e suite (e2e/containers) when a Docker engine answers: its
# images are built first (make images). NEREID_DOCKER=required (set by .ci/run,
# implied by CI=true) makes a machine without an engine fail; NEREID_DOCKER=off
# skips the images and the suite.
test: deps
	@bash scripts/images.sh --if-docker
	$(GO) vet $$($(GO) list work)
	$(GO) test $(TESTFLAGS) work
	@# The Triton C backend bridge and the bus's concurrent machinery (streams,
	@# chunking, cancellation, the connection watch) once more under the race detector.
	$(GO) test -race $(TESTFLAGS) ./services/executor/internal/cbackend ./pkg/bus ./pkg/failover ./pkg/routines

unit:
	$(GO) test $(TESTFLAGS) $$($(GO) list work | grep -v /e2e)

e2e: deps
	@bash scripts/images.sh --if-docker
	$(GO) test $(TESTFLAGS) -v ./e2e/...

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem ./e2e/bench/...

# The placement scale envelope (e2e/scale): executor processes, gateways,
# placement controllers and thousands of models on this machine; minutes
# long, so not part of `make test`. SCALE_SHAPES picks the runs
# (EXECUTORSxMODELS,...; default 8x200,48x200,8x2000,48x2000); the table
# it prints is the one docs/placement.md reports.
SCALE_SHAPES ?=
scale: deps
	bash -o pipefail -c 'NEREID_SCALE=1 NEREID_SCALE_SHAPES="$(SCALE_SHAPES)" $(GO) test -count=1 -timeout 90m -run TestScaleEnvelope -v ./e2e/scale/ 2>&1 | tee scale.out'

# docs/performance.md from a whole `make bench` run, whose output is kept in
# bench.out; `make perfdoc BENCH_OUT=file` writes it from an earlier run's
# output instead. PERFDOC_NOTE describes the run on the page.
BENCH_OUT   ?=
PERFDOC_NOTE ?= $(shell date -u +%Y-%m-%d), $(shell nproc) CPUs
perfdoc:
	@bash scripts/perfdoc_test.sh
	@if [ -z "$(BENCH_OUT)" ]; then bash -o pipefail -c '$(MAKE) --no-print-directory bench 2>&1 | tee bench.out'; fi
	bash scripts/perfdoc.sh "$(PERFDOC_NOTE)" < $(or $(BENCH_OUT),bench.out) > docs/performance.md.tmp || { rm -f docs/performance.md.tmp; exit 1; }
	mv docs/performance.md.tmp docs/performance.md

proto:
	bash api/gen.sh

proto-check:
	bash api/gen.sh --check

MODULES := api internal pkg services/gateway services/executor services/shm-registry services/sequence-router services/standalone e2e

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$' | grep -v '\.pb\.gw\.go$$')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $$($(GO) list work)
	@# Every module builds on its own (GOWORK=off), as a single service's image build does.
	@for m in $(MODULES); do (cd $$m && GOWORK=off GOFLAGS=-mod=readonly $(GO) build ./...) || { echo "module $$m does not build with GOWORK=off"; exit 1; }; done

deps:
	@bash scripts/deps.sh

# Every service image (nereid-<service>:$${NEREID_TAG:-dev}) with Docker Compose
# v2, from deploy/docker/Dockerfile and docker-compose.yml, on an engine with no
# images and no registry: local equivalents of the golang, debian, nats and
# redis images are made from Debian's packages first (deploy/docker/compose.offline.yml),
# and the standalone image (nereid:$${NEREID_TAG:-dev}); then .env (compose-env, offline).
images:
	@bash scripts/images.sh

# .env beside docker-compose.yml, read by every docker compose command here:
# the invoking user's NEREID_UID/NEREID_GID (so the services open the shared
# memory regions that user's clients create) and, when given
# (make compose-env NEREID_EXECUTORS=3), the executors' scale. make images
# runs it too and adds COMPOSE_FILE with the offline override. scripts/compose-env.sh.
compose-env:
	@bash scripts/compose-env.sh

# docker-compose.yml through compose-go (docker compose's own loader and schema),
# the Dockerfile's context against .dockerignore, and every flag the compose
# file passes against the services' mains. No Docker engine needed; also part of `make test`.
compose-config:
	$(GO) test -count=1 ./deploy/validate

# The Helm chart: helm lint and helm template with default and GPU values, then
# the rendered manifests' flags, probes and /dev/shm checked by deploy/validate.
# helm is built from its Go module once (about 4 minutes from a cold cache).
HELM_VERSION := v3.22.0
HELM         := $(BIN)/helm-$(HELM_VERSION)/helm
CHART        := charts/nereid

$(HELM):
	GOBIN=$(dir $(HELM)) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

helm-lint: $(HELM)
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/gpu-values.yaml
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/secure-values.yaml
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/nodepools-values.yaml
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/placement-values.yaml
	@mkdir -p $(BIN)/helm-out
	$(HELM) template nereid $(CHART) > $(BIN)/helm-out/default.yaml
	$(HELM) template nereid $(CHART) -f $(CHART)/ci/gpu-values.yaml > $(BIN)/helm-out/gpu.yaml
	$(HELM) template nereid $(CHART) -f $(CHART)/ci/secure-values.yaml > $(BIN)/helm-out/secure.yaml
	$(HELM) template nereid $(CHART) -f $(CHART)/ci/nodepools-values.yaml > $(BIN)/helm-out/nodepools.yaml
	$(HELM) template nereid $(CHART) -f $(CHART)/ci/placement-values.yaml > $(BIN)/helm-out/placement.yaml
	NEREID_HELM_MANIFESTS=$(BIN)/helm-out/default.yaml,$(BIN)/helm-out/gpu.yaml,$(BIN)/helm-out/secure.yaml,$(BIN)/helm-out/nodepools.yaml,$(BIN)/helm-out/placement.yaml $(GO) test -count=1 -run TestChart -v ./deploy/validate

clean:
	rm -rf $(BIN)
