#!/usr/bin/env bash
# make mcp-test: the MCP Inspector's CLI (npm @modelcontextprotocol/inspector, pinned in
# hack/mcpinspector/package-lock.json), a client no one here wrote, lists krunbox mcp's
# tools and calls each against a sandbox on the libkrun test double: over stdio, then
# over Streamable HTTP on 127.0.0.1.
#
# usage: KRUNBOX=build/krunbox TESTKRUN=build/testkrun/libkrun.so.1 IMAGE=oci:build/testimage:latest hack/mcpinspector/run.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
: "${KRUNBOX:?the krunbox binary}" "${TESTKRUN:?the libkrun test double}" "${IMAGE:?the test image}"
bin=$here/node_modules/.bin
[ -x "$bin/mcp-inspector" ] || { echo "mcp-test: $here/node_modules is missing: run make deps (or npm ci in hack/mcpinspector)" >&2; exit 1; }

tmp=$(mktemp -d)
ws=$tmp/ws
mkdir -p "$ws"
export MCP_CATALOG_PATH=$tmp/catalog.json # the inspector's own state, not ~/.mcp-inspector
server_pid=
cleanup() {
	[ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
	for sb in $(KRUNBOX_HOME=$tmp/home KRUNBOX_LIBKRUN=$TESTKRUN "$KRUNBOX" ls -q 2>/dev/null); do
		KRUNBOX_HOME=$tmp/home "$KRUNBOX" rm -f "$sb" >/dev/null 2>&1 || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

fail=0
# check NAME WANT OUTPUT: OUTPUT must hold WANT.
check() {
	if grep -qF -- "$2" <<<"$3"; then
		echo "ok   $1"
	else
		echo "FAIL $1: want $2 in:"
		sed 's/^/     /' <<<"$3"
		fail=1
	fi
}

# inspect ARGS...: one inspector run against krunbox mcp on stdio.
inspect() {
	"$bin/node" "$bin/mcp-inspector" --cli --cwd "$ws" -e "KRUNBOX_HOME=$tmp/home" -e "KRUNBOX_LIBKRUN=$TESTKRUN" \
		"$KRUNBOX" mcp --image "$IMAGE" "$@" 2>&1 || true
}

# call TOOL KEY=VALUE...: tools/call over stdio.
call() {
	local tool=$1
	shift
	local args=()
	for a in "$@"; do args+=(--tool-arg "$a"); done
	inspect --method tools/call --tool-name "$tool" "${args[@]}"
}

out=$(inspect --method tools/list)
for t in run read write edit list find grep sandbox_status sandbox_restart; do
	check "tools/list has $t" "\"name\": \"$t\"" "$out"
done
check "tools/list: inputSchema" '"inputSchema"' "$out"

check "run" '[stdout]\nhello from the vm\nexit code: 0' "$(call run 'command=echo hello from the vm')"
check "run: exit code is an error" '"isError": true' "$(call run 'command=exit 7')"
check "write" "wrote 12 bytes to $ws/notes.txt" "$(call write path=notes.txt 'content=one two one
')"
check "write: on the host" "one two one" "$(cat "$ws/notes.txt")"
check "read" '1\tone two one' "$(call read path=notes.txt)"
check "edit: ambiguous is an error" 'occurs 2 times' "$(call edit path=notes.txt old_string=one new_string=uno)"
check "edit" 'replaced 1 occurrence(s)' "$(call edit path=notes.txt old_string=two new_string=dos)"
check "edit: on the host" "one dos one" "$(cat "$ws/notes.txt")"
check "list" 'notes.txt' "$(call list)"
check "find" 'notes.txt' "$(call find 'pattern=*.txt')"
check "grep" 'notes.txt:1:one dos one' "$(call grep 'pattern=d[aeiou]s')"
check "read outside the workspace: the guest's file" '1\tBusyBox' "$(call run 'command=busybox | head -1 > /tmp/bb; true' >/dev/null; call read path=/tmp/bb)"
check "sandbox_status" ': ready' "$(call sandbox_status)"
check "sandbox_restart" 'restarted: ready' "$(call sandbox_restart)"

# Streamable HTTP on 127.0.0.1: the server logs its URL.
(cd "$ws" && KRUNBOX_HOME=$tmp/home KRUNBOX_LIBKRUN=$TESTKRUN exec "$KRUNBOX" mcp --image "$IMAGE" --http 127.0.0.1:0 2>"$tmp/http.log") &
server_pid=$!
url=
for _ in $(seq 100); do
	url=$(grep -o 'http://127[0-9.:]*/' "$tmp/http.log" 2>/dev/null | head -1) || true
	[ -n "$url" ] && break
	kill -0 "$server_pid" 2>/dev/null || break
	sleep 0.1
done
if [ -z "$url" ]; then
	echo "FAIL http: krunbox mcp --http did not start:"
	cat "$tmp/http.log"
	exit 1
fi
out=$("$bin/node" "$bin/mcp-inspector" --cli --transport http --server-url "$url" --method tools/call --tool-name run --tool-arg 'command=echo over http' 2>&1 || true)
check "run over Streamable HTTP" 'over http' "$out"

[ "$fail" = 0 ] && echo "mcp-test: the inspector's calls passed" || { echo "mcp-test: FAILED"; exit 1; }
