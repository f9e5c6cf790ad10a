//! `StdConv`, vit_jax's weight-standardised convolution: the same output
//! as a `Conv` given the standardised kernel, and gradients into the raw
//! kernel that match finite differences (f64). Against Flax:
//! `tests/flax_port_bit.rs`.

use flaxen::prelude::*;

pub struct Std;

#[compact]
impl Std {
    fn forward(x: Input<3, 6, 6>) {
        let y = StdConv(
            4,
            (3, 3),
            strides = (2, 2),
            use_bias = false,
            name = "conv_root",
        )(x);
        StdConv(5, (1, 1))(relu(y))
    }
}

pub struct Plain;

#[compact]
impl Plain {
    fn forward(x: Input<3, 6, 6>) {
        let y = Conv(
            4,
            (3, 3),
            strides = (2, 2),
            use_bias = false,
            name = "conv_root",
        )(x);
        Conv(5, (1, 1))(relu(y))
    }
}

/// `(w - mean) / (std + 1e-5)` per output channel, by hand.
fn standardized(w: &[f64], per: usize) -> Vec<f64> {
    w.chunks(per)
        .flat_map(|c| {
            let n = c.len() as f64;
            let m = c.iter().sum::<f64>() / n;
            let s = (c.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n).sqrt();
            c.iter()
                .map(move |v| (v - m) / (s + 1e-5))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn std_conv_is_conv_on_the_standardised_kernel() {
    let dev = Cpu::seed_from_u64(3);
    let m = dev.build_module::<Std, f64>();
    let mut p = dev.build_module::<Plain, f64>();
    p.conv_root
        .weight
        .copy_from(&standardized(&m.conv_root.inner.weight.as_vec(), 27));
    p.conv_0
        .weight
        .copy_from(&standardized(&m.std_conv_0.inner.weight.as_vec(), 4));
    p.conv_0.bias.copy_from(&m.std_conv_0.inner.bias.as_vec());
    let x: Tensor<Rank4<2, 3, 6, 6>, f64, _> = dev.sample_normal();
    let (a, b) = (m.forward(x.clone()).as_vec(), p.forward(x).as_vec());
    for (a, b) in a.iter().zip(&b) {
        assert!((a - b).abs() < 1e-12, "{a} {b}");
    }
    // Keys are the convolution's own.
    let keys = flaxen::interop::flax::FlaxLeaves::of::<StdModule<f64, Cpu>>();
    let paths: Vec<String> = keys.leaves().iter().map(|l| l.flax_path()).collect();
    assert_eq!(
        paths,
        [
            "params/conv_root/kernel",
            "params/StdConv_0/kernel",
            "params/StdConv_0/bias"
        ]
    );
}

#[test]
fn std_conv_gradients_reach_the_raw_kernel() {
    let dev = Cpu::seed_from_u64(4);
    let m = dev.build_module::<Std, f64>();
    let x: Tensor<Rank4<2, 3, 6, 6>, f64, _> = dev.sample_normal();
    let r: Tensor<Rank4<2, 5, 3, 3>, f64, _> = dev.sample_normal();
    let grads = (m.forward(x.clone().traced(m.alloc_grads())) * r.clone())
        .sum()
        .backward();
    let g = grads.get(&m.conv_root.inner.weight).as_vec();
    let loss =
        |m: &StdModule<f64, Cpu>| (m.forward(x.clone()) * r.clone()).sum::<Rank0, _>().array();
    let w = m.conv_root.inner.weight.as_vec();
    let eps = 1e-6;
    for i in [0, 13, 40, 107] {
        let (mut up, mut down) = (m.clone(), m.clone());
        let (mut a, mut b) = (w.clone(), w.clone());
        a[i] += eps;
        b[i] -= eps;
        up.conv_root.inner.weight.copy_from(&a);
        down.conv_root.inner.weight.copy_from(&b);
        let num = (loss(&up) - loss(&down)) / (2.0 * eps);
        assert!(
            (num - g[i]).abs() < 1e-6 * num.abs().max(1.0),
            "{i}: {num} {}",
            g[i]
        );
    }
}
