//! Shared by the tests of Optax traces on trees keyed by checkpoint names
//! (`optim_lamb.rs`, `optim_masked.rs`: the five-leaf [`Net`],
//! `conv_0.weight` 3x2x3x3, `conv_0.bias` 3, `dense_0.weight` 5x7,
//! `dense_0.bias` 5, `layer_norm_0.scale` 7; `optim_adafactor.rs`: the same
//! and `dense_1.weight` 7x3, through [`tree_net!`]): the fixture's cases,
//! a tree as a dfdx module that takes the fixture's gradients exactly, and
//! the checks every such test runs (each trace through both apply paths, a
//! state that resumes bit for bit, a `TrainState` that round-trips), and
//! Optax's cosine schedule in both precisions. Include after
//! `#[path = "common/fixture.rs"] mod fixture;`.
#![allow(dead_code)]

use std::collections::BTreeMap;

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::{cosine_decay, Schedule};
use flaxen::runtime::state::{StateDict, StateMap};
use flaxen::runtime::train_state::TrainState;
use serde::Deserialize;

pub use crate::fixture::Arr;

pub type Tree = BTreeMap<String, Arr>;

#[derive(Deserialize)]
pub struct Case {
    pub name: String,
    pub dtype: String,
    pub init: Tree,
    pub grads: Vec<Tree>,
    pub params_after_each_step: Vec<Tree>,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub cases: Vec<Case>,
}

/// The fixture in `json` (its text, from `include_str!`).
pub fn load(json: &str) -> Fixture {
    serde_json::from_str(json).unwrap()
}

impl Fixture {
    /// The case called `name`.
    pub fn case(&self, name: &str) -> &Case {
        self.cases
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no case {name}"))
    }
}

/// A tree of the fixtures as a dfdx module on the Cpu.
pub trait TreeNet<E: Dtype>: TensorCollection<E, Cpu> + Clone
where
    Cpu: Device<E>,
{
    /// The leaves' checkpoint names, in [`TreeNet::values`] order.
    const KEYS: &'static [&'static str];
    /// The module holding the fixture's tree `t`.
    fn from_tree(dev: &Cpu, t: &Tree) -> Self;
    /// Every leaf's values, in [`TreeNet::KEYS`] order.
    fn values(&self) -> Vec<Vec<E>>;
    /// Gradients equal to the tree `g` exactly: d/dp sum(p * gp) = gp.
    fn grads_of(&self, g: &Tree) -> Gradients<E, Cpu>;
}

/// Defines `pub struct $name<E, D>` with one tensor field a leaf (checkpoint
/// name `$key`, shape `$shape`), its `TensorCollection`, and its
/// [`TreeNet`] on the Cpu.
macro_rules! tree_net {
    ($(#[$attr:meta])* $name:ident { $($field:ident: $key:literal, $shape:ty;)+ }) => {
        $(#[$attr])*
        #[derive(Debug, Clone)]
        pub struct $name<E: Dtype, D: Storage<E>> {
            $(pub $field: Tensor<$shape, E, D>,)+
        }

        impl<E: Dtype, D: Device<E>> TensorCollection<E, D> for $name<E, D> {
            type To<E2: Dtype, D2: Device<E2>> = $name<E2, D2>;

            fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
                visitor: &mut V,
            ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
                visitor.visit_fields(
                    ($(
                        Self::tensor(
                            $key,
                            |s| &s.$field,
                            |s| &mut s.$field,
                            TensorOptions::reset_to_zeros(),
                        ),
                    )+),
                    |($($field,)+)| $name { $($field,)+ },
                )
            }
        }

        impl<E: Dtype> $crate::optax_tree::TreeNet<E> for $name<E, Cpu>
        where
            Cpu: Device<E>,
        {
            const KEYS: &'static [&'static str] = &[$($key),+];

            fn from_tree(dev: &Cpu, t: &$crate::optax_tree::Tree) -> Self {
                $name {
                    $($field: $crate::fixture::tensor(dev, &t[$key]),)+
                }
            }

            fn values(&self) -> Vec<Vec<E>> {
                vec![$(self.$field.as_vec()),+]
            }

            fn grads_of(&self, g: &$crate::optax_tree::Tree) -> Gradients<E, Cpu> {
                let gm = Self::from_tree(&Cpu::default(), g);
                // One backward pass a leaf into the same gradients: each
                // adds `gp` to its leaf's zeros, so the result is exact.
                let mut grads = self.alloc_grads();
                $(
                    grads = (self.$field.clone().traced(grads) * gm.$field)
                        .sum::<Rank0, _>()
                        .backward();
                )+
                grads
            }
        }
    };
}
#[allow(unused_imports)] // only optim_adafactor.rs defines a tree of its own
pub(crate) use tree_net;

tree_net!(
    /// The five-leaf tree of `optax_lamb.json` and `optax_masked.json`.
    Net {
        conv_w: "conv_0.weight", Rank4<3, 2, 3, 3>;
        conv_b: "conv_0.bias", Rank1<3>;
        dense_w: "dense_0.weight", Rank2<5, 7>;
        dense_b: "dense_0.bias", Rank1<5>;
        ln_scale: "layer_norm_0.scale", Rank1<7>;
    }
);

/// The keys an Adam-like state (`count`, `mu`, `nu`) on [`Net`] saves
/// under `opt.`.
pub const MOMENTS: [&str; 11] = [
    "opt.count",
    "opt.mu.conv_0.bias",
    "opt.mu.conv_0.weight",
    "opt.mu.dense_0.bias",
    "opt.mu.dense_0.weight",
    "opt.mu.layer_norm_0.scale",
    "opt.nu.conv_0.bias",
    "opt.nu.conv_0.weight",
    "opt.nu.dense_0.bias",
    "opt.nu.dense_0.weight",
    "opt.nu.layer_norm_0.scale",
];

/// [`MOMENTS`] saved under `prefix` instead (`opt.1.` for the second of a
/// chain).
pub fn moments_at(prefix: &str) -> Vec<String> {
    MOMENTS
        .iter()
        .map(|k| k.replacen("opt.", prefix, 1))
        .collect()
}

/// The five-leaf tree's checkpoint names.
pub const KEYS: &[&str] = <Net<f32, Cpu> as TreeNet<f32>>::KEYS;

/// The five-leaf tree `t` in dtype `E`.
pub fn model<E: Dtype>(dev: &Cpu, t: &Tree) -> Net<E, Cpu>
where
    Cpu: Device<E>,
{
    Net::from_tree(dev, t)
}

/// [`TreeNet::values`] of `m`.
pub fn values<E: Dtype, N: TreeNet<E>>(m: &N) -> Vec<Vec<E>>
where
    Cpu: Device<E>,
{
    m.values()
}

/// [`TreeNet::grads_of`] of `m`.
pub fn grads_of<E: Dtype, N: TreeNet<E>>(m: &N, g: &Tree) -> Gradients<E, Cpu>
where
    Cpu: Device<E>,
{
    m.grads_of(g)
}

/// Largest `|got - want| / max(|want|, 1e-2)` over the trace's steps, `tx`
/// run from `m` (the case's initial tree).
pub fn trace_error<E: Dtype, N: TreeNet<E>, T: GradientTransformation<E, Cpu>>(
    case: &Case,
    mut m: N,
    tx: &T,
    fused: bool,
) -> f64
where
    Cpu: Device<E>,
{
    let mut state = tx.try_init_model(&m).unwrap();
    let mut worst = 0.0f64;
    for (step, want) in case.params_after_each_step.iter().enumerate() {
        let grads = m.grads_of(&case.grads[step]);
        if fused {
            tx.apply_model(&mut state, grads, &mut m).unwrap();
        } else {
            let updates = tx.update_model(&mut state, grads, &m).unwrap();
            apply_updates(&mut m, updates).unwrap();
        }
        for (got, key) in m.values().iter().zip(N::KEYS) {
            let e = crate::fixture::max_rel_error(got, &want[*key].data, 1e-2);
            worst = crate::fixture::worse(e, worst);
        }
    }
    worst
}

/// Every case of `fixture`, which must hold `n`, reproduced through both
/// apply paths within 1e-5 (`f32`) or 1e-6 (`f64`) relative: `error(case,
/// fused)` runs the case's transformation and returns its [`trace_error`].
pub fn assert_every_trace(fixture: &Fixture, n: usize, error: impl Fn(&Case, bool) -> f64) {
    assert_eq!(fixture.cases.len(), n, "a new case needs a line here");
    for case in &fixture.cases {
        assert_eq!(case.grads.len(), 12);
        let tol = if case.dtype == "f64" { 1e-6 } else { 1e-5 };
        let errs = [false, true].map(|fused| error(case, fused));
        eprintln!(
            "{:70} max rel error (two-step, fused): {:.1e} {:.1e}",
            case.name, errs[0], errs[1]
        );
        for (path, e) in ["update_model + apply_updates", "apply_model"]
            .iter()
            .zip(errs)
        {
            assert!(
                e <= tol,
                "{} ({path}): relative error {e:e} > {tol:e}",
                case.name
            );
        }
    }
}

/// [`assert_every_trace`] over `$fixture` (`$n` cases), each case run in
/// its dtype from `model::<E>(dev, &case.init)` with the transformation
/// the calling file's `with_tx!(case, |tx| ..)` names.
#[allow(unused_macros)] // each test file uses it once
macro_rules! every_trace {
    ($fixture:expr, $n:expr) => {
        optax_tree::assert_every_trace(&$fixture, $n, |case, fused| {
            let dev = Cpu::default();
            match case.dtype.as_str() {
                "f32" => with_tx!(case, |tx| {
                    optax_tree::trace_error(case, model::<f32>(&dev, &case.init), &tx, fused)
                }),
                "f64" => with_tx!(case, |tx| {
                    optax_tree::trace_error(case, model::<f64>(&dev, &case.init), &tx, fused)
                }),
                other => panic!("dtype {other}"),
            }
        })
    };
}
#[allow(unused_imports)]
pub(crate) use every_trace;

/// A state of `tx` saved after 5 of `case`'s steps from `a` (through a
/// `StateMap` and the exact counters) and loaded into a fresh one resumes
/// bit for bit, through both apply paths; the saved keys are `keys`.
pub fn resumes_bit_for_bit<N: TreeNet<f32>, T: GradientTransformation<f32, Cpu>>(
    case: &Case,
    mut a: N,
    tx: T,
    keys: &[impl AsRef<str>],
) {
    let keys: Vec<&str> = keys.iter().map(AsRef::as_ref).collect();
    let mut sa = tx.try_init_model(&a).unwrap();
    for g in &case.grads[..5] {
        let grads = a.grads_of(g);
        tx.apply_model(&mut sa, grads, &mut a).unwrap();
    }
    let mut saved = StateMap::new();
    sa.save_state("opt.", &mut saved);
    let mut counters = StateMap::new();
    sa.save_counters("opt.", &mut counters);
    let found: Vec<_> = saved.keys().cloned().collect();
    assert_eq!(found, keys);
    let mut b = a.clone();
    let mut sb = tx.try_init_model(&b).unwrap();
    sb.load_state("opt.", &saved).unwrap();
    sb.load_counters("opt.", &counters).unwrap();
    for (step, g) in case.grads.iter().enumerate().skip(5) {
        let grads = a.grads_of(g);
        tx.apply_model(&mut sa, grads, &mut a).unwrap();
        let grads = b.grads_of(g);
        if step % 2 == 0 {
            tx.apply_model(&mut sb, grads, &mut b).unwrap();
        } else {
            let updates = tx.update_model(&mut sb, grads, &b).unwrap();
            apply_updates(&mut b, updates).unwrap();
        }
    }
    assert_eq!(a.values(), b.values());
}

/// `TrainState` trains `init` with `tx` on `case`'s gradients, and a
/// checkpoint of it after 3 steps round-trips: the loaded state then
/// follows the original bit for bit.
pub fn train_state_round_trips<N: TreeNet<f32>, T: GradientTransformation<f32, Cpu> + Clone>(
    case: &Case,
    init: N,
    tx: T,
) {
    let mut a = TrainState::create(init.clone(), tx.clone()).unwrap();
    for g in &case.grads[..3] {
        let grads = a.params.grads_of(g);
        a.apply_gradients(grads).unwrap();
    }
    let mut saved = StateMap::new();
    a.save_state("", &mut saved);
    let mut counters = StateMap::new();
    a.save_counters("", &mut counters);
    let mut b = TrainState::create(init, tx).unwrap();
    b.load_state("", &saved).unwrap();
    b.load_counters("", &counters).unwrap();
    for g in &case.grads[3..] {
        let grads = a.params.grads_of(g);
        a.apply_gradients(grads).unwrap();
        let grads = b.params.grads_of(g);
        b.apply_gradients(grads).unwrap();
    }
    assert_eq!(a.params.values(), b.params.values());
}

/// Optax's `cosine_decay_schedule(0.3, decay_steps=12)`: flaxen's
/// `cosine_decay` for `f32` traces, the same formula in `f64` for `f64`
/// traces (flaxen's schedules compute in `f32`, as Optax does without x64).
#[derive(Debug, Clone)]
pub struct Cosine {
    pub f64: bool,
}

impl Schedule for Cosine {
    fn value(&self, step: u64) -> f64 {
        if self.f64 {
            let t = step.min(12) as f64;
            0.3 * (0.5 * (1.0 + (std::f64::consts::PI * t / 12.0).cos()))
        } else {
            cosine_decay(0.3, 12, 0.0).value(step)
        }
    }
}
