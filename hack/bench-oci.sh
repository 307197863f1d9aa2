#!/usr/bin/env bash
# Runs the oci benchmarks (make bench-oci). As root, on a fresh loop-mounted
# journaled ext4, like docs/oci.md §4.2: on an ext4 without a journal (this
# machine's root file system), creating files soon after many deletions is
# several times slower (§4.3), which would measure the file system's
# history instead of the extractors. The loop device does direct I/O on
# its backing file, so that each tree is cached once (by the ext4 on top)
# rather than twice: the page cache of 40 trees would otherwise outgrow the
# memory this VM has ever touched, and here memory never touched before is
# several times as slow to use (BENCHMARKS.md, "Issue 16, third round").
#
# Two images: the synthetic one and one of real content (Debian packages,
# hack/bench-oci-debian.sh, cached in build/bench-oci/debian). With
# KRUNBOX_BIN (make bench-oci sets it), krunbox and crane (built here from
# go-containerregistry) run as processes from their CLIs.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
mkdir -p build
$GO build -o build/crane github.com/google/go-containerregistry/cmd/crane
export KRUNBOX_BENCH_CRANE=$PWD/build/crane
if deb=$(hack/bench-oci-debian.sh "$PWD/build/bench-oci/debian"); then
	export KRUNBOX_BENCH_DEBIAN=$deb
else
	echo "bench-oci: no Debian packages (apt-get download failed): the real-content image is skipped" >&2
fi
BENCH=(-tags "${GO_TAGS:-}" -run '^$' -bench "${BENCH_OCI:-.}" -benchtime "${BENCHTIME_OCI:-5x}" -timeout 30m ./oci/)
if [ "$(id -u)" != 0 ] || ! command -v mkfs.ext4 >/dev/null; then
	echo "bench-oci: not root or no mkfs.ext4: measuring in ${TMPDIR:-/tmp}" >&2
	exec $GO test "${BENCH[@]}"
fi
work=$(mktemp -d /var/tmp/krunbox-bench-oci.XXXXXX)
dev=
cleanup() {
	umount "$work/mnt" 2>/dev/null || true
	[ -z "$dev" ] || losetup -d "$dev" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
truncate -s 12G "$work/fs.img"
mkfs.ext4 -q -F "$work/fs.img"
mkdir "$work/mnt"
dev=$(losetup --direct-io=on --find --show "$work/fs.img")
mount "$dev" "$work/mnt"
echo "bench-oci: measuring on a fresh journaled ext4 at $work/mnt" >&2
TMPDIR="$work/mnt" $GO test "${BENCH[@]}"
