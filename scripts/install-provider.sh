#!/usr/bin/env bash
# Builds the simulated cloud provider and installs it into a tofu filesystem
# mirror; prints the installed version on its last line.
#
#   scripts/install-provider.sh [MIRROR]
#
# MIRROR is the first argument, else $REZUSCLOUD_PROVIDER_MIRROR, else
# bin/providers in the repository. Extra linker flags come from
# $REZUSSIM_LDFLAGS (for instance "-X main.build=abc").
#
# The version is derived from the binary's content: 0.1.<first 7 hex digits
# of its sha256, as a decimal>. Identical bytes give the identical version,
# so rebuilding unchanged code changes nothing; a changed binary gets a new
# version beside the old ones, which are never deleted, so lock files that
# pin an older build keep working. Versions are not ordered by build time:
# <mirror>/rezuscloud.io/rezuscloud/rezussim/LATEST names the newest install.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mirror=${1:-${REZUSCLOUD_PROVIDER_MIRROR:-$root/bin/providers}}
mkdir -p "$mirror"
mirror=$(cd "$mirror" && pwd)

pkgdir="$mirror/rezuscloud.io/rezuscloud/rezussim"
mkdir -p "$pkgdir"
tmp=$(mktemp "$pkgdir/.build.XXXXXX")
trap 'rm -f "$tmp"' EXIT

# -trimpath and -buildvcs=false keep the bytes independent of where the
# repository lives and of its git state, CGO_ENABLED=0 of the host's C tools,
# and an empty GOFLAGS of the caller's flags (such as -race).
(cd "$root" && CGO_ENABLED=0 GOFLAGS= bash scripts/gobuild.sh "install-provider: rezussim" -trimpath -buildvcs=false \
	-ldflags "-s -w ${REZUSSIM_LDFLAGS:-}" -o "$tmp" ./cmd/terraform-provider-rezussim)

sum=$(sha256sum "$tmp" | cut -c1-7)
version="0.1.$((16#$sum))"
platform="$(go env GOOS)_$(go env GOARCH)"
dest="$pkgdir/$version/$platform"
bin="$dest/terraform-provider-rezussim_v$version"

if [ -f "$bin" ] && cmp -s "$tmp" "$bin"; then
	echo "install-provider: rezussim $version already installed in $mirror" >&2
else
	mkdir -p "$dest"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$bin"
	echo "install-provider: installed rezussim $version into $mirror" >&2
fi

latest=$(mktemp "$pkgdir/.latest.XXXXXX")
echo "$version" >"$latest"
chmod 0644 "$latest"
mv -f "$latest" "$pkgdir/LATEST"
echo "$version"
