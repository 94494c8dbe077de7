#!/usr/bin/env bash
# Runs `go build` and says how far it is: every few seconds a line on
# standard error with the packages compiled out of those to compile, and
# an estimate of the time left.
#
#   scripts/gobuild.sh LABEL [BUILD FLAGS] -o OUT PACKAGES...
#
# It runs in the current directory, with the caller's environment. The
# packages to compile are counted first: `go list -deps` of the same
# packages with the same flags, keeping those that the build cache does not
# hold (.Stale), but for the main packages, which are stale whenever the
# binary is to be written. `go build -v` then names each package as it
# compiles it. Compiler errors and go's own messages pass through.
#
# Progress lines go to standard error and replace each other on a
# terminal; $REZUSCLOUD_PROGRESS_INTERVAL sets their interval in seconds
# (default 5). Standard output stays empty.
set -uo pipefail

label=$1
shift
build=("$@")
interval=${REZUSCLOUD_PROGRESS_INTERVAL:-5}

# go list takes the build's flags and packages, but not -o.
list=()
while [ $# -gt 0 ]; do
	case $1 in
	-o) shift ;;
	-o=* | -v | -x) ;;
	*) list+=("$1") ;;
	esac
	shift
done

human() { # seconds as 1h02m, 2m03s or 3s
	local s=$1
	if [ "$s" -ge 3600 ]; then
		printf '%dh%02dm' $((s / 3600)) $((s % 3600 / 60))
	elif [ "$s" -ge 60 ]; then
		printf '%dm%02ds' $((s / 60)) $((s % 60))
	else
		printf '%ds' "$s"
	fi
}

packages() { # 1 package, 2 packages
	if [ "$1" -eq 1 ]; then echo "1 package"; else echo "$1 packages"; fi
}

tty=false
[ -t 2 ] && tty=true
say() { # a progress line: on a terminal it replaces the one before
	if $tty; then
		printf '\r\033[K%s' "$1" >&2
	else
		printf '%s\n' "$1" >&2
	fi
}
done_line() {
	$tty && printf '\r\033[K' >&2
	printf '%s\n' "$1" >&2
}

# The count is only for the progress lines: when go list fails, the build
# runs without a total and its own errors tell why.
if stale=$(go list -deps -f '{{if and .Stale (ne .Name "main")}}x{{end}}' "${list[@]}"); then
	total=$(grep -c x <<<"$stale")
	if [ "$total" -eq 0 ]; then
		say "$label: every package is in the build cache; linking"
	else
		say "$label: compiling $(packages "$total")"
	fi
else
	total=-1
	say "$label: compiling"
fi

start=$SECONDS
# progress reads `go build -v` and counts the lines that name a package.
progress() {
	local n=0 last=$SECONDS line rc elapsed left status
	while :; do
		IFS= read -r -t "$interval" line
		rc=$?
		if [ $rc -eq 0 ]; then
			if [[ $line =~ ^[A-Za-z0-9_.~+/-]+$ ]]; then
				n=$((n + 1))
			else
				$tty && printf '\r\033[K' >&2
				printf '%s\n' "$line" >&2
			fi
		elif [ $rc -le 128 ]; then
			break # end of output
		fi
		[ $((SECONDS - last)) -ge "$interval" ] || continue
		last=$SECONDS
		elapsed=$((SECONDS - start))
		if [ "$total" -gt 0 ] && [ "$n" -ge "$total" ]; then
			status="$total/$total packages, linking"
		elif [ "$total" -gt 0 ]; then
			status="$n/$total packages"
			# An estimate once there is something to go by.
			if [ "$n" -ge 5 ] && [ "$elapsed" -ge 5 ]; then
				left=$(((total - n) * elapsed / n))
				status+=", ETA $(human "$left")"
			fi
		elif [ "$total" -eq 0 ]; then
			status="linking"
		else
			status="$(packages "$n")"
		fi
		say "$label: $status ($(human "$elapsed") so far)"
	done
}

go build -v "${build[@]}" 2>&1 | progress
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
	done_line "$label: go build failed after $(human $((SECONDS - start)))"
	exit "$rc"
fi
done_line "$label: built in $(human $((SECONDS - start)))"
