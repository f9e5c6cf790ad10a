#!/usr/bin/env bash
# flaxen against JAX/Flax on the W1 and W2 training workloads (batch 32,
# Adam, integer labels), each framework in its modes, alternating the
# frameworks round by round so that all see the same machine load, then
# printing the medians and the ratio of each framework's best mode.
#
#   flaxen: "step"  - one TrainState step per call (bench_scan's naive loop),
#           "scan"  - scan!(5) over 5 stacked batches (bench_scan),
#           "layers"- the same networks built from flaxen's layers by hand,
#                     trained with dfdx's Adam (bench_layers).
#   JAX:    "step"  - one jitted step per call,
#           "scan"  - lax.scan over 5 stacked batches with unroll=True
#                     (XLA:CPU's fastest mode for these models).
#
# The machine's limit is measured in the same rounds: XLA's jitted 2048x2048
# f32 matmul, and flaxen's own GEMM (a Dense forward, 2048 x 2048 x 2048).
#
#   pip install -r tests/python/requirements.txt   # jax, flax, optax
#   JAX_PYTHON=/path/to/venv/bin/python bench/compare.sh [ROUNDS]
#
# JAX_PYTHON= (empty) skips JAX. BASE_DIR=/path/to/older/examples adds an
# older build's bench_layers and bench_scan to every round (before/after).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
jax=${JAX_PYTHON-python3}
base=${BASE_DIR:-}
cargo build --release --example bench_layers --example bench_scan >&2
bin=target/release/examples
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# One round runs every framework's group once. The groups' order rotates
# from round to round, so that no group always runs right after the same
# one: with a fixed order, flaxen's group, which always ran right after
# JAX's many-threaded process, once measured its step mode 18% below
# base's step mode, which runs the same code.
groups=(flaxen)
[ -n "$base" ] && groups+=(base)
[ -n "$jax" ] && groups+=(jax)
run_group() {
    case $1 in
    flaxen | base)
        local dir=$bin
        [ "$1" = base ] && dir=$base
        "$dir/bench_scan" | sed "s/^/$1 /" >>"$log"
        "$dir/bench_layers" --only W1 | sed "s/^/$1 /" >>"$log"
        "$dir/bench_layers" --only W2 | sed "s/^/$1 /" >>"$log"
        if [ "$1" = flaxen ]; then
            "$dir/bench_layers" --only GEMM | sed "s/^/$1 /" >>"$log"
        fi
        ;;
    jax) "$jax" bench/jax_reference.py | sed 's/^/jax /' >>"$log" ;;
    esac
}
for r in $(seq "$rounds"); do
    n=${#groups[@]}
    for i in $(seq 0 $((n - 1))); do
        run_group "${groups[$(((i + r) % n))]}"
    done
    echo "round $r/$rounds done" >&2
done
python3 - "$log" "$rounds" <<'PY'
import json, statistics, sys
FLOPS = {"W1": 1.279488e6, "W2": 27.411456e6}  # training FLOPs per sample
runs = {}
def add(key, v):
    runs.setdefault(key, []).append(v)
for line in open(sys.argv[1]):
    who, _, js = line.partition(" ")
    d = json.loads(js)
    w = d["workload"]
    if d.get("bench") == "scan":
        add((w, who, "step"), d["naive_samples_per_s"])
        add((w, who, "scan"), d["scan_samples_per_s"])
    elif w in ("MATMUL2048", "GEMM2048"):
        add((w, who, "gflop"), d["gflop_per_s"])
    elif who == "jax":
        add((w, who, d["mode"]), d["samples_per_s"])
    else:
        add((w, who, "layers"), d["samples_per_s"])
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"medians of {sys.argv[2]} alternated rounds, samples/s (batch 32)\n")
print("| workload | framework | step | scan (K=5) | layers | best | best GFLOP/s |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
best = {}
for w in ("W1", "W2"):
    for who in ("flaxen", "base", "jax"):
        modes = {m: med.get((w, who, m)) for m in ("step", "scan", "layers")}
        vals = [v for v in modes.values() if v]
        if not vals:
            continue
        best[(w, who)] = max(vals)
        cell = lambda v: f"{v:,.0f}" if v else "-"
        print(f"| {w} | {who} | {cell(modes['step'])} | {cell(modes['scan'])} | "
              f"{cell(modes['layers'])} | {cell(best[(w, who)])} | "
              f"{best[(w, who)] * FLOPS[w] / 1e9:.1f} |")
print()
for w in ("W1", "W2"):
    if (w, "jax") in best:
        print(f"{w}: flaxen best / JAX best = {best[(w, 'flaxen')] / best[(w, 'jax')]:.2f}")
    if (w, "base") in best:
        print(f"{w}: flaxen best / base best = {best[(w, 'flaxen')] / best[(w, 'base')]:.2f}")
    s, n = med.get((w, "flaxen", "scan")), med.get((w, "flaxen", "step"))
    if s and n:
        print(f"{w}: flaxen scan!(5) / naive loop = {s / n:.2f}")
xla, own = med.get(("MATMUL2048", "jax", "gflop")), med.get(("GEMM2048", "flaxen", "gflop"))
if xla:
    print(f"\nmatmul ceiling: XLA 2048^2 {xla:.1f} GFLOP/s", end="")
    print(f", flaxen's GEMM 2048^2 {own:.1f} GFLOP/s" if own else "")
    w2 = best.get(("W2", "flaxen"))
    if w2:
        print(f"W2 flaxen best: {w2 * FLOPS['W2'] / 1e9:.1f} GFLOP/s = "
              f"{100 * w2 * FLOPS['W2'] / 1e9 / xla:.0f}% of XLA's matmul rate")
PY
