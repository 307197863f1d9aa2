#!/bin/sh
# Runs krunbox's end-to-end suite on this host against real libkrun, with
# the krunbox binary and busybox image of this bundle (see README.md).
# Arguments go to the test binary, e.g. -test.run 'TestRealLibkrun/Terminal'.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
export KRUNBOX_BIN="$here/krunbox"
export KRUNBOX_E2E_IMAGE="oci:$here/busybox:latest"
export KRUNBOX_E2E_LIBKRUN="${KRUNBOX_E2E_LIBKRUN:-real}"
export KRUNBOX_TEST_LIBKRUN="$here/testkrun/libkrun.so.1"
export KRUNBOX_E2E_NETPROBE="$here/netprobe"
echo "== krunbox doctor --quick (the suite's own doctor boots a VM)"
"$KRUNBOX_BIN" doctor --quick || true
echo "== e2e suite (KRUNBOX_E2E_LIBKRUN=$KRUNBOX_E2E_LIBKRUN)"
cd "$here"
exec ./e2e.test -test.v -test.timeout 30m "$@"
