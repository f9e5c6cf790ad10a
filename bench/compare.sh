#!/usr/bin/env bash
# flaxen against JAX/Flax on the training workloads of bench_layers (batch
# 32, Adam lr 1e-3, softmax cross-entropy): W1, W2 and W3 (CNNs, W3 with
# depthwise, dilated and transposed convs), TEXT (a 2-block Transformer
# text classifier) and LSTM (a row-LSTM), each framework in its modes,
# alternating the frameworks round by round so that all see the same
# machine load, then printing the medians and the ratio of each
# framework's best mode.
#
#   flaxen: "step"  - one TrainState step per call (bench_scan's naive loop),
#           "scan"  - scan!(5) over 5 stacked batches (bench_scan),
#           "layers"- the same networks built from flaxen's layers by hand,
#                     trained with dfdx's Adam (bench_layers).
#           bench_scan covers W1 and W2 only: W3, TEXT and LSTM have only
#           the "layers" figure.
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
# FLAXEN_BIN=/path/to/examples skips `cargo build` and runs the
# bench_layers and bench_scan already built there. WORKLOADS="W1 TEXT"
# runs only those workloads, in every group (default: W1 W2 TEXT LSTM W3);
# the two matmul ceilings always run.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
jax=${JAX_PYTHON-python3}
base=${BASE_DIR:-}
read -ra workloads <<<"${WORKLOADS:-W1 W2 TEXT LSTM W3}"
for w in "${workloads[@]}"; do
    case $w in
    W1 | W2 | W3 | TEXT | LSTM) ;;
    *) echo "WORKLOADS: unknown workload $w (W1 W2 W3 TEXT LSTM)" >&2 && exit 2 ;;
    esac
done
has() { [[ " ${workloads[*]} " == *" $1 "* ]]; }
if [ -n "${FLAXEN_BIN:-}" ]; then
    bin=$FLAXEN_BIN
else
    cargo build --release --example bench_layers --example bench_scan >&2
    bin=target/release/examples
fi
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
        # bench_scan has no --only and always runs both W1 and W2; the
        # summary drops the one not asked for.
        if has W1 || has W2; then
            "$dir/bench_scan" | sed "s/^/$1 /" >>"$log"
        fi
        for w in "${workloads[@]}"; do
            "$dir/bench_layers" --only "$w" | sed "s/^/$1 /" >>"$log"
        done
        if [ "$1" = flaxen ]; then
            "$dir/bench_layers" --only GEMM | sed "s/^/$1 /" >>"$log"
        fi
        ;;
    jax)
        local only
        only=$(IFS=, && echo "${workloads[*]},MATMUL")
        "$jax" bench/jax_reference.py --only "$only" | sed 's/^/jax /' >>"$log"
        ;;
    esac
}
for r in $(seq "$rounds"); do
    n=${#groups[@]}
    for i in $(seq 0 $((n - 1))); do
        run_group "${groups[$(((i + r) % n))]}"
    done
    echo "round $r/$rounds done" >&2
done
python3 - "$log" "$rounds" "${workloads[*]}" <<'PY'
import json, statistics, sys
# Training FLOPs per sample, as bench_layers.rs counts them for W1-W3 and as
# bench/jax_reference.py's FLOPS table explains them for TEXT and LSTM.
FLOPS = {"W1": 1.279488e6, "W2": 27.411456e6, "W3": 33.802944e6,
         "TEXT": 113.247744e6, "LSTM": 3.960576e6}
BATCH = 32
workloads = sys.argv[3].split()
runs = {}
def add(key, v):
    runs.setdefault(key, []).append(v)
for line in open(sys.argv[1]):
    who, _, js = line.partition(" ")
    d = json.loads(js)
    w = d["workload"]
    if w in ("MATMUL2048", "GEMM2048"):
        add((w, who, "gflop"), d["gflop_per_s"])
    elif w not in workloads:
        continue  # bench_scan's other workload
    elif d.get("bench") == "scan":
        add((w, who, "step"), d["naive_samples_per_s"])
        add((w, who, "scan"), d["scan_samples_per_s"])
    elif who == "jax":
        add((w, who, d["mode"]), d["samples_per_s"])
    else:
        # Older builds' TEXT line has step_ms but no samples_per_s.
        sps = d.get("samples_per_s") or BATCH / (d["step_ms"] / 1e3)
        add((w, who, "layers"), sps)
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"medians of {sys.argv[2]} alternated rounds, samples/s (batch 32)\n")
print("| workload | framework | step | scan (K=5) | layers | best | best GFLOP/s |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
best = {}
cell = lambda v: f"{v:,.0f}" if v else "-"
for w in workloads:
    for who in ("flaxen", "base", "jax"):
        modes = {m: med.get((w, who, m)) for m in ("step", "scan", "layers")}
        vals = [v for v in modes.values() if v]
        if not vals:
            continue
        best[(w, who)] = max(vals)
        gflops = f"{best[(w, who)] * FLOPS[w] / 1e9:.1f}" if w in FLOPS else "-"
        print(f"| {w} | {who} | {cell(modes['step'])} | {cell(modes['scan'])} | "
              f"{cell(modes['layers'])} | {cell(best[(w, who)])} | {gflops} |")
print()
for w in workloads:
    if (w, "flaxen") in best and (w, "jax") in best:
        print(f"{w}: flaxen best / JAX best = {best[(w, 'flaxen')] / best[(w, 'jax')]:.2f}")
    if (w, "flaxen") in best and (w, "base") in best:
        print(f"{w}: flaxen best / base best = {best[(w, 'flaxen')] / best[(w, 'base')]:.2f}")
    s, n = med.get((w, "flaxen", "scan")), med.get((w, "flaxen", "step"))
    if s and n:
        print(f"{w}: flaxen scan!(5) / naive loop = {s / n:.2f}")
xla, own = med.get(("MATMUL2048", "jax", "gflop")), med.get(("GEMM2048", "flaxen", "gflop"))
if xla:
    print(f"\nmatmul ceiling: XLA 2048^2 {xla:.1f} GFLOP/s", end="")
    print(f", flaxen's GEMM 2048^2 {own:.1f} GFLOP/s" if own else "")
    for w in workloads:
        b = best.get((w, "flaxen"))
        if b and w in FLOPS:
            print(f"{w} flaxen best: {b * FLOPS[w] / 1e9:.1f} GFLOP/s = "
                  f"{100 * b * FLOPS[w] / 1e9 / xla:.0f}% of XLA's matmul rate")
PY
