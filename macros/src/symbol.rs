//! The model language's vocabulary as typed enums (serde's `symbol.rs`):
//! a name is looked up once, into [`LayerKind`] or [`OpKind`], and every
//! later phase matches the enum exhaustively. Also: "did you mean"
//! suggestions and the names Flax and PyTorch users reach for.

/// Declares a vocabulary enum with its source spellings.
macro_rules! vocabulary {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name { $($(#[$vm])* $variant,)* }

        impl $name {
            /// Every spelling, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($text,)*];

            /// The spelling in model source.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }

            /// The word spelt `s`, if it is one.
            pub fn from_name(s: &str) -> Option<Self> {
                [$($name::$variant,)*].into_iter().find(|k| k.name() == s)
            }
        }
    };
}

vocabulary! {
    /// Layers with parameters (or a mode), called as `Layer(args)(x)`.
    pub enum LayerKind {
        /// `Dense(features)`
        Dense => "Dense",
        /// `Conv(features, kernel_size)`
        Conv => "Conv",
        /// `ConvTranspose(features, kernel_size)`
        ConvTranspose => "ConvTranspose",
        /// `StdConv(features, kernel_size)`: vit_jax's weight-standardised `Conv`
        StdConv => "StdConv",
        /// `Dropout(rate)`
        Dropout => "Dropout",
        /// `BatchNorm()`
        BatchNorm => "BatchNorm",
        /// `LayerNorm()`
        LayerNorm => "LayerNorm",
        /// `RMSNorm()`
        RmsNorm => "RMSNorm",
        /// `GroupNorm()`
        GroupNorm => "GroupNorm",
        /// `SelfAttention(num_heads)`
        SelfAttention => "SelfAttention",
        /// `MultiHeadDotProductAttention(num_heads)`
        MultiHeadDotProductAttention => "MultiHeadDotProductAttention",
        /// `Embed(num_embeddings, features)`
        Embed => "Embed",
        /// `RNN(LSTMCell(features))`
        Rnn => "RNN",
    }
}

vocabulary! {
    /// Functional ops, called as `op(x, args)`.
    pub enum OpKind {
        /// `relu(x)`
        Relu => "relu",
        /// `gelu(x, approximate = true)`
        Gelu => "gelu",
        /// `sigmoid(x)`
        Sigmoid => "sigmoid",
        /// `tanh(x)`
        Tanh => "tanh",
        /// `silu(x)`
        Silu => "silu",
        /// `swish(x)`
        Swish => "swish",
        /// `leaky_relu(x, negative_slope = 0.01)`
        LeakyRelu => "leaky_relu",
        /// `elu(x, alpha = 1.0)`
        Elu => "elu",
        /// `selu(x)`
        Selu => "selu",
        /// `softplus(x)`
        Softplus => "softplus",
        /// `log_sigmoid(x)`
        LogSigmoid => "log_sigmoid",
        /// `relu6(x)`
        Relu6 => "relu6",
        /// `hard_tanh(x)`
        HardTanh => "hard_tanh",
        /// `hard_sigmoid(x)`
        HardSigmoid => "hard_sigmoid",
        /// `hard_silu(x)`
        HardSilu => "hard_silu",
        /// `hard_swish(x)`
        HardSwish => "hard_swish",
        /// `exp(x)`
        Exp => "exp",
        /// `log(x)`
        Log => "log",
        /// `sqrt(x)`
        Sqrt => "sqrt",
        /// `rsqrt(x)`
        Rsqrt => "rsqrt",
        /// `sin(x)`
        Sin => "sin",
        /// `cos(x)`
        Cos => "cos",
        /// `abs(x)`
        Abs => "abs",
        /// `square(x)`
        Square => "square",
        /// `pow(x, p)`
        Pow => "pow",
        /// `clip(x, min, max)`
        Clip => "clip",
        /// `stop_gradient(x)`
        StopGradient => "stop_gradient",
        /// `shift_right(x)`
        ShiftRight => "shift_right",
        /// `sinusoidal_positions(x, max_len = 2048)`
        SinusoidalPositions => "sinusoidal_positions",
        /// `softmax(x, axis = -1)`
        Softmax => "softmax",
        /// `log_softmax(x, axis = -1)`
        LogSoftmax => "log_softmax",
        /// `mean(x, axis)`
        Mean => "mean",
        /// `sum(x, axis)`
        Sum => "sum",
        /// `concatenate((x, y), axis)`
        Concatenate => "concatenate",
        /// `pad(x, pad_width)`
        Pad => "pad",
        /// `slice(x, start, stop, axis = -1)`
        Slice => "slice",
        /// `avg_pool(x, window_shape)`
        AvgPool => "avg_pool",
        /// `max_pool(x, window_shape)`
        MaxPool => "max_pool",
        /// `flatten(x)`
        Flatten => "flatten",
        /// `reshape(x, shape)`
        Reshape => "reshape",
        /// `resize(x, shape, method)`
        Resize => "resize",
        /// `swapaxes(x, a, b)`
        SwapAxes => "swapaxes",
        /// `transpose(x, axes)`
        Transpose => "transpose",
        /// `make_causal_mask(x)`
        MakeCausalMask => "make_causal_mask",
        /// `make_attention_mask(q_tokens, k_tokens)`
        MakeAttentionMask => "make_attention_mask",
        /// `combine_masks(a, b)`
        CombineMasks => "combine_masks",
        /// `dot_product_attention(q, k, v, mask = m)`
        DotProductAttention => "dot_product_attention",
    }
}

vocabulary! {
    /// Lifted transforms of a layer call, `transform(Layer(args))(x)`
    /// (Flax's `nn.remat(Layer)(args)(x)`).
    pub enum TransformKind {
        /// `remat(Block(..))(x)`: recompute the block in the backward pass
        Remat => "remat",
    }
}

vocabulary! {
    /// Flax's initialisers (`nn.initializers.*`), the values of
    /// `kernel_init = ..` and the like, and of `param(..)`.
    pub enum InitKind {
        /// `zeros`
        Zeros => "zeros",
        /// `ones`
        Ones => "ones",
        /// `zeros_init()`
        ZerosInit => "zeros_init",
        /// `ones_init()`
        OnesInit => "ones_init",
        /// `constant(value)`
        Constant => "constant",
        /// `normal(stddev = 0.01)`
        Normal => "normal",
        /// `uniform(scale = 0.01)`
        Uniform => "uniform",
        /// `truncated_normal(stddev = 0.01, lower = -2.0, upper = 2.0)`
        TruncatedNormal => "truncated_normal",
        /// `variance_scaling(scale, mode, distribution)`
        VarianceScaling => "variance_scaling",
        /// `lecun_normal()`
        LecunNormal => "lecun_normal",
        /// `lecun_uniform()`
        LecunUniform => "lecun_uniform",
        /// `xavier_normal()`
        XavierNormal => "xavier_normal",
        /// `xavier_uniform()`
        XavierUniform => "xavier_uniform",
        /// `glorot_normal()`
        GlorotNormal => "glorot_normal",
        /// `glorot_uniform()`
        GlorotUniform => "glorot_uniform",
        /// `he_normal()`
        HeNormal => "he_normal",
        /// `he_uniform()`
        HeUniform => "he_uniform",
        /// `kaiming_normal()`
        KaimingNormal => "kaiming_normal",
        /// `kaiming_uniform()`
        KaimingUniform => "kaiming_uniform",
        /// `orthogonal(scale = 1.0)`
        Orthogonal => "orthogonal",
    }
}

vocabulary! {
    /// Builtin functions of values known at expansion and of tensors.
    pub enum BuiltinKind {
        /// `maximum(a, b)`: elementwise, on tensors or numbers
        Maximum => "maximum",
        /// `minimum(a, b)`
        Minimum => "minimum",
        /// `select(mask, a, b)`: `jnp.where`
        Select => "select",
        /// `arange(n)` or `arange(start, stop)`: a constant `[n]` tensor
        Arange => "arange",
        /// `len(t)`: a tuple's or shape's length
        Len => "len",
        /// `enumerate(t)`, in a `for` loop
        Enumerate => "enumerate",
        /// `partial(Conv, use_bias = false)`: `functools.partial`
        Partial => "partial",
    }
}

vocabulary! {
    /// Random draws, `random.normal(shape)`: `jax.random`'s, without the
    /// key (the device's seeded generator draws).
    pub enum DrawKind {
        /// `random.normal(shape)`
        Normal => "normal",
        /// `random.uniform(shape, minval = 0.0, maxval = 1.0)`
        Uniform => "uniform",
        /// `random.bernoulli(p, shape)`: a mask
        Bernoulli => "bernoulli",
    }
}

vocabulary! {
    /// Recurrent cells, the argument of `RNN(..)`.
    pub enum CellKind {
        /// `LSTMCell(features)`
        Lstm => "LSTMCell",
        /// `GRUCell(features)`
        Gru => "GRUCell",
        /// `SimpleCell(features)`
        Simple => "SimpleCell",
    }
}

/// Names from Flax, PyTorch and Keras that are not flaxen words, with what
/// to write instead; `None` when flaxen has no counterpart yet.
pub fn foreign(name: &str) -> Option<(&'static str, Option<&'static str>)> {
    let hint = match name {
        "Sequential" => (
            "flaxen has no `Sequential`: write the layers one after another \
             (`let x = Dense(64)(x); let x = relu(x);`), or a `for` loop over a block",
            None,
        ),
        "Linear" | "DenseGeneral" => (
            "a fully connected layer is `Dense(features)`",
            Some("Dense"),
        ),
        "Conv2D" | "Conv2d" | "ConvLocal" => (
            "a 2-D convolution is `Conv(features, kernel_size)` (NCHW)",
            Some("Conv"),
        ),
        "BatchNorm2d" | "BatchNorm1d" | "BatchNormalization" => {
            ("`BatchNorm()` normalises per channel", Some("BatchNorm"))
        }
        "LayerNormalization" => ("`LayerNorm()`", Some("LayerNorm")),
        "RmsNorm" | "RMSNormalization" => ("`RMSNorm()`", Some("RMSNorm")),
        "Upsample" | "UpsamplingNearest2d" | "UpsamplingBilinear2d" | "upsample" | "interpolate" => (
            "resizing is `resize(x, (c, 2 * h, 2 * w), method = \"nearest\")` (jax.image.resize); nearest by an integer factor is a copy",
            None,
        ),
        "ReLU" | "Relu" => ("activations are ops: `relu(x)`", Some("relu")),
        "GELU" | "Gelu" => ("activations are ops: `gelu(x)`", Some("gelu")),
        "Sigmoid" => ("activations are ops: `sigmoid(x)`", Some("sigmoid")),
        "Tanh" => ("activations are ops: `tanh(x)`", Some("tanh")),
        "SiLU" | "Silu" => ("activations are ops: `silu(x)`", Some("silu")),
        "Softmax" => ("`softmax(x, axis = -1)`", Some("softmax")),
        "Flatten" => ("`flatten(x)`", Some("flatten")),
        "MaxPool2d" | "MaxPool2D" | "MaxPool" => (
            "pooling is an op: `max_pool(x, (2, 2), strides = (2, 2))`",
            Some("max_pool"),
        ),
        "AvgPool2d" | "AvgPool2D" | "AvgPool" => (
            "pooling is an op: `avg_pool(x, (2, 2), strides = (2, 2))`",
            Some("avg_pool"),
        ),
        "Embedding" => (
            "token ids become features with `Embed(num_embeddings, features)`",
            Some("Embed"),
        ),
        "MultiheadAttention" | "MultiHeadAttention" => (
            "attention is `SelfAttention(num_heads)` or, across two inputs, `MultiHeadDotProductAttention(num_heads)`",
            Some("MultiHeadDotProductAttention"),
        ),
        "LSTM" | "GRU" | "Lstm" | "Gru" => (
            "a recurrent layer is `RNN(LSTMCell(features))(x)` (or `GRUCell`, `SimpleCell`) on `[seq, features]`",
            None,
        ),
        "checkpoint" | "Checkpoint" | "checkpoint_name" => (
            "rematerialisation (`jax.checkpoint`) of a block is `remat(Block(..))(x)`",
            None,
        ),
        "OptimizedLSTMCell" => (
            "flaxen's `RNN(LSTMCell(features))(x)` computes Flax's `OptimizedLSTMCell` (the same gates; its checkpoint keys are `LSTMCell`'s)",
            Some("LSTMCell"),
        ),
        "Bidirectional" | "Einsum" | "InstanceNorm" | "SpectralNorm" | "WeightNorm"
        | "ConvLSTMCell" | "MGUCell" => ("flaxen does not have this Flax layer yet", None),
        _ => return None,
    };
    Some(hint)
}

/// Flax linen's own layers that flaxen does not have: reserved words, so
/// that a Flax user's `InstanceNorm()(x)` says so instead of looking for a
/// model of that name. Every other CamelCase name applied as a layer is a
/// user's `#[compact]` model, never a "did you mean".
pub fn is_flax_class(name: &str) -> bool {
    matches!(
        name,
        "Sequential"
            | "DenseGeneral"
            | "ConvLocal"
            | "Einsum"
            | "InstanceNorm"
            | "SpectralNorm"
            | "WeightNorm"
            | "Bidirectional"
            | "MultiHeadAttention"
            | "OptimizedLSTMCell"
            | "ConvLSTMCell"
            | "MGUCell"
    )
}

/// Edit distance (Levenshtein), for suggestions.
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The nearest candidate within a small distance, ignoring case and `_`.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let norm = |s: &str| s.to_lowercase().replace('_', "");
    let lw = norm(word);
    candidates
        .iter()
        .map(|c| (distance(&lw, &norm(c)), *c))
        .filter(|(d, _)| *d <= 2.max(word.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// The vocabulary word nearest to `word`: a layer or an op.
pub fn nearest_word(word: &str) -> Option<&'static str> {
    nearest(word, LayerKind::NAMES)
        .or_else(|| nearest(word, OpKind::NAMES))
        .or_else(|| nearest(word, CellKind::NAMES))
        .or_else(|| nearest(word, TransformKind::NAMES))
        .or_else(|| nearest(word, InitKind::NAMES))
        .or_else(|| nearest(word, BuiltinKind::NAMES))
}

/// How a vocabulary word is called: `` `Dense(..)(x)` `` or `` `relu(x)` ``.
pub fn call_form(word: &str) -> String {
    if CellKind::from_name(word).is_some() {
        format!("`RNN({word}(..))(x)`")
    } else if InitKind::from_name(word).is_some() {
        format!("`{word}(..)` (an initialiser)")
    } else if TransformKind::from_name(word).is_some() {
        format!("`{word}(Block(..))(x)`")
    } else if LayerKind::from_name(word).is_some() {
        format!("`{word}(..)(x)`")
    } else {
        format!("`{word}(x)`")
    }
}

/// `CamelCase` to `snake_case` (Flax's `BatchNorm_0` becomes `batch_norm_0`).
pub fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            // A word starts at an uppercase letter after a lowercase one or
            // a digit, and at the last capital of an acronym that a
            // lowercase letter follows (`RMSNorm` is `rms_norm`).
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1);
            let starts = match prev {
                None => false,
                Some(p) if !p.is_uppercase() => true,
                Some(_) => next.is_some_and(|n| n.is_lowercase()),
            };
            if starts {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_are_exact() {
        assert_eq!(LayerKind::from_name("Dense"), Some(LayerKind::Dense));
        assert_eq!(LayerKind::from_name("dense"), None);
        assert_eq!(OpKind::from_name("avg_pool"), Some(OpKind::AvgPool));
        assert_eq!(OpKind::from_name("min_pool"), None);
        for n in LayerKind::NAMES {
            assert_eq!(LayerKind::from_name(n).map(LayerKind::name), Some(*n));
        }
        for n in OpKind::NAMES {
            assert_eq!(OpKind::from_name(n).map(OpKind::name), Some(*n));
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(nearest("Desne", LayerKind::NAMES), Some("Dense"));
        assert_eq!(nearest("dense", LayerKind::NAMES), Some("Dense"));
        assert_eq!(nearest("Conv2D", LayerKind::NAMES), Some("Conv"));
        assert_eq!(nearest("ResidualBlock", LayerKind::NAMES), None);
        assert_eq!(nearest("logsoftmax", OpKind::NAMES), Some("log_softmax"));
        assert_eq!(distance("kitten", "sitting"), 3);
        assert!(foreign("Sequential").is_some());
        assert_eq!(foreign("Linear").and_then(|f| f.1), Some("Dense"));
    }

    #[test]
    fn snake_case() {
        assert_eq!(snake("BatchNorm"), "batch_norm");
        assert_eq!(snake("ResBlock"), "res_block");
        assert_eq!(snake("RMSNorm"), "rms_norm");
        assert_eq!(snake("MLPBlock2D"), "mlp_block2_d");
        assert_eq!(snake("Mlp"), "mlp");
    }
}
