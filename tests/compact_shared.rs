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

/// wmt's `Encoder`, taking the caller's `Embed` as `shared_embedding`
/// (or building its own when none is given).
pub struct Enc;

#[compact]
impl Enc {
    fn forward(tokens: Tokens<5>, shared_embedding: Param<None>) {
        let input_embed = match shared_embedding {
            Some(e) => e,
            None => Embed(20, 8),
        };
        relu(Dense(8)(input_embed(tokens)))
    }
}

/// wmt's `Decoder` with `logits_via_embedding`: the shared table looks the
/// targets up and gives the logits through `attend`.
pub struct Dec;

#[compact]
impl Dec {
    fn forward(encoded: Input<5, 8>, tokens: Tokens<5>, shared_embedding: Param<None>) {
        let output_embed = match shared_embedding {
            Some(e) => e,
            None => Embed(20, 8),
        };
        let y = Dense(8)(output_embed(tokens) + encoded);
        output_embed.attend(y) / sqrt(8.0)
    }
}

/// One `Embed` built in `setup` and passed to both: Flax keeps it at
/// `shared_embedding`, beside `encoder` and `decoder`.
pub struct SharedPair;

#[compact]
impl SharedPair {
    fn setup() {
        let shared_embedding = Embed(20, 8);
        let encoder = Enc(shared_embedding = shared_embedding);
        let decoder = Dec(shared_embedding = shared_embedding);
    }

    fn encode(inputs: Tokens<5>) {
        self.encoder(inputs)
    }

    fn decode(encoded: Input<5, 8>, targets: Tokens<5>) {
        self.decoder(encoded, targets)
    }

    fn forward(inputs: Tokens<5>, targets: Tokens<5>) {
        let encoded = self.encode(inputs);
        self.decode(encoded, targets)
    }
}

/// An `Embed` passed to nested models is one table: at the caller's path,
/// and its gradient (from the encoder's lookup, the decoder's lookup and
/// the decoder's `attend`) is the loss's, against central differences.
#[test]
fn an_embed_passed_to_nested_models_is_one_table() {
    let dev = Cpu::seed_from_u64(3);
    let mut m = dev.build_module::<SharedPair, f64>();
    let keys: Vec<String> = flax::read_arrays(&flax::save(&m).unwrap())
        .unwrap()
        .into_keys()
        .collect();
    assert_eq!(
        keys,
        [
            "params/decoder/Dense_0/bias",
            "params/decoder/Dense_0/kernel",
            "params/encoder/Dense_0/bias",
            "params/encoder/Dense_0/kernel",
            "params/shared_embedding/embedding",
        ]
    );
    assert_eq!(m.num_trainable_params(), 20 * 8 + 2 * (8 * 8 + 8));
    let s: Tensor<Rank2<2, 5>, usize, Cpu> = dev.tensor([[1, 2, 3, 4, 5], [6, 7, 1, 0, 0]]);
    let t: Tensor<Rank2<2, 5>, usize, Cpu> = dev.tensor([[5, 4, 3, 2, 1], [1, 9, 9, 0, 0]]);
    let w: Tensor<Rank3<2, 5, 20>, f64, Cpu> = dev.sample_normal();
    let loss = |m: &SharedPairModule<f64, Cpu>| {
        (m.forward((s.clone(), t.clone())) * w.clone())
            .sum::<Rank0, _>()
            .array()
    };
    let g = (m.forward((s.clone().traced(m.alloc_grads()), t.clone())) * w.clone())
        .sum()
        .backward();
    let table = g.get(&m.shared_embedding.embedding).as_vec();
    // `encode` then `decode` from Rust give `forward`'s logits exactly.
    let encoded = m.encode(s.clone());
    assert_eq!(
        m.decode((encoded, t.clone())).as_vec(),
        m.forward((s.clone(), t.clone())).as_vec()
    );
    // Rows read by the encoder (2), by both (1), by the decoder only (9),
    // and by `attend` alone (12, 19).
    let base = m.shared_embedding.embedding.as_vec();
    for k in [2 * 8, 8 + 3, 9 * 8 + 5, 12 * 8, 19 * 8 + 7] {
        let mut at = |d: f64| {
            let mut v = base.clone();
            v[k] += d;
            m.shared_embedding.embedding = dev.tensor(v);
            loss(&m)
        };
        let fd = (at(1e-6) - at(-1e-6)) / 2e-6;
        assert!(
            (fd - table[k]).abs() < 1e-6 * fd.abs().max(1.0),
            "{k}: {fd} vs {}",
            table[k]
        );
    }
}
