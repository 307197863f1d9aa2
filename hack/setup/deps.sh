#!/usr/bin/env bash
# What building and testing krunbox needs, checked before anything long runs.
#
#   hack/setup/deps.sh check TOOL...  the toolchains named (go, node, cc, git), at the
#                                     versions below; exit 1 saying what to install
#   hack/setup/deps.sh test           every toolchain, then the Debian packages the tests
#                                     use (installed with apt-get when root, else exit 1
#                                     with the command to run) and the npm dependencies
#                                     of pi/ and hack/mcpinspector/ (npm ci when a
#                                     node_modules is missing or older than its
#                                     package-lock.json)
#
# Environment: GO, CC (the Makefile's), NODE_MIN (to override the Node minimum).
set -euo pipefail
cd "$(dirname "$0")/../.."

GO=${GO:-go}
CC=${CC:-cc}
# Go: the go directive of go.mod. A Go 1.21 or later fetches that toolchain itself
# (GOTOOLCHAIN=auto), so `go env GOVERSION` already reports the one that will build.
GO_MIN=$(awk '$1 == "go" { print $2; exit }' go.mod)
# Node: pi 0.73, which the pi tests run on the system's node, needs 20.6 (its engines) and
# its undici 20.18.1; pi 1.x needs 22.19, which pi/node_modules brings on linux-x64.
NODE_MIN=${NODE_MIN:-20.18.1}
# The Debian packages the tests use: busybox-static for the test images (hack/mkimage,
# the e2e and pi tests' sandboxes); tmux for pi's interactive mode in the pi tests;
# btrfs-progs for a loop-mounted btrfs on which the sandbox root copy's reflinks are tested;
# ca-certificates for the HTTPS of Go's module downloads (a minimal Debian lacks it);
# nasm for the assembly of ISA-L, which inflates image layers (hack/setup/isal.sh builds it
# after this; a build without it falls back to the slower pure-Go inflater, and says so);
# e2fsprogs for mke2fs, which formats block roots' disks (and krunbox itself needs).
PACKAGES=(busybox-static tmux btrfs-progs ca-certificates nasm e2fsprogs)

failed=0
fail() {
	printf 'deps: %s\n' "$@" >&2
	failed=1
}

# at_least HAVE MIN: whether version HAVE is MIN or later.
at_least() {
	[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

check_go() {
	local have
	if ! command -v "$GO" >/dev/null; then
		fail "no Go toolchain ($GO): install Go $GO_MIN or later from https://go.dev/dl/ (Debian 12's golang package is 1.19, too old)"
		return
	fi
	have=$("$GO" env GOVERSION 2>/dev/null || "$GO" version 2>/dev/null | awk '{ print $3 }')
	have=${have%% *} # go1.26.8 X:nodwarf5, a toolchain built with an experiment
	have=${have#go}
	if [ -z "$have" ]; then
		fail "$GO does not say its version ('$GO env GOVERSION' failed): install Go $GO_MIN or later from https://go.dev/dl/"
	elif ! at_least "$have" "$GO_MIN"; then
		fail "Go $have is too old: krunbox needs Go $GO_MIN or later (go.mod). Install it from https://go.dev/dl/ and put it first on PATH (Debian 12's golang package is 1.19); a Go 1.21 or later fetches $GO_MIN itself unless GOTOOLCHAIN=local"
	fi
}

check_node() {
	local have
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		fail "no Node.js (node and npm): the pi extension's tests need Node $NODE_MIN or later: https://nodejs.org/en/download (or NodeSource's Debian packages; Debian 12's nodejs package is 18, too old)"
		return
	fi
	have=$(node --version 2>/dev/null)
	have=${have#v}
	if [ -z "$have" ] || ! at_least "$have" "$NODE_MIN"; then
		fail "Node ${have:-of unknown version} is too old: the pi extension's tests need Node $NODE_MIN or later (pi 0.73 runs on it). Install it from https://nodejs.org/en/download (or NodeSource's Debian packages; Debian 12's nodejs package is 18)"
	fi
}

check_cc() {
	if ! command -v "$CC" >/dev/null; then
		fail "no C compiler ($CC): krunbox's runner is cgo and the libkrun test double is C: apt-get install gcc (or set CC)"
	fi
}

check_git() {
	if ! command -v git >/dev/null; then
		fail "no git: the build names its version with it and the tests drive it: apt-get install git"
	fi
}

check() {
	local tool
	for tool in "$@"; do
		case $tool in
		go | node | cc | git) "check_$tool" ;;
		*)
			echo "deps: unknown tool '$tool' (go, node, cc, git)" >&2
			exit 2
			;;
		esac
	done
	if [ "$failed" = 1 ]; then
		exit 1
	fi
}

# packages installs the missing Debian packages, or says how to.
packages() {
	local missing=() p
	if command -v dpkg-query >/dev/null; then
		for p in "${PACKAGES[@]}"; do
			if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
				missing+=("$p")
			fi
		done
	else
		# Not Debian: look for what the packages bring.
		[ -x /bin/busybox ] || missing+=(busybox-static)
		command -v tmux >/dev/null || missing+=(tmux)
		command -v mkfs.btrfs >/dev/null || missing+=(btrfs-progs)
		command -v nasm >/dev/null || missing+=(nasm)
		PATH=$PATH:/usr/sbin:/sbin command -v mke2fs >/dev/null || missing+=(e2fsprogs)
	fi
	if [ ${#missing[@]} = 0 ]; then
		return
	fi
	if ! command -v apt-get >/dev/null; then
		echo "deps: the tests need ${missing[*]} (Debian's names): a static busybox at /bin/busybox, tmux, mkfs.btrfs, nasm and mke2fs; install them with your package manager" >&2
		exit 1
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "deps: the tests need the Debian packages ${missing[*]}; install them, then run make test again:" >&2
		echo "    sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# npm_deps runs npm ci in DIR (pi/, hack/mcpinspector/) when its node_modules is missing
# or older than the lock file (npm ci writes node_modules/.package-lock.json).
npm_deps() {
	local dir=$1
	local stamp=$dir/node_modules/.package-lock.json
	if [ -f "$stamp" ] && [ ! "$dir/package-lock.json" -nt "$stamp" ]; then
		return
	fi
	echo "deps: npm ci in $dir/ ($dir/node_modules is missing or older than $dir/package-lock.json)"
	(cd "$dir" && npm ci --no-audit --no-fund)
}

case ${1:-} in
check)
	shift
	check "$@"
	;;
test)
	check go cc git node
	packages
	npm_deps pi
	# The MCP Inspector's CLI, for make mcp-test (its own Node 22 comes with it).
	npm_deps hack/mcpinspector
	;;
*)
	echo "usage: $0 check go|node|cc|git... | $0 test" >&2
	exit 2
	;;
esac
