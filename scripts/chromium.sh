#!/usr/bin/env bash
# Provides a headless-capable Chromium for the browser tests and prints its
# path on the last line of standard output.
#
# Order: $REZUSCLOUD_CHROMIUM if set, a chromium already installed, or
# Debian's chromium package installed with apt-get (as root; apt-get update
# runs first). When none of that works, it prints why on standard error,
# prints nothing on standard output and exits 3: the browser tests then skip
# and say why. Any other failure exits 1.
set -uo pipefail

found() {
	local c
	for c in chromium chromium-browser google-chrome-stable google-chrome; do
		if p=$(command -v "$c" 2>/dev/null) && [ -x "$p" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

if [ -n "${REZUSCLOUD_CHROMIUM:-}" ]; then
	if p=$(command -v "$REZUSCLOUD_CHROMIUM" 2>/dev/null) && [ -x "$p" ]; then
		echo "$p"
		exit 0
	fi
	echo "chromium: REZUSCLOUD_CHROMIUM=$REZUSCLOUD_CHROMIUM is not an executable" >&2
	exit 3
fi
if found; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "chromium: not installed, and this machine has no apt-get to install Debian's chromium package" >&2
	exit 3
fi
if [ "$(id -u)" != 0 ]; then
	echo "chromium: not installed, and installing it needs root: run 'sudo apt-get update && sudo apt-get install -y chromium'" >&2
	exit 3
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "chromium: installing Debian's chromium package (apt-get update, apt-get install -y chromium)" >&2
# Other installs may hold dpkg's lock for a while: wait for it.
if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update >"$log" 2>&1; then
	echo "chromium: apt-get update failed:" >&2
	tail -n 5 "$log" >&2
	exit 3
fi
if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y chromium >"$log" 2>&1; then
	echo "chromium: apt-get install -y chromium failed:" >&2
	tail -n 5 "$log" >&2
	exit 3
fi
if found; then
	exit 0
fi
echo "chromium: apt-get installed the chromium package, but no chromium binary is on PATH" >&2
exit 3
