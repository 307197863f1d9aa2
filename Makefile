# krunbox build, test and benchmark entry points. `make test` runs every test
# the project has; `make run` builds krunbox and runs the main job.

SHELL        := /bin/bash
GO           ?= go
CC           ?= cc
BUILD        := $(CURDIR)/build
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS      := -X main.version=$(VERSION)
AGENT_ARCHES := amd64 arm64
AGENT_EMBED  := hostapi/internal/agentbin/bin
AGENTS       := $(foreach a,$(AGENT_ARCHES),$(AGENT_EMBED)/krunbox-agent-linux-$(a))
TESTKRUN     := $(BUILD)/testkrun/libkrun.so.1
STATICCHECK  := $(GO) tool -modfile=tools/go.mod staticcheck
UNAME_S      := $(shell uname -s)

# The image and command of `make run`.
RUN_IMAGE ?= alpine
RUN_CMD   ?= uname -a

# What the tests need to find: the built CLI and the libkrun test double.
TEST_ENV := KRUNBOX_BIN=$(BUILD)/krunbox KRUNBOX_TEST_LIBKRUN=$(TESTKRUN)

.PHONY: all build agent krunbox testkrun test unit lint cross pi-test bench bench-oci bench-agent bench-vm bench-sandbox bench-pi run pi-package e2e-bundle clean FORCE

all: build

## build: the krunbox CLI with the guest agents embedded
build: krunbox

## agent: the static guest agent for every supported guest architecture
agent: $(AGENTS)

$(AGENT_EMBED)/krunbox-agent-linux-%: FORCE
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $@ ./cmd/krunbox-agent
	@mkdir -p $(BUILD) && cp $@ $(BUILD)/

krunbox: agent
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BUILD)/krunbox ./cmd/krunbox
ifeq ($(UNAME_S),Darwin)
	codesign --entitlements hack/hvf-entitlements.plist --force -s - $(BUILD)/krunbox
endif

## testkrun: the libkrun test double (hack/testkrun), for machines without KVM
testkrun: $(TESTKRUN)

$(TESTKRUN): $(wildcard hack/testkrun/*.c hack/testkrun/*.h)
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -fvisibility=hidden -O2 -g -Wall -Wextra -Werror -Wl,-soname,libkrun.so.1 -o $@ $(filter %.c,$^) -lpthread

## test: every test: lint, Go unit and end-to-end tests, cross builds, pi extension
test: lint unit cross pi-test

unit: build testkrun
	$(TEST_ENV) $(GO) test -count=1 -timeout 20m ./...
	@[ -r /dev/kvm ] || echo "SKIP: real-libkrun VM tests (no /dev/kvm here); see hack/README.md to run them on a KVM host"

## lint: gofmt, go vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

## cross: the CLI builds without cgo and for the other platforms
cross:
	CGO_ENABLED=0 $(GO) build -o /dev/null ./...
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -o /dev/null ./...
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./...

pi-test:
	cd pi && npm test

## bench: every benchmark; figures go to BENCHMARKS.md
bench: bench-oci bench-agent bench-vm bench-sandbox bench-pi

# Each area's benchmark target. Placeholders until the area is written.
bench-oci bench-agent bench-sandbox bench-pi:
	@echo "$@: not written yet"

## bench-vm: VM start-up overhead under the test double, against fork/exec
bench-vm: testkrun
	$(TEST_ENV) $(GO) test -run '^$$' -bench StartToFirstByte -benchtime 50x -count 3 ./hostapi/vmm

## run: build krunbox and run the main job ($(RUN_IMAGE): $(RUN_CMD))
run: build
	$(BUILD)/krunbox run --rm $(RUN_IMAGE) -- $(RUN_CMD)

clean:
	rm -rf $(BUILD) $(AGENTS)

FORCE:
