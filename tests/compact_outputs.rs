//! Several outputs, `(mean, logvar)` / `(policy, value)`: the module
//! returns a tuple of tensors; the whole tape travels with the first, so a
//! loss that reads the first (alone or with the others) has every
//! parameter's gradient. Against Flax: `tests/flax_ports.rs`'s PPO
//! `ActorCritic` (gradients within 1e-4 of Flax's).

use flaxen::prelude::*;

/// A VAE encoder's head: a shared trunk, then `mean` and `logvar`.
pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(x: Input<6>, latents: Param<3>) {
        let h = relu(Dense(8)(x));
        let mean = Dense(latents, name = "fc2_mean")(h);
        let logvar = Dense(latents, name = "fc2_logvar")(h);
        (mean, logvar)
    }
}

/// Three outputs of different shapes, one of them the trunk itself.
pub struct Three;

#[compact]
impl Three {
    fn forward(x: Input<4, 5>) {
        let h = tanh(Dense(5)(x));
        (mean(h, axis = -1), h, Dense(2)(x[0]))
    }
}

type X = Tensor<Rank2<3, 6>, f64, Cpu>;

fn grads_of(m: &EncoderModule<f64, Cpu>, x: &X, wm: f64, wl: f64) -> Vec<Vec<f64>> {
    let (mean, logvar) = m.forward(x.clone().traced(m.alloc_grads()));
    let loss = (mean * wm).sum() + (logvar * wl).sum();
    let g = loss.backward();
    vec![
        g.get(&m.dense_0.weight).as_vec(),
        g.get(&m.fc2_mean.weight).as_vec(),
        g.get(&m.fc2_logvar.weight).as_vec(),
    ]
}

#[test]
fn a_loss_of_both_outputs_trains_the_trunk_and_both_heads() {
    let dev = Cpu::seed_from_u64(0);
    let m = dev.build_module::<Encoder, f64>();
    let x: X = dev.sample_normal();
    let (mean, logvar) = m.forward(x.clone());
    assert_eq!(mean.shape(), &(Const::<3>, Const::<3>));
    assert_eq!(logvar.shape(), &(Const::<3>, Const::<3>));
    // The combined loss's gradients are the sums of each output's, and
    // finite differences agree.
    let both = grads_of(&m, &x, 1.0, 0.5);
    let only_mean = grads_of(&m, &x, 1.0, 0.0);
    let only_logvar = grads_of(&m, &x, 0.0, 0.5);
    for k in 0..3 {
        for i in 0..both[k].len() {
            let sum = only_mean[k][i] + only_logvar[k][i];
            assert!((both[k][i] - sum).abs() < 1e-12);
        }
    }
    assert!(
        only_logvar[0].iter().any(|g| *g != 0.0),
        "the trunk learns from logvar"
    );
    let loss = |m: &EncoderModule<f64, Cpu>| {
        let (a, b) = m.forward(x.clone());
        (a.sum::<Rank0, _>().array()) + 0.5 * b.sum::<Rank0, _>().array()
    };
    let eps = 1e-6;
    let w = m.dense_0.weight.as_vec();
    for i in [0, 7, 20] {
        let mut p = m.clone();
        let mut v = w.clone();
        v[i] += eps;
        p.dense_0.weight.copy_from(&v);
        let num = (loss(&p) - loss(&m)) / eps;
        assert!((num - both[0][i]).abs() < 1e-5, "{num} {}", both[0][i]);
    }
}

#[test]
fn the_first_output_alone_carries_every_gradient() {
    let dev = Cpu::seed_from_u64(1);
    let m = dev.build_module::<Three, f32>();
    let x: Tensor<Rank3<2, 4, 5>, f32, _> = dev.sample_normal();
    let (a, h, c) = m.forward(x.clone());
    assert_eq!(a.shape(), &(Const::<2>, Const::<4>));
    assert_eq!(h.shape(), &(Const::<2>, Const::<4>, Const::<5>));
    assert_eq!(c.shape(), &(Const::<2>, Const::<2>));
    // Training mode too; the loss reads the first output only.
    let mut m = m;
    let (a, _h, _c) = m.forward_mut(x.traced(m.alloc_grads()));
    let g = a.sum().backward();
    assert!(g.get(&m.dense_0.weight).as_vec().iter().any(|v| *v != 0.0));
    assert!(g.get(&m.dense_1.weight).as_vec().iter().all(|v| *v == 0.0));
}

/// `Encoder` applied inside another model, its outputs bound by name, as
/// the Flax VAE's `mean, logvar = self.encoder(x)`.
pub struct Outer;

#[compact]
impl Outer {
    fn forward(x: Input<6>) {
        let (mean, logvar) = Encoder(name = "encoder")(x);
        let z = mean + exp(0.5 * logvar);
        (Dense(6, name = "decoder")(z), mean, logvar)
    }
}

/// The same written out in one model.
pub struct OuterWrittenOut;

#[compact]
impl OuterWrittenOut {
    fn forward(x: Input<6>) {
        let h = relu(Dense(8, name = "dense_0")(x));
        let mean = Dense(3, name = "fc2_mean")(h);
        let logvar = Dense(3, name = "fc2_logvar")(h);
        let z = mean + exp(0.5 * logvar);
        (Dense(6, name = "decoder")(z), mean, logvar)
    }
}

#[test]
fn a_nested_models_outputs_bound_by_name_compute_as_written_out() {
    let dev = Cpu::seed_from_u64(4);
    let a = dev.build_module::<Outer, f64>();
    let mut b = dev.build_module::<OuterWrittenOut, f64>();
    b.dense_0 = a.encoder.dense_0.clone();
    b.fc2_mean = a.encoder.fc2_mean.clone();
    b.fc2_logvar = a.encoder.fc2_logvar.clone();
    b.decoder = a.decoder.clone();
    let x: X = dev.sample_normal();
    type Taped<S> = Tensor<S, f64, Cpu, OwnedTape<f64, Cpu>>;
    let loss = |(r, m, l): (Taped<Rank2<3, 6>>, Taped<Rank2<3, 3>>, Taped<Rank2<3, 3>>)| {
        r.square().sum() + (m * 2.0).sum() + l.exp().sum()
    };
    let ga = loss(a.forward(x.clone().traced(a.alloc_grads()))).backward();
    let gb = loss(b.forward(x.clone().traced(b.alloc_grads()))).backward();
    assert_eq!(
        ga.get(&a.encoder.fc2_logvar.weight).as_vec(),
        gb.get(&b.fc2_logvar.weight).as_vec()
    );
    assert_eq!(
        ga.get(&a.encoder.dense_0.weight).as_vec(),
        gb.get(&b.dense_0.weight).as_vec()
    );
    assert_eq!(
        ga.get(&a.decoder.bias).as_vec(),
        gb.get(&b.decoder.bias).as_vec()
    );
    let (ra, ma, la) = a.forward(x.clone());
    let (rb, mb, lb) = b.forward(x);
    assert_eq!(
        (ra.as_vec(), ma.as_vec(), la.as_vec()),
        (rb.as_vec(), mb.as_vec(), lb.as_vec())
    );
}
