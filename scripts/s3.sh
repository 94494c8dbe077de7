#!/usr/bin/env bash
# Provides a real S3-compatible server for the tests of the S3 backup store:
# versitygw, built once from the Go module proxy into the cache (as
# scripts/tools.sh caches tofu). Prints its path on the last line.
#
# versitygw installs with `go install` (its module has no replace
# directives); the binary goes to a temporary name in the cache and is
# renamed when complete. One build runs at a time: a second caller waits
# for the first one's binary.
#
# $REZUSCLOUD_S3_BIN names a versitygw binary that exists already; it is
# used as it is.
set -euo pipefail

version=v1.8.0
cache="${REZUSCLOUD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rezuscloud}"
bin="$cache/versitygw-$version"

if [ -n "${REZUSCLOUD_S3_BIN:-}" ]; then
	[ -x "$REZUSCLOUD_S3_BIN" ] || { echo "s3: $REZUSCLOUD_S3_BIN is not an executable" >&2; exit 1; }
	echo "$REZUSCLOUD_S3_BIN"; exit 0
fi
if [ -x "$bin" ]; then
	echo "$bin"; exit 0
fi

mkdir -p "$cache"
if command -v flock >/dev/null 2>&1; then
	exec 9>"$cache/.versitygw-$version.lock"
	if ! flock -n 9; then
		echo "s3: another process is building versitygw $version into $cache; waiting for it" >&2
		flock 9
	fi
	if [ -x "$bin" ]; then
		echo "$bin"; exit 0
	fi
fi
echo "s3: building versitygw $version into $cache (a few minutes on 2 cores; later runs use the cache)" >&2
tmp="$cache/versitygw-build.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
# go install of a module@version builds outside any module: a scratch
# directory keeps this repository's go.mod and go.work out of it.
(cd "$tmp" && GOBIN="$tmp" GOFLAGS= GOTOOLCHAIN=${GOTOOLCHAIN:-local} go install "github.com/versity/versitygw/cmd/versitygw@$version")
[ -x "$tmp/versitygw" ] || { echo "s3: build of versitygw failed" >&2; exit 1; }
mv "$tmp/versitygw" "$bin"
echo "s3: versitygw $version ready at $bin" >&2
echo "$bin"
