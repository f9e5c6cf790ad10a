//! `tests/fixtures/flax_norm_act.json` (Flax linen BatchNorm, LayerNorm and
//! activations, float64, made by `tests/python/make_flax_norm_act.py`) and
//! the `#[compact]` models that run its cases on any device, shared by
//! `tests/layers_norm_act.rs` (Cpu) and `tests/cuda_layers.rs` (Cuda):
//! include with `#[path = "common/norm_act.rs"] mod norm_act;` and call
//! `norm_act::all_cases!(&dev, f32)`.
//!
//! Every case runs through a DSL model written with Flax's defaults where
//! the fixture uses them, and checks forward values, the gradients of
//! `loss = sum(y * r)` w.r.t. the input and the parameters, and
//! BatchNorm's updated running statistics. Tolerances: f64 `|got - flax| <=
//! 1e-9 * max(|flax|, 1)`; f32 (inputs rounded to f32) `<= 1e-4 *
//! max(|flax|, 1)`.
#![allow(dead_code)]

use flaxen::prelude::*;
use serde::Deserialize;

pub use crate::fixture::{assert_flax, cast, tensor, Arr};

#[derive(Deserialize)]
pub struct BnOut {
    pub y: Arr,
    pub running_mean: Arr,
    pub running_var: Arr,
    pub grad_x: Arr,
    pub grad_scale: Arr,
    pub grad_bias: Arr,
}

#[derive(Deserialize)]
pub struct BnCase {
    pub layer: String,
    pub x: Arr,
    pub r: Arr,
    pub scale: Arr,
    pub bias: Arr,
    pub running_mean: Arr,
    pub running_var: Arr,
    pub train: BnOut,
    pub eval: BnOut,
}

#[derive(Deserialize)]
pub struct ActCase {
    pub op: String,
    pub x: Arr,
    pub r: Arr,
    pub y: Arr,
    pub grad_x: Arr,
}

/// LayerNorm, RMSNorm (no bias) and GroupNorm cases.
#[derive(Deserialize)]
pub struct ScaleNormCase {
    pub layer: String,
    pub x: Arr,
    pub r: Arr,
    pub scale: Arr,
    pub bias: Option<Arr>,
    pub y: Arr,
    pub grad_x: Arr,
    pub grad_scale: Arr,
    pub grad_bias: Option<Arr>,
}

/// SelfAttention cases: every projection's weight `(out, in)` and bias, and
/// their gradients (keys `query_weight`, `grad_query_weight`, ...).
#[derive(Deserialize)]
pub struct AttnCase {
    pub layer: String,
    pub x: Arr,
    pub r: Arr,
    pub y: Arr,
    pub grad_x: Arr,
    #[serde(flatten)]
    pub projections: std::collections::BTreeMap<String, Arr>,
}

#[derive(Deserialize)]
pub struct Fixture {
    pub batch_norm: Vec<BnCase>,
    pub layer_norm: Vec<ScaleNormCase>,
    pub activations: Vec<ActCase>,
    pub rms_norm: Vec<ScaleNormCase>,
    pub group_norm: Vec<ScaleNormCase>,
    pub self_attention: Vec<AttnCase>,
}

pub fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../fixtures/flax_norm_act.json")).expect("fixture parses")
}

// ------------------------------------------------------------ the models

/// One `#[compact]` model per line: `Name [input dims] { body }`.
macro_rules! models {
    ($($(#[$doc:meta])* $model:ident [$($dim:literal),*] { $($body:tt)* })*) => {$(
        $(#[$doc])*
        #[doc = concat!("`", stringify!($($body)*), "` alone.")]
        pub struct $model;

        #[compact]
        impl $model {
            fn forward(x: Input<$($dim),*>) {
                $($body)*
            }
        }
    )*};
}

models! {
    /// Flax's `BatchNorm(momentum=0.9)` on features (epsilon: the default).
    Bn1 [5] { BatchNorm(momentum = 0.9)(x) }
    /// Flax's `BatchNorm(epsilon=1e-3)` on images (momentum: the default).
    Bn2 [4, 5, 6] { BatchNorm(epsilon = 1e-3)(x) }
    Ln1 [7] { LayerNorm()(x) }
    Ln2 [4, 7] { LayerNorm(epsilon = 1e-2)(x) }
    Rms1 [7] { RMSNorm()(x) }
    Rms2 [4, 7] { RMSNorm(epsilon = 1e-2)(x) }
    Gn1 [8, 3, 4] { GroupNorm(num_groups = 4)(x) }
    Gn2 [6, 3, 3] { GroupNorm(group_size = 3, epsilon = 1e-3)(x) }
    Attn1 [5, 4] { SelfAttention(num_heads = 2, qkv_features = 8, out_features = 6)(x) }
    /// qkv and out features: the input's.
    Attn2 [4, 6] { SelfAttention(3)(x) }
    ReluOp [9] { relu(x) }
    GeluOp [9] { gelu(x) }
    GeluExactOp [9] { gelu(x, approximate = false) }
    SiluOp [9] { silu(x) }
    SigmoidOp [9] { sigmoid(x) }
    TanhOp [9] { tanh(x) }
    SoftmaxOp [9] { softmax(x) }
    LogSoftmaxOp [9] { log_softmax(x) }
    SoftmaxSeqOp [4, 5] { softmax(x, axis = -2) }
    LogSoftmaxSeqOp [4, 5] { log_softmax(x, -2) }
    SwishOp [9] { swish(x) }
    LeakyReluOp [9] { leaky_relu(x) }
    LeakyRelu02Op [9] { leaky_relu(x, negative_slope = 0.2) }
    EluOp [9] { elu(x) }
    Elu05Op [9] { elu(x, 0.5) }
    SeluOp [9] { selu(x) }
    SoftplusOp [9] { softplus(x) }
    LogSigmoidOp [9] { log_sigmoid(x) }
    Relu6Op [9] { relu6(x) }
    HardTanhOp [9] { hard_tanh(x) }
    HardSigmoidOp [9] { hard_sigmoid(x) }
    HardSiluOp [9] { hard_silu(x) }
}

// ------------------------------------------------------------- the checks

/// One BatchNorm case through a model whose only field is `batch_norm_0`:
/// inference with the fixture's running statistics (which it must leave
/// alone), then training (batch statistics, gradients, updated statistics).
macro_rules! batch_norm_case {
    ($dev:expr, $model:ty, $e:ty, $case:expr, $x:ty) => {{
        use $crate::norm_act::{assert_flax, cast, tensor};
        let dev = $dev;
        let case: &$crate::norm_act::BnCase = $case;
        let mut m = dev.build_module::<$model, $e>();
        m.batch_norm_0.scale.copy_from(&cast::<$e>(&case.scale));
        m.batch_norm_0.bias.copy_from(&cast::<$e>(&case.bias));
        m.batch_norm_0
            .running_mean
            .copy_from(&cast::<$e>(&case.running_mean));
        m.batch_norm_0
            .running_var
            .copy_from(&cast::<$e>(&case.running_var));
        let x: Tensor<$x, $e, _> = tensor(dev, &case.x);
        let r: Tensor<$x, $e, _> = tensor(dev, &case.r);
        let what = |s: &str| format!("{} {} {s}", case.layer, stringify!($e));

        let y = m.forward(x.clone());
        assert_flax(&what("eval y"), &y.as_vec(), &case.eval.y);
        let bn = &m.batch_norm_0;
        assert_flax(
            &what("eval keeps running_mean"),
            &bn.running_mean.as_vec(),
            &case.running_mean,
        );
        assert_flax(
            &what("eval keeps running_var"),
            &bn.running_var.as_vec(),
            &case.running_var,
        );

        let y = m.forward_mut(x.leaky_trace());
        let t = &case.train;
        assert_flax(&what("train y"), &y.as_vec(), &t.y);
        let g = (y * r).sum().backward();
        let bn = &m.batch_norm_0;
        assert_flax(&what("grad x"), &g.get(&x).as_vec(), &t.grad_x);
        assert_flax(
            &what("grad scale"),
            &g.get(&bn.scale).as_vec(),
            &t.grad_scale,
        );
        assert_flax(&what("grad bias"), &g.get(&bn.bias).as_vec(), &t.grad_bias);
        assert_flax(
            &what("running_mean"),
            &bn.running_mean.as_vec(),
            &t.running_mean,
        );
        assert_flax(
            &what("running_var"),
            &bn.running_var.as_vec(),
            &t.running_var,
        );
    }};
}

/// One LayerNorm, RMSNorm or GroupNorm case through a model whose only
/// field is `$field`, written `$field: scale` or `$field: scale, bias` with
/// the layer's names of Flax's `scale` and `bias` (`LayerNorm`, as dfdx's `LayerNorm1D`,
/// calls them `gamma` and `beta`): values with and without a tape,
/// gradients w.r.t. the input, the scale and the bias.
macro_rules! scale_norm_case {
    ($dev:expr, $model:ty, $e:ty, $case:expr, $x:ty, $field:ident: $scale:ident $(, $bias:ident)?) => {{
        use $crate::norm_act::{assert_flax, cast, tensor};
        let dev = $dev;
        let case: &$crate::norm_act::ScaleNormCase = $case;
        let mut m = dev.build_module::<$model, $e>();
        m.$field.$scale.copy_from(&cast::<$e>(&case.scale));
        $(m.$field.$bias.copy_from(&cast::<$e>(case.bias.as_ref().expect("bias")));)?
        let x: Tensor<$x, $e, _> = tensor(dev, &case.x);
        let r: Tensor<$x, $e, _> = tensor(dev, &case.r);
        let what = |s: &str| format!("{} {} {s}", case.layer, stringify!($e));
        assert_flax(&what("y, no tape"), &m.forward(x.clone()).as_vec(), &case.y);
        let y = m.forward(x.leaky_trace());
        assert_flax(&what("y"), &y.as_vec(), &case.y);
        let g = (y * r).sum().backward();
        assert_flax(&what("grad x"), &g.get(&x).as_vec(), &case.grad_x);
        assert_flax(&what("grad scale"), &g.get(&m.$field.$scale).as_vec(), &case.grad_scale);
        $(assert_flax(
            &what("grad bias"),
            &g.get(&m.$field.$bias).as_vec(),
            case.grad_bias.as_ref().expect("grad_bias"),
        );)?
        let checks_bias: &[&str] = &[$(stringify!($bias))?];
        assert_eq!(case.bias.is_some(), !checks_bias.is_empty(), "{}: bias", case.layer);
    }};
}

/// One SelfAttention case through a model whose only field is
/// `self_attention_0`: values with and without a tape, gradients w.r.t. the
/// input and every projection's weight and bias.
macro_rules! attention_case {
    ($dev:expr, $model:ty, $e:ty, $case:expr, $x:ty, $y:ty) => {{
        use $crate::norm_act::{assert_flax, cast, tensor};
        let dev = $dev;
        let case: &$crate::norm_act::AttnCase = $case;
        let p = |k: &str| {
            case.projections
                .get(k)
                .unwrap_or_else(|| panic!("{}: no `{k}`", case.layer))
        };
        let mut m = dev.build_module::<$model, $e>();
        let a = &mut m.self_attention_0;
        a.query.weight.copy_from(&cast::<$e>(p("query_weight")));
        a.query.bias.copy_from(&cast::<$e>(p("query_bias")));
        a.key.weight.copy_from(&cast::<$e>(p("key_weight")));
        a.key.bias.copy_from(&cast::<$e>(p("key_bias")));
        a.value.weight.copy_from(&cast::<$e>(p("value_weight")));
        a.value.bias.copy_from(&cast::<$e>(p("value_bias")));
        a.out.weight.copy_from(&cast::<$e>(p("out_weight")));
        a.out.bias.copy_from(&cast::<$e>(p("out_bias")));
        let x: Tensor<$x, $e, _> = tensor(dev, &case.x);
        let r: Tensor<$y, $e, _> = tensor(dev, &case.r);
        let what = |s: &str| format!("{} {} {s}", case.layer, stringify!($e));
        assert_flax(&what("y, no tape"), &m.forward(x.clone()).as_vec(), &case.y);
        let y = m.forward(x.leaky_trace());
        assert_flax(&what("y"), &y.as_vec(), &case.y);
        let g = (y * r).sum().backward();
        assert_flax(&what("grad x"), &g.get(&x).as_vec(), &case.grad_x);
        let a = &m.self_attention_0;
        for (n, d) in [("query", &a.query), ("key", &a.key), ("value", &a.value)] {
            assert_flax(
                &what(n),
                &g.get(&d.weight).as_vec(),
                p(&format!("grad_{n}_weight")),
            );
            assert_flax(
                &what(n),
                &g.get(&d.bias).as_vec(),
                p(&format!("grad_{n}_bias")),
            );
        }
        assert_flax(
            &what("out"),
            &g.get(&a.out.weight).as_vec(),
            p("grad_out_weight"),
        );
        assert_flax(
            &what("out"),
            &g.get(&a.out.bias).as_vec(),
            p("grad_out_bias"),
        );
    }};
}

/// One activation case (input shape `$x`, batch axis first): values with
/// and without a tape, and the gradient.
macro_rules! activation_case {
    ($dev:expr, $model:ty, $e:ty, $case:expr, $x:ty) => {{
        use $crate::norm_act::{assert_flax, tensor};
        let dev = $dev;
        let case: &$crate::norm_act::ActCase = $case;
        let m = dev.build_module::<$model, $e>();
        let x: Tensor<$x, $e, _> = tensor(dev, &case.x);
        let r: Tensor<$x, $e, _> = tensor(dev, &case.r);
        let what = |s: &str| format!("{} {} {s}", case.op, stringify!($e));
        assert_flax(&what("y, no tape"), &m.forward(x.clone()).as_vec(), &case.y);
        let y = m.forward(x.leaky_trace());
        assert_flax(&what("y"), &y.as_vec(), &case.y);
        let g = (y * r).sum().backward();
        assert_flax(&what("grad x"), &g.get(&x).as_vec(), &case.grad_x);
    }};
}

/// `activation_case!` for each `"op": Model, Shape;` line, counting them.
macro_rules! each_activation {
    (($dev:expr, $e:ty, $case:ident, $count:ident) $($op:literal: $model:ident, $x:ty;)*) => {$(
        activation_case!($dev, $model, $e, $case($op), $x);
        $count += 1;
    )*};
}

/// Every case of the fixture on `$dev` in dtype `$e`.
macro_rules! all_cases {
    ($dev:expr, $e:ty) => {{
        use $crate::norm_act::*;
        let f = fixture();
        let [bn1, bn2] = &f.batch_norm[..] else {
            panic!("a new BatchNorm case needs a line here")
        };
        batch_norm_case!($dev, Bn1, $e, bn1, Rank2<6, 5>);
        batch_norm_case!($dev, Bn2, $e, bn2, Rank4<3, 4, 5, 6>);
        let [ln1, ln2] = &f.layer_norm[..] else {
            panic!("a new LayerNorm case needs a line here")
        };
        scale_norm_case!($dev, Ln1, $e, ln1, Rank2<4, 7>, layer_norm_0: gamma, beta);
        scale_norm_case!($dev, Ln2, $e, ln2, Rank3<3, 4, 7>, layer_norm_0: gamma, beta);
        let case = |op: &str| {
            f.activations
                .iter()
                .find(|c| c.op == op)
                .unwrap_or_else(|| panic!("the fixture has no `{op}` case"))
        };
        let [rms1, rms2] = &f.rms_norm[..] else {
            panic!("a new RMSNorm case needs a line here")
        };
        scale_norm_case!($dev, Rms1, $e, rms1, Rank2<4, 7>, rms_norm_0: scale);
        scale_norm_case!($dev, Rms2, $e, rms2, Rank3<3, 4, 7>, rms_norm_0: scale);
        let [gn1, gn2] = &f.group_norm[..] else {
            panic!("a new GroupNorm case needs a line here")
        };
        scale_norm_case!($dev, Gn1, $e, gn1, Rank4<2, 8, 3, 4>, group_norm_0: scale, bias);
        scale_norm_case!($dev, Gn2, $e, gn2, Rank4<2, 6, 3, 3>, group_norm_0: scale, bias);
        let [at1, at2] = &f.self_attention[..] else {
            panic!("a new SelfAttention case needs a line here")
        };
        attention_case!($dev, Attn1, $e, at1, Rank3<2, 5, 4>, Rank3<2, 5, 6>);
        attention_case!($dev, Attn2, $e, at2, Rank3<3, 4, 6>, Rank3<3, 4, 6>);
        let mut checked = 0;
        each_activation! {
            ($dev, $e, case, checked)
            "relu": ReluOp, Rank2<4, 9>;
            "gelu": GeluOp, Rank2<4, 9>;
            "gelu(approximate=False)": GeluExactOp, Rank2<4, 9>;
            "silu": SiluOp, Rank2<4, 9>;
            "sigmoid": SigmoidOp, Rank2<4, 9>;
            "tanh": TanhOp, Rank2<4, 9>;
            "softmax": SoftmaxOp, Rank2<4, 9>;
            "log_softmax": LogSoftmaxOp, Rank2<4, 9>;
            "softmax(axis=-2)": SoftmaxSeqOp, Rank3<2, 4, 5>;
            "log_softmax(axis=-2)": LogSoftmaxSeqOp, Rank3<2, 4, 5>;
            "swish": SwishOp, Rank2<4, 9>;
            "leaky_relu": LeakyReluOp, Rank2<4, 9>;
            "leaky_relu(negative_slope=0.2)": LeakyRelu02Op, Rank2<4, 9>;
            "elu": EluOp, Rank2<4, 9>;
            "elu(alpha=0.5)": Elu05Op, Rank2<4, 9>;
            "selu": SeluOp, Rank2<4, 9>;
            "softplus": SoftplusOp, Rank2<4, 9>;
            "log_sigmoid": LogSigmoidOp, Rank2<4, 9>;
            "relu6": Relu6Op, Rank2<4, 9>;
            "hard_tanh": HardTanhOp, Rank2<4, 9>;
            "hard_sigmoid": HardSigmoidOp, Rank2<4, 9>;
            "hard_silu": HardSiluOp, Rank2<4, 9>;
        }
        assert_eq!(checked, f.activations.len(), "a new activation case needs a line here");
    }};
}

pub(crate) use {
    activation_case, all_cases, attention_case, batch_norm_case, each_activation, scale_norm_case,
};
