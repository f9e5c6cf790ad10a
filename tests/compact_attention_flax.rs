//! Flax parity of models with token ids, masks and several inputs
//! (`tests/fixtures/flax_attention.json`, made by
//! `tests/python/make_flax_attention.py`): `Embed`, a padding mask from the
//! tokens, masked `SelfAttention`, the CLS token; a causal `SelfAttention`,
//! masked cross-attention (`MultiHeadDotProductAttention`) to a second input
//! under a mask given as a third, the last position. The fixture's random
//! parameters are loaded by checkpoint key; the output, the float inputs'
//! gradients, every parameter gradient and the parameter count are
//! compared, in f64 within `1e-9` and f32 within `1e-4` (relative to
//! `max(|flax|, 1)`).

#[allow(unused_macros, unused_imports)]
#[path = "common/norm_act.rs"]
mod norm_act;

#[allow(dead_code, unused_macros, unused_imports)]
#[path = "common/compact_v2.rs"]
mod compact_v2;

use std::collections::BTreeMap;

use compact_v2::{assert_param_grads, load_tensors};
use flaxen::prelude::*;
use norm_act::{assert_flax, tensor, Arr};
use serde::Deserialize;

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
            mask = mask
        );
        let x = x + y;
        Dense(4)(x[-1])
    }
}

#[derive(Deserialize)]
struct Case {
    model: String,
    inputs: Vec<Arr>,
    r: Arr,
    params: BTreeMap<String, Arr>,
    num_params: usize,
    y: Arr,
    grad_inputs: Vec<Arr>,
    grads: BTreeMap<String, Arr>,
}

#[derive(Deserialize)]
struct Fixture {
    classifier: Case,
    decoder: Case,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("fixtures/flax_attention.json")).expect("fixture parses")
}

fn ids(a: &Arr) -> Vec<usize> {
    a.data.iter().map(|v| *v as usize).collect()
}

macro_rules! classifier {
    ($name:ident, $e:ty) => {
        #[test]
        fn $name() {
            let dev: Cpu = Default::default();
            let case = fixture().classifier;
            let what = |s: &str| format!("{} {} {s}", case.model, stringify!($e));
            let mut m = dev.build_module::<Classifier, $e>();
            load_tensors(&mut m, &case.model, case.params.iter());
            assert_eq!(m.num_trainable_params(), case.num_params);
            let tokens: Tensor<Rank2<3, 7>, usize, _> = dev.tensor_from_vec(ids(&case.inputs[0]), Default::default());
            let r: Tensor<Rank2<3, 3>, $e, _> = tensor(&dev, &case.r);
            let y = m.forward(tokens.traced(m.alloc_grads()));
            assert_flax(&what("y"), &y.as_vec(), &case.y);
            let g = (y * r).sum().backward();
            assert_param_grads(&what(""), &m, &g, &case.grads);
        }
    };
}

macro_rules! decoder {
    ($name:ident, $e:ty) => {
        #[test]
        fn $name() {
            let dev: Cpu = Default::default();
            let case = fixture().decoder;
            let what = |s: &str| format!("{} {} {s}", case.model, stringify!($e));
            let mut m = dev.build_module::<Decoder, $e>();
            load_tensors(&mut m, &case.model, case.params.iter());
            assert_eq!(m.num_trainable_params(), case.num_params);
            let x: Tensor<Rank3<3, 5, 8>, $e, _> = tensor(&dev, &case.inputs[0]);
            let memory: Tensor<Rank3<3, 6, 7>, $e, _> = tensor(&dev, &case.inputs[1]);
            let mask: Tensor<Rank3<3, 5, 6>, bool, _> =
                dev.tensor_from_vec(case.inputs[2].data.iter().map(|v| *v != 0.0).collect(), Default::default());
            let r: Tensor<Rank2<3, 4>, $e, _> = tensor(&dev, &case.r);
            // The tape rides on the first input; the model gives the memory
            // a tape of its own, merged into it, so (with a leaky tape,
            // which keeps every gradient) the memory's is there too.
            let y = m.forward((x.leaky_trace(), memory.clone(), mask));
            assert_flax(&what("y"), &y.as_vec(), &case.y);
            let g = (y * r).sum().backward();
            assert_flax(&what("grad x"), &g.get(&x).as_vec(), &case.grad_inputs[0]);
            assert_flax(&what("grad memory"), &g.get(&memory).as_vec(), &case.grad_inputs[1]);
            assert_param_grads(&what(""), &m, &g, &case.grads);
        }
    };
}

classifier!(classifier_matches_flax_f64, f64);
classifier!(classifier_matches_flax_f32, f32);
decoder!(decoder_matches_flax_f64, f64);
decoder!(decoder_matches_flax_f32, f32);
