#!/usr/bin/env bash
# Side-by-side throughput of flaxen (examples/bench_layers) and JAX/Flax
# (bench/jax_reference.py) on W1 and W2, alternating the frameworks round by
# round so that both see the same machine load, then printing the median
# samples/s of each. A loaded machine moves single runs by 30% or more; the
# medians of alternated rounds are what to compare.
#
#   cargo build --release --example bench_layers
#   JAX_PYTHON=/tmp/jaxenv/bin/python bench/compare.sh [ROUNDS]
#
# BASE_BIN=/path/to/older/bench_layers adds that binary to every round
# (before/after comparisons); JAX_PYTHON= (empty) skips JAX.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
bin=${FLAXEN_BIN:-target/release/examples/bench_layers}
jax=${JAX_PYTHON-python3}
base=${BASE_BIN:-}
log=$(mktemp)
for r in $(seq "$rounds"); do
    "$bin" | sed 's/^/flaxen /' >>"$log"
    if [ -n "$base" ]; then "$base" | sed 's/^/base /' >>"$log"; fi
    if [ -n "$jax" ]; then "$jax" bench/jax_reference.py | sed 's/^/jax /' >>"$log"; fi
    echo "round $r/$rounds done" >&2
done
python3 - "$log" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, _, js = line.partition(" ")
    d = json.loads(js)
    runs.setdefault((d["workload"], who), []).append(d["samples_per_s"])
for (w, who), v in sorted(runs.items()):
    print(f"{w} {who:6} median {statistics.median(v):7.0f} samples/s  runs {sorted(v)}")
PY
rm -f "$log"
