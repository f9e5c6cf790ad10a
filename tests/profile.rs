//! The profiler: a compact CNN trained a few steps under it is named layer
//! by layer, every call has its forward and backward spans, backward spans
//! run in reverse order, the rows and "other" add up to the wall time, the
//! Chrome trace is well formed, and nothing is recorded without a running
//! profiler (or on another thread, or from a tape of an earlier run).
//! Nested models' layers are named under their field. No assertion is on
//! speed.
//!
//! Calls the model runs as one kernel (a conv with the relu and pooling
//! that read it, on the CPU) share one span and one row, named by all of
//! them joined with `+` (`conv_0+relu_0+avg_pool_0`); the tests read the
//! calls out of such names, so they hold with and without such fusion.

use std::time::{Duration, Instant};

use flaxen::prelude::*;
use flaxen::runtime::optim::Adam;
use flaxen::runtime::profile::{self, Category, Event, ProfileReport, Profiler};

#[path = "common/flax_cnn.rs"]
mod flax_cnn;

flax_cnn::seed_cnn!(
    /// The seed CNN on 8×8 inputs, at the Flax fixture's widths.
    Cnn: 8, conv(8, 16), dense(32), out(10)
);

/// The CNN's calls in execution order.
const CNN_CALLS: [&str; 10] = [
    "conv_0",
    "relu_0",
    "avg_pool_0",
    "conv_1",
    "relu_1",
    "avg_pool_1",
    "flatten_0",
    "dense_0",
    "relu_2",
    "dense_1",
];

const B: usize = 4;
const STEPS: usize = 3;

type Dev = Cpu;
type CnnState = TrainState<<Cnn as BuildOnDevice<Dev, f32>>::Built, Adam<f64>, f32, Dev>;

fn cnn_state() -> CnnState {
    let dev = Dev::seed_from_u64(0);
    TrainState::create(dev.build_module::<Cnn, f32>(), adam(1e-3)).unwrap()
}

/// One training step of the CNN, marked as a step; the input skips its
/// gradient as in the `train` example.
fn cnn_step(state: &mut CnnState) {
    let _step = profile::step_scope();
    let dev = state.params.conv_0.weight.device().clone();
    let x: Tensor<Rank4<B, 1, 8, 8>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank1<B>, usize, _> = dev.tensor([1, 2, 3, 4]);
    let (_, grads) = state
        .value_and_grad(|m, tape| {
            let logits = m.forward(NoInputGrad(x.put_tape(tape)));
            softmax_cross_entropy_with_integer_labels(logits, y).mean()
        })
        .unwrap();
    state.apply_gradients(grads).unwrap();
}

fn names(report: &ProfileReport) -> Vec<&str> {
    report.rows().iter().map(|r| r.name.as_str()).collect()
}

/// The calls a span or row name stands for: `block_0.conv_0+relu_0` is
/// `block_0.conv_0` and `block_0.relu_0`.
fn calls_of(name: &str) -> Vec<String> {
    let prefix = match name.split('+').next().and_then(|first| first.rfind('.')) {
        Some(dot) => &name[..=dot],
        None => "",
    };
    name.split('+')
        .enumerate()
        .map(|(k, part)| {
            if k == 0 {
                part.to_string()
            } else {
                format!("{prefix}{part}")
            }
        })
        .collect()
}

/// The calls of several names, in order.
fn calls<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    names.into_iter().flat_map(calls_of).collect()
}

fn of(report: &ProfileReport, category: Category) -> Vec<&Event> {
    report
        .events()
        .iter()
        .filter(|e| e.category == category)
        .collect()
}

/// The spans of one category, no two of which overlap.
fn assert_disjoint(events: &[&Event]) {
    for pair in events.windows(2) {
        assert!(
            pair[0].end() <= pair[1].start,
            "{} ({:?}..{:?}) overlaps {} ({:?})",
            pair[0].name,
            pair[0].start,
            pair[0].end(),
            pair[1].name,
            pair[1].start
        );
    }
}

#[test]
fn a_cnn_training_step_is_profiled_layer_by_layer() {
    let mut state = cnn_state();
    cnn_step(&mut state); // warmup, not profiled
    let outer = Instant::now();
    let report = profile::profile(|| {
        for _ in 0..STEPS {
            cnn_step(&mut state);
        }
    });
    let outer = outer.elapsed();
    eprintln!("{}", report.table());

    // Every layer by its checkpoint name and every op, in call order, each
    // with one forward and one backward span per step.
    assert_eq!(calls(names(&report)), CNN_CALLS);
    let order = names(&report);
    for row in report.rows() {
        assert_eq!(
            (row.forward_calls, row.backward_calls),
            (STEPS, STEPS),
            "{}",
            row.name
        );
        assert!(row.forward > Duration::ZERO && row.backward > Duration::ZERO);
    }
    assert_eq!(report.steps(), STEPS);
    let table = report.table();
    for name in order.iter().chain(&["other", "total"]) {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} missing from\n{table}"
        );
    }

    // The rows and "other" add up to the wall time: the leaf spans do not
    // overlap, so nothing is counted twice (tolerance: 1% of the total,
    // which only rounding to nanoseconds uses).
    let fwd = of(&report, Category::Forward);
    let bwd = of(&report, Category::Backward);
    let mut leaves: Vec<&Event> = fwd.iter().chain(&bwd).copied().collect();
    leaves.sort_by_key(|e| e.start);
    assert_disjoint(&leaves);
    let rows: Duration = report.rows().iter().map(|r| r.total()).sum();
    let sum = rows + report.other();
    let diff = sum.abs_diff(report.total());
    assert!(
        diff <= report.total() / 100,
        "rows {rows:?} + other {:?} = {sum:?}, total {:?}",
        report.other(),
        report.total()
    );
    assert!(
        report.other() > Duration::ZERO,
        "the optimizer is outside every layer"
    );
    assert!(report.total() <= outer);
    let steps = of(&report, Category::Step);
    let in_steps: Duration = steps.iter().map(|e| e.duration).sum();
    assert!(in_steps <= report.total());

    // Per step: every forward span before every backward span, the
    // backward spans in the reverse of the call order (the last layer's
    // backward starts first), all inside the step's span.
    let n = order.len();
    assert_eq!((fwd.len(), bwd.len()), (n * STEPS, n * STEPS));
    for (k, step) in steps.iter().enumerate() {
        let inside = |e: &&&Event| e.start >= step.start && e.end() <= step.end();
        let f: Vec<&str> = fwd.iter().filter(inside).map(|e| e.name.as_str()).collect();
        let b: Vec<&str> = bwd.iter().filter(inside).map(|e| e.name.as_str()).collect();
        assert_eq!(f, order, "step {k}");
        let mut reversed = order.clone();
        reversed.reverse();
        assert_eq!(b, reversed, "step {k}");
        let last_forward = fwd.iter().filter(inside).map(|e| e.end()).max().unwrap();
        let first_backward = bwd.iter().filter(inside).map(|e| e.start).min().unwrap();
        assert!(last_forward <= first_backward, "step {k}");
    }

    // The Chrome trace: JSON with a complete event per span.
    let path =
        std::env::temp_dir().join(format!("flaxen-profile-{}.trace.json", std::process::id()));
    report.write_chrome_trace(&path).unwrap();
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), (2 * n + 1) * STEPS);
    let mut cats = std::collections::HashMap::<&str, usize>::new();
    for e in events {
        assert!(e["name"].is_string(), "{e}");
        assert_eq!(e["ph"], "X", "{e}");
        assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
        assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        *cats.entry(e["cat"].as_str().unwrap()).or_default() += 1;
    }
    assert_eq!(cats["forward"], n * STEPS);
    assert_eq!(cats["backward"], n * STEPS);
    assert_eq!(cats["step"], STEPS);
    // Microseconds: the first conv's forward lies inside the first step.
    let span = |e: &serde_json::Value| {
        let ts = e["ts"].as_f64().unwrap();
        (ts, ts + e["dur"].as_f64().unwrap())
    };
    let conv = span(events.iter().find(|e| e["name"] == order[0]).unwrap());
    let step = span(events.iter().find(|e| e["cat"] == "step").unwrap());
    assert!(
        step.0 <= conv.0 && conv.1 <= step.1,
        "{conv:?} outside {step:?}"
    );
    let first = steps[0];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    assert!((step.0 - us(first.start)).abs() < 1.0 && (step.1 - us(first.end())).abs() < 1.0);
}

#[test]
fn nothing_is_recorded_without_a_running_profiler() {
    let mut state = cnn_state();
    assert!(!profile::is_recording());
    cnn_step(&mut state);
    let report = profile::profile(|| {});
    assert!(report.rows().is_empty() && report.events().is_empty());
    assert_eq!(report.steps(), 0);

    // A forward pass recorded by one profiler whose backward runs after it
    // finished: the forward spans only; the backward markers left on the
    // tape record nothing in a later profiler.
    let dev = Dev::default();
    let m = dev.build_module::<Cnn, f32>();
    let x: Tensor<Rank4<B, 1, 8, 8>, f32, _> = dev.sample_normal();
    let p = Profiler::start();
    let y = m.forward(x.trace(m.alloc_grads()));
    let first = p.finish();
    assert_eq!(calls(names(&first)), CNN_CALLS);
    assert!(first
        .rows()
        .iter()
        .all(|r| (r.forward_calls, r.backward_calls) == (1, 0)));
    assert!(first.table().contains("1/0"));
    let later = profile::profile(|| {
        let _ = y.mean().backward();
    });
    assert!(later.rows().is_empty() && later.events().is_empty());
}

#[test]
fn a_profiler_records_its_own_thread_only() {
    let p = Profiler::start();
    let other = std::thread::spawn(|| {
        assert!(!profile::is_recording());
        let mut state = cnn_state();
        cnn_step(&mut state);
    });
    other.join().unwrap();
    let report = p.finish();
    assert!(report.rows().is_empty() && report.events().is_empty());
}

#[test]
fn paused_time_is_neither_recorded_nor_counted() {
    let mut state = cnn_state();
    let mut p = Profiler::start();
    cnn_step(&mut state);
    p.pause();
    let paused = Instant::now();
    cnn_step(&mut state);
    std::thread::sleep(Duration::from_millis(20));
    let paused = paused.elapsed();
    p.resume();
    let report = p.finish();
    assert_eq!(report.steps(), 1);
    assert!(report
        .rows()
        .iter()
        .all(|r| (r.forward_calls, r.backward_calls) == (1, 1)));
    assert!(report.total() + paused <= report.elapsed() + Duration::from_millis(1));
}

/// A residual block: conv, relu and the skip connection.
pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<4, 6, 6>) {
        x + relu(Conv(4, (3, 3))(x))
    }
}

/// Two blocks between a conv and a dense head.
pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 6, 6>) {
        let x = Conv(4, 3)(x);
        let x = Block()(x);
        let x = Block()(x);
        Dense(3)(flatten(x))
    }
}

#[test]
fn nested_models_name_their_layers_under_their_field() {
    let dev = Dev::seed_from_u64(1);
    let m = dev.build_module::<Net, f32>();
    let report = profile::profile(|| {
        for _ in 0..2 {
            let _step = profile::step_scope();
            let x: Tensor<Rank4<2, 1, 6, 6>, f32, _> = dev.sample_normal();
            let _ = m
                .forward(x.trace(m.alloc_grads()))
                .square()
                .mean()
                .backward();
        }
    });
    eprintln!("{}", report.table());
    let expected = [
        "conv_0",
        "block_0.conv_0",
        "block_0.relu_0",
        "block_0.add_0",
        "block_1.conv_0",
        "block_1.relu_0",
        "block_1.add_0",
        "flatten_0",
        "dense_0",
    ];
    assert_eq!(calls(names(&report)), expected);
    assert!(report
        .rows()
        .iter()
        .all(|r| (r.forward_calls, r.backward_calls) == (2, 2)));

    // Each block's call is a span of its own (in the trace, not a row) that
    // holds its layers' spans, forward and backward.
    for category in [Category::Forward, Category::Backward] {
        let events = of(&report, category);
        let blocks: Vec<&&Event> = events.iter().filter(|e| e.block).collect();
        assert_eq!(blocks.len(), 4, "{category:?}");
        for b in &blocks {
            let inner: Vec<&str> = events
                .iter()
                .filter(|e| !e.block && e.start >= b.start && e.end() <= b.end())
                .map(|e| e.name.as_str())
                .collect();
            let prefix = format!("{}.", b.name);
            let want: Vec<&str> = names(&report)
                .into_iter()
                .filter(|n| n.starts_with(&prefix))
                .collect();
            let mut inner = inner;
            if category == Category::Backward {
                inner.reverse();
            }
            assert_eq!(inner, want, "{} {category:?}", b.name);
        }
        let leaves: Vec<&Event> = events.iter().filter(|e| !e.block).copied().collect();
        assert_disjoint(&leaves);
    }
    let rows: Duration = report.rows().iter().map(|r| r.total()).sum();
    let diff = (rows + report.other()).abs_diff(report.total());
    assert!(diff <= report.total() / 100);
}

/// Tokens, a mask made inside the model (a call without a tape), masked
/// attention (several inputs, the first marked).
pub struct Lm;

#[compact]
impl Lm {
    fn forward(tokens: Tokens<6>) {
        let mask = make_attention_mask(tokens, tokens);
        let x = Embed(20, 8)(tokens);
        let x = x + SelfAttention(2)(LayerNorm()(x), mask = mask);
        Dense(20)(x * 0.5)
    }
}

#[test]
fn masks_and_several_inputs_are_profiled() {
    let dev = Dev::seed_from_u64(2);
    let m = dev.build_module::<Lm, f32>();
    let tokens: Tensor<Rank2<2, 6>, usize, _> =
        dev.tensor([[1, 2, 3, 0, 0, 0], [4, 5, 6, 7, 8, 9]]);
    let report = profile::profile(|| {
        let y = m.forward(tokens.trace(m.alloc_grads()));
        let _ = y.square().mean().backward();
    });
    eprintln!("{}", report.table());
    assert_eq!(
        names(&report),
        [
            "make_attention_mask_0",
            "embed_0",
            "layer_norm_0",
            "self_attention_0",
            "add_0",
            "mul_0",
            "dense_0"
        ]
    );
    for row in report.rows() {
        let backward = usize::from(row.name != "make_attention_mask_0");
        assert_eq!(
            (row.forward_calls, row.backward_calls),
            (1, backward),
            "{}",
            row.name
        );
    }
    let mut bwd = of(&report, Category::Backward);
    bwd.sort_by_key(|e| e.start);
    let order: Vec<&str> = bwd.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        order,
        [
            "dense_0",
            "mul_0",
            "add_0",
            "self_attention_0",
            "layer_norm_0",
            "embed_0"
        ]
    );
}
