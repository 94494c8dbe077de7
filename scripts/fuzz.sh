#!/usr/bin/env bash
# Runs every fuzz target of the module, one at a time: each `func FuzzX` of a
# _test.go file, for FUZZTIME (the first argument, default 20s). A new fuzz
# target joins by being written; nothing lists them.
set -euo pipefail
fuzztime=${1:-20s}
cd "$(dirname "$0")/.."
targets=$(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . |
	sed -E 's#^\./(.*)/[^/]*_test\.go:[0-9]+:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort -u)
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
while read -r dir name; do
	echo "fuzz: $name in ./$dir for $fuzztime"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "./$dir"
done <<<"$targets"
