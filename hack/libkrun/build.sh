#!/bin/bash
# Builds the libkrun krunbox ships: upstream libkrun v1.19.0 with the patches in this
# folder (hack/libkrun/*.patch), with the net and blk features (upstream's NET=1 BLK=1).
#
# usage: hack/libkrun/build.sh OUT [CHECKOUT]
#   With CHECKOUT, a git checkout of github.com/containers/libkrun at tag v1.19.0: the
#   patches are applied to a copy of it and it is built with upstream's Makefile
#   (make NET=1 BLK=1: cargo and the crate registry), the way a user or a packager builds
#   it. OUT gets libkrun.so.1 (and its versioned file), include/libkrun.h and, when the
#   system has one (or LIBKRUNFW=FILE names it), libkrunfw.so.5.
#
#   Without CHECKOUT, on a machine without the crate registry (CI, development):
#   $REALVM/build-libkrun.sh builds $REALVM/src/libkrun-1.19.0.tar.gz with Debian's crate
#   packages and the same patches (EXTRA_PATCHES), and gets libkrunfw from Debian. The
#   result is cached in $CACHE/libkrun-KEY, KEY being a hash of the source, the patches,
#   the build script and the features, so a machine builds each change once; OUT is a
#   symbolic link to it. Exit status 3 (and nothing built) when $REALVM has no source or
#   build script, or when not root (that script installs Debian packages): the caller
#   says SKIP.
#
# env:  REALVM  the nested-VM harness's folder (default ../shared/realvm beside the clone)
#       CACHE   the build cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/krunbox-build)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:?usage: $0 OUT [CHECKOUT]}
CHECKOUT=${2:-}
FEATURES="blk net"
log() { echo "libkrun: $*" >&2; }

patches() { find "$HERE" -maxdepth 1 -name '*.patch' | sort; }

# upstream CHECKOUT: patch a copy of the checkout and build it with its own Makefile.
upstream() {
	local src=$OUT.src fw
	[ -f "$CHECKOUT/src/libkrun/Cargo.toml" ] || { log "$CHECKOUT is not a libkrun checkout"; exit 2; }
	rm -rf "$src" "$OUT"
	mkdir -p "$src" "$OUT/include"
	(cd "$CHECKOUT" && git archive HEAD) | tar -x -C "$src"
	for p in $(patches); do
		log "applying $(basename "$p")"
		patch -s -p1 -d "$src" <"$p"
	done
	make -C "$src" NET=1 BLK=1
	cp -L "$src"/target/release/libkrun.so.1.* "$OUT/"
	ln -sf "$(basename "$OUT"/libkrun.so.1.*)" "$OUT/libkrun.so.1"
	cp "$src/include/libkrun.h" "$OUT/include/"
	fw=${LIBKRUNFW:-$(ldconfig -p | awk '/libkrunfw\.so\.5 /{print $NF; exit}')}
	if [ -n "$fw" ]; then cp -L "$fw" "$OUT/libkrunfw.so.5"; else log "no libkrunfw.so.5 on this system: install it, or set LIBKRUNFW=FILE"; fi
	rm -rf "$src"
}

# cached: build with $REALVM/build-libkrun.sh into the cache, once per key.
cached() {
	local realvm=${REALVM:-$(cd "$ROOT/.." && pwd)/shared/realvm}
	local tarball=$realvm/src/libkrun-1.19.0.tar.gz script=$realvm/build-libkrun.sh
	local cache=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/krunbox-build} key dir
	if [ ! -f "$tarball" ] || [ ! -x "$script" ]; then
		log "cannot build: $tarball or $script is missing (REALVM=DIR; or hack/libkrun/build.sh OUT CHECKOUT with the crate registry)"
		exit 3
	fi
	if [ "$(id -u)" != 0 ]; then
		log "cannot build: $script installs Debian packages (apt-get), which needs root"
		exit 3
	fi
	key=$( { sha256sum "$tarball" "$script" $(patches) | cut -d' ' -f1; echo "$FEATURES"; } | sha256sum | cut -c1-16)
	dir=$cache/libkrun-$key
	mkdir -p "$cache"
	# one build per key at a time: another make test on this machine waits for it
	exec 9>"$dir.lock"
	flock 9
	if [ -f "$dir/out/libkrun.so.1" ] && [ -f "$dir/out/libkrunfw.so.5" ] && [ -f "$dir/ok" ]; then
		log "cached: $dir/out"
	else
		log "building libkrun 1.19.0 and $(patches | wc -l) patch(es) into $dir (about 5 minutes on 2 cores, more the first time)"
		rm -rf "$dir"
		mkdir -p "$dir"
		# A build of its own (WORK) per key: nothing shared with another build running.
		WORK=$dir/work KRUN_OUT=$dir/out KRUN_FEATURES=$FEATURES EXTRA_PATCHES=$HERE \
			"$script" "$tarball" >"$dir/build.log" 2>&1 ||
			{ tail -n 40 "$dir/build.log" >&2; log "build failed: $dir/build.log"; exit 1; }
		nm -D --defined-only "$dir/out/libkrun.so.1" | grep -q ' krun_set_virtiofs_cache$' ||
			{ log "$dir/out/libkrun.so.1 lacks krun_set_virtiofs_cache: the patches were not applied"; exit 1; }
		rm -rf "$dir/work"
		touch "$dir/ok"
	fi
	rm -rf "$OUT"
	mkdir -p "$(dirname "$OUT")"
	ln -s "$dir/out" "$OUT"
}

if [ -n "$CHECKOUT" ]; then upstream; else cached; fi
log "$OUT: $(cd -P "$OUT" && ls libkrun.so.1 libkrunfw.so.5 2>/dev/null | tr '\n' ' ')"
