#!/usr/bin/env bash
# Builds Intel's ISA-L, whose igzip inflates image layers (internal/gunzip), as a static
# library: DIR/include/isa-l/*.h and DIR/lib/libisal.a (DIR: build/isal by default).
#
#   hack/setup/isal.sh [DIR]
#
# Debian ships ISA-L only as a shared library, and krunbox is one binary: this builds
# Debian 12's source of it (libisal 2.30.0), checked against the SHA-256 that Debian's
# signed Sources index gives for it. It needs nasm (make deps installs it), a C compiler
# and curl or wget, and takes a few seconds. It does nothing when the library is there.
# Exit 1, saying why, when it cannot build it: the Makefile then builds krunbox with the
# pure-Go inflater.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=2.30.0
URL=http://deb.debian.org/debian/pool/main/libi/libisal/libisal_$VERSION.orig.tar.xz
SHA256=f363f1be3d657d5676cef5253ee2233e60116e2fa9c9de86881185bf81e0e4b8
DIR=$(realpath -m "${1:-build/isal}")
CC=${CC:-cc}

if [ -f "$DIR/lib/libisal.a" ] && [ "$(cat "$DIR/version" 2>/dev/null)" = "$VERSION" ]; then
	exit 0
fi
say() { echo "isal: $*" >&2; }
if [ "$(uname -s)/$(uname -m)" != Linux/x86_64 ]; then
	say "ISA-L is built here for linux/amd64 only, not $(uname -s)/$(uname -m)"
	exit 1
fi
if ! command -v nasm >/dev/null; then
	say "no nasm, which ISA-L's assembly needs (Debian: apt-get install nasm; make deps does)"
	exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/krunbox-isal.XXXXXX")
trap 'rm -rf "$work"' EXIT
tarball=$DIR/src/${URL##*/}
if [ ! -f "$tarball" ] || ! echo "$SHA256  $tarball" | sha256sum -c --status; then
	mkdir -p "$DIR/src"
	say "downloading $URL"
	if command -v curl >/dev/null; then
		fetch=(curl -fsSL --retry 3 -o "$work/src.tar.xz" "$URL")
	elif command -v wget >/dev/null; then
		fetch=(wget -q -O "$work/src.tar.xz" "$URL")
	else
		say "neither curl nor wget to download $URL"
		exit 1
	fi
	if ! "${fetch[@]}"; then
		say "cannot download $URL"
		exit 1
	fi
	if ! echo "$SHA256  $work/src.tar.xz" | sha256sum -c --status; then
		say "$URL does not have the SHA-256 Debian's Sources index gives ($SHA256)"
		exit 1
	fi
	mv "$work/src.tar.xz" "$tarball"
fi
tar -xf "$tarball" -C "$work"
src=$(echo "$work"/libisal-$VERSION)
say "building ISA-L $VERSION (static) into $DIR"
if ! make -C "$src" -f Makefile.unx -j"$(nproc)" CC="$CC" lib >"$work/build.log" 2>&1; then
	tail -n 20 "$work/build.log" >&2
	say "the build of ISA-L failed"
	exit 1
fi
rm -rf "$DIR/include" "$DIR/lib"
mkdir -p "$DIR/include/isa-l" "$DIR/lib"
cp "$src"/include/*.h "$DIR/include/isa-l/"
cp "$src/bin/isa-l.a" "$DIR/lib/libisal.a"
echo "$VERSION" >"$DIR/version"
