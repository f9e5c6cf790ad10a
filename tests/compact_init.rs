//! Flax's initialisers in `#[compact]` models, against Flax's own draws
//! (`tests/python/make_flax_inits.py`, `fixtures/flax_inits.json`): five
//! models written as the generator's Flax modules, built here, saved as
//! Flax lays them out, and each tensor compared with the same tensor of
//! Flax's model by Flax path.
//!
//! - constants (`zeros`, `ones`, `constant(v)`): every value, exactly (f64
//!   here, Flax's float32 value within its rounding);
//! - `orthogonal`: the shorter side orthonormal, scaled, within 1e-9;
//! - every random one: all draws inside the distribution's support (the
//!   truncation bounds, the uniform's ends), and the mean and standard
//!   deviation within 6 standard errors of the analytic ones and of Flax's
//!   own draw's. The analytic std holds each layer's fans (a conv's
//!   receptive field, one group's inputs, attention's flattened kernels),
//!   so a wrong fan fails here: the closest pair in the fixture (fan_in 90
//!   against 108) differs by 10% in std, over 10 standard errors.

use flaxen::interop::flax;
use flaxen::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;

pub struct InitDense;

#[compact]
impl InitDense {
    fn forward(x: Input<300>) {
        let x = Dense(
            256,
            kernel_init = xavier_uniform(),
            bias_init = normal(stddev = 0.5),
        )(x);
        let x = Dense(
            256,
            kernel_init = variance_scaling(2.0, "fan_out", "normal"),
            bias_init = uniform(scale = 2.0),
        )(x);
        let x = Dense(256, kernel_init = glorot_normal(), use_bias = false)(x);
        let x = Dense(
            256,
            kernel_init = lecun_uniform(),
            bias_init = truncated_normal(stddev = 0.5),
        )(x);
        let x = Dense(
            256,
            kernel_init = kaiming_normal(),
            bias_init = constant(0.25),
        )(x);
        let x = Dense(
            256,
            kernel_init = variance_scaling(0.5, "fan_avg", "truncated_normal"),
            bias_init = ones,
        )(x);
        let x = Dense(
            256,
            kernel_init = variance_scaling(3.0, "fan_in", "uniform"),
            bias_init = zeros,
        )(x);
        let x = Dense(256, kernel_init = zeros, bias_init = ones_init())(x);
        let x = Dense(256, kernel_init = constant(-0.5), bias_init = zeros_init())(x);
        let x = Dense(128, kernel_init = orthogonal())(x);
        let x = Dense(
            256,
            kernel_init = truncated_normal(stddev = 2.0, lower = -1.0, upper = 0.5),
        )(x);
        let x = Dense(256, kernel_init = he_uniform())(x);
        let x = Dense(
            256,
            kernel_init = xavier_normal(),
            bias_init = normal(stddev = 3.0),
        )(x);
        let x = Dense(256, kernel_init = kaiming_uniform())(x);
        let x = Dense(256, kernel_init = normal(stddev = 0.2))(x);
        let x = Dense(256, kernel_init = uniform(scale = 0.5))(x);
        let x = Dense(256, kernel_init = he_normal())(x);
        let x = Dense(256, kernel_init = lecun_normal())(x);
        let x = Dense(256, kernel_init = glorot_uniform())(x);
        Dense(200, kernel_init = orthogonal(scale = 2.0))(x)
    }
}

pub struct InitConv;

#[compact]
impl InitConv {
    fn forward(x: Input<6, 9, 9>) {
        let x = Conv(
            48,
            (3, 5),
            kernel_init = he_normal(),
            bias_init = uniform(scale = 2.0),
        )(x);
        let x = Conv(
            32,
            (3, 3),
            feature_group_count = 4,
            kernel_init = lecun_normal(),
        )(x);
        let x = GroupNorm(
            num_groups = 4,
            scale_init = uniform(scale = 3.0),
            bias_init = constant(-1.0),
        )(x);
        let x = ConvTranspose(
            20,
            (3, 3),
            kernel_init = xavier_uniform(),
            bias_init = constant(0.25),
        )(x);
        let x = BatchNorm(scale_init = zeros, bias_init = normal(stddev = 1.0))(x);
        Conv(
            64,
            (1, 1),
            kernel_init = variance_scaling(1.0, "fan_avg", "uniform"),
        )(x)
    }
}

pub struct InitTokens;

#[compact]
impl InitTokens {
    fn forward(t: Tokens<12>) {
        let a = Embed(500, 48, embedding_init = normal(stddev = 1.0))(t);
        let b = Embed(
            300,
            48,
            embedding_init = variance_scaling(1.0, "fan_in", "uniform"),
        )(t);
        let c = Embed(400, 48)(t);
        let x = a + b + c;
        let x = MultiHeadDotProductAttention(
            num_heads = 4,
            qkv_features = 64,
            kernel_init = xavier_uniform(),
            bias_init = truncated_normal(stddev = 0.1),
        )(x, x);
        let x = MultiHeadDotProductAttention(
            num_heads = 2,
            qkv_features = 32,
            out_features = 40,
            kernel_init = he_uniform(),
        )(x, x);
        let x = LayerNorm(scale_init = constant(2.0), bias_init = ones)(x);
        RMSNorm(scale_init = normal(stddev = 0.5))(x)
    }
}

pub struct InitRnn;

#[compact]
impl InitRnn {
    fn forward(x: Input<7, 24>) {
        let x = RNN(LSTMCell(
            64,
            kernel_init = glorot_normal(),
            recurrent_kernel_init = orthogonal(),
            bias_init = ones,
        ))(x);
        let x = RNN(GRUCell(
            48,
            kernel_init = kaiming_uniform(),
            recurrent_kernel_init = lecun_normal(),
            bias_init = constant(0.1),
        ))(x);
        RNN(SimpleCell(
            40,
            kernel_init = xavier_uniform(),
            recurrent_kernel_init = normal(stddev = 0.3),
            bias_init = constant(0.5),
        ))(x)
    }
}

pub struct InitParams;

#[compact]
impl InitParams {
    fn forward(x: Input<10, 16>) {
        let cls = param("cls", zeros, (1, 1, 16));
        let pos = param("pos_embedding", normal(stddev = 0.02), (1, 10, 16));
        let w = param("w", xavier_uniform(), (200, 300));
        let t = param(
            "t",
            truncated_normal(stddev = 0.5, lower = -1.0, upper = 3.0),
            (100, 100),
        );
        let scale = param("scale", ones, (16,));
        let c = param("c", constant(0.3), (4, 16));
        let v = param("v", lecun_normal(), (64, 3, 3, 32));
        concatenate((cls, x + pos), axis = -2) * scale
    }
}

/// The model's tensors as Flax lays them out, by Flax path.
fn flax_tensors<M>(model: &M) -> BTreeMap<String, (Vec<usize>, Vec<f64>)>
where
    M: TensorCollection<f64, Cpu> + flax::FlaxLayout,
{
    let bytes = flax::save(model).unwrap();
    flax::read_arrays(&bytes)
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k, (t.shape, t.data)))
        .collect()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// Every leaf of Flax's model `name` against flaxen's.
fn compare(name: &str, ours: &BTreeMap<String, (Vec<usize>, Vec<f64>)>) {
    let fixture: Value = serde_json::from_str(include_str!("fixtures/flax_inits.json")).unwrap();
    let leaves = fixture[name].as_object().unwrap();
    let mut got: Vec<&String> = ours.keys().collect();
    got.sort();
    let mut want: Vec<&String> = leaves.keys().collect();
    want.sort();
    assert_eq!(got, want, "{name}: Flax's leaves");
    for (path, leaf) in leaves {
        let (shape, v) = &ours[path];
        let flax_shape: Vec<usize> = leaf["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(shape, &flax_shape, "{name} {path}");
        let what = format!("{name} {path} ({})", leaf["init"]);
        let n = v.len() as f64;
        if let Some(exact) = leaf["exact"].as_f64() {
            // Flax's value is the float32 nearest `exact`.
            assert!(v.iter().all(|x| *x == exact), "{what}: not all {exact}");
            assert!((num(&leaf["mean"]) - exact).abs() <= 1e-7 * exact.abs().max(1.0));
            continue;
        }
        let mean = v.iter().sum::<f64>() / n;
        let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        if leaf["kind"] == "orthogonal" {
            let cols = *flax_shape.last().unwrap();
            let rows = v.len() / cols;
            let scale2 = (num(&leaf["expected_rms"]).powi(2) * n / rows.min(cols) as f64).sqrt();
            let scale2 = scale2 * scale2;
            let (k, len) = (rows.min(cols), rows.max(cols));
            let at = |a: usize, i: usize| {
                if cols <= rows {
                    v[i * cols + a]
                } else {
                    v[a * cols + i]
                }
            };
            for a in 0..k {
                for b in 0..k {
                    let dot: f64 = (0..len).map(|i| at(a, i) * at(b, i)).sum();
                    let want = if a == b { scale2 } else { 0.0 };
                    assert!(
                        (dot - want).abs() < 1e-9,
                        "{what}: Q^T Q [{a}, {b}] = {dot}"
                    );
                }
            }
            continue;
        }
        if let Some(s) = leaf["support"].as_array() {
            let (lo, hi) = (num(&s[0]), num(&s[1]));
            let slack = 1e-12 * hi.abs().max(lo.abs());
            assert!(
                v.iter().all(|x| *x >= lo - slack && *x <= hi + slack),
                "{what}: a draw outside [{lo}, {hi}]"
            );
            // Flax's draw fills its support: so does ours.
            let width = hi - lo;
            let (min, max) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
            if n >= 1000.0 {
                assert!(
                    min - lo < 0.05 * width && hi - max < 0.05 * width,
                    "{what}: [{min}, {max}]"
                );
            }
        }
        let (em, es) = (num(&leaf["expected_mean"]), num(&leaf["expected_std"]));
        let se = es / n.sqrt();
        assert!(
            (mean - em).abs() <= 6.0 * se,
            "{what}: mean {mean}, expected {em}"
        );
        assert!(
            (std - es).abs() <= 6.0 * es / n.sqrt(),
            "{what}: std {std}, expected {es}"
        );
        let (fm, fs) = (num(&leaf["mean"]), num(&leaf["std"]));
        assert!(
            (mean - fm).abs() <= 8.5 * se,
            "{what}: mean {mean}, Flax's {fm}"
        );
        assert!(
            (std - fs).abs() <= 8.5 * es / n.sqrt(),
            "{what}: std {std}, Flax's {fs}"
        );
    }
}

#[test]
fn dense_initialisers_draw_as_flax_does() {
    let dev = Cpu::seed_from_u64(1);
    compare(
        "InitDense",
        &flax_tensors(&dev.build_module::<InitDense, f64>()),
    );
}

#[test]
fn conv_and_norm_initialisers_use_flax_fans() {
    let dev = Cpu::seed_from_u64(2);
    compare(
        "InitConv",
        &flax_tensors(&dev.build_module::<InitConv, f64>()),
    );
}

#[test]
fn embed_and_attention_initialisers_use_flax_fans() {
    let dev = Cpu::seed_from_u64(3);
    compare(
        "InitTokens",
        &flax_tensors(&dev.build_module::<InitTokens, f64>()),
    );
}

#[test]
fn recurrent_cell_initialisers_land_where_flax_puts_them() {
    let dev = Cpu::seed_from_u64(4);
    compare(
        "InitRnn",
        &flax_tensors(&dev.build_module::<InitRnn, f64>()),
    );
}

#[test]
fn declared_parameters_draw_with_flax_fans() {
    let dev = Cpu::seed_from_u64(5);
    compare(
        "InitParams",
        &flax_tensors(&dev.build_module::<InitParams, f64>()),
    );
}

/// `reset_params` redraws with the layers' defaults; `try_initialize`
/// puts the model's own initialisers back, and a declared `param` keeps
/// its own through both.
#[test]
fn initialize_after_reset_params_restores_the_source_initialisers() {
    use flaxen::runtime::compact::Initialize;
    let dev = Cpu::seed_from_u64(6);
    let mut m = dev.build_module::<InitConv, f32>();
    m.try_reset_params().unwrap();
    assert!(m.batch_norm_0.scale.as_vec().iter().all(|v| *v == 1.0));
    m.try_initialize().unwrap();
    assert!(m.batch_norm_0.scale.as_vec().iter().all(|v| *v == 0.0));
    let mut p = dev.build_module::<InitParams, f32>();
    p.try_reset_params().unwrap();
    assert!(p.c.as_vec().iter().all(|v| *v == 0.3));
}

/// The same models built on dfdx's `Cuda` device (compiled by CI's
/// `cuda,ci-check` check, run where a GPU is): the initialisers fill
/// device memory through the same draws.
#[cfg(feature = "cuda")]
#[test]
fn initialisers_fill_cuda_tensors_as_flax_does() {
    let dev = Cuda::seed_from_u64(7);
    let conv = dev
        .build_module::<InitConv, f64>()
        .to_device(&Cpu::default());
    compare("InitConv", &flax_tensors(&conv));
    let params = dev
        .build_module::<InitParams, f64>()
        .to_device(&Cpu::default());
    compare("InitParams", &flax_tensors(&params));
}
