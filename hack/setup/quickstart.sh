#!/usr/bin/env bash
# Runs README.md's quick start as it is written there (the sh block between the
# <!-- quickstart --> and <!-- /quickstart --> lines), from the repository's root with a
# krunbox state directory of its own, and checks what it prints; then checks that make run
# exits with krunbox's exit code. make test runs it (make quickstart).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(uname -s)" != Linux ]; then
	echo "SKIP: README's quick start: the libkrun test double runs on Linux only"
	exit 0
fi

block=$(awk '
	/^<!-- quickstart[ :-]/ { on = 1; next }
	/^<!-- \/quickstart -->/ { on = 0 }
	on && /^```/ { inside = !inside; next }
	on && inside' README.md)
if [ -z "$block" ]; then
	echo "quickstart: README.md has no sh block between <!-- quickstart --> and <!-- /quickstart -->" >&2
	exit 1
fi

home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
fail() {
	echo "quickstart: $1" >&2
	[ -z "${2:-}" ] || printf '%s\n' "$2" | sed 's/^/    /' >&2
	exit 1
}

# The quick start, in a shell of its own, as a reader would paste it.
echo "quickstart: running README.md's quick start:"
printf '%s\n' "$block" | sed 's/^/    /'
if ! out=$(env -u KRUNBOX_LIBKRUN KRUNBOX_HOME="$home" MAKEFLAGS= bash -euo pipefail -c "$block" </dev/null 2>&1); then
	if KRUNBOX_LIBKRUN=$PWD/build/testkrun/libkrun.so.1 KRUNBOX_HOME="$home" build/krunbox doctor --quick 2>&1 | grep -q '✗ namespaces'; then
		echo "SKIP: README's quick start: the libkrun test double needs namespaces this host does not give (krunbox doctor)"
		exit 0
	fi
	fail "README.md's quick start failed:" "$out"
fi
grep -q '^Linux ' <<<"$out" || fail "the quick start's uname -a printed no 'Linux ...' line:" "$out"
grep -qx 'hello' <<<"$out" || fail "the quick start's sh -c printed no 'hello' line:" "$out"
grep -q "^oci:$PWD/build/testimage *latest " <<<"$out" || fail "the quick start's krunbox images lists no oci:$PWD/build/testimage, tagged latest:" "$out"

# make run exits with krunbox's own code: 125 when VMs cannot start (KRUNBOX_LIBKRUN
# names a library that is not there, so this holds on a KVM host too), the command's
# own code otherwise.
check_run() {
	local want=$1 code=0
	shift
	env KRUNBOX_HOME="$home" MAKEFLAGS= "$@" make --no-print-directory run >"$home/run.log" 2>&1 </dev/null || code=$?
	[ "$code" = "$want" ] || fail "$* make run: exit code $code, want $want:" "$(cat "$home/run.log")"
}
check_run 125 KRUNBOX_LIBKRUN=/nonexistent/libkrun.so.1
check_run 7 KRUNBOX_LIBKRUN="$PWD/build/testkrun/libkrun.so.1" RUN_IMAGE=oci:build/testimage RUN_CMD='sh -c "exit 7"'
echo "quickstart: README's quick start works; make run exits with krunbox's exit code"
