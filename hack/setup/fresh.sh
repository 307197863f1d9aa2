#!/usr/bin/env bash
# make test as a new user's first run: a fresh clone of the committed HEAD, with an
# empty Go module cache, an empty Go build cache, an empty npm cache and no
# XDG cache folder (~/.cache), so that whatever the tests need and only a used
# machine holds shows up as a failure here.
#
#   hack/setup/fresh.sh [MAKE-ARGS...]     (make test-fresh; default target: test)
#
# It keeps what belongs to the machine rather than to a used one: the toolchains, the
# go, npm and apt settings (~/.config/go/env, ~/.npmrc, apt's sources), and the
# Debian packages make deps installs (a check can't uninstall them: run it on a new
# machine for that). REALVM is passed on (the clone has no ../shared beside it).
# Uncommitted changes are not in the clone: commit first. The folder is removed
# afterwards unless KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/../.."

repo=$PWD
realvm=${REALVM:-$(realpath -m "$repo/../shared/realvm")}
top=$(mktemp -d "${TMPDIR:-/tmp}/krunbox-fresh.XXXXXX")
cleanup() {
	if [ "${KEEP:-}" = 1 ]; then
		echo "fresh: kept $top"
		return
	fi
	chmod -R u+w "$top" 2>/dev/null || true # the module cache's files are read-only
	rm -rf "$top"
}
trap cleanup EXIT

if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	echo "fresh: the working tree has uncommitted changes; the check runs on HEAD ($(git rev-parse --short HEAD)) without them"
fi
git clone -q --no-local "$repo" "$top/krunbox"
mkdir -p "$top/gomod" "$top/gobuild" "$top/npm" "$top/home-cache"
echo "fresh: $(git -C "$top/krunbox" rev-parse --short HEAD) in $top/krunbox, empty caches under $top"
cd "$top/krunbox"
# XDG_CACHE_HOME names a folder that does not exist yet, as ~/.cache on a new machine.
env GOMODCACHE="$top/gomod" GOCACHE="$top/gobuild" \
	npm_config_cache="$top/npm" XDG_CACHE_HOME="$top/home-cache/absent" \
	REALVM="$realvm" make "${@:-test}"
