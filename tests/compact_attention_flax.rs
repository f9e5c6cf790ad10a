//! Flax parity of models with token ids, masks and several inputs
//! (`tests/fixtures/flax_attention.json`, made by
//! `tests/python/make_flax_attention.py`), on the Cpu: `Embed`, a padding
//! mask from the tokens, masked `SelfAttention`, the CLS token; a causal
//! `SelfAttention`, masked cross-attention (`MultiHeadDotProductAttention`)
//! to a second input under a mask given as a third, the last position. The
//! fixture's random parameters are loaded by checkpoint key; the output, the
//! float inputs' gradients, every parameter gradient and the parameter count
//! are compared, in f64 within `1e-9` and f32 within `1e-4` (relative to
//! `max(|flax|, 1)`). The models and checks are in
//! `tests/common/attention_flax.rs` (shared with the Cuda tests).

#[path = "common/fixture.rs"]
mod fixture;

#[allow(unused_macros, unused_imports)]
#[path = "common/norm_act.rs"]
mod norm_act;

#[allow(unused_macros, unused_imports)]
#[path = "common/compact_v2.rs"]
mod compact_v2;

#[path = "common/attention_flax.rs"]
mod attention_flax;

use attention_flax::{classifier_case, decoder_case};
use flaxen::prelude::*;

#[test]
fn classifier_matches_flax_f64() {
    classifier_case!(&Cpu::default(), f64);
}

#[test]
fn classifier_matches_flax_f32() {
    classifier_case!(&Cpu::default(), f32);
}

#[test]
fn decoder_matches_flax_f64() {
    decoder_case!(&Cpu::default(), f64);
}

#[test]
fn decoder_matches_flax_f32() {
    decoder_case!(&Cpu::default(), f32);
}
