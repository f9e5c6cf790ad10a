//! Models with token ids, masks and several inputs, and the checks that run
//! them against `tests/fixtures/flax_attention.json` (made by
//! `tests/python/make_flax_attention.py`) on a device: include next to
//! `norm_act.rs` and `compact_v2.rs`, whose loading, gradient checks and
//! tolerances (f64 `1e-9`, f32 `1e-4` relative to `max(|flax|, 1)`) they
//! use. Used by `tests/compact_attention_flax.rs` (Cpu) and
//! `tests/cuda_layers.rs` (Cuda).
#![allow(dead_code)]

use std::collections::BTreeMap;

use flaxen::prelude::*;
use serde::Deserialize;

use crate::norm_act::Arr;

pub struct Classifier;

#[compact]
impl Classifier {
    fn forward(tokens: Tokens<7>) {
        let mask = make_attention_mask(tokens, tokens);
        let x = Embed(num_embeddings = 50, features = 16)(tokens);
        let x = SelfAttention(num_heads = 2, qkv_features = 16)(x, mask = mask);
        let x = LayerNorm()(x);
        Dense(3)(x[0])
    }
}

pub struct Decoder;

#[compact]
impl Decoder {
    fn forward(x: Input<5, 8>, memory: Input<6, 7>, mask: Mask<5, 6>) {
        let y = SelfAttention(num_heads = 2)(x, mask = make_causal_mask(x));
        let x = x + y;
        let y = MultiHeadDotProductAttention(num_heads = 2, qkv_features = 10, out_features = 8)(
            x,
            memory,
            mask = mask,
        );
        let x = x + y;
        Dense(4)(x[-1])
    }
}

#[derive(Deserialize)]
pub struct Case {
    pub model: String,
    pub inputs: Vec<Arr>,
    pub r: Arr,
    pub params: BTreeMap<String, Arr>,
    pub num_params: usize,
    pub y: Arr,
    pub grad_inputs: Vec<Arr>,
    pub grads: BTreeMap<String, Arr>,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub classifier: Case,
    pub decoder: Case,
}

pub fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../fixtures/flax_attention.json")).expect("fixture parses")
}

pub fn ids(a: &Arr) -> Vec<usize> {
    a.data.iter().map(|v| *v as usize).collect()
}

/// Runs the classifier case in dtype `$e` on `$dev`: parameters by key,
/// the count, `y` and every parameter gradient.
macro_rules! classifier_case {
    ($dev:expr, $e:ty) => {
        {
            use $crate::attention_flax::{fixture, ids, Classifier};
            use $crate::compact_v2::{assert_param_grads, load_tensors};
            use $crate::norm_act::{assert_flax, tensor};
            let dev = $dev;
            let case = fixture().classifier;
            let what = |s: &str| format!("{} {} {s}", case.model, stringify!($e));
            let mut m = dev.build_module::<Classifier, $e>();
            load_tensors(&mut m, &case.model, case.params.iter());
            assert_eq!(m.num_trainable_params(), case.num_params);
            let tokens: Tensor<Rank2<3, 7>, usize, _> = dev.tensor_from_vec(ids(&case.inputs[0]), Default::default());
            let r: Tensor<Rank2<3, 3>, $e, _> = tensor(dev, &case.r);
            let y = m.forward(tokens.traced(m.alloc_grads()));
            assert_flax(&what("y"), &y.as_vec(), &case.y);
            let g = (y * r).sum().backward();
            assert_param_grads(&what(""), &m, &g, &case.grads);
        }
    };
}

/// Runs the decoder case in dtype `$e` on `$dev`: `y`, the gradients of
/// both float inputs and of every parameter.
macro_rules! decoder_case {
    ($dev:expr, $e:ty) => {{
        use $crate::attention_flax::{fixture, Decoder};
        use $crate::compact_v2::{assert_param_grads, load_tensors};
        use $crate::norm_act::{assert_flax, tensor};
        let dev = $dev;
        let case = fixture().decoder;
        let what = |s: &str| format!("{} {} {s}", case.model, stringify!($e));
        let mut m = dev.build_module::<Decoder, $e>();
        load_tensors(&mut m, &case.model, case.params.iter());
        assert_eq!(m.num_trainable_params(), case.num_params);
        let x: Tensor<Rank3<3, 5, 8>, $e, _> = tensor(dev, &case.inputs[0]);
        let memory: Tensor<Rank3<3, 6, 7>, $e, _> = tensor(dev, &case.inputs[1]);
        let mask: Tensor<Rank3<3, 5, 6>, bool, _> = dev.tensor_from_vec(
            case.inputs[2].data.iter().map(|v| *v != 0.0).collect(),
            Default::default(),
        );
        let r: Tensor<Rank2<3, 4>, $e, _> = tensor(dev, &case.r);
        // The tape rides on the first input; the model gives the memory
        // a tape of its own, merged into it, so (with a leaky tape,
        // which keeps every gradient) the memory's is there too.
        let y = m.forward((x.leaky_trace(), memory.clone(), mask));
        assert_flax(&what("y"), &y.as_vec(), &case.y);
        let g = (y * r).sum().backward();
        assert_flax(&what("grad x"), &g.get(&x).as_vec(), &case.grad_inputs[0]);
        assert_flax(
            &what("grad memory"),
            &g.get(&memory).as_vec(),
            &case.grad_inputs[1],
        );
        assert_param_grads(&what(""), &m, &g, &case.grads);
    }};
}

pub(crate) use {classifier_case, decoder_case};
