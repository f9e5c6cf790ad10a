//! Shared by the tests of Optax traces on the five-leaf tree
//! (`conv_0.weight` 3x2x3x3, `conv_0.bias` 3, `dense_0.weight` 5x7,
//! `dense_0.bias` 5, `layer_norm_0.scale` 7): the tree as a dfdx module, the
//! fixture's cases, gradients equal to the fixture's, a trace's worst error
//! and Optax's cosine schedule in both precisions.
#![allow(dead_code)]

use std::collections::BTreeMap;

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::{cosine_decay, Schedule};
use serde::Deserialize;

#[derive(Debug, Clone)]
pub struct Net<E: Dtype, D: Storage<E>> {
    pub conv_w: Tensor<Rank4<3, 2, 3, 3>, E, D>,
    pub conv_b: Tensor<Rank1<3>, E, D>,
    pub dense_w: Tensor<Rank2<5, 7>, E, D>,
    pub dense_b: Tensor<Rank1<5>, E, D>,
    pub ln_scale: Tensor<Rank1<7>, E, D>,
}

impl<E: Dtype, D: Device<E>> TensorCollection<E, D> for Net<E, D> {
    type To<E2: Dtype, D2: Device<E2>> = Net<E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::tensor(
                    "conv_0.weight",
                    |s| &s.conv_w,
                    |s| &mut s.conv_w,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "conv_0.bias",
                    |s| &s.conv_b,
                    |s| &mut s.conv_b,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "dense_0.weight",
                    |s| &s.dense_w,
                    |s| &mut s.dense_w,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "dense_0.bias",
                    |s| &s.dense_b,
                    |s| &mut s.dense_b,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "layer_norm_0.scale",
                    |s| &s.ln_scale,
                    |s| &mut s.ln_scale,
                    TensorOptions::reset_to_zeros(),
                ),
            ),
            |(conv_w, conv_b, dense_w, dense_b, ln_scale)| Net {
                conv_w,
                conv_b,
                dense_w,
                dense_b,
                ln_scale,
            },
        )
    }
}

pub const KEYS: [&str; 5] = [
    "conv_0.weight",
    "conv_0.bias",
    "dense_0.weight",
    "dense_0.bias",
    "layer_norm_0.scale",
];

#[derive(Deserialize, Clone)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

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

pub fn cast<E: Dtype>(t: &Tree, key: &str, shape: &[usize]) -> Vec<E> {
    let a = &t[key];
    assert_eq!(a.shape, shape, "{key}");
    a.data.iter().map(|&v| E::from_f64(v).unwrap()).collect()
}

pub fn model<E: Dtype>(dev: &Cpu, t: &Tree) -> Net<E, Cpu>
where
    Cpu: Device<E>,
{
    Net {
        conv_w: dev.tensor_from_vec(cast(t, KEYS[0], &[3, 2, 3, 3]), Default::default()),
        conv_b: dev.tensor_from_vec(cast(t, KEYS[1], &[3]), Default::default()),
        dense_w: dev.tensor_from_vec(cast(t, KEYS[2], &[5, 7]), Default::default()),
        dense_b: dev.tensor_from_vec(cast(t, KEYS[3], &[5]), Default::default()),
        ln_scale: dev.tensor_from_vec(cast(t, KEYS[4], &[7]), Default::default()),
    }
}

pub fn values<E: Dtype>(m: &Net<E, Cpu>) -> [Vec<E>; 5]
where
    Cpu: Device<E>,
{
    [
        m.conv_w.as_vec(),
        m.conv_b.as_vec(),
        m.dense_w.as_vec(),
        m.dense_b.as_vec(),
        m.ln_scale.as_vec(),
    ]
}

/// Gradients equal to `g` exactly: d/dp sum(p * gp) = gp.
pub fn grads_of<E: Dtype>(m: &Net<E, Cpu>, g: &Tree) -> Gradients<E, Cpu>
where
    Cpu: Device<E>,
{
    let gm = model::<E>(m.conv_w.device(), g);
    let l0 = (m.conv_w.clone().traced(m.alloc_grads()) * gm.conv_w).sum();
    let (l0, tape) = l0.split_tape();
    let l1 = (m.conv_b.clone().put_tape(tape) * gm.conv_b).sum();
    let (l1, tape) = l1.split_tape();
    let l2 = (m.dense_w.clone().put_tape(tape) * gm.dense_w).sum();
    let (l2, tape) = l2.split_tape();
    let l3 = (m.dense_b.clone().put_tape(tape) * gm.dense_b).sum();
    let (l3, tape) = l3.split_tape();
    let l4 = (m.ln_scale.clone().put_tape(tape) * gm.ln_scale).sum();
    (l4 + l3 + l2 + l1 + l0).backward()
}

/// Largest `|got - want| / max(|want|, 1e-2)` over the trace's steps.
pub fn trace_error<E: Dtype, T: GradientTransformation<E, Cpu>>(
    case: &Case,
    tx: &T,
    fused: bool,
) -> f64
where
    Cpu: Device<E>,
{
    let dev = Cpu::default();
    let mut m = model::<E>(&dev, &case.init);
    let mut state = tx.try_init_model(&m).unwrap();
    let mut worst = 0.0f64;
    for (step, want) in case.params_after_each_step.iter().enumerate() {
        let grads = grads_of(&m, &case.grads[step]);
        if fused {
            tx.apply_model(&mut state, grads, &mut m).unwrap();
        } else {
            let updates = tx.update_model(&mut state, grads, &m).unwrap();
            apply_updates(&mut m, updates).unwrap();
        }
        for (got, key) in values(&m).iter().zip(KEYS) {
            for (g, w) in got.iter().zip(&want[key].data) {
                let g = g.to_f64().unwrap();
                worst = worst.max((g - w).abs() / w.abs().max(1e-2));
            }
        }
    }
    worst
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
