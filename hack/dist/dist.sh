#!/bin/bash
# Packs krunbox for users: the release bundle, or the libraries of the pi package.
#
# usage: hack/dist/dist.sh bundle        build OUT/krunbox-VERSION-OS-ARCH.tar.gz
#        hack/dist/dist.sh libs DIR      put libkrun, libkrunfw and their licences in DIR
# env:   KRUNBOX      the krunbox binary (built with make build: agents embedded)
#        VERSION      krunbox's version, in the bundle's name
#        OUT          where the bundle goes (bundle only)
#        LIBKRUN_DIR  a folder holding libkrun.so.1 and libkrunfw.so.5 (or their
#                     versioned files, libkrun.so.1.* and libkrunfw.so.5.*); empty: the
#                     result carries no libkrun and needs a system one, and says so
#        LIBKRUNFW    a libkrunfw.so.5 to bundle instead of LIBKRUN_DIR's (make libkrunfw's:
#                     its guest kernel fires file events for host edits); its source
#                     notice then names hack/libkrunfw's patch, bundled beside it
#
# A copy of a library folder may hold libkrun.so.1 as a small text file naming the
# versioned file (a symlink that lost its kind, as ../shared/realvm/lib has it): such a
# name is followed, within the folder; without libkrun.so.1 at all, the highest
# libkrun.so.1.* is taken. The bundle holds the real files under their sonames.
#
# Bundle layout, to unpack under any prefix (tar --strip-components=1 -C PREFIX):
#   bin/krunbox
#   lib/krunbox/libkrun.so.1, lib/krunbox/libkrunfw.so.5  (krunbox finds them there)
#   share/doc/krunbox/README.md, LICENSE, licenses/, SOURCES.md
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

die() { echo "dist: $*" >&2; exit 1; }

[ "$(uname -s)" = Linux ] || [ -z "${LIBKRUN_DIR:-}" ] ||
	die "LIBKRUN_DIR: bundling libkrun is supported on Linux only (on macOS: brew install libkrun)"

# isELF FILE: whether FILE starts with the ELF magic.
isELF() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

# resolve NAME: the real file of library NAME (libkrun.so.1) in LIBKRUN_DIR.
resolve() {
	local dir=$LIBKRUN_DIR name=$1 f target
	f=$dir/$name
	if [ -L "$f" ]; then
		f=$(readlink -f "$f")
	elif [ -f "$f" ] && ! isELF "$f" && [ "$(wc -c <"$f")" -lt 256 ]; then
		target=$(head -n 1 "$f")
		case $target in
		"" | */* | .*) die "$f: a text file naming '$target', want a file name in $dir" ;;
		esac
		f=$dir/$target
	elif [ ! -e "$f" ]; then
		f=$(find "$dir" -maxdepth 1 -name "$name.*" -type f | sort -V | tail -n 1)
		[ -n "$f" ] || die "LIBKRUN_DIR=$dir: neither $name nor $name.* there"
	fi
	[ -f "$f" ] || die "$dir/$name: $f is not a file"
	isELF "$f" || die "$dir/$name: $f is not a shared library (no ELF header)"
	echo "$f"
}

# version FILE SONAME: the version in a versioned file name (libkrun.so.1.19.0: 1.19.0),
# or "unknown".
version() {
	local b
	b=$(basename "$1")
	case $b in
	"$2".*) echo "${2##*.so.}.${b#"$2".}" ;;
	*) echo unknown ;;
	esac
}

# libs DIR: libkrun, libkrunfw, their licences and the source notice into DIR.
# Prints nothing when LIBKRUN_DIR is empty.
libs() {
	local dest=$1 krun krunfw kver fwver linux
	krun=$(resolve libkrun.so.1)
	krunfw=${LIBKRUNFW:-$(resolve libkrunfw.so.5)}
	[ -f "$krunfw" ] && isELF "$krunfw" || die "LIBKRUNFW=$krunfw: not a shared library"
	kver=$(version "$krun" libkrun.so.1)
	fwver=$(version "$krunfw" libkrunfw.so.5)
	linux=$(grep -a -o -m 1 'Linux version [0-9][0-9.]*' "$krunfw" | head -n 1 | cut -d' ' -f3 || true)
	mkdir -p "$dest"
	install -m 0755 "$krun" "$dest/libkrun.so.1"
	install -m 0755 "$krunfw" "$dest/libkrunfw.so.5"
	echo "libkrun $kver (from $krun), libkrunfw $fwver (from $krunfw, Linux ${linux:-unknown})"
	LIBS_NOTE="libkrun $kver and libkrunfw $fwver (its guest kernel: Linux ${linux:-unknown})"
	LIBKRUN_VERSION=$kver LIBKRUNFW_VERSION=$fwver LINUX_VERSION=${linux:-unknown}
	# krunbox's libkrun (make libkrun) carries hack/libkrun's changes: the notice says so
	LIBKRUN_PATCHED=
	if grep -qa krun_set_virtiofs_cache "$krun"; then LIBKRUN_PATCHED=1; fi
	# krunbox's libkrunfw (make libkrunfw) carries hack/libkrunfw's kernel patch
	LIBKRUNFW_PATCHED=
	if grep -qa fsnotify_inject "$krunfw"; then LIBKRUNFW_PATCHED=1; fi
}

# notices DIR: the licences and the source notice of the bundled libraries.
notices() {
	local d=$1
	mkdir -p "$d/licenses"
	cp "$HERE"/licenses/*.txt "$d/licenses/"
	local fwtag=v$LIBKRUNFW_VERSION linux=$LINUX_VERSION
	local ksrc="https://github.com/containers/libkrun, tag v$LIBKRUN_VERSION"
	if [ -n "$LIBKRUN_PATCHED" ]; then
		mkdir -p "$d/libkrun-patches"
		cp "$ROOT"/hack/libkrun/*.patch "$d/libkrun-patches/"
		ksrc="$ksrc, with krunbox's changes in \`libkrun-patches/\` (\`patch -p1\`; they add \`krun_set_virtiofs_cache\`)"
	fi
	local fwsrc="https://github.com/containers/libkrunfw, tag $fwtag" fwnote=
	if [ -n "$LIBKRUNFW_PATCHED" ]; then
		mkdir -p "$d/libkrunfw-patches"
		cp "$ROOT"/hack/libkrunfw/*.patch "$d/libkrunfw-patches/"
		fwsrc="$fwsrc, with krunbox's kernel patch in \`libkrunfw-patches/\`"
		fwnote="
This libkrunfw is krunbox's build (\`make libkrunfw\`, hack/libkrunfw/build.sh in
krunbox's source): libkrunfw's source, with the kernel patch in \`libkrunfw-patches/\`
applied after libkrunfw's own \`patches/\`, and \`CONFIG_FSNOTIFY_INJECT=y\` added to its
\`config-libkrunfw_*\` (/proc/fs/fsnotify_inject: host edits wake the guest's file
watchers). Linux $linux is the kernel release it was built from.
"
	fi
	cat >"$d/SOURCES.md" <<EOF
# The libraries bundled with krunbox, their licences and their source

| file | what | licence | source |
|---|---|---|---|
| \`lib/krunbox/libkrun.so.1\` | libkrun $LIBKRUN_VERSION, the virtual machine monitor | Apache-2.0 (\`licenses/libkrun-Apache-2.0.txt\`) | $ksrc |
| \`lib/krunbox/libkrunfw.so.5\` | libkrunfw $LIBKRUNFW_VERSION, the guest kernel as a library | LGPL-2.1 (\`licenses/libkrunfw-LGPL-2.1.txt\`) | $fwsrc |
| the kernel inside libkrunfw | Linux $linux | GPL-2.0 (\`licenses/linux-GPL-2.0.txt\`) | see below |

The corresponding source of the Linux kernel in libkrunfw.so.5 is libkrunfw's source at
tag $fwtag (https://github.com/containers/libkrunfw/tree/$fwtag): its \`Makefile\` names
the kernel release it builds (\`KERNEL_VERSION\`, here linux-$linux), downloaded from
https://cdn.kernel.org/pub/linux/kernel/v${linux%%.*}.x/linux-$linux.tar.xz, and
\`patches/\` and \`config-libkrunfw_$(uname -m)\` are the patches and the configuration
applied to it; \`make\` there rebuilds the library. Where the library came from a
distribution's package (Debian's libkrunfw5, Fedora's libkrunfw), that package's source
package (\`apt-get source libkrunfw\`, \`dnf download --source libkrunfw\`) is the same
source with the distribution's changes.
$fwnote
libkrunfw is loaded by libkrun at run time (dlopen); you may replace either library with
another build of the same ABI (libkrun.so.1, libkrunfw.so.5) by putting it in
\`lib/krunbox/\`, or point KRUNBOX_LIBKRUN at another libkrun.
EOF
}

case ${1:-} in
bundle)
	: "${KRUNBOX:?}" "${VERSION:?}" "${OUT:?}"
	os=$(go env GOOS) arch=$(go env GOARCH)
	name=krunbox-$VERSION-$os-$arch
	stage=$OUT/$name
	rm -rf "$stage" "$OUT/$name.tar.gz"
	mkdir -p "$stage/bin" "$stage/share/doc/krunbox"
	install -m 0755 "$KRUNBOX" "$stage/bin/krunbox"
	cp "$ROOT/LICENSE" "$stage/share/doc/krunbox/LICENSE"
	if [ -n "${LIBKRUN_DIR:-}" ]; then
		libs "$stage/lib/krunbox" >/dev/null
		notices "$stage/share/doc/krunbox"
		carries="It carries $LIBS_NOTE in \`lib/krunbox/\`, where krunbox finds them: nothing else to install
but \`libzstd.so.1\` (installed on every Debian, Ubuntu and Fedora). See \`SOURCES.md\` for
their licences and source."
	else
		carries="**It carries no libkrun**: install libkrun 1.19 and libkrunfw 5 on this machine
(Fedora/RHEL: \`dnf install libkrun\`; elsewhere: the bundle built with them, or from source,
see krunbox's README), or set KRUNBOX_LIBKRUN to a libkrun.so.1."
	fi
	cat >"$stage/share/doc/krunbox/README.md" <<EOF
# krunbox $VERSION for $os/$arch

krunbox runs commands in libkrun microVMs (https://github.com/krunbox/krunbox).
$carries

Install: unpack under a prefix whose \`bin\` is on your PATH, for example

    tar -xzf $name.tar.gz --strip-components=1 -C ~/.local
    sudo tar -xzf $name.tar.gz --strip-components=1 -C /usr/local
    sudo mkdir -p /opt/krunbox && sudo tar -xzf $name.tar.gz --strip-components=1 -C /opt/krunbox

then check the machine with \`krunbox doctor\`: it says which libkrun it found, and why.
krunbox looks for libkrun in this order: the file KRUNBOX_LIBKRUN names; the one installed
with it (\`../lib/krunbox/\` from the real path of the krunbox binary, so a symlink to
\`bin/krunbox\` works too); \`\$KRUNBOX_HOME/lib\`; the system's dynamic loader. libkrunfw is
loaded from the folder libkrun came from when it is there.

krunbox needs /dev/kvm (read-write) on Linux. krunbox is MIT-licensed (\`LICENSE\`).
EOF
	tar -C "$OUT" --owner=0 --group=0 --numeric-owner -czf "$OUT/$name.tar.gz" "$name"
	rm -rf "$stage"
	echo "dist: $OUT/$name.tar.gz"
	[ -n "${LIBKRUN_DIR:-}" ] || echo "dist: no LIBKRUN_DIR: the bundle carries no libkrun; it needs a system libkrun (make dist LIBKRUN_DIR=DIR bundles one)"
	;;
libs)
	dest=${2:?usage: dist.sh libs DIR}
	if [ -z "${LIBKRUN_DIR:-}" ]; then
		echo "dist: no LIBKRUN_DIR: the package carries no libkrun; it needs a system libkrun (LIBKRUN_DIR=DIR bundles one)"
		exit 0
	fi
	libs "$dest"
	notices "$dest"
	;;
*)
	echo "usage: dist.sh bundle | dist.sh libs DIR" >&2
	exit 2
	;;
esac
