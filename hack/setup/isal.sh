#!/usr/bin/env bash
# Builds Intel's ISA-L, whose igzip inflates image layers (internal/gunzip), as a static
# library: DIR/include/isa-l/*.h and DIR/lib/libisal.a (DIR: build/isal by default).
#
#   hack/setup/isal.sh [DIR]
#
# Debian ships ISA-L only as a shared library, and krunbox is one binary: this builds
# Debian 12's source of it (libisal 2.30.0), fetched with apt-get source through the apt
# sources, mirror and proxy this machine is set up with (deb-src lines for the archives
# its deb lines name, in a private apt state, so the system's is not touched), and
# checked by apt against Debian's signed Sources index and here against the SHA-256
# that index gives. It needs apt-get, nasm (make deps installs it) and a C compiler, and
# takes a few seconds. It does nothing when the library is there.
# Exit 1, saying why, when it cannot build it: the Makefile then builds krunbox with the
# pure-Go inflater.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=2.30.0
SRCPKG=libisal=$VERSION-5
ORIG=libisal_$VERSION.orig.tar.xz
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
tarball=$DIR/src/$ORIG
if [ ! -f "$tarball" ] || ! echo "$SHA256  $tarball" | sha256sum -c --status; then
	mkdir -p "$DIR/src"
	if ! command -v apt-get >/dev/null; then
		say "no apt-get to fetch Debian's source package $SRCPKG"
		exit 1
	fi
	# deb-src for every archive the machine's deb lines name, with their options.
	apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Created-By: Packages' |
		sort -u | while read -r uri suite comp; do echo "deb-src $uri $suite $comp"; done >"$work/sources.list"
	if [ ! -s "$work/sources.list" ]; then
		say "apt knows no Debian archive (run apt-get update first, as root)"
		exit 1
	fi
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/dl"
	apt=(apt-get -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1
		-o APT::Sandbox::User="$(id -un)")
	say "fetching Debian's source package $SRCPKG with apt-get source"
	if ! "${apt[@]}" update >"$work/apt.log" 2>&1 ||
		! (cd "$work/dl" && "${apt[@]}" source --download-only "$SRCPKG") >>"$work/apt.log" 2>&1; then
		tail -n 5 "$work/apt.log" >&2
		say "cannot fetch $SRCPKG with apt-get source (is its archive, Debian 12's, among apt's sources?)"
		exit 1
	fi
	if ! echo "$SHA256  $work/dl/$ORIG" | sha256sum -c --status; then
		say "$ORIG does not have the SHA-256 Debian's Sources index gives ($SHA256)"
		exit 1
	fi
	mv "$work/dl/$ORIG" "$tarball"
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
