#!/usr/bin/env bash
# Measures `rezusctl diff` on the example repository against a local server:
# without --plan, and with --plan for one changed tenant against a bare
# `tofu plan` of that tenant's changed workspace. Prints medians of N runs.
#
#   bench/diff/run.sh [N]        (after `make build`; default N=9)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
n=${1:-9}
tofu=$(bash "$root/scripts/tools.sh" | tail -n1)
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
url=http://127.0.0.1:$port
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

cp -r "$root/examples" "$work/m"
"$root/bin/rezuscloud" serve --data "$work/data" --dir "$work/m" --listen "127.0.0.1:$port" \
	--tofu "$tofu" --provider-mirror "$root/bin/providers" >"$work/log" 2>&1 &
echo $! >"$work/pid"
for _ in $(seq 120); do
	curl -sf "$url/api/v1/status" 2>/dev/null | grep -q '"lastAppliedCommit":"sha256' && break
	sleep 1
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
timeit() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s.%N); awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f\n", e - s }'; }

cp -r "$work/m" "$work/local"
sed -i 's/count: 1/count: 2/' "$work/local/staging/nodegroups.yaml"

nodiff=$(for _ in $(seq "$n"); do timeit "$root/bin/rezusctl" diff -s "$url" "$work/m"; done | median)
diffchg=$(for _ in $(seq "$n"); do timeit "$root/bin/rezusctl" diff -s "$url" "$work/local"; done | median)
plan=$(for _ in $(seq "$n"); do timeit "$root/bin/rezusctl" diff -s "$url" --plan "$work/local"; done | median)

# The same change, planned by hand in a copy of staging's workspace.
cp -r "$work/data/work/staging" "$work/bare"
python3 - "$work/bare/main.tf.json" <<'PY'
import json, sys
p = sys.argv[1]; d = json.load(open(p))
for ng in d["resource"]["rezussim_machine"].values():
    ng["count"] = 2
json.dump(d, open(p, "w"))
PY
bare=$(cd "$work/bare" && export TF_CLI_CONFIG_FILE="$work/data/tofu.rc" TF_HTTP_ADDRESS="$url/tfstate/staging" \
	REZUSSIM_DIR="$work/data/sim" CHECKPOINT_DISABLE=1 &&
	for _ in $(seq "$n"); do timeit "$tofu" plan -lock=false -input=false; done | median)

echo "rezusctl diff, no change:          ${nodiff}s"
echo "rezusctl diff, staging scaled:     ${diffchg}s   (target < 0.3 s)"
echo "rezusctl diff --plan, staging:     ${plan}s"
echo "bare tofu plan, staging changed:   ${bare}s"
echo "ratio --plan / bare plan:          $(awk -v p="$plan" -v b="$bare" 'BEGIN { printf "%.2f", p / b }')   (target <= 1.3)"
