//! `remat(Block(..))(x)` against the plain `Block(..)(x)`: the same values,
//! gradients (bit for bit), BatchNorm statistics, checkpoint keys and
//! training trajectory, on residual blocks with convolutions and
//! BatchNorm; a finite-difference check of the recomputed gradients; the
//! profiler's names; the runtime's refusal of a nondeterministic block.

#[path = "common/remat.rs"]
mod remat_common;

use flaxen::prelude::*;
use flaxen::runtime::checkpoint::load_module_state;
use flaxen::runtime::layers::Remat;
use flaxen::runtime::profile::Profiler;
use flaxen::runtime::state::StateMap;
use remat_common::{grads_by_key, state, Checkpointed, Plain};

/// Built-in layers under `remat`, on features; no BatchNorm or Dropout, so
/// `forward` also runs on a taped input.
pub struct MlpPlain;

#[compact]
impl MlpPlain {
    fn forward(x: Input<6>) {
        let h = gelu(Dense(16)(x));
        let h = h + tanh(Dense(16)(h));
        Dense(3)(LayerNorm()(h))
    }
}

pub struct MlpRemat;

#[compact]
impl MlpRemat {
    fn forward(x: Input<6>) {
        let h = gelu(remat(Dense(16))(x));
        let h = h + tanh(remat(Dense(16))(h));
        Dense(3)(remat(LayerNorm())(h))
    }
}

/// `remat` inside a block under `remat`: the outer recomputation runs the
/// inner one in its own backward pass.
pub struct Inner;

#[compact]
impl Inner {
    fn forward(x: Input<6>) {
        x + remat(Dense(6))(relu(x))
    }
}

pub struct InnerPlain;

#[compact]
impl InnerPlain {
    fn forward(x: Input<6>) {
        x + Dense(6)(relu(x))
    }
}

pub struct NestedPlain;

#[compact]
impl NestedPlain {
    fn forward(x: Input<6>) {
        Dense(2)(InnerPlain(name = "inner")(InnerPlain(name = "first")(x)))
    }
}

pub struct NestedRemat;

#[compact]
impl NestedRemat {
    fn forward(x: Input<6>) {
        Dense(2)(remat(Inner(name = "inner"))(Inner(name = "first")(x)))
    }
}

/// The exact bits of each value (`assert_eq` on floats takes -0 for 0).
fn bits<E: Dtype>(v: &[E]) -> Vec<u64> {
    v.iter()
        .map(|x| x.to_f64().unwrap_or(f64::NAN).to_bits())
        .collect()
}

/// The remat model with the plain one's parameters (and statistics).
macro_rules! twin {
    ($dev:expr, $plain:ty, $remat:ty, $e:ty) => {{
        let plain = $dev.build_module::<$plain, $e>();
        let mut remat = $dev.build_module::<$remat, $e>();
        load_module_state(&mut remat, "", &state(&plain)).unwrap();
        (plain, remat)
    }};
}

/// One training-mode forward and backward of each model on the same batch:
/// loss, output, input and parameter gradients, and the statistics after
/// the call are the same, bit for bit.
macro_rules! bit_for_bit {
    ($e:ty) => {{
        let dev: Cpu = Cpu::seed_from_u64(7);
        let (mut plain, mut remat) = twin!(dev, Plain, Checkpointed, $e);
        assert!(state(&plain) == state(&remat));
        let x: Tensor<Rank4<5, 3, 8, 8>, $e, Cpu> = dev.sample_normal();
        let run = |x: Tensor<Rank4<5, 3, 8, 8>, $e, Cpu>,
                   y: Tensor<Rank2<5, 4>, $e, Cpu, OwnedTape<$e, Cpu>>| {
            let y = y.square().sum();
            let loss = y.retaped::<NoneTape>().array();
            (loss, y.backward(), x)
        };
        let (l1, g1, x1) = run(x.clone(), plain.forward_mut(x.leaky_trace()));
        let (l2, g2, x2) = run(x.clone(), remat.forward_mut(x.leaky_trace()));
        assert_eq!(l1.to_bits(), l2.to_bits());
        let (d1, d2) = (g1.get(&x1).as_vec(), g2.get(&x2).as_vec());
        assert_eq!(d1, d2);
        assert_eq!(bits(&d1), bits(&d2), "signs of zeros too");
        let (p1, p2) = (grads_by_key(&plain, &g1), grads_by_key(&remat, &g2));
        assert!(p1.contains_key("res_block_1.conv_1.weight"));
        assert!(p1.values().all(|g| g.iter().any(|v| *v != 0.0)));
        assert_eq!(p1, p2);
        for (k, g) in &p1 {
            assert_eq!(bits(g), bits(&p2[k]), "{k}");
        }
        // Running statistics moved once, as in the plain call.
        let (s1, s2) = (state(&plain), state(&remat));
        assert_ne!(
            s1["res_block_0.batch_norm_0.running_mean"].data,
            vec![0.0; 8]
        );
        assert!(s1 == s2);
        // Inference reads them.
        let (y1, y2) = (plain.forward(x.clone()), remat.forward(x));
        assert_eq!(y1.as_vec(), y2.as_vec());
    }};
}

#[test]
fn residual_blocks_gradients_bit_for_bit_f32() {
    bit_for_bit!(f32);
}

#[test]
fn residual_blocks_gradients_bit_for_bit_f64() {
    bit_for_bit!(f64);
}

#[test]
fn checkpoint_keys_are_the_plain_models() {
    let dev: Cpu = Default::default();
    let (plain, remat) = twin!(dev, Plain, Checkpointed, f32);
    let keys = |s: StateMap<f32>| s.into_keys().collect::<Vec<_>>();
    let (k1, k2) = (keys(state(&plain)), keys(state(&remat)));
    assert_eq!(k1, k2);
    for k in [
        "conv_0.weight",
        "res_block_0.conv_0.weight",
        "res_block_0.batch_norm_1.running_var",
        "res_block_1.batch_norm_0.scale",
        "dense_0.bias",
    ] {
        assert!(k2.iter().any(|x| x == k), "{k} in {k2:?}");
    }
    assert_eq!(plain.num_trainable_params(), remat.num_trainable_params());
    let _: &Remat<_> = &remat.res_block_1;
    // A dfdx safetensors file of one loads into the other.
    let dir = std::env::temp_dir().join(format!("flaxen-remat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.safetensors");
    remat.save_safetensors(&path).unwrap();
    let mut other = dev.build_module::<Plain, f32>();
    other.load_safetensors(&path).unwrap();
    assert!(state(&other) == state(&remat));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn training_steps_give_the_same_parameters() {
    use flaxen::runtime::losses::softmax_cross_entropy_with_integer_labels;
    let dev: Cpu = Cpu::seed_from_u64(3);
    let (plain, remat) = twin!(dev, Plain, Checkpointed, f32);
    let mut a = TrainState::create(plain, adam(1e-2)).unwrap();
    let mut b = TrainState::create(remat, adam(1e-2)).unwrap();
    for step in 0..4 {
        let x: Tensor<Rank4<6, 3, 8, 8>, f32, Cpu> = dev.sample_normal();
        let y: Tensor<Rank1<6>, usize, Cpu> = dev.tensor([0, 1, 2, 3, step % 4, 1]);
        let (la, ga) = a
            .value_and_grad(|m, t| {
                let logits = m.forward_mut(x.clone().put_tape(t));
                softmax_cross_entropy_with_integer_labels(logits, y.clone()).mean()
            })
            .unwrap();
        let (lb, gb) = b
            .value_and_grad(|m, t| {
                let logits = m.forward_mut(x.clone().put_tape(t));
                softmax_cross_entropy_with_integer_labels(logits, y.clone()).mean()
            })
            .unwrap();
        assert_eq!(la.array(), lb.array(), "loss of step {step}");
        a.apply_gradients(ga).unwrap();
        b.apply_gradients(gb).unwrap();
        assert!(state(&a.params) == state(&b.params), "after step {step}");
    }
}

#[test]
fn built_in_layers_under_remat() {
    let dev: Cpu = Cpu::seed_from_u64(11);
    let (plain, remat) = twin!(dev, MlpPlain, MlpRemat, f64);
    let x: Tensor<Rank2<7, 6>, f64, Cpu> = dev.sample_normal();
    // `forward` (not `forward_mut`) on a taped input.
    let g1 = plain.forward(x.leaky_trace()).square().sum().backward();
    let g2 = remat.forward(x.leaky_trace()).square().sum().backward();
    assert_eq!(g1.get(&x).as_vec(), g2.get(&x).as_vec());
    assert_eq!(grads_by_key(&plain, &g1), grads_by_key(&remat, &g2));
    assert!(grads_by_key(&remat, &g2).contains_key("layer_norm_0.gamma"));
}

/// The loss of the remat model in training mode, with one tensor of the
/// checkpoint (or the input) moved by `h` at `i`.
fn loss_at(params: &StateMap<f64>, x: &[f64], which: &str, i: usize, h: f64) -> f64 {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Checkpointed, f64>();
    let mut p = params.clone();
    let mut x = x.to_vec();
    match which {
        "input" => x[i] += h,
        key => p.get_mut(key).unwrap().data[i] += h,
    }
    load_module_state(&mut m, "", &p).unwrap();
    let x: Tensor<Rank4<4, 3, 8, 8>, f64, Cpu> = dev.tensor_from_vec(x, Default::default());
    m.forward_mut(x.leaky_trace())
        .square()
        .sum::<Rank0, _>()
        .retaped::<NoneTape>()
        .array()
}

#[test]
fn recomputed_gradients_match_finite_differences() {
    let dev: Cpu = Cpu::seed_from_u64(5);
    let mut m = dev.build_module::<Checkpointed, f64>();
    // Scales away from 1, so every parameter matters.
    let mut p = state(&m);
    for (k, t) in p.iter_mut() {
        if k.ends_with(".scale") {
            t.data
                .iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = 0.5 + 0.1 * i as f64);
        }
    }
    load_module_state(&mut m, "", &p).unwrap();
    let x: Tensor<Rank4<4, 3, 8, 8>, f64, Cpu> = dev.sample_normal();
    let xs = x.as_vec();
    let g = m.forward_mut(x.leaky_trace()).square().sum().backward();
    let grads = grads_by_key(&m, &g);
    let dx = g.get(&x).as_vec();
    let h = 1e-5;
    let mut checked = 0;
    for (key, at) in [
        ("res_block_0.conv_0.weight", [0, 100, 511]),
        ("res_block_0.batch_norm_1.scale", [0, 3, 7]),
        ("res_block_1.conv_1.weight", [1, 222, 400]),
        ("res_block_1.batch_norm_0.bias", [2, 5, 6]),
        ("conv_0.weight", [0, 50, 215]),
        ("input", [0, 300, 767]),
    ] {
        for i in at {
            let fd = (loss_at(&p, &xs, key, i, h) - loss_at(&p, &xs, key, i, -h)) / (2.0 * h);
            let an = if key == "input" { dx[i] } else { grads[key][i] };
            let err = (fd - an).abs() / an.abs().max(1e-3);
            assert!(
                err < 1e-5,
                "{key}[{i}]: finite difference {fd}, gradient {an}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 18);
}

#[test]
fn profiler_names_the_recomputation_under_the_block() {
    let dev: Cpu = Default::default();
    let (mut plain, mut remat) = twin!(dev, Plain, Checkpointed, f32);
    let x: Tensor<Rank4<2, 3, 8, 8>, f32, Cpu> = dev.sample_normal();
    let report = |f: &mut dyn FnMut()| {
        let p = Profiler::start();
        f();
        p.finish()
    };
    let r1 = report(&mut || {
        let _ = plain.forward_mut(x.leaky_trace()).sum().backward();
    });
    let r2 = report(&mut || {
        let _ = remat.forward_mut(x.leaky_trace()).sum().backward();
    });
    let names = |r: &flaxen::runtime::profile::ProfileReport| {
        r.rows().iter().map(|r| r.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&r1), names(&r2));
    for name in [
        "res_block_0.conv_0",
        "res_block_1.add_0",
        "add_0",
        "dense_0",
    ] {
        let (a, b) = (r1.row(name).unwrap(), r2.row(name).unwrap());
        let again = usize::from(name.starts_with("res_block"));
        // Each block layer runs once more, in the backward pass, and its
        // backward span comes from the recomputation.
        assert_eq!(b.forward_calls, a.forward_calls * (1 + again), "{name}");
        assert_eq!((a.backward_calls, b.backward_calls), (1, 1), "{name}");
    }
}

/// dfdx's `Dropout` draws a new mask when the block is recomputed; the
/// runtime notices (on the CPU, in debug builds) rather than returning a
/// wrong gradient. `#[compact]` refuses such a block outright.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "Remat: the block's recomputation")]
fn nondeterministic_block_is_refused() {
    use flaxen::dfdx::nn::builders::{Dropout, Linear};
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Remat<(Linear<8, 8>, Dropout)>, f32>();
    let x: Tensor<Rank2<16, 8>, f32, Cpu> = dev.sample_normal();
    let _ = m.forward_mut(x.leaky_trace()).sum().backward();
}

#[test]
fn remat_inside_remat() {
    let dev: Cpu = Cpu::seed_from_u64(2);
    let (mut plain, mut remat) = twin!(dev, NestedPlain, NestedRemat, f64);
    let x: Tensor<Rank2<3, 6>, f64, Cpu> = dev.sample_normal();
    let g1 = plain.forward_mut(x.leaky_trace()).square().sum().backward();
    let g2 = remat.forward_mut(x.leaky_trace()).square().sum().backward();
    let (p1, p2) = (grads_by_key(&plain, &g1), grads_by_key(&remat, &g2));
    assert!(p2.contains_key("inner.dense_0.weight"));
    assert_eq!(p1, p2);
    assert_eq!(g1.get(&x).as_vec(), g2.get(&x).as_vec());
}

/// A decoder block over `(targets, memory, mask)`, and masked
/// self-attention: blocks of several inputs under `remat`.
pub struct Cross;

#[compact]
impl Cross {
    fn forward(x: Input<5, 8>, mem: Input<4, 8>, mask: Mask<5, 4>) {
        let h = MultiHeadDotProductAttention(num_heads = 2)(LayerNorm()(x), mem, mask = mask);
        x + Dense(8)(gelu(h))
    }
}

pub struct EncDecPlain;

#[compact]
impl EncDecPlain {
    fn forward(src: Input<4, 8>, tgt: Input<5, 8>, mask: Mask<5, 4>) {
        let mem = tanh(Dense(8)(src));
        let causal = make_causal_mask(tgt);
        let y = tgt + SelfAttention(num_heads = 2)(tgt, mask = causal);
        let y = Cross(name = "cross")(y, mem, mask);
        Dense(3)(y[0])
    }
}

pub struct EncDecRemat;

#[compact]
impl EncDecRemat {
    fn forward(src: Input<4, 8>, tgt: Input<5, 8>, mask: Mask<5, 4>) {
        let mem = tanh(Dense(8)(src));
        let causal = make_causal_mask(tgt);
        let y = tgt + remat(SelfAttention(num_heads = 2))(tgt, mask = causal);
        let y = remat(Cross(name = "cross"))(y, mem, mask);
        Dense(3)(y[0])
    }
}

/// Under `remat`, a block of several inputs gives the plain block's values
/// and gradients bit for bit, the gradients of every float input (the
/// memory's reach the encoder) included.
#[test]
fn blocks_of_several_inputs_under_remat_bit_for_bit() {
    let dev: Cpu = Cpu::seed_from_u64(11);
    let (plain, remat) = twin!(dev, EncDecPlain, EncDecRemat, f64);
    let src: Tensor<Rank3<3, 4, 8>, f64, Cpu> = dev.sample_normal();
    let tgt: Tensor<Rank3<3, 5, 8>, f64, Cpu> = dev.sample_normal();
    let pattern: Vec<bool> = (0..60).map(|i| i % 3 != 1 || i % 4 == 0).collect();
    let mask: Tensor<Rank3<3, 5, 4>, bool, Cpu> =
        dev.tensor_from_vec(pattern, (Const::<3>, Const::<5>, Const::<4>));
    let y1 = plain.forward((src.clone(), tgt.clone(), mask.clone()));
    let y2 = remat.forward((src.clone(), tgt.clone(), mask.clone()));
    assert_eq!(bits(&y1.as_vec()), bits(&y2.as_vec()));
    let run = |y: Tensor<Rank2<3, 3>, f64, Cpu, OwnedTape<f64, Cpu>>| y.square().sum().backward();
    let g1 = run(plain.forward((
        src.clone().leaky_trace(),
        tgt.clone().leaky_trace(),
        mask.clone(),
    )));
    let g2 = run(remat.forward((src.clone().leaky_trace(), tgt.clone().leaky_trace(), mask)));
    assert_eq!(bits(&g1.get(&src).as_vec()), bits(&g2.get(&src).as_vec()));
    assert_eq!(bits(&g1.get(&tgt).as_vec()), bits(&g2.get(&tgt).as_vec()));
    let (p1, p2) = (grads_by_key(&plain, &g1), grads_by_key(&remat, &g2));
    assert!(
        p1["dense_0.weight"].iter().any(|v| *v != 0.0),
        "the encoder gets gradients"
    );
    assert!(p1.contains_key("cross.multi_head_dot_product_attention_0.key.weight"));
    assert_eq!(p1.len(), p2.len());
    for (k, g) in &p1 {
        assert_eq!(bits(g), bits(&p2[k]), "{k}");
    }
}
