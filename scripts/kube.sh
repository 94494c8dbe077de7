#!/usr/bin/env bash
# Provides the real Kubernetes control plane that the simulated cloud runs
# for a tenant: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl, and etcdutl, which restores an etcd snapshot,
# built once from the Go module proxy into the cache (as scripts/tools.sh
# caches tofu). Prints the directory that holds them on the last line.
#
# None of these modules installs with `go install`: k8s.io/kubernetes
# replaces its staging modules with ./staging paths its zip does not hold,
# and etcd's server and etcdutl modules have replace directives too. So
# each is built inside a small wrapper module of its own, under the cache:
# Kubernetes's with a replace of every staging module by its release on
# the proxy. One build runs at a time: a second caller waits for the first
# one's binaries. Only the binaries the cache lacks are built.
#
# $REZUSCLOUD_KUBE_BIN names a directory that holds the six binaries
# already; it is used as it is.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
k8s=v1.37.2
staging=v0.37.2
etcd=v3.7.3
cache="${REZUSCLOUD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rezuscloud}"
out="$cache/kube-$k8s-etcd-$etcd"
bins=(etcd etcdutl kube-apiserver kube-controller-manager kube-scheduler kubectl)
k8sbins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

# complete DIR [BINARY...]: DIR holds every binary named (default: all).
complete() {
	local dir=$1 b
	shift
	[ $# -gt 0 ] || set -- "${bins[@]}"
	for b in "$@"; do [ -x "$dir/$b" ] || return 1; done
}

if [ -n "${REZUSCLOUD_KUBE_BIN:-}" ]; then
	complete "$REZUSCLOUD_KUBE_BIN" || { echo "kube: $REZUSCLOUD_KUBE_BIN lacks one of ${bins[*]}" >&2; exit 1; }
	echo "$REZUSCLOUD_KUBE_BIN"; exit 0
fi
if complete "$out"; then
	echo "$out"; exit 0
fi

mkdir -p "$cache"
if command -v flock >/dev/null 2>&1; then
	exec 9>"$cache/.kube-$k8s.lock"
	if ! flock -n 9; then
		echo "kube: another process is building the Kubernetes control plane into $cache; waiting for it" >&2
		flock 9
	fi
	if complete "$out"; then
		echo "$out"; exit 0
	fi
fi
mkdir -p "$out"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local}

# build LABEL DIR OUT PKG [LDFLAGS]: one binary, built in the wrapper
# module DIR, unless the cache holds it.
build() {
	local label=$1 dir=$2 bin=$3 pkg=$4 ldflags=${5:-}
	[ -x "$out/$bin" ] && return 0
	echo "kube: compiling $bin" >&2
	(cd "$dir" && bash "$root/scripts/gobuild.sh" "kube: $label" -trimpath -ldflags "-s -w $ldflags" -o "$out/$bin.tmp" "$pkg")
	mv "$out/$bin.tmp" "$out/$bin"
}

if complete "$out" "${k8sbins[@]}"; then
	echo "kube: building what $out lacks of etcd $etcd's binaries" >&2
else
	echo "kube: building etcd $etcd and Kubernetes $k8s into $out (the first build takes 15 to 25 minutes on 2 cores; later ones use the cache)" >&2
fi
src="$cache/kube-src"
mkdir -p "$src/etcd" "$src/etcdutl" "$src/kubernetes"

# etcd: its server module's main package is the etcd binary.
if [ ! -x "$out/etcd" ]; then
	cat >"$src/etcd/go.mod" <<EOF
module rezuscloud.local/etcdbuild

go 1.26.0

require go.etcd.io/etcd/server/v3 $etcd
EOF
	cat >"$src/etcd/tools.go" <<'EOF'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
EOF
	(cd "$src/etcd" && go mod tidy >&2)
	build etcd "$src/etcd" etcd go.etcd.io/etcd/server/v3
fi

# etcdutl: its module's main package restores a snapshot into a data dir.
if [ ! -x "$out/etcdutl" ]; then
	cat >"$src/etcdutl/go.mod" <<EOF
module rezuscloud.local/etcdutlbuild

go 1.26.0

require go.etcd.io/etcd/etcdutl/v3 $etcd
EOF
	cat >"$src/etcdutl/tools.go" <<'EOF'
//go:build tools

package tools

import _ "go.etcd.io/etcd/etcdutl/v3"
EOF
	(cd "$src/etcdutl" && go mod tidy >&2)
	build etcdutl "$src/etcdutl" etcdutl go.etcd.io/etcd/etcdutl/v3
fi

# Kubernetes: the staging modules at their release on the proxy.
if ! complete "$out" "${k8sbins[@]}"; then
	modfile=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$k8s" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[ -f "$modfile" ] || { echo "kube: download of k8s.io/kubernetes $k8s failed" >&2; exit 1; }
	{
		echo "module rezuscloud.local/kubebuild"
		echo
		echo "go 1.26.0"
		echo
		echo "godebug default=go1.26"
		echo
		echo "require k8s.io/kubernetes $k8s"
		echo
		sed -n 's/^[[:space:]]*\(k8s\.io\/[^ ]*\) => \.\/staging.*/\1/p' "$modfile" |
			grep -v -e '^k8s.io/sample-controller$' -e '^k8s.io/sample-cli-plugin$' |
			while read -r m; do echo "replace $m => $m $staging"; done
	} >"$src/kubernetes/go.mod"
	cat >"$src/kubernetes/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
	(cd "$src/kubernetes" && go mod tidy >&2)
	v=k8s.io/component-base/version
	minor=$(echo "$k8s" | cut -d. -f2)
	ld="-X $v.gitVersion=$k8s -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
	ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$k8s -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
	for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
		build "$b" "$src/kubernetes" "$b" "k8s.io/kubernetes/cmd/$b" "$ld"
	done
fi
complete "$out" || { echo "kube: the build left $out without one of ${bins[*]}" >&2; exit 1; }
echo "kube: the Kubernetes control plane is ready in $out" >&2
echo "$out"
