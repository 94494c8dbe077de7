#!/usr/bin/env bash
# Provides an OpenTofu binary >= 1.10 and prints its path on the last line.
#
# Order: $TOFU if set, `tofu` on PATH if its version fits, a cached build, or a
# fresh build of OpenTofu from the Go module proxy into the cache. OpenTofu's
# module has replace directives, so `go install` cannot build it; building
# inside its downloaded module directory works. One build runs at a time:
# a second caller waits for the first one's binary.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=v1.10.10
cache="${REZUSCLOUD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rezuscloud}"
bin="$cache/tofu-$version"

fits() {
	# tofu version prints "OpenTofu v1.10.10" on its first line.
	local v
	v=$("$1" version 2>/dev/null | head -n1 | sed -n 's/^OpenTofu v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
	[ -n "$v" ] || return 1
	set -- $v
	[ "$1" -gt 1 ] || { [ "$1" -eq 1 ] && [ "$2" -ge 10 ]; }
}

if [ -n "${TOFU:-}" ] && fits "$TOFU"; then
	echo "$TOFU"; exit 0
fi
if command -v tofu >/dev/null 2>&1 && fits "$(command -v tofu)"; then
	command -v tofu; exit 0
fi
if [ -x "$bin" ] && fits "$bin"; then
	echo "$bin"; exit 0
fi

mkdir -p "$cache"
if command -v flock >/dev/null 2>&1; then
	exec 9>"$cache/.tofu-$version.lock"
	if ! flock -n 9; then
		echo "tools: another process is building OpenTofu $version into $cache; waiting for it" >&2
		flock 9
	fi
	if [ -x "$bin" ] && fits "$bin"; then
		echo "$bin"; exit 0
	fi
fi
echo "tools: building OpenTofu $version into $cache (a few minutes on 2 cores)" >&2
echo "tools: [1/2] downloading github.com/opentofu/opentofu@$version" >&2
dir=$(go mod download -json "github.com/opentofu/opentofu@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "tools: download of OpenTofu failed" >&2; exit 1; }
echo "tools: [2/2] compiling ./cmd/tofu (its modules download first)" >&2
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
(cd "$dir" && GOFLAGS=-mod=mod bash "$root/scripts/gobuild.sh" "tools: OpenTofu" \
	-ldflags "-X github.com/opentofu/opentofu/version.dev=no" -o "$tmp" ./cmd/tofu)
[ -x "$tmp" ] || { echo "tools: build of OpenTofu failed" >&2; exit 1; }
mv "$tmp" "$bin"
fits "$bin" || { echo "tools: built $bin but it does not report $version" >&2; exit 1; }
echo "tools: OpenTofu $version ready at $bin" >&2
echo "$bin"
