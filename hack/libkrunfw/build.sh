#!/bin/bash
# Builds the libkrunfw krunbox ships: upstream libkrunfw (the guest kernel libkrun boots)
# with the kernel patches in this folder (hack/libkrunfw/*.patch) and their options on:
# /proc/fs/fsnotify_inject (CONFIG_FSNOTIFY_INJECT), through which the guest agent makes
# the guest kernel fire inotify and fanotify events for changes the user made on the host.
#
# usage: hack/libkrunfw/build.sh OUT CHECKOUT
#   CHECKOUT  a checkout of github.com/containers/libkrunfw whose kernel is 6.12 (its
#             patches/ and config-libkrunfw_*). The build is upstream's own Makefile on a
#             copy of it, with this folder's patches added after libkrunfw's.
#   OUT       gets libkrunfw.so.5 (a symbolic link into the cache, below).
# env:  KERNEL_TARBALL  the kernel source instead of the one libkrunfw's Makefile downloads
#                 (a .tar.xz whose top folder is the tree; libkrunfw's patches must apply to
#                 it), or "debian": Debian's linux-source-6.12, fetched with apt-get download
#                 (libkrunfw's patches that need porting to it are replaced by those in
#                 debian-6.12/ of the same name)
#       CACHE     the build cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/krunbox-build)
#       JOBS      make's jobs (default: the number of CPUs)
# The result is cached in $CACHE/libkrunfw-KEY, KEY a hash of this script, this folder's
# patches, the checkout's patches, configs, Makefile and bundler, and the kernel tarball: a
# machine builds each change once (about 10 minutes on 2 idle cores). Needs gcc, make, flex,
# bison, bc, libelf-dev and python3 with pyelftools (Debian: python3-pyelftools).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: $0 OUT CHECKOUT}
CHECKOUT=${2:?usage: $0 OUT CHECKOUT (a checkout of github.com/containers/libkrunfw)}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/krunbox-build}
MARKER=fsnotify_inject
log() { echo "libkrunfw: $*" >&2; }

[ -f "$CHECKOUT/Makefile" ] && [ -f "$CHECKOUT/bin2cbundle.py" ] && [ -d "$CHECKOUT/patches" ] ||
	{ log "$CHECKOUT is not a libkrunfw checkout (Makefile, bin2cbundle.py, patches/)"; exit 2; }
CHECKOUT=$(cd "$CHECKOUT" && pwd)
mkdir -p "$CACHE"

# The kernel tarball: given, Debian's, or (empty) the one libkrunfw's Makefile downloads.
tarball=${KERNEL_TARBALL:-}
if [ "$tarball" = debian ]; then
	tarball=$CACHE/linux-source-6.12.tar.xz
	if [ ! -f "$tarball" ]; then
		d=$(mktemp -d)
		# A fresh machine may have no package lists yet: fetch them once (as root) and retry.
		(cd "$d" && { apt-get download linux-source-6.12 >&2 ||
			{ [ "$(id -u)" = 0 ] && apt-get update >&2 && apt-get download linux-source-6.12 >&2; }; } &&
			dpkg-deb -x linux-source-6.12_*.deb x) ||
			{ log "apt-get download linux-source-6.12 failed (as root, apt-get update first)"; rm -rf "$d"; exit 1; }
		mv "$d/x/usr/src/linux-source-6.12.tar.xz" "$tarball.tmp" && mv "$tarball.tmp" "$tarball"
		rm -rf "$d"
	fi
fi
[ -z "$tarball" ] || [ -f "$tarball" ] || { log "KERNEL_TARBALL $tarball: no such file"; exit 2; }

# A python3 that has pyelftools, for libkrunfw's bin2cbundle.py.
py=
for p in python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null && "$p" -c 'import elftools' 2>/dev/null; then py=$(command -v "$p"); break; fi
done
[ -n "$py" ] || { log "no python3 with pyelftools (Debian: apt-get install python3-pyelftools)"; exit 2; }

# Ports of libkrunfw's patches to Debian's kernel, replacing them by name (debian-6.12/).
ports=()
[ "${KERNEL_TARBALL:-}" != debian ] || ports=("$HERE"/debian-6.12/*.patch)

key=$( {
	sha256sum "$0" "$HERE"/*.patch "${ports[@]}" | cut -d' ' -f1
	(cd "$CHECKOUT" && sha256sum Makefile bin2cbundle.py config-libkrunfw_* patches/*.patch) | cut -d' ' -f1
	[ -z "$tarball" ] || sha256sum "$tarball" | cut -d' ' -f1
} | sha256sum | cut -c1-16)
dir=$CACHE/libkrunfw-$key
exec 9>"$dir.lock"
flock 9
if [ -f "$dir/ok" ]; then
	log "cached: $dir/out"
else
	log "building libkrunfw with $(ls "$HERE"/*.patch | wc -l) krunbox patch(es) into $dir (about 10 minutes on 2 idle cores)"
	rm -rf "$dir"
	mkdir -p "$dir/src" "$dir/out"
	cp -a "$CHECKOUT/." "$dir/src/"
	rm -rf "$dir/src/.git"
	# After libkrunfw's own patches (its Makefile applies patches/0*.patch in order).
	for p in "${ports[@]}"; do
		[ -f "$dir/src/patches/$(basename "$p")" ] || { log "$CHECKOUT has no patches/$(basename "$p") for $p to replace"; exit 2; }
		cp "$p" "$dir/src/patches/"
	done
	for p in "$HERE"/*.patch; do cp "$p" "$dir/src/patches/0900-krunbox-$(basename "$p")"; done
	for c in "$dir"/src/config-libkrunfw_*; do echo CONFIG_FSNOTIFY_INJECT=y >>"$c"; done
	args=()
	if [ -n "$tarball" ]; then
		# (tar stops on a closed pipe once head has its line)
		top=$(set +o pipefail; tar -tf "$tarball" 2>/dev/null | head -n 1 | cut -d/ -f1)
		args=(KERNEL_TARBALL="$tarball" KERNEL_VERSION="$top")
	fi
	# In its folder, not make -C, and as a top-level make (no MAKEFLAGS, MAKELEVEL from a
	# make running this script): libkrunfw's Makefile passes $(MAKEFLAGS) to the kernel's
	# make as words, and a sub-make's "w" (print the directory) would be taken for a target.
	(cd "$dir/src" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES PATH="$(dirname "$py"):$PATH" \
		make -j"${JOBS:-$(nproc)}" "${args[@]}") >"$dir/build.log" 2>&1 ||
		{ tail -n 40 "$dir/build.log" >&2; log "build failed: $dir/build.log"; exit 1; }
	# libkrunfw's Makefile goes on past a patch that does not apply: check that ours did.
	grep -q "^CONFIG_FSNOTIFY_INJECT=y" "$dir"/src/*/.config && grep -qa "$MARKER" "$dir"/src/libkrunfw.so.5.* ||
		{ log "the kernel was built without $MARKER: see $dir/build.log"; exit 1; }
	# Hunks of libkrunfw's patches that did not apply (drivers this config does not build,
	# such as vhost, may be fine): say which, for whoever runs the result.
	rejects=$(sed -n 's/.*saving rejects to file //p' "$dir/build.log" | sort -u | tr '\n' ' ')
	[ -z "$rejects" ] || log "warning: patch hunks did not apply to $rejects(see $dir/build.log)"
	cp "$dir"/src/libkrunfw.so.5.* "$dir/out/"
	ln -sf "$(basename "$dir"/out/libkrunfw.so.5.*)" "$dir/out/libkrunfw.so.5"
	rm -rf "$dir/src"
	touch "$dir/ok"
fi
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
ln -s "$dir/out" "$OUT"
log "$OUT: $(cd -P "$OUT" && ls libkrunfw.so.5*)"
