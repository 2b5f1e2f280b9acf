# Nereid — make verbs. `make run` serves deploy/model_repository; `make test` runs everything CI runs.
GO        ?= go
BIN       := $(CURDIR)/bin
REPO      ?= deploy/model_repository
TESTFLAGS ?= -count=1 -timeout 12m
BENCHTIME ?= 2s

SERVICES := gateway executor shm-registry sequence-router

.PHONY: all build run test unit e2e bench proto proto-check lint deps compose-config helm-lint clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/nereid ./services/standalone/cmd/nereid
	@for s in $(SERVICES); do $(GO) build -o $(BIN)/nereid-$$s ./services/$$s/cmd/$$s || exit 1; done

# One process with an embedded NATS server and every service, on Triton's ports.
run: build
	$(BIN)/nereid --model-repository $(REPO) --http-port 8000 --grpc-port 8001 --metrics-port 8002

# Unit, integration (embedded NATS) and e2e (real binaries, nats-server, redis-server).
test: deps
	$(GO) vet $$($(GO) list work)
	$(GO) test $(TESTFLAGS) work

unit:
	$(GO) test $(TESTFLAGS) $$($(GO) list work | grep -v /e2e)

e2e: deps
	$(GO) test $(TESTFLAGS) -v ./e2e/...

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem ./e2e/bench/...

proto:
	bash api/gen.sh

proto-check:
	bash api/gen.sh --check

MODULES := api pkg services/gateway services/executor services/shm-registry services/sequence-router services/standalone e2e

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $$($(GO) list work)
	@# Every module builds on its own (GOWORK=off), as a single service's image build does.
	@for m in $(MODULES); do (cd $$m && GOWORK=off GOFLAGS=-mod=readonly $(GO) build ./...) || { echo "module $$m does not build with GOWORK=off"; exit 1; }; done

deps:
	@bash scripts/deps.sh

clean:
	rm -rf $(BIN)
