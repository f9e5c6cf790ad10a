//! Random draws in the body, `jax.random`'s without the key:
//! `random.normal(shape)`, `random.uniform(shape, minval, maxval)`,
//! `random.bernoulli(p, shape)`. The draws come from the generator of the
//! input's device: a device seeded the same way draws the same values, so
//! the VAE's reparameterisation `mean + eps * exp(0.5 * logvar)` is checked
//! exactly against `eps` drawn again, and its gradients (through `mean` and
//! `logvar`, none through `eps`) against central differences taken with
//! the same draws. The distributions are checked on large draws (means and
//! spreads within 6 standard errors of JAX's definitions); the values are
//! not JAX's, whose generator differs.

use flaxen::prelude::*;
use flaxen::runtime::compact::{draw_normal, draw_uniform};

/// `z = mean + eps * std`, returned with `mean` and `logvar`, as the Flax
/// VAE's `reparameterize`.
pub struct Reparam;

#[compact]
impl Reparam {
    fn forward(x: Input<6>, latents: Param<3>) {
        let mean = Dense(latents)(x);
        let logvar = Dense(latents)(x);
        let std = exp(0.5 * logvar);
        let eps = random.normal(logvar.shape);
        (mean + eps * std, mean, logvar)
    }
}

/// Each draw on a wide shape, for its statistics.
pub struct Draws;

#[compact]
impl Draws {
    fn forward(x: Input<4000>) {
        let n = random.normal(x.shape);
        let u = random.uniform(x.shape, minval = -1.0, maxval = 3.0);
        let keep = random.bernoulli(0.3, x.shape);
        (n + 0.0 * x, u, select(keep, 1.0, x * 0.0))
    }
}

/// A mask drawn with `bernoulli` and applied with `select` (`jnp.where`),
/// as word dropout is: each value kept with probability `1 - rate`.
pub struct WordDropout;

#[compact]
impl WordDropout {
    fn forward(x: Input<5, 4>, rate: Param<0.25>) {
        let keep = random.bernoulli(1.0 - rate, x.shape);
        select(keep, x, 0.0)
    }
}

fn on(seed: u64, x: &Tensor<Rank2<2, 6>, f64, Cpu>) -> Tensor<Rank2<2, 6>, f64, Cpu> {
    x.to_device(&Cpu::seed_from_u64(seed))
}

#[test]
fn reparameterisation_uses_the_devices_draws_and_carries_gradients() {
    let dev = Cpu::seed_from_u64(0);
    let m = dev.build_module::<Reparam, f64>();
    let x: Tensor<Rank2<2, 6>, f64, Cpu> = dev.sample_normal();
    let (z, mean, logvar) = m.forward(on(11, &x));
    let eps = draw_normal::<_, f64, _, NoneTape>(&Cpu::seed_from_u64(11), (Const::<2>, Const::<3>))
        .unwrap()
        .as_vec();
    let (mean, logvar) = (mean.as_vec(), logvar.as_vec());
    for (k, z) in z.as_vec().iter().enumerate() {
        let want = mean[k] + eps[k] * (0.5 * logvar[k]).exp();
        assert!((z - want).abs() < 1e-12, "{k}: {z} vs {want}");
    }
    // Each call draws afresh.
    let x11 = on(11, &x);
    assert_ne!(m.forward(x11.clone()).0.as_vec(), m.forward(x11).0.as_vec());

    // Gradients through mean and logvar, eps held: the same draws each time.
    let w: Tensor<Rank2<2, 3>, f64, Cpu> = dev.sample_normal();
    let loss = |x: &Tensor<Rank2<2, 6>, f64, Cpu>| {
        (m.forward(on(11, x)).0 * w.clone())
            .sum::<Rank0, _>()
            .array()
    };
    let x11 = on(11, &x);
    let g = (m.forward(x11.leaky_trace()).0 * w.to_device(x11.device()))
        .sum()
        .backward();
    let g = g.get(&x11).as_vec();
    let base = x.as_vec();
    for k in 0..base.len() {
        let (mut a, mut b) = (base.clone(), base.clone());
        a[k] += 1e-6;
        b[k] -= 1e-6;
        let fd = (loss(&dev.tensor(a)) - loss(&dev.tensor(b))) / 2e-6;
        let fd: f64 = fd;
        assert!(
            (fd - g[k]).abs() < 1e-6 * fd.abs().max(1.0),
            "{k}: {fd} vs {}",
            g[k]
        );
    }
}

#[test]
fn draws_follow_jax_distributions() {
    let dev = Cpu::seed_from_u64(5);
    let m = dev.build_module::<Draws, f64>();
    let x: Tensor<Rank2<2, 4000>, f64, Cpu> = dev.zeros();
    let (n, u, keep) = m.forward(x);
    let stats = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / v.len() as f64;
        (mean, var)
    };
    let k = 8000f64;
    let (mean, var) = stats(&n.as_vec());
    assert!(mean.abs() < 6.0 / k.sqrt(), "normal mean {mean}");
    assert!(
        (var - 1.0).abs() < 6.0 * (2.0 / k).sqrt(),
        "normal variance {var}"
    );
    let u = u.as_vec();
    assert!(u.iter().all(|v| (-1.0..3.0).contains(v)));
    let (mean, var) = stats(&u);
    assert!(
        (mean - 1.0).abs() < 6.0 * (16.0 / 12.0 / k).sqrt(),
        "uniform mean {mean}"
    );
    assert!((var - 16.0 / 12.0).abs() < 0.1, "uniform variance {var}");
    let (rate, _) = stats(&keep.as_vec());
    assert!(
        (rate - 0.3).abs() < 6.0 * (0.3 * 0.7 / k).sqrt(),
        "bernoulli rate {rate}"
    );
    // A device seeded the same way draws the same values.
    let a = draw_uniform::<_, f64, _, NoneTape>(
        &Cpu::seed_from_u64(9),
        (Const::<2>, Const::<7>),
        -1.0,
        3.0,
    )
    .unwrap();
    let b = draw_uniform::<_, f64, _, NoneTape>(
        &Cpu::seed_from_u64(9),
        (Const::<2>, Const::<7>),
        -1.0,
        3.0,
    )
    .unwrap();
    assert_eq!(a.as_vec(), b.as_vec());
}

#[test]
fn a_bernoulli_mask_keeps_at_its_rate() {
    let dev = Cpu::seed_from_u64(2);
    let m = dev.build_module::<WordDropout, f64>();
    let x: Tensor<Rank3<64, 5, 4>, f64, Cpu> = dev.ones();
    let y = m.forward(x).as_vec();
    assert!(y.iter().all(|v| *v == 0.0 || *v == 1.0));
    let rate = y.iter().sum::<f64>() / y.len() as f64;
    let n = y.len() as f64;
    assert!(
        (rate - 0.75).abs() < 6.0 * (0.75 * 0.25 / n).sqrt(),
        "{rate}"
    );
}
