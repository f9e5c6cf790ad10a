//! A model's Flax tree from its own structure: which Flax path and layout
//! each of its tensors has, as `#[compact]` declares them.
//!
//! The macro knows every field's layer kind, the name Flax gives it (the
//! name written with `name = ".."`, else the Flax class name and its index
//! in call order, `Dense_3`, a nested model's type name verbatim,
//! `DecoderLSTMCell_0`) and what the layer reads (a `Dense` after a
//! `flatten` of a `[c, h, w]` map). It implements [`FlaxLayout`] for the
//! module it generates with calls to [`FlaxLeaves::layer`] and
//! [`FlaxLeaves::nested`]; the per-kind tables of leaves live here, once.

use super::keys::Layout;

/// The Flax collection a tensor belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Collection {
    /// `params`: what the optimizer trains.
    Params,
    /// `batch_stats`: BatchNorm's running statistics.
    BatchStats,
}

impl Collection {
    /// Flax's name for it.
    ///
    /// ```
    /// use flaxen_runtime::interop::flax::Collection;
    /// assert_eq!(Collection::BatchStats.name(), "batch_stats");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Collection::Params => "params",
            Collection::BatchStats => "batch_stats",
        }
    }
}

/// One tensor of a model, as flaxen and as Flax hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlaxLeaf {
    /// flaxen's checkpoint key (`res_unit_0.gn1.scale`).
    pub key: String,
    /// Flax's path below the collection (`["ResUnit_0", "gn1", "scale"]`).
    pub path: Vec<String>,
    /// Flax's collection.
    pub collection: Collection,
    /// How the array differs between the two.
    pub layout: Layout,
}

impl FlaxLeaf {
    /// The Flax path with its collection, joined with `/` as Flax's
    /// `flatten_dict(sep="/")` writes it (`params/Conv_0/kernel`).
    ///
    /// ```
    /// use flaxen_runtime::interop::flax::{Collection, FlaxKind, FlaxLeaves};
    ///
    /// let mut t = FlaxLeaves::new();
    /// t.layer("stem", "stem", FlaxKind::Conv { bias: false });
    /// assert_eq!(t.leaves()[0].flax_path(), "params/stem/kernel");
    /// ```
    pub fn flax_path(&self) -> String {
        format!("{}/{}", self.collection.name(), self.path.join("/"))
    }
}

/// The kinds of layer with parameters, as the Flax checkpoint lays them
/// out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlaxKind {
    /// `Dense`: `kernel` (in, out), `bias`. `flattened` is the `[c, h, w]`
    /// map it reads through a `flatten`: Flax flattens NHWC maps, so its
    /// kernel's rows run over (h, w, c) and are permuted to flaxen's
    /// (c, h, w) columns.
    Dense {
        /// Whether it has a bias.
        bias: bool,
        /// The `[c, h, w]` map flattened into its input, in Flax's (h, w,
        /// c) order; `None` for any other input.
        flattened: Option<[usize; 3]>,
    },
    /// `Dense(.., axis = -3)`, a `Dense` on the channels of an NCHW map:
    /// Flax's `kernel` (in, out) and `bias`, flaxen's 1x1 conv `weight`
    /// (out, in, 1, 1).
    DenseOnChannels {
        /// Whether it has a bias.
        bias: bool,
    },
    /// `Conv` and `ConvTranspose`: `kernel` (HWIO), `bias`.
    Conv {
        /// Whether it has a bias.
        bias: bool,
    },
    /// `BatchNorm`: `scale`, `bias`; `batch_stats`' `mean`, `var`.
    BatchNorm,
    /// `LayerNorm`: `scale`, `bias`.
    LayerNorm,
    /// `RMSNorm`: `scale`.
    RmsNorm,
    /// `GroupNorm`: `scale`, `bias`.
    GroupNorm,
    /// `MultiHeadDotProductAttention` / `SelfAttention`: `query`, `key`,
    /// `value` (kernels (F, H, D), biases (H, D)) and `out` (H, D, O);
    /// without biases for Flax's `use_bias=False`.
    Attention {
        /// The number of heads.
        heads: usize,
        /// Whether the projections have biases.
        bias: bool,
    },
    /// `Embed`: `embedding`.
    Embed,
    /// `LSTMCell`: `ii`, `if`, `ig`, `io` without bias; `hi`, `hf`, `hg`,
    /// `ho` with.
    LstmCell,
    /// `GRUCell`: `ir`, `iz`, `in` and `hn` with bias; `hr`, `hz` without.
    GruCell,
    /// `SimpleCell`: `i` with bias, `h` without.
    SimpleCell,
}

/// (flaxen leaf, Flax leaf below the module, collection, layout) of a kind.
fn leaves(kind: FlaxKind) -> Vec<(String, Vec<&'static str>, Collection, Layout)> {
    use Collection::{BatchStats, Params};
    let p = |key: &str, path: Vec<&'static str>, layout| (key.to_owned(), path, Params, layout);
    // A Dense-like gate or projection named `name`: its kernel and maybe
    // its bias.
    let dense = |name: &'static str, bias: bool| {
        let mut v = vec![(
            format!("{name}.weight"),
            vec![name, "kernel"],
            Params,
            Layout::Transpose,
        )];
        if bias {
            v.push((
                format!("{name}.bias"),
                vec![name, "bias"],
                Params,
                Layout::Keep,
            ));
        }
        v
    };
    match kind {
        FlaxKind::Dense { bias, flattened } => {
            let layout = match flattened {
                Some([c, h, w]) => Layout::Flattened { c, h, w },
                None => Layout::Transpose,
            };
            let mut v = vec![p("weight", vec!["kernel"], layout)];
            if bias {
                v.push(p("bias", vec!["bias"], Layout::Keep));
            }
            v
        }
        FlaxKind::DenseOnChannels { bias } => {
            let mut v = vec![p("weight", vec!["kernel"], Layout::DenseAsConv)];
            if bias {
                v.push(p("bias", vec!["bias"], Layout::Keep));
            }
            v
        }
        FlaxKind::Conv { bias } => {
            let mut v = vec![p("weight", vec!["kernel"], Layout::Conv)];
            if bias {
                v.push(p("bias", vec!["bias"], Layout::Keep));
            }
            v
        }
        FlaxKind::BatchNorm => vec![
            p("scale", vec!["scale"], Layout::Keep),
            p("bias", vec!["bias"], Layout::Keep),
            (
                "running_mean".into(),
                vec!["mean"],
                BatchStats,
                Layout::Keep,
            ),
            ("running_var".into(), vec!["var"], BatchStats, Layout::Keep),
        ],
        FlaxKind::LayerNorm => vec![
            p("gamma", vec!["scale"], Layout::Keep),
            p("beta", vec!["bias"], Layout::Keep),
        ],
        FlaxKind::RmsNorm => vec![p("scale", vec!["scale"], Layout::Keep)],
        FlaxKind::GroupNorm => vec![
            p("scale", vec!["scale"], Layout::Keep),
            p("bias", vec!["bias"], Layout::Keep),
        ],
        FlaxKind::Attention { heads, bias } => {
            let mut v = Vec::new();
            for name in ["query", "key", "value"] {
                v.push(p(
                    &format!("{name}.weight"),
                    vec![name, "kernel"],
                    Layout::Qkv { heads },
                ));
                if bias {
                    v.push(p(
                        &format!("{name}.bias"),
                        vec![name, "bias"],
                        Layout::QkvBias { heads },
                    ));
                }
            }
            v.push(p(
                "out.weight",
                vec!["out", "kernel"],
                Layout::Out { heads },
            ));
            if bias {
                v.push(p("out.bias", vec!["out", "bias"], Layout::Keep));
            }
            v
        }
        FlaxKind::Embed => vec![p("embedding", vec!["embedding"], Layout::Keep)],
        FlaxKind::LstmCell => [("ii", false), ("if", false), ("ig", false), ("io", false)]
            .into_iter()
            .chain([("hi", true), ("hf", true), ("hg", true), ("ho", true)])
            .flat_map(|(n, b)| dense(n, b))
            .collect(),
        FlaxKind::GruCell => [
            ("ir", true),
            ("iz", true),
            ("in", true),
            ("hr", false),
            ("hz", false),
            ("hn", true),
        ]
        .into_iter()
        .flat_map(|(n, b)| dense(n, b))
        .collect(),
        FlaxKind::SimpleCell => [("i", true), ("h", false)]
            .into_iter()
            .flat_map(|(n, b)| dense(n, b))
            .collect(),
    }
}

/// The leaves of a model, collected from its structure.
///
/// ```
/// use flaxen_runtime::interop::flax::{FlaxKind, FlaxLeaves};
///
/// let mut t = FlaxLeaves::new();
/// t.layer("dense_0", "Dense_0", FlaxKind::Dense { bias: true, flattened: None });
/// t.layer("head", "head", FlaxKind::Dense { bias: false, flattened: Some([4, 2, 2]) });
/// let paths: Vec<String> = t.leaves().iter().map(|l| l.flax_path()).collect();
/// assert_eq!(paths, ["params/Dense_0/kernel", "params/Dense_0/bias", "params/head/kernel"]);
/// assert_eq!(t.leaves()[2].key, "head.weight");
/// ```
#[derive(Debug, Clone, Default)]
pub struct FlaxLeaves {
    key: Vec<String>,
    path: Vec<String>,
    leaves: Vec<FlaxLeaf>,
}

impl FlaxLeaves {
    /// No leaves yet.
    ///
    /// ```
    /// assert!(flaxen_runtime::interop::flax::FlaxLeaves::new().leaves().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The leaves of `M`'s tree.
    ///
    /// ```
    /// use flaxen_runtime::interop::flax::{FlaxKind, FlaxLayout, FlaxLeaves};
    ///
    /// struct Probe;
    /// impl FlaxLayout for Probe {
    ///     fn flax_leaves(out: &mut FlaxLeaves) {
    ///         out.layer("embed_0", "Embed_0", FlaxKind::Embed);
    ///     }
    /// }
    /// assert_eq!(FlaxLeaves::of::<Probe>().leaves()[0].key, "embed_0.embedding");
    /// ```
    pub fn of<M: FlaxLayout + ?Sized>() -> Self {
        let mut out = Self::new();
        M::flax_leaves(&mut out);
        out
    }

    /// A layer of `kind`, flaxen field `key`, Flax module `flax`.
    pub fn layer(&mut self, key: &str, flax: &str, kind: FlaxKind) {
        for (leaf, below, collection, layout) in leaves(kind) {
            let key = self.key.iter().map(String::as_str).chain([key, &*leaf]);
            let path = self
                .path
                .iter()
                .map(String::as_str)
                .chain([flax])
                .chain(below);
            self.leaves.push(FlaxLeaf {
                key: key.collect::<Vec<_>>().join("."),
                path: path.map(str::to_owned).collect(),
                collection,
                layout,
            });
        }
    }

    /// A declared parameter (`param("cls", zeros, (1, 1, c))`): flaxen
    /// key `key`, Flax name `flax`, held as Flax holds it.
    ///
    /// ```
    /// use flaxen_runtime::interop::flax::FlaxLeaves;
    ///
    /// let mut t = FlaxLeaves::new();
    /// t.param("cls", "cls");
    /// assert_eq!(t.leaves()[0].flax_path(), "params/cls");
    /// ```
    pub fn param(&mut self, key: &str, flax: &str) {
        let keys = self.key.iter().map(String::as_str).chain([key]);
        let path = self.path.iter().map(String::as_str).chain([flax]);
        self.leaves.push(FlaxLeaf {
            key: keys.collect::<Vec<_>>().join("."),
            path: path.map(str::to_owned).collect(),
            collection: Collection::Params,
            layout: Layout::Keep,
        });
    }

    /// A nested model `M`, flaxen field `key`, Flax module `flax`.
    pub fn nested<M: FlaxLayout + ?Sized>(&mut self, key: &str, flax: &str) {
        self.key.push(key.to_owned());
        self.path.push(flax.to_owned());
        M::flax_leaves(self);
        self.key.pop();
        self.path.pop();
    }

    /// The leaves, in the model's field order.
    pub fn leaves(&self) -> &[FlaxLeaf] {
        &self.leaves
    }
}

/// A module whose tensors have a place in a Flax checkpoint: implemented
/// by every `#[compact]` model (and [`Remat`](crate::layers::Remat) of
/// one), used by [`load`](super::load) and [`save`](super::save).
///
/// ```
/// use flaxen_runtime::interop::flax::{FlaxKind, FlaxLayout, FlaxLeaves};
///
/// /// A hand-written module of one `nn.Dense(10, name="head")`.
/// struct Head;
/// impl FlaxLayout for Head {
///     fn flax_leaves(out: &mut FlaxLeaves) {
///         out.layer("head", "head", FlaxKind::Dense { bias: true, flattened: None });
///     }
/// }
/// let t = FlaxLeaves::of::<Head>();
/// assert_eq!(t.leaves()[1].flax_path(), "params/head/bias");
/// ```
pub trait FlaxLayout {
    /// Appends the module's leaves to `out` (keys and paths below the
    /// prefixes `out` holds).
    fn flax_leaves(out: &mut FlaxLeaves);
}

impl<M: FlaxLayout> FlaxLayout for crate::layers::Remat<M> {
    /// A block under `remat` keeps its block's keys and paths.
    fn flax_leaves(out: &mut FlaxLeaves) {
        M::flax_leaves(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_the_runtime_layers() {
        use crate::checkpoint::save_module_state;
        use crate::layers::builder;
        use crate::state::StateMap;
        use dfdx::prelude::*;

        fn keys<M: dfdx::nn::BuildOnDevice<Cpu, f32>>() -> Vec<String>
        where
            M::Built: TensorCollection<f32, Cpu>,
        {
            let dev: Cpu = Default::default();
            let m = dev.build_module::<M, f32>();
            let mut s = StateMap::new();
            save_module_state(&m, "m.", &mut s);
            s.into_keys().collect()
        }
        fn table(kind: FlaxKind) -> Vec<String> {
            let mut t = FlaxLeaves::new();
            t.layer("m", "M", kind);
            let mut k: Vec<String> = t.leaves().iter().map(|l| l.key.clone()).collect();
            k.sort();
            k
        }
        let dense = FlaxKind::Dense {
            bias: true,
            flattened: None,
        };
        assert_eq!(keys::<builder::Dense<3, 2>>(), table(dense));
        let unbiased = FlaxKind::Dense {
            bias: false,
            flattened: None,
        };
        assert_eq!(keys::<builder::UnbiasedDense<3, 2>>(), table(unbiased));
        assert_eq!(keys::<builder::BatchNorm<3>>(), table(FlaxKind::BatchNorm));
        assert_eq!(keys::<builder::RmsNorm<3>>(), table(FlaxKind::RmsNorm));
        assert_eq!(
            keys::<builder::GroupNorm<4, 2>>(),
            table(FlaxKind::GroupNorm)
        );
        assert_eq!(
            keys::<dfdx::nn::builders::LayerNorm1D<3>>(),
            table(FlaxKind::LayerNorm)
        );
        assert_eq!(keys::<builder::Embed<5, 3>>(), table(FlaxKind::Embed));
        assert_eq!(
            keys::<builder::MultiHeadAttention<4, 3, 8, 2, 6>>(),
            table(FlaxKind::Attention {
                heads: 2,
                bias: true
            })
        );
        assert_eq!(
            keys::<builder::MultiHeadAttention<4, 3, 8, 2, 6, crate::layers::Unbiased>>(),
            table(FlaxKind::Attention {
                heads: 2,
                bias: false
            })
        );
        type Lstm = builder::Rnn<builder::LstmCell<3, 4>, false, false, false>;
        type Gru = builder::Rnn<builder::GruCell<3, 4>, false, false, false>;
        type Simple = builder::Rnn<builder::SimpleCell<3, 4>, false, false, false>;
        assert_eq!(keys::<Lstm>(), table(FlaxKind::LstmCell));
        assert_eq!(keys::<Gru>(), table(FlaxKind::GruCell));
        assert_eq!(keys::<Simple>(), table(FlaxKind::SimpleCell));
    }

    #[test]
    fn nested_prefixes_both_sides() {
        struct Inner;
        impl FlaxLayout for Inner {
            fn flax_leaves(out: &mut FlaxLeaves) {
                out.layer("gn1", "gn1", FlaxKind::GroupNorm);
            }
        }
        let mut t = FlaxLeaves::new();
        t.nested::<Inner>("res_unit_0", "ResUnit_0");
        t.layer("fc", "fc", FlaxKind::RmsNorm);
        let got: Vec<(String, String)> = t
            .leaves()
            .iter()
            .map(|l| (l.key.clone(), l.flax_path()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "res_unit_0.gn1.scale".into(),
                    "params/ResUnit_0/gn1/scale".into()
                ),
                (
                    "res_unit_0.gn1.bias".into(),
                    "params/ResUnit_0/gn1/bias".into()
                ),
                ("fc.scale".into(), "params/fc/scale".into()),
            ]
        );
    }
}
