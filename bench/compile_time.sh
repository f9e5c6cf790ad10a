#!/usr/bin/env bash
# How long a one-line model edit takes to rebuild: a one-file crate that
# depends on flaxen by path and holds the seed CNN written with #[compact]
# and one training step (TrainState, adam, value_and_grad), as a user's
# small crate would. Its dependencies are built first (not timed); then
# each round edits one Dense width (256 <-> 255) and times `cargo build`,
# release and debug, and prints the medians.
#
#   bench/compile_time.sh [ROUNDS]        # default 5
#
# BASE=/path/to/another/flaxen/checkout adds a second probe on that
# checkout, built in the same rounds right after this one's (before/after
# in one run). PROBE_DIR=/path puts the probes (and their target
# directories) there instead of target/compile-time-probe. RUSTFLAGS and
# CARGO_PROFILE_* pass through, so settings can be compared run against run.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
root=$(pwd)
top=${PROBE_DIR:-$root/target/compile-time-probe}
probes=("this:$root")
if [ -n "${BASE:-}" ]; then
    probes+=("base:$BASE")
fi

# setup NAME FLAXEN_PATH
setup() {
    mkdir -p "$top/$1/src"
    printf '%s\n' \
        '[package]' \
        'name = "compile-time-probe"' \
        'version = "0.0.0"' \
        'edition = "2021"' \
        'publish = false' \
        '' \
        '[dependencies]' \
        "flaxen = { path = \"$2\" }" \
        '' \
        '[workspace]' >"$top/$1/Cargo.toml"
}

# write_main NAME WIDTH
write_main() {
    sed "s/@WIDTH@/$2/" >"$top/$1/src/main.rs" <<'RS'
use flaxen::prelude::*;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 28, 28>) {
        let x = Conv(features = 32, kernel_size = (3, 3))(x);
        let x = relu(x);
        let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
        let x = Conv(features = 64, kernel_size = (3, 3))(x);
        let x = relu(x);
        let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
        let x = flatten(x);
        let x = Dense(features = @WIDTH@)(x);
        let x = relu(x);
        Dense(features = 10)(x)
    }
}

type Net = <Cnn as BuildOnDevice<Cpu, f32>>::Built;

fn main() {
    let dev = Cpu::seed_from_u64(0);
    let mut state: TrainState<Net, _, f32, Cpu> =
        TrainState::create(dev.build_module::<Cnn, f32>(), adam(1e-3)).unwrap();
    let x: Tensor<Rank4<8, 1, 28, 28>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank1<8>, usize, _> = dev.tensor([0, 1, 2, 3, 4, 5, 6, 7]);
    let (loss, grads) = state
        .value_and_grad(|m, tape| {
            softmax_cross_entropy_with_integer_labels(m.forward(x.put_tape(tape)), y).mean()
        })
        .unwrap();
    state.apply_gradients(grads).unwrap();
    println!("{}", loss.array());
}
RS
}

echo "building the probes' dependencies (not timed)..." >&2
for p in "${probes[@]}"; do
    name=${p%%:*}
    setup "$name" "${p#*:}"
    write_main "$name" 256
    (cd "$top/$name" && cargo build -q --release && cargo build -q) >&2
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
width=256
for r in $(seq "$rounds"); do
    width=$((width == 256 ? 255 : 256))
    for kind in release debug; do
        for p in "${probes[@]}"; do
            name=${p%%:*}
            write_main "$name" $width
            flag=$([ $kind = release ] && echo --release || true)
            start=$(date +%s.%N)
            (cd "$top/$name" && cargo build -q $flag)
            end=$(date +%s.%N)
            echo "$name $kind $(echo "$end - $start" | bc)" >>"$log"
        done
    done
    echo "round $r/$rounds done" >&2
done
python3 - "$log" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, kind, secs = line.split()
    runs.setdefault((name, kind), []).append(float(secs))
for (name, kind), v in runs.items():
    print(f"{name} {kind}: median {statistics.median(v):.2f} s, min {min(v):.2f}, "
          f"max {max(v):.2f} ({len(v)} one-line edits)")
PY
