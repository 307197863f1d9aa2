#!/usr/bin/env bash
# Prepares the real-content image of make bench-oci: Debian packages,
# downloaded with apt-get download and unpacked with dpkg -x, one directory
# per layer, like an image built in four steps (base system, Python, Perl,
# then tools and data). Cached: a second run only prints the directory.
# Usage: hack/bench-oci-debian.sh DIR; prints DIR, which then holds
# layer1/ ... layer4/.
set -euo pipefail
dir=${1:?usage: $0 DIR}
layers=(
	"base-files base-passwd libc6 libgcc-s1 libstdc++6 zlib1g libzstd1 liblzma5 libbz2-1.0 libselinux1 libpcre2-8-0 libcrypt1 libacl1 libattr1 libcap2 libaudit1 libgmp10 libtinfo6 libncursesw6 ncurses-base ncurses-bin coreutils bash dash debianutils diffutils findutils grep sed tar gzip mawk hostname login passwd libpam0g libpam-modules util-linux dpkg apt libapt-pkg6.0 libdb5.3 libsystemd0 libssl3 openssl ca-certificates"
	"python3.11-minimal libpython3.11-minimal libpython3.11-stdlib python3-pkg-resources python3-yaml python3-six libsqlite3-0"
	"perl-base perl-modules-5.36"
	"tzdata locales vim-tiny vim-runtime git-man manpages curl libcurl4 systemd"
)
if [ -e "$dir/done" ]; then
	echo "$dir"
	exit 0
fi
rm -rf "$dir"
# 0700: the packages' set-user-ID programs must not be reachable by others.
mkdir -p "$(dirname "$dir")"
mkdir -m 0700 "$dir"
mkdir "$dir/debs"
for i in "${!layers[@]}"; do
	l="$dir/layer$((i + 1))"
	mkdir -p "$l"
	# shellcheck disable=SC2086 # a list of package names
	(cd "$dir/debs" && apt-get download -q ${layers[$i]} >&2)
	for p in ${layers[$i]}; do
		dpkg -x "$dir/debs/${p}"_*.deb "$l"
	done
done
rm -rf "$dir/debs"
touch "$dir/done"
echo "$dir"
