//! Flax checkpoints in and out: the variables a Flax user saves with
//! `flax.serialization.to_bytes({"params": ..., "batch_stats": ...})` (or
//! `to_bytes(params)`), loaded into a `#[compact]` model, and a model saved
//! back as bytes that `flax.serialization.from_bytes` reads.
//!
//! # Mapping
//!
//! [`load`] and [`save`] map a model by its own structure: `#[compact]`
//! implements [`FlaxLayout`] for every model, listing each tensor's flaxen
//! key, Flax path and [`Layout`] from what the model declares (the
//! `name = ".."` it gives a layer, else Flax's automatic `Dense_3`, a
//! nested model's type name verbatim; the layer's kind; the `[c, h, w]`
//! map a `Dense` reads through a `flatten`). Layouts:
//!
//! | Flax | flaxen |
//! | --- | --- |
//! | `Conv_0/kernel`, `ConvTranspose_0/kernel` (H, W, I, O) | `conv_0.weight` (O, I, H, W) |
//! | `Dense_0/kernel` (in, out) | `dense_0.weight` (out, in) |
//! | `Dense_0/kernel` after an NHWC flatten, rows (h, w, c) | `dense_0.weight` (out, c*h*w), columns (c, h, w) |
//! | `BatchNorm_0/scale`, `bias`; `batch_stats`' `mean`, `var` | `batch_norm_0.scale`, `bias`, `running_mean`, `running_var` |
//! | `LayerNorm_0/scale`, `bias` | `layer_norm_0.gamma`, `beta` |
//! | `GroupNorm_0/scale`, `bias`; `RMSNorm_0/scale` | the same names |
//! | `SelfAttention_0/query/kernel` (F, H, D); `key`, `value` alike | `self_attention_0.query.weight` (H*D, F); biases (H, D) -> (H*D) |
//! | `SelfAttention_0/out/kernel` (H, D, O) | `self_attention_0.out.weight` (O, H*D) |
//! | `Embed_0/embedding` | `embed_0.embedding` |
//! | `LSTMCell_0/ii/kernel` (in, out) (and every gate of `GRUCell`, `SimpleCell`; `RNN` adds no level) | `lstm_cell_0.ii.weight` (out, in) |
//! | `head/kernel/value` (a boxed leaf) | `head.weight` |
//!
//! Loading is all or nothing: a missing, extra or mis-shaped tensor makes
//! one [`FlaxError::Mismatches`] listing them all, each with flaxen's key
//! and Flax's path. Values may be float32, float64, float16 or bfloat16 in
//! the file; they are converted to the model's dtype. Saving writes
//! float32 (float64 for an f64 model), so a round trip is exact.
//!
//! [`read_state`] and [`write_state`] map a bare [`StateMap`] by name
//! instead (Flax's automatic names of flaxen's layers only; the heads of
//! attention layers given through [`SaveOptions::num_heads`]), for files
//! whose model is not at hand; [`read_arrays`] shows a file as Flax holds
//! it.
//!
//! ```
//! use flaxen_runtime::dfdx::prelude::*;
//! use flaxen_runtime::interop::flax;
//!
//! let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/flax_interop.msgpack");
//! let state = flax::read_state::<f32>(&std::fs::read(fixture).unwrap()).unwrap();
//! assert_eq!(state["dense_0.weight"].shape, [16, 128]); // Flax's kernel is (128, 16)
//!
//! // The arrays as Flax holds them, by Flax path.
//! let arrays = flax::read_arrays(&std::fs::read(fixture).unwrap()).unwrap();
//! assert_eq!(arrays["params/Dense_0/kernel"].shape, [128, 16]);
//!
//! // A bare dfdx module's keys (`weight`, `bias`) name no Flax layer.
//! let dev = Cpu::default();
//! let model = dev.build_module::<Linear<3, 2>, f32>();
//! let mut state = flaxen_runtime::state::StateMap::new();
//! flaxen_runtime::checkpoint::save_module_state(&model, "", &mut state);
//! let err = flax::write_state(&state, &flax::SaveOptions::new()).unwrap_err();
//! assert!(err.to_string().contains("`bias`"), "{err}");
//! ```

mod keys;
mod layout;
mod msgpack;

pub use keys::Layout;
pub use layout::{Collection, FlaxKind, FlaxLayout, FlaxLeaf, FlaxLeaves};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::checkpoint::{load_module_state, save_module_state};
use crate::dfdx::nn::tensor_collection::TensorCollection;
use crate::dfdx::prelude::{Device, Dtype};
use crate::state::{HostTensor, StateError, StateMap};

use msgpack::{Array, Leaves, Width};

/// Why a Flax checkpoint could not be read, mapped, loaded or written.
///
/// ```
/// use flaxen_runtime::interop::flax::{read_state, FlaxError};
///
/// let err = read_state::<f32>(&[0x81]).unwrap_err(); // a map cut short
/// assert!(matches!(err, FlaxError::Msgpack { .. }), "{err}");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum FlaxError {
    /// The bytes are not one msgpack value (truncated, or not msgpack).
    #[error("not a Flax checkpoint: {reason}")]
    Msgpack {
        /// What the decoder found.
        reason: String,
    },
    /// A value is not what `flax.serialization.to_bytes` writes, or an
    /// array has an unsupported dtype or the wrong rank for its layer.
    #[error("Flax tensor `{path}`: {reason}")]
    Format {
        /// Flax's path (`Conv_0/kernel`) or flaxen's key.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor of a layer flaxen cannot map (another kind of module, or
    /// an unknown leaf).
    #[error("no flaxen mapping for `{path}` by name (`read_state` and `write_state` know Flax's automatic names of Conv, Dense, BatchNorm, LayerNorm, attention, Embed and the recurrent cells; `load` and `save` map any `#[compact]` model by its structure)")]
    Unmapped {
        /// Flax's path, or flaxen's key when saving.
        path: String,
    },
    /// The top level holds a collection other than `params` and
    /// `batch_stats`.
    #[error("Flax collection `{name}` is not one flaxen loads (only `params` and `batch_stats`)")]
    Collection {
        /// The collection.
        name: String,
    },
    /// The file and the model disagree: a tensor missing, extra or of
    /// another shape. The message names it.
    #[error("{error} (Flax: `{flax}`)")]
    Mismatch {
        /// Which tensor, by flaxen key, and how it differs.
        error: StateError,
        /// Its Flax path (`Conv_0/kernel`), as far as it can be told.
        flax: String,
    },
    /// The file and the model's structure disagree: every missing, extra
    /// and mis-shaped tensor (up to [`MAX_LISTED`]), each with flaxen's key
    /// and Flax's path.
    #[error("the Flax checkpoint does not fit the model: {} problem(s){}:\n  {}", .total, if *.total > .problems.len() { format!(" (the first {} listed)", .problems.len()) } else { String::new() }, .problems.join("\n  "))]
    Mismatches {
        /// One line per problem.
        problems: Vec<String>,
        /// How many there are in all.
        total: usize,
    },
    /// A value does not fit the model's dtype.
    #[error("Flax tensor `{path}`: value {value} does not fit the model's dtype")]
    Value {
        /// Flax's path.
        path: String,
        /// The value.
        value: f64,
    },
    /// Saving an attention layer needs its number of heads.
    #[error("cannot save `{key}`: give the heads of `{module}` with SaveOptions::num_heads")]
    Heads {
        /// The tensor.
        key: String,
        /// The attention module.
        module: String,
    },
    /// Reading or writing the file failed.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
}

/// What [`save`] needs beyond the model: the number of heads of each
/// attention layer.
///
/// ```
/// use flaxen_runtime::interop::flax::SaveOptions;
///
/// let opts = SaveOptions::new().num_heads("encoder_block_0.self_attention_0", 4);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Default)]
pub struct SaveOptions {
    heads: BTreeMap<String, usize>,
}

impl SaveOptions {
    /// No attention layers.
    ///
    /// ```
    /// let opts = flaxen_runtime::interop::flax::SaveOptions::new();
    /// # let _ = opts;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// `module` (the flaxen prefix of an attention layer, e.g.
    /// `self_attention_0`) has `heads` heads.
    ///
    /// ```
    /// let opts = flaxen_runtime::interop::flax::SaveOptions::new().num_heads("self_attention_0", 2);
    /// # let _ = opts;
    /// ```
    pub fn num_heads(mut self, module: &str, heads: usize) -> Self {
        self.heads.insert(module.to_owned(), heads);
        self
    }
}

/// The tensors of a Flax checkpoint under flaxen's keys and layouts, with
/// the Flax path of each key.
fn read_leaves(bytes: &[u8]) -> Result<(StateMap<f64>, BTreeMap<String, String>), FlaxError> {
    let mut state = StateMap::new();
    let mut flax_paths = BTreeMap::new();
    for ((c, path), a) in by_collection(msgpack::decode(bytes)?)? {
        let (key, a) = keys::to_flaxen(&path, a)?;
        let joined = format!("{}/{}", c.name(), path.join("/"));
        if let Some(first) = flax_paths.insert(key.clone(), joined.clone()) {
            return Err(FlaxError::Format {
                path: joined,
                reason: format!("maps to `{key}`, as `{first}` does"),
            });
        }
        state.insert(
            key,
            HostTensor {
                shape: a.shape,
                data: a.data,
            },
        );
    }
    Ok((state, flax_paths))
}

/// Every array of a Flax checkpoint as it is, keyed by its Flax path
/// joined with `/` (`params/Conv_0/kernel`, a boxed leaf's
/// `params/head/kernel/value`), in Flax's layout, widened to f64: what
/// `flax.traverse_util.flatten_dict(msgpack_restore(bytes), sep="/")`
/// gives in Python, for looking into a file.
///
/// ```
/// use flaxen_runtime::interop::flax;
///
/// let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/flax_interop.msgpack")).unwrap();
/// let arrays = flax::read_arrays(&bytes).unwrap();
/// assert_eq!(arrays["params/Conv_0/kernel"].shape, [3, 3, 1, 8]); // HWIO
/// ```
pub fn read_arrays(bytes: &[u8]) -> Result<StateMap<f64>, FlaxError> {
    Ok(msgpack::decode(bytes)?
        .into_iter()
        .map(|(path, a)| {
            let t = HostTensor {
                shape: a.shape,
                data: a.data,
            };
            (path.join("/"), t)
        })
        .collect())
}

/// Reads a Flax checkpoint into a [`StateMap`] under flaxen's keys and
/// layouts, converted to `E`: what [`load`] passes to
/// [`load_module_state`].
///
/// ```
/// use flaxen_runtime::interop::flax;
///
/// let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/flax_interop.msgpack")).unwrap();
/// let state = flax::read_state::<f32>(&bytes).unwrap();
/// assert_eq!(state["conv_0.weight"].shape, [8, 1, 3, 3]); // from HWIO (3, 3, 1, 8)
/// assert!(state.contains_key("batch_norm_0.running_var"));
/// ```
pub fn read_state<E: Dtype>(bytes: &[u8]) -> Result<StateMap<E>, FlaxError> {
    let (state, flax_paths) = read_leaves(bytes)?;
    convert(state, &flax_paths)
}

fn convert<E: Dtype>(
    state: StateMap<f64>,
    flax_paths: &BTreeMap<String, String>,
) -> Result<StateMap<E>, FlaxError> {
    state
        .into_iter()
        .map(|(key, t)| {
            let path = flax_paths.get(&key).cloned().unwrap_or_else(|| key.clone());
            let data = in_dtype::<E>(&t.data, &path)?;
            Ok((
                key,
                HostTensor {
                    shape: t.shape,
                    data,
                },
            ))
        })
        .collect()
}

/// How many problems a [`FlaxError::Mismatches`] lists.
pub const MAX_LISTED: usize = 32;

/// A Flax file's arrays by collection and path below it: `to_bytes` of the
/// variables (`params`, `batch_stats` on top) or of the params alone.
type ByCollection = BTreeMap<(Collection, Vec<String>), Array>;

fn by_collection(leaves: Leaves) -> Result<ByCollection, FlaxError> {
    // `to_bytes(variables)` has collections on top; `to_bytes(params)` not.
    let has_collections = leaves
        .keys()
        .any(|p| p.first().map(String::as_str) == Some("params"));
    let mut out = ByCollection::new();
    for (path, a) in leaves {
        if !has_collections {
            out.insert((Collection::Params, path), a);
            continue;
        }
        let c = match path[0].as_str() {
            "params" => Collection::Params,
            "batch_stats" => Collection::BatchStats,
            other => {
                return Err(FlaxError::Collection {
                    name: other.to_owned(),
                })
            }
        };
        out.insert((c, path[1..].to_vec()), a);
    }
    Ok(out)
}

/// `data` in the model's dtype; `path` names the array in messages.
fn in_dtype<E: Dtype>(data: &[f64], path: &str) -> Result<Vec<E>, FlaxError> {
    data.iter()
        .map(|&v| {
            E::from_f64(v).ok_or_else(|| FlaxError::Value {
                path: path.to_owned(),
                value: v,
            })
        })
        .collect()
}

/// Loads the Flax checkpoint `bytes`, as `flax.serialization.to_bytes`
/// wrote the variables (or the params alone), into `module`.
///
/// The mapping comes from the model's own structure ([`FlaxLayout`]): each
/// field's Flax path is the name its layer has in Flax (the `name = ".."`
/// written in the model, else Flax's automatic `Dense_3` or `ResUnit_0`),
/// and each array's layout follows the layer's kind (HWIO kernels to OIHW,
/// `(in, out)` to `(out, in)`, attention's `(F, H, D)` kernels flattened,
/// and the rows of a `Dense` that reads a `flatten` of a `[c, h, w]` map
/// permuted from Flax's NHWC order). Boxed leaves
/// (`nn.with_logical_partitioning`, saved as `{"value": ..}`) are unboxed.
///
/// Every tensor of the model must be in the file with its shape, and
/// nothing else: otherwise one [`FlaxError::Mismatches`] lists every
/// missing, extra and mis-shaped tensor with flaxen's key and Flax's path.
/// On `Err` the model is unchanged. Values may be float32, float64,
/// float16 or bfloat16 in the file; they are converted to the model's
/// dtype. Settings that are not tensors (epsilons, momenta) are the
/// model's and stay as they are.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::interop::flax::{self, FlaxKind, FlaxLayout, FlaxLeaves};
///
/// /// A module whose one tensor is Flax's `Embed_0/embedding`.
/// #[derive(Clone, Debug)]
/// struct Table(flaxen_runtime::layers::Embed<4, 2, f32, Cpu>);
/// impl FlaxLayout for Table {
///     fn flax_leaves(out: &mut FlaxLeaves) {
///         out.layer("0", "Embed_0", FlaxKind::Embed);
///     }
/// }
/// # impl TensorCollection<f32, Cpu> for Table {
/// #     type To<E2: Dtype, D2: Device<E2>> = ();
/// #     fn iter_tensors<V: ModuleVisitor<Self, f32, Cpu>>(v: &mut V) -> Result<Option<()>, V::Err> {
/// #         v.visit_fields(Self::module("0", |s| &s.0, |s| &mut s.0), |_| ())
/// #     }
/// # }
/// let dev = Cpu::default();
/// let mut m = Table(dev.build_module::<flaxen_runtime::layers::builder::Embed<4, 2>, f32>());
/// let err = flax::load(&mut m, b"\x81").unwrap_err(); // truncated
/// assert!(matches!(err, flax::FlaxError::Msgpack { .. }));
/// ```
pub fn load<E, D, M>(module: &mut M, bytes: &[u8]) -> Result<(), FlaxError>
where
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D> + FlaxLayout,
{
    let tree = FlaxLeaves::of::<M>();
    let mut file = by_collection(msgpack::decode(bytes)?)?;
    let mut model = StateMap::<E>::new();
    save_module_state(module, "", &mut model);
    let mut problems = Vec::new();
    let mut state = StateMap::<E>::new();
    for leaf in tree.leaves() {
        let flax = leaf.flax_path();
        let mut boxed = leaf.path.clone();
        boxed.push("value".to_owned());
        let found = file
            .remove(&(leaf.collection, leaf.path.clone()))
            .or_else(|| file.remove(&(leaf.collection, boxed)));
        let Some(a) = found else {
            problems.push(format!("missing: `{flax}` (flaxen `{}`)", leaf.key));
            continue;
        };
        let flax_shape = a.shape.clone();
        let a = match leaf.layout.to_flaxen(a, &flax) {
            Ok(a) => a,
            Err(e) => {
                problems.push(format!("{e} (flaxen `{}`)", leaf.key));
                continue;
            }
        };
        match model.get(&leaf.key) {
            None => problems.push(format!(
                "`{flax}` maps to flaxen `{}`, which the model does not have",
                leaf.key
            )),
            Some(t) if t.shape != a.shape => problems.push(format!(
                "shape: `{flax}` is {flax_shape:?} in the file ({:?} in flaxen's layout), but flaxen `{}` is {:?}",
                a.shape, leaf.key, t.shape
            )),
            Some(_) => {
                let data = in_dtype::<E>(&a.data, &flax)?;
                state.insert(leaf.key.clone(), HostTensor { shape: a.shape, data });
            }
        }
    }
    for ((c, path), a) in &file {
        problems.push(format!(
            "extra: `{}/{}` {:?} has no place in the model",
            c.name(),
            path.join("/"),
            a.shape
        ));
    }
    for key in model.keys() {
        if !tree.leaves().iter().any(|l| &l.key == key) {
            problems.push(format!(
                "flaxen `{key}` has no Flax path in the model's layout"
            ));
        }
    }
    if !problems.is_empty() {
        let total = problems.len();
        problems.truncate(MAX_LISTED);
        return Err(FlaxError::Mismatches { problems, total });
    }
    load_module_state(module, "", &state).map_err(|error| {
        let key = match &error {
            StateError::Missing { key }
            | StateError::Shape { key, .. }
            | StateError::Invalid { key, .. } => key.clone(),
        };
        let flax = tree
            .leaves()
            .iter()
            .find(|l| l.key == key)
            .map(FlaxLeaf::flax_path)
            .unwrap_or_else(|| "?".to_owned());
        FlaxError::Mismatch { error, flax }
    })
}

/// Flax's path of a flaxen checkpoint key, collection first: the
/// inverse of the name mapping (layouts aside).
///
/// ```
/// use flaxen_runtime::interop::flax::flax_path;
///
/// assert_eq!(flax_path("conv_0.weight").unwrap(), "params/Conv_0/kernel");
/// assert_eq!(flax_path("batch_norm_1.running_var").unwrap(), "batch_stats/BatchNorm_1/var");
/// assert_eq!(
///     flax_path("encoder_block_1.self_attention_0.out.weight").unwrap(),
///     "params/EncoderBlock_1/SelfAttention_0/out/kernel"
/// );
/// assert!(flax_path("0.weight").is_err()); // a dfdx tuple index
/// ```
pub fn flax_path(key: &str) -> Result<String, FlaxError> {
    let leaf = key.rsplit('.').next().unwrap_or(key);
    let (path, _) = keys::flax_names(key)?;
    Ok(format!("{}/{}", keys::collection(leaf), path.join("/")))
}

/// [`load`] from a file.
///
/// ```no_run
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::interop::flax;
///
/// # fn demo<M: TensorCollection<f32, Cpu> + flax::FlaxLayout>(model: &mut M) {
/// flax::load_file(model, "params.msgpack").unwrap();
/// # }
/// ```
pub fn load_file<E, D, M>(module: &mut M, path: impl AsRef<Path>) -> Result<(), FlaxError>
where
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D> + FlaxLayout,
{
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| FlaxError::Io {
        path: path.into(),
        error,
    })?;
    load(module, &bytes)
}

/// `module`'s tensors as the bytes of
/// `flax.serialization.to_bytes({"params": ..., "batch_stats": ...})`
/// (no `batch_stats` when the model has no BatchNorm), which
/// `flax.serialization.from_bytes` reads back.
///
/// ```
/// use flaxen_runtime::interop::flax;
///
/// let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/flax_interop.msgpack")).unwrap();
/// let state = flax::read_state::<f32>(&bytes).unwrap();
/// let again = flax::write_state(&state, &flax::SaveOptions::new()).unwrap();
/// assert_eq!(flax::read_state::<f32>(&again).unwrap(), state);
/// ```
pub fn write_state<E: Dtype>(
    state: &StateMap<E>,
    opts: &SaveOptions,
) -> Result<Vec<u8>, FlaxError> {
    let width = width::<E>();
    let mut leaves = Leaves::new();
    for (key, t) in state {
        let data = t
            .data
            .iter()
            .map(|v| v.to_f64().unwrap_or(f64::NAN))
            .collect();
        let a = Array {
            shape: t.shape.clone(),
            data,
        };
        let (path, a) = keys::to_flax(key, a, |m| opts.heads.get(m).copied())?;
        let leaf = key.rsplit('.').next().unwrap_or(key);
        let mut full = vec![keys::collection(leaf).to_owned()];
        full.extend(path);
        leaves.insert(full, a);
    }
    Ok(msgpack::encode(&leaves, width))
}

/// `module`'s tensors as the bytes `flax.serialization.to_bytes(variables)`
/// writes for the same model in Flax (`{"params": .., "batch_stats": ..}`,
/// no `batch_stats` without a BatchNorm), which
/// `flax.serialization.from_bytes` reads back: the inverse of [`load`],
/// with the paths and layouts of the model's [`FlaxLayout`]. Saving writes
/// float32 (float64 for an f64 model), so a round trip is exact.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::interop::flax::{self, FlaxKind, FlaxLayout, FlaxLeaves};
///
/// /// `Linear` saved as Flax's `nn.Dense(3, name="head")`.
/// struct Head;
/// impl FlaxLayout for Head {
///     fn flax_leaves(out: &mut FlaxLeaves) {
///         out.layer("head", "head", FlaxKind::Dense { bias: true, flattened: None });
///     }
/// }
/// # let _ = FlaxLeaves::of::<Head>();
/// ```
pub fn save<E, D, M>(module: &M) -> Result<Vec<u8>, FlaxError>
where
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D> + FlaxLayout,
{
    let mut state = StateMap::new();
    save_module_state(module, "", &mut state);
    let mut leaves = Leaves::new();
    for leaf in FlaxLeaves::of::<M>().leaves() {
        let t = state.remove(&leaf.key).ok_or_else(|| FlaxError::Unmapped {
            path: leaf.key.clone(),
        })?;
        let a = Array {
            shape: t.shape,
            data: t
                .data
                .iter()
                .map(|v| v.to_f64().unwrap_or(f64::NAN))
                .collect(),
        };
        let a = leaf.layout.to_flax(a, &leaf.key)?;
        let mut full = vec![leaf.collection.name().to_owned()];
        full.extend(leaf.path.iter().cloned());
        leaves.insert(full, a);
    }
    if let Some(key) = state.keys().next() {
        return Err(FlaxError::Unmapped { path: key.clone() });
    }
    Ok(msgpack::encode(&leaves, width::<E>()))
}

/// Float64 for an f64 model, else float32 (what Flax trains in).
fn width<E: Dtype>() -> Width {
    if std::mem::size_of::<E>() > 4 {
        Width::F64
    } else {
        Width::F32
    }
}

/// [`save`] to a file, atomically.
///
/// ```no_run
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::interop::flax;
///
/// # fn demo<M: TensorCollection<f32, Cpu> + flax::FlaxLayout>(model: &M) {
/// flax::save_file(model, "params.msgpack").unwrap();
/// # }
/// ```
pub fn save_file<E, D, M>(module: &M, path: impl AsRef<Path>) -> Result<(), FlaxError>
where
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D> + FlaxLayout,
{
    let path = path.as_ref();
    let bytes = save(module)?;
    crate::checkpoint::write_atomic(path, &bytes).map_err(|error| FlaxError::Io {
        path: path.into(),
        error,
    })
}
