//! A layer bound once and applied several times shares one set of
//! parameters (Flax's `dense = nn.Dense(8)`, then `dense(dense(x))`), and
//! `embed.attend(x)` uses an `Embed`'s table as the output layer (tied
//! embeddings). Against Flax (`tests/python/make_flax_shared.py`,
//! `fixtures/flax_shared.{msgpack,json}`): parameter count and paths, the
//! checkpoint as `to_bytes` wrote it, outputs within 1e-5 (f32) and 1e-9
//! (f64), gradients (summed over the applications, the table's from both
//! the lookup and `attend`) within 1e-4 (f32) and 1e-9 (f64).

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/flax_files.rs"]
mod flax_files;

use fixture::{assert_rel, Arr};
use flax_files::{assert_grads, f32s, fixture, flax_grads, load_as_flax_wrote_it};
use flaxen::interop::flax;
use flaxen::prelude::*;

/// The generator's `Tied` module, as Flax writes it.
pub struct Tied;

#[compact]
impl Tied {
    fn forward(tokens: Tokens<6>) {
        let embed = Embed(20, 8);
        let x = embed(tokens);
        let dense = Dense(8);
        let x = dense(relu(dense(x)));
        let norm = LayerNorm();
        let x = norm(x) + norm(x * 2.0);
        let head = Dense(8, name = "head");
        let x = head(x);
        embed.attend(x)
    }
}

#[derive(serde::Deserialize)]
struct Extra {
    tokens: Arr,
    out_f64: Arr,
}

const BYTES: &[u8] = include_bytes!("fixtures/flax_shared.msgpack");
const JSON: &str = include_str!("fixtures/flax_shared.json");

fn tokens(e: &Extra) -> Vec<usize> {
    e.tokens.data.iter().map(|v| *v as usize).collect()
}

#[test]
fn shared_layers_and_attend_match_flax() {
    let f = fixture(JSON);
    let extra: Extra = serde_json::from_str(JSON).unwrap();
    let dev = Cpu::default();
    let mut model = dev.build_module::<Tied, f32>();
    load_as_flax_wrote_it(&mut model, BYTES, &f);
    let t: Tensor<Rank2<3, 6>, usize, Cpu> = dev.tensor(tokens(&extra));
    let out = model.forward(t.clone());
    assert_rel(
        "out",
        &out.as_vec(),
        &f.out.as_ref().unwrap().data,
        1e-5,
        1.0,
    );
    let w: Tensor<Rank3<3, 6, 20>, f32, Cpu> = dev.tensor(f32s(f.w.as_ref().unwrap()));
    let grads = (model.forward(t.traced(model.alloc_grads())) * w)
        .sum()
        .backward();
    assert_grads(&flax_grads(&model, &grads), &f.grads_f64, 1e-4);
}

#[test]
fn shared_layers_and_attend_in_f64_match_flax_in_f64() {
    let f = fixture(JSON);
    let extra: Extra = serde_json::from_str(JSON).unwrap();
    let dev = Cpu::default();
    let mut model = dev.build_module::<Tied, f64>();
    flax::load(&mut model, BYTES).unwrap();
    let t: Tensor<Rank2<3, 6>, usize, Cpu> = dev.tensor(tokens(&extra));
    assert_rel(
        "out",
        &model.forward(t.clone()).as_vec(),
        &extra.out_f64.data,
        1e-9,
        1.0,
    );
    let w: Tensor<Rank3<3, 6, 20>, f64, Cpu> = dev.tensor(f.w.as_ref().unwrap().data.clone());
    let grads = (model.forward(t.traced(model.alloc_grads())) * w)
        .sum()
        .backward();
    assert_grads(&flax_grads(&model, &grads), &f.grads_f64, 1e-9);
}
