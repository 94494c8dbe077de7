#!/usr/bin/env bash
# Runs the module's tests with the race detector, the end-to-end package
# ./test beside the others.
#
#   scripts/gotest.sh [GO TEST FLAGS]
#
# ./test alone takes most of the time (about 18 of 25 minutes on two
# cores), and `go test ./...` starts it among the last packages, so the
# whole run waited for the other packages and then for it. Here it starts
# at once, in a `go test` of its own, while a second `go test` runs the
# other packages one at a time: still two test processes at a time, as
# `go test -p 2` runs them on two cores, and the run ends with ./test.
# Its output is kept in a file and printed when it ends, so that the two
# do not mix; the exit status fails when either fails.
#
# It runs in the current directory, with the caller's environment.
set -uo pipefail

go=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$go" test "$@" ./test/ >"$out" 2>&1 &
e2e=$!

mapfile -t others < <("$go" list ./... | grep -v '/test$')
"$go" test -p 1 "$@" "${others[@]}"
rc=$?

wait "$e2e" || rc=1
cat "$out"
exit $rc
