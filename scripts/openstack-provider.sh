#!/usr/bin/env bash
# Provides the OpenStack provider (terraform-provider-openstack v3.4.0) in a
# tofu filesystem mirror; prints the installed binary's path on its last line.
#
#   scripts/openstack-provider.sh [MIRROR]
#
# MIRROR is the first argument, else $REZUSCLOUD_PROVIDER_MIRROR, else
# bin/providers in the repository. The binary is built once from the Go module
# proxy into the cache ($REZUSCLOUD_CACHE, else $XDG_CACHE_HOME/rezuscloud,
# else ~/.cache/rezuscloud) and copied from there into the mirror, so a second
# run only compares bytes. The build is reproducible (-trimpath, no VCS
# stamps), so the lock files of existing work directories stay valid.
set -euo pipefail

version=3.4.0
module=github.com/terraform-provider-openstack/terraform-provider-openstack/v3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mirror=${1:-${REZUSCLOUD_PROVIDER_MIRROR:-$root/bin/providers}}
cache="${REZUSCLOUD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rezuscloud}"
name="terraform-provider-openstack_v$version"
cached="$cache/$name"

if [ ! -x "$cached" ]; then
	mkdir -p "$cache"
	echo "openstack-provider: building $module@v$version into $cache (1-2 minutes on 2 cores)" >&2
	# Built inside its downloaded module, as `go install $module@v$version`
	# builds it, so that the packages to compile can be counted first.
	dir=$(cd "$cache" && GOFLAGS= GOWORK=off go mod download -json "$module@v$version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || { echo "openstack-provider: download of $module@v$version failed" >&2; exit 1; }
	built=$(mktemp "$cache/.openstack-build.XXXXXX")
	trap 'rm -f "$built"' EXIT
	# An empty GOFLAGS keeps the caller's flags (such as -race) out, and
	# CGO_ENABLED=0 the host's C tools.
	(cd "$dir" && CGO_ENABLED=0 GOFLAGS= GOWORK=off bash "$root/scripts/gobuild.sh" "openstack-provider" \
		-trimpath -buildvcs=false -ldflags "-s -w" -o "$built" .)
	[ -s "$built" ] || { echo "openstack-provider: the build produced no binary" >&2; exit 1; }
	chmod 0755 "$built"
	mv -f "$built" "$cached"
	echo "openstack-provider: built $cached" >&2
fi

mkdir -p "$mirror"
mirror=$(cd "$mirror" && pwd)
platform="$(go env GOOS)_$(go env GOARCH)"
dest="$mirror/registry.opentofu.org/terraform-provider-openstack/openstack/$version/$platform"
bin="$dest/$name"
if [ -f "$bin" ] && cmp -s "$cached" "$bin"; then
	echo "openstack-provider: $version already installed in $mirror" >&2
else
	mkdir -p "$dest"
	tmp=$(mktemp "$dest/.install.XXXXXX")
	cp "$cached" "$tmp"
	chmod 0755 "$tmp"
	mv -f "$tmp" "$bin"
	echo "openstack-provider: installed $version into $mirror" >&2
fi
echo "$bin"
