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

# A busybox image (Debian's busybox-static) in an OCI layout, built here so that no
# registry is needed: for make run-busybox, the pi tests' sandboxes and the e2e bundle.
TEST_IMAGE := $(BUILD)/testimage

# ISA-L's igzip, linked statically, inflates image layers more than twice as fast as
# the pure-Go inflater (internal/gunzip). hack/setup/isal.sh builds it from Debian's
# source into build/isal (make isal; make build and make deps run it). Where it cannot
# (not linux/amd64, no nasm or no network), the build uses the pure-Go one, and says so.
# GO_TAGS is expanded where it is used, once make isal has run.
ISAL_LIB  := $(BUILD)/isal/lib/libisal.a
ISAL_HOST := $(shell [ "$$(uname -s)/$$(uname -m)" = Linux/x86_64 ] && echo yes)
GO_TAGS    = $(shell [ -f $(ISAL_LIB) ] && echo krunbox_isal)

# What the tests need to find: the built CLI and the libkrun test double.
TEST_ENV := KRUNBOX_BIN=$(BUILD)/krunbox KRUNBOX_TEST_LIBKRUN=$(TESTKRUN)

.PHONY: dist all build agent krunbox isal testkrun testimage test test-fresh deps check-build quickstart release-artifacts unit lint cross pi-test mcp-test realvm-tier libkrun libkrunfw libkrun-if-possible test-realvm test-realvm-full realvm-payload bench bench-net bench-oci bench-agent bench-vm bench-sandbox bench-pi bench-mcp bench-secrets bench-isolate bench-realvm bench-realvm-shares run run-busybox run-job run-busybox-job pi-package pi-tarball e2e-bundle clean FORCE

all: build

## build: the krunbox CLI with the guest agents embedded
build: krunbox

## agent: the static guest agent for every supported guest architecture
agent: $(AGENTS)

$(AGENT_EMBED)/krunbox-agent-linux-%: FORCE | check-build
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $@ ./cmd/krunbox-agent
	{ sha256sum $@ 2>/dev/null || shasum -a 256 $@; } | cut -d' ' -f1 > $@.sha256
	@mkdir -p $(BUILD) && cp $@ $(BUILD)/

krunbox: agent isal | check-build
	@[ -z "$(ISAL_HOST)" ] || [ -f $(ISAL_LIB) ] || echo "krunbox: no ISA-L (hack/setup/isal.sh could not build it, see above): image layers are inflated by the slower pure-Go inflater"
	$(GO) build -trimpath -tags "$(GO_TAGS)" -ldflags "$(LDFLAGS)" -o $(BUILD)/krunbox ./cmd/krunbox
ifeq ($(UNAME_S),Darwin)
	codesign --entitlements hack/hvf-entitlements.plist --force -s - $(BUILD)/krunbox
endif

# The libkrun and libkrunfw that make dist and make pi-package bundle: a folder holding
# libkrun.so.1 and libkrunfw.so.5 (or their versioned files). Without it both still work,
# and say that the result needs a system libkrun. CI: LIBKRUN_DIR=../shared/realvm/lib.
# Without LIBKRUN_DIR, they bundle build/libkrun when make libkrun has built it.
LIBKRUN_DIR     ?=
LIBKRUN_DIR_ABS  = $(abspath $(or $(LIBKRUN_DIR),$(wildcard $(LIBKRUN_BUILT))))
# and krunbox's libkrunfw (make libkrunfw) instead of LIBKRUN_DIR's, where it is built
LIBKRUNFW_ABS    = $(abspath $(wildcard $(BUILD)/libkrunfw/libkrunfw.so.5))

# The libkrun krunbox ships: upstream 1.19.0 with hack/libkrun's patches (a share's cache
# behaviour, krun_set_virtiofs_cache, which keeps the workspace live from host to guest),
# built with NET and BLK. hack/libkrun/build.sh builds it from $(REALVM)'s source with
# Debian's crate packages (no crate registry), cached by the hash of the source and the
# patches in $${XDG_CACHE_HOME:-~/.cache}/krunbox-build; LIBKRUN_CHECKOUT=DIR builds an
# upstream checkout of v1.19.0 with its own Makefile and the crate registry instead.
LIBKRUN_BUILT    := $(BUILD)/libkrun
LIBKRUN_CHECKOUT ?=

## libkrun: krunbox's libkrun (1.19.0 + hack/libkrun/*.patch, NET and BLK) and libkrunfw in build/libkrun (LIBKRUN_CHECKOUT=DIR: from an upstream checkout)
libkrun:
	REALVM=$(REALVM) hack/libkrun/build.sh $(LIBKRUN_BUILT) $(LIBKRUN_CHECKOUT)

# The guest kernel krunbox ships: upstream libkrunfw with hack/libkrunfw's patch
# (/proc/fs/fsnotify_inject: host edits of the workspace wake the guest's file watchers).
# hack/libkrunfw/build.sh builds it from a libkrunfw checkout (LIBKRUNFW_CHECKOUT=DIR),
# with the kernel its Makefile downloads or KERNEL_TARBALL=FILE ("debian": Debian's
# linux-source-6.12), cached by the hash of its inputs (about 10 minutes on 2 idle cores, once).
# Where build/libkrunfw exists, the real-VM tier boots it (test.sh's KRUNFW) and
# release-artifacts bundles it; elsewhere the file-event scenarios SKIP, saying why.
LIBKRUNFW_BUILT    := $(BUILD)/libkrunfw
LIBKRUNFW_CHECKOUT ?=
KERNEL_TARBALL     ?=

## libkrunfw: krunbox's libkrunfw (upstream + hack/libkrunfw/*.patch: guest file events) in build/libkrunfw (LIBKRUNFW_CHECKOUT=DIR, KERNEL_TARBALL=FILE|debian)
libkrunfw:
	@[ -n "$(LIBKRUNFW_CHECKOUT)" ] || { echo "make libkrunfw: set LIBKRUNFW_CHECKOUT to a checkout of github.com/containers/libkrunfw (kernel 6.12); see hack/README.md"; exit 2; }
	KERNEL_TARBALL=$(KERNEL_TARBALL) hack/libkrunfw/build.sh $(LIBKRUNFW_BUILT) $(LIBKRUNFW_CHECKOUT)

# libkrun-if-possible is make libkrun where it can be built (the harness's source is
# there), and says SKIP otherwise; a build that fails fails.
libkrun-if-possible:
	@REALVM=$(REALVM) hack/libkrun/build.sh $(LIBKRUN_BUILT); rc=$$?; \
	if [ $$rc = 3 ]; then rm -rf $(LIBKRUN_BUILT); echo "SKIP: krunbox's libkrun (make libkrun) cannot be built here: the real-VM tier runs on $(REALVM)/lib, and its coherence scenarios SKIP"; \
	elif [ $$rc != 0 ]; then exit $$rc; fi

## dist: the release bundle build/dist/krunbox-VERSION-OS-ARCH.tar.gz (LIBKRUN_DIR=DIR: with libkrun and libkrunfw)
dist: build
	KRUNBOX=$(BUILD)/krunbox VERSION=$(VERSION) OUT=$(BUILD)/dist LIBKRUN_DIR=$(LIBKRUN_DIR_ABS) LIBKRUNFW=$(LIBKRUNFW_ABS) hack/dist/dist.sh bundle

## testkrun: the libkrun test double (hack/testkrun), for machines without KVM
testkrun: $(TESTKRUN)

$(TESTKRUN): $(wildcard hack/testkrun/*.c hack/testkrun/*.h)
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -fvisibility=hidden -O2 -g -Wall -Wextra -Werror -Wl,-soname,libkrun.so.1 -o $@ $(filter %.c,$^) -lpthread

## test: every test: lint, Go unit and end-to-end tests, cross builds, pi extension, real VMs, README's quick start (make deps first)
# quickstart and release-artifacts build again: they run after the tests, even under -j.
test: deps
	@$(MAKE) --no-print-directory lint unit cross pi-test mcp-test realvm-tier
	@$(MAKE) --no-print-directory quickstart release-artifacts

## test-fresh: make test as on a new machine: a fresh clone of HEAD, empty Go module, Go build and npm caches, no ~/.cache (hack/setup/fresh.sh)
test-fresh:
	REALVM=$(REALVM) hack/setup/fresh.sh test

## deps: check the toolchains, install the Debian packages the tests need (as root; else it says how), pi's and the MCP Inspector's npm packages
deps:
	@GO=$(GO) CC=$(CC) hack/setup/deps.sh test
	@[ -z "$(ISAL_HOST)" ] || CC=$(CC) hack/setup/isal.sh $(BUILD)/isal

## isal: ISA-L, the fast inflater of image layers, as a static library in build/isal (hack/setup/isal.sh); the build goes on without it
isal:
	-@[ -z "$(ISAL_HOST)" ] || CC=$(CC) hack/setup/isal.sh $(BUILD)/isal

## quickstart: README's quick start, run as written there, and make run's exit code (hack/setup/quickstart.sh)
quickstart:
	hack/setup/quickstart.sh

# check-build checks the toolchains a build needs (Go, a C compiler, git), before the
# first go command: Debian 12's Go 1.19 would fail on go.mod, less clearly.
check-build:
	@GO=$(GO) CC=$(CC) hack/setup/deps.sh check go cc git

# release-artifacts builds what CI publishes, with the libkrun and libkrunfw the real-VM
# tests ran on: build/dist/krunbox-VERSION-OS-ARCH.tar.gz and build/pi-krunbox-VERSION.tgz.
# They carry krunbox's libkrun (build/libkrun, which make test builds); without it, the
# harness's upstream one, and say so.
release-artifacts:
	@if [ -e $(LIBKRUN_BUILT)/libkrun.so.1 ]; then $(MAKE) --no-print-directory dist pi-package LIBKRUN_DIR=$(LIBKRUN_BUILT); \
	elif [ -d $(REALVM)/lib ]; then echo "release artifacts: WARNING: with $(REALVM)/lib, an upstream libkrun without krun_set_virtiofs_cache (make libkrun could not build krunbox's)"; \
		$(MAKE) --no-print-directory dist pi-package LIBKRUN_DIR=$(REALVM)/lib; \
	else echo "SKIP: release artifacts with libkrun: $(REALVM)/lib is missing (make dist LIBKRUN_DIR=DIR)"; fi

unit: build testkrun
	$(TEST_ENV) $(GO) test -tags "$(GO_TAGS)" -count=1 -timeout 20m ./...
	@[ -r /dev/kvm ] || echo "SKIP: real-libkrun VM tests and end-to-end suite (no /dev/kvm here); see hack/README.md and e2e/bundle/README.md to run them on a KVM host"

## lint: gofmt, go vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags "$(GO_TAGS)" ./...
	$(STATICCHECK) -tags "$(GO_TAGS)" ./...

## cross: the CLI builds without cgo and for the other platforms
cross:
	CGO_ENABLED=0 $(GO) build -o /dev/null ./...
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -o /dev/null ./...
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./...

# The pi extension (pi/). Its dependencies come from `npm ci` in pi/ (make deps runs it);
# these targets install nothing. Tests run on the system's node (pi 0.73 on it) and on the
# Node 22 from pi/node_modules (pi 1.x), see pi/test/e2e/harness.ts.
PI_PLATFORM = $(shell node -p 'process.platform + "-" + process.arch' 2>/dev/null)
PI_VERSION  = $(shell node -p 'require("./pi/package.json").version' 2>/dev/null)
PI_TARBALL  = $(BUILD)/pi-krunbox-$(PI_VERSION).tgz
PI_DEPS     = @test -d pi/node_modules || { echo "$@: pi/node_modules is missing: run make deps (or 'npm ci' in pi/)"; exit 1; }

## pi-package: the pi extension's npm tarball, with this host's krunbox inside (LIBKRUN_DIR=DIR: and libkrun)
pi-package: build pi-tarball

# pi-tarball packs the pi extension with the krunbox already in $(BUILD), and with
# LIBKRUN_DIR's libkrun and libkrunfw beside it (where krunbox finds them).
pi-tarball:
	@test -x $(BUILD)/krunbox || { echo "$@: $(BUILD)/krunbox is missing: run make build"; exit 1; }
	rm -rf $(BUILD)/pi-package
	mkdir -p $(BUILD)/pi-package/bin/$(PI_PLATFORM)
	cp -R pi/package.json pi/README.md pi/index.ts pi/src $(BUILD)/pi-package/
	cp $(BUILD)/krunbox $(BUILD)/pi-package/bin/$(PI_PLATFORM)/krunbox
	LIBKRUN_DIR=$(LIBKRUN_DIR_ABS) LIBKRUNFW=$(LIBKRUNFW_ABS) hack/dist/dist.sh libs $(BUILD)/pi-package/bin/$(PI_PLATFORM)
	cd $(BUILD)/pi-package && npm pack --silent --pack-destination $(BUILD) >/dev/null
	@echo "$@: $(PI_TARBALL)"

# The pi tests run against the krunbox just built, on the libkrun test double: the protocol
# conformance suite (KRUNBOX_SERVE_*), the extension's tests and real pi end to end
# (KRUNBOX_E2E_*). See pi/test/serve-driver.ts and pi/test/e2e/harness.ts.
PI_LIBKRUN_ENV = '{"KRUNBOX_LIBKRUN":"$(TESTKRUN)"}'
PI_TEST_ENV    = KRUNBOX_SERVE_BIN=$(BUILD)/krunbox KRUNBOX_SERVE_ENV=$(PI_LIBKRUN_ENV) KRUNBOX_SERVE_IMAGE=oci:$(TEST_IMAGE):latest \
                 KRUNBOX_E2E_BIN=$(BUILD)/krunbox KRUNBOX_E2E_VM=1 KRUNBOX_E2E_ENV=$(PI_LIBKRUN_ENV) KRUNBOX_E2E_IMAGE=oci:$(TEST_IMAGE):latest

## pi-test: the pi extension: type check, unit, protocol conformance, package, e2e with real pi, on real krunbox
pi-test: build testkrun $(TEST_IMAGE)/index.json
	$(PI_DEPS)
	$(MAKE) --no-print-directory pi-tarball
	cd pi && node_modules/.bin/tsc -p .
	cd pi && $(PI_TEST_ENV) node --import tsx --test --test-reporter=spec test/*.test.ts test/e2e/*.test.ts
	@# The stand-in server (three tests use its boot delay) must keep to the protocol too.
	cd pi && node --import tsx --test --test-reporter=dot test/conformance.test.ts

## mcp-test: krunbox mcp driven by the MCP Inspector's CLI (hack/mcpinspector): every tool, over stdio and Streamable HTTP, on the test double
mcp-test: build testkrun $(TEST_IMAGE)/index.json
	KRUNBOX=$(BUILD)/krunbox TESTKRUN=$(TESTKRUN) IMAGE=oci:$(TEST_IMAGE):latest hack/mcpinspector/run.sh

# Real libkrun microVMs, nested: ../shared/realvm/run boots an L1 Linux under QEMU (TCG,
# emulated AMD SVM) that has a real /dev/kvm and libkrun 1.19, and hack/realvm/test.sh
# runs the groups of hack/realvm/groups there, one L1 boot per group (see
# hack/realvm/README.md). Tier "ci" is a representative subset that passes on real VMs
# today (make test runs it when the harness is there; a test that fails by a known fault
# of the nested emulation, a deadline, a VMEXIT0 start or a guest RCU stall, runs once more
# and counts as passed, RETRIED, when it then passes; it tolerates up to 3 tests failed only
# by the known nested-VM start failure "stopped (exit code 0)", VMEXIT0, with a WARNING);
# "full" adds the scenarios known to fail on real VMs and those that need an L1
# of their own, and counts every failure.
REALVM ?= $(abspath $(CURDIR)/../shared/realvm)

realvm-tier:
	@if [ -x $(REALVM)/run ]; then $(MAKE) --no-print-directory test-realvm; \
	else echo "SKIP: real-VM tests (make test-realvm): $(REALVM)/run is missing (the nested-VM harness, REALVM=DIR)"; fi

# Both run on krunbox's own libkrun (build/libkrun) where make libkrun can build it,
# else on the harness's ($(REALVM)/lib, upstream's), where the coherence scenarios SKIP.
REALVM_KRUN_LIB = $$([ -e $(LIBKRUN_BUILT)/libkrun.so.1 ] && echo $(LIBKRUN_BUILT))
# and on krunbox's libkrunfw where make libkrunfw has built it (guest file events)
REALVM_KRUNFW = $$([ -e $(LIBKRUNFW_BUILT)/libkrunfw.so.5 ] && echo $(abspath $(LIBKRUNFW_BUILT))/libkrunfw.so.5)

## test-realvm: the ci subset of the real-libkrun tests (e2e, hostapi/vmm, pi) in nested real microVMs
test-realvm: realvm-payload libkrun-if-possible
	KRUN_LIB=$(REALVM_KRUN_LIB) KRUNFW=$(REALVM_KRUNFW) BUILD=$(BUILD) REALVM=$(REALVM) hack/realvm/test.sh ci

## test-realvm-full: every real-libkrun test in nested real microVMs (the ci tier and the groups kept out of CI for its time)
test-realvm-full: realvm-payload libkrun-if-possible
	KRUN_LIB=$(REALVM_KRUN_LIB) KRUNFW=$(REALVM_KRUNFW) BUILD=$(BUILD) REALVM=$(REALVM) hack/realvm/test.sh full

# realvm-payload builds what the L1 payloads hold: krunbox, the test image, the compiled
# e2e and hostapi/vmm suites, the vsock probe of the latter and the network probe of
# the former.
realvm-payload: build $(TEST_IMAGE)/index.json
	$(GO) test -c -o $(BUILD)/e2e.test ./e2e
	$(GO) test -c -o $(BUILD)/vmm.test ./hostapi/vmm
	CGO_ENABLED=0 $(GO) build -o $(BUILD)/vsockprobe ./hostapi/vmm/testdata/vsockprobe
	CGO_ENABLED=0 $(GO) build -o $(BUILD)/netprobe ./hack/netprobe

## bench-realvm: ratios on nested real microVMs (start, exec, 256 MiB files, pi tool call) for BENCHMARKS.md
bench-realvm: realvm-payload
	$(PI_DEPS)
	$(GO) test -c -o $(BUILD)/hostapi.test ./hostapi
	$(GO) build -o $(BUILD)/benchpi ./hack/benchpi
	BUILD=$(BUILD) REALVM=$(REALVM) hack/realvm/test.sh bench

## bench-realvm-shares: the live workspace on nested real VMs, what coherence buys and costs, with krunbox's libkrun and then upstream's (BENCHMARKS.md)
bench-realvm-shares: realvm-payload libkrun-if-possible
	$(GO) test -c -o $(BUILD)/hostapi.test ./hostapi
	$(GO) build -o $(BUILD)/benchpi ./hack/benchpi
	KRUN_LIB=$(REALVM_KRUN_LIB) KRUNFW=$(REALVM_KRUNFW) BUILD=$(BUILD) REALVM=$(REALVM) hack/realvm/test.sh bench bench-shares
	rm -rf $(BUILD)/realvm/out/bench-shares.krunbox && mv $(BUILD)/realvm/out/bench-shares $(BUILD)/realvm/out/bench-shares.krunbox
	BUILD=$(BUILD) REALVM=$(REALVM) hack/realvm/test.sh bench bench-shares

## bench: every benchmark; figures go to BENCHMARKS.md
bench: bench-oci bench-agent bench-vm bench-sandbox bench-pi bench-mcp bench-net bench-secrets bench-isolate

## bench-oci: cold pull + flatten (the CLI, two images) against crane export | tar -x and the tar -x floor
bench-oci: krunbox
	KRUNBOX_BIN=$(BUILD)/krunbox GO=$(GO) GO_TAGS="$(GO_TAGS)" hack/bench-oci.sh

## bench-sandbox: sandbox create against cp -a, krunbox exec against /bin/true, start to ready (BENCHMARKS.md)
bench-sandbox: build testkrun
	$(TEST_ENV) $(GO) test -run '^$$' -bench 'Sandbox' -benchtime 20x -timeout 30m ./hostapi/ ./e2e/

## bench-net: krunbox's network stack against TSI on the double: connect time and a 256 MiB download (public), a 256 MiB HTTPS download through the secrets' interception (BENCHMARKS.md)
bench-net: build testkrun
	$(TEST_ENV) $(GO) test -run '^$$' -bench 'Network' -benchtime 7x -timeout 20m ./e2e/

## bench-secrets: a 256 MiB HTTPS download through the secrets' TLS interception against a direct one (BENCHMARKS.md)
bench-secrets:
	$(GO) test -run '^$$' -bench 'Download256MiB' -benchtime 5x -count 3 ./internal/secrets/

## bench-isolate: an isolated checkout (10k files, 100 MB of history) against git worktree add and git clone --local; diff of 100 files against git diff (BENCHMARKS.md)
bench-isolate:
	$(GO) test -run '^$$' -bench 'Isolated' -benchtime 5x -timeout 30m ./hostapi/internal/isolate/

## bench-agent: the guest agent against os/exec and a bare socket pair (BENCHMARKS.md)
bench-agent:
	$(GO) test -run '^$$' -bench 'ExecTrue|Ping|SmallFileRead' -benchtime 2000x ./hostapi/
	$(GO) test -run '^$$' -bench 'FileTransfer' -benchtime 10x ./hostapi/

## bench-mcp: tool-call overhead krunbox mcp adds on a ready sandbox, against hostapi (BENCHMARKS.md)
bench-mcp: build testkrun $(TEST_IMAGE)/index.json
	KRUNBOX_LIBKRUN=$(TESTKRUN) $(GO) run ./hack/benchmcp -krunbox $(BUILD)/krunbox -image oci:$(TEST_IMAGE):latest -n 200

## bench-pi: tool-call overhead the pi extension adds on a ready sandbox, against hostapi (BENCHMARKS.md)
bench-pi: build testkrun $(TEST_IMAGE)/index.json
	$(PI_DEPS)
	$(GO) build -o $(BUILD)/benchpi ./hack/benchpi
	cd pi && $(PI_TEST_ENV) KRUNBOX_BENCH_BASELINE=$(BUILD)/benchpi node --import tsx bench/overhead.ts

## bench-vm: VM start-up overhead under the test double, against fork/exec
bench-vm: testkrun
	$(TEST_ENV) $(GO) test -run '^$$' -bench StartToFirstByte -benchtime 50x -count 3 ./hostapi/vmm

# make run and make run-busybox exit with krunbox's exit code, as krunbox run does (125:
# this host cannot start VMs), not with make's 2: see hack/makeexit/makeexit.mk.
MAKEEXIT_SO    := $(BUILD)/makeexit.so
MAKEEXIT_GOALS := run run-busybox
RUN_STATUS     := $(BUILD)/run.status
include hack/makeexit/makeexit.mk

## run: build krunbox and run the main job ($(RUN_IMAGE): $(RUN_CMD)); without KVM it says what is missing, exit code 125
run: run-job
	$(call exit-with,$(RUN_STATUS))

## run-busybox: the main job on a busybox image built here (busybox-static), no registry needed
run-busybox: run-busybox-job
	$(call exit-with,$(RUN_STATUS))

run-job: build
	@rm -f $(RUN_STATUS); $(BUILD)/krunbox run --rm $(RUN_IMAGE) -- $(RUN_CMD); echo $$? >$(RUN_STATUS)

run-busybox-job: build $(TEST_IMAGE)/index.json
	@rm -f $(RUN_STATUS); $(BUILD)/krunbox run --rm oci:$(TEST_IMAGE):latest -- $(RUN_CMD); echo $$? >$(RUN_STATUS)

## testimage: the busybox test image (Debian's busybox-static) as an OCI layout in build/testimage
testimage: $(TEST_IMAGE)/index.json

$(TEST_IMAGE)/index.json: hack/mkimage/main.go $(wildcard internal/testutil/testimage/*.go)
	rm -rf $(TEST_IMAGE)
	$(GO) run ./hack/mkimage $(TEST_IMAGE) >/dev/null

## e2e-bundle: the end-to-end suite, krunbox and a busybox image, to run on a KVM host without Go
e2e-bundle: build testkrun $(TEST_IMAGE)/index.json
	rm -rf $(BUILD)/e2e-bundle
	mkdir -p $(BUILD)/e2e-bundle/testkrun
	$(GO) test -c -o $(BUILD)/e2e-bundle/e2e.test ./e2e
	CGO_ENABLED=0 $(GO) build -o $(BUILD)/e2e-bundle/netprobe ./hack/netprobe
	cp $(BUILD)/krunbox e2e/bundle/run.sh e2e/bundle/README.md $(BUILD)/e2e-bundle/
	cp $(TESTKRUN) $(BUILD)/e2e-bundle/testkrun/
	cp -R $(TEST_IMAGE) $(BUILD)/e2e-bundle/busybox
	@echo "$@: $(BUILD)/e2e-bundle (copy it to a KVM host and run ./run.sh there)"

clean:
	rm -rf $(BUILD) $(AGENTS)

FORCE:
