//! Flax parameter paths to flaxen checkpoint keys and layouts, and back: the
//! Rust twin of `tests/python/flax_keys.py`'s `to_flaxen` (plus the gates of
//! the recurrent cells), and its exact inverse.

use super::msgpack::Array;
use super::FlaxError;

/// `Conv_0` -> `Conv`; a name without a numeric suffix (`query`, `ii`) is
/// its own kind, as in `flax_keys.kind`.
fn kind(module: &str) -> &str {
    match module.rsplit_once('_') {
        Some((head, tail))
            if !head.is_empty() && !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) =>
        {
            head
        }
        _ => module,
    }
}

/// `CamelCase` to `snake_case` as the `#[compact]` macro names fields
/// (`BatchNorm` -> `batch_norm`, `LSTMCell` -> `lstm_cell`): a word starts
/// at a capital after a lowercase letter or digit, and at the last capital
/// of an acronym that a lowercase letter follows.
pub(crate) fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let starts = match i.checked_sub(1).map(|p| chars[p]) {
                None => false,
                Some(p) if !p.is_uppercase() => true,
                Some(_) => chars.get(i + 1).is_some_and(|n| n.is_lowercase()),
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

/// Flax's spelling of the modules whose names hold an acronym, which
/// `snake` cannot undo word by word.
const ACRONYMS: &[&str] = &[
    "LSTMCell",
    "OptimizedLSTMCell",
    "GRUCell",
    "MGUCell",
    "RMSNorm",
];

/// `batch_norm` -> `BatchNorm`, the inverse of [`snake`] for Flax's
/// modules and for user modules named without acronyms.
fn camel(snake_name: &str) -> String {
    if let Some(known) = ACRONYMS.iter().find(|a| snake(a) == snake_name) {
        return (*known).to_owned();
    }
    snake_name
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

/// How an array differs between Flax's checkpoint and flaxen's module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Same values, same shape.
    Keep,
    /// Conv (and ConvTranspose) kernel HWIO <-> weight OIHW.
    Conv,
    /// Dense kernel (in, out) <-> weight (out, in).
    Transpose,
    /// Dense kernel (in, out) <-> 1x1 conv weight (out, in, 1, 1): a
    /// `Dense` on the channels of an NCHW map.
    DenseAsConv,
    /// The kernel of a Dense that reads a flattened `[c, h, w]` map: Flax's
    /// rows run over (h, w, c) (it flattens NHWC maps), flaxen's columns
    /// over (c, h, w).
    Flattened {
        /// Channels.
        c: usize,
        /// Height.
        h: usize,
        /// Width.
        w: usize,
    },
    /// Attention `query`/`key`/`value` kernel (F, H, D) <-> (H*D, F).
    Qkv {
        /// H; 0 where the name mapping does not know it.
        heads: usize,
    },
    /// Attention `query`/`key`/`value` bias (H, D) <-> (H*D).
    QkvBias {
        /// H; 0 where the name mapping does not know it.
        heads: usize,
    },
    /// Attention `out` kernel (H, D, O) <-> (O, H*D).
    Out {
        /// H; 0 where the name mapping does not know it.
        heads: usize,
    },
}

impl Layout {
    /// The same layout with `heads` heads, for the attention layouts.
    fn with_heads(self, h: usize) -> Self {
        match self {
            Layout::Qkv { .. } => Layout::Qkv { heads: h },
            Layout::QkvBias { .. } => Layout::QkvBias { heads: h },
            Layout::Out { .. } => Layout::Out { heads: h },
            other => other,
        }
    }

    /// Whether writing Flax's array needs the number of heads.
    fn heads_needed(self) -> bool {
        matches!(
            self,
            Layout::Qkv { .. } | Layout::QkvBias { .. } | Layout::Out { .. }
        )
    }

    /// The heads an attention layout needs to write Flax's array (0 for
    /// the other layouts).
    fn heads(self) -> usize {
        match self {
            Layout::Qkv { heads } | Layout::QkvBias { heads } | Layout::Out { heads } => heads,
            _ => 0,
        }
    }

    /// Flax's array (at `path`, for messages) in flaxen's layout.
    pub(crate) fn to_flaxen(self, a: Array, path: &str) -> Result<Array, FlaxError> {
        let rank = |r: usize| {
            if a.shape.len() == r {
                Ok(())
            } else {
                Err(FlaxError::Format {
                    path: path.to_owned(),
                    reason: format!("shape {:?} is not of rank {r}", a.shape),
                })
            }
        };
        Ok(match self {
            Layout::Keep => a,
            Layout::Conv => {
                rank(4)?;
                permute(&a, &[3, 2, 0, 1])
            }
            Layout::Transpose => {
                rank(2)?;
                permute(&a, &[1, 0])
            }
            Layout::DenseAsConv => {
                rank(2)?;
                let (i, o) = (a.shape[0], a.shape[1]);
                reshaped(permute(&a, &[1, 0]), vec![o, i, 1, 1])
            }
            Layout::Flattened { c, h, w } => {
                rank(2)?;
                if a.shape[0] != c * h * w {
                    return Err(FlaxError::Format {
                        path: path.to_owned(),
                        reason: format!(
                            "shape {:?}: a Dense after a flatten of [{c}, {h}, {w}] has {} input rows",
                            a.shape,
                            c * h * w
                        ),
                    });
                }
                let o = a.shape[1];
                // (h, w, c, o) -> (o, c, h, w), as a conv kernel is.
                reshaped(
                    permute(&reshaped(a, vec![h, w, c, o]), &[3, 2, 0, 1]),
                    vec![o, c * h * w],
                )
            }
            Layout::Qkv { .. } => {
                rank(3)?;
                let f = a.shape[0];
                let hd = a.shape[1] * a.shape[2];
                permute(&reshaped(a, vec![f, hd]), &[1, 0])
            }
            Layout::QkvBias { .. } => {
                rank(2)?;
                let hd = a.shape[0] * a.shape[1];
                reshaped(a, vec![hd])
            }
            Layout::Out { .. } => {
                rank(3)?;
                let o = a.shape[2];
                let hd = a.shape[0] * a.shape[1];
                permute(&reshaped(a, vec![hd, o]), &[1, 0])
            }
        })
    }

    /// flaxen's array (of key `key`, for messages) in Flax's layout.
    pub(crate) fn to_flax(self, a: Array, key: &str) -> Result<Array, FlaxError> {
        let shape_err = |r: usize| FlaxError::Format {
            path: key.to_owned(),
            reason: format!("shape {:?} is not of rank {r}", a.shape),
        };
        let split_heads = |hd: usize| -> Result<(usize, usize), FlaxError> {
            let h = self.heads();
            if h == 0 || !hd.is_multiple_of(h) {
                return Err(FlaxError::Format {
                    path: key.to_owned(),
                    reason: format!("{hd} features do not split into {h} heads"),
                });
            }
            Ok((h, hd / h))
        };
        Ok(match self {
            Layout::Keep => a,
            Layout::Conv if a.shape.len() == 4 => permute(&a, &[2, 3, 1, 0]),
            Layout::Transpose if a.shape.len() == 2 => permute(&a, &[1, 0]),
            Layout::DenseAsConv if a.shape.len() == 4 && a.shape[2..] == [1, 1] => {
                let (o, i) = (a.shape[0], a.shape[1]);
                permute(&reshaped(a, vec![o, i]), &[1, 0])
            }
            Layout::DenseAsConv => {
                return Err(FlaxError::Format {
                    path: key.to_owned(),
                    reason: format!("shape {:?} is not [out, in, 1, 1]", a.shape),
                })
            }
            Layout::Flattened { c, h, w } if a.shape.len() == 2 && a.shape[1] == c * h * w => {
                let o = a.shape[0];
                reshaped(
                    permute(&reshaped(a, vec![o, c, h, w]), &[2, 3, 1, 0]),
                    vec![h * w * c, o],
                )
            }
            Layout::Qkv { .. } if a.shape.len() == 2 => {
                let (h, d) = split_heads(a.shape[0])?;
                let f = a.shape[1];
                reshaped(permute(&a, &[1, 0]), vec![f, h, d])
            }
            Layout::QkvBias { .. } if a.shape.len() == 1 => {
                let (h, d) = split_heads(a.shape[0])?;
                reshaped(a, vec![h, d])
            }
            Layout::Out { .. } if a.shape.len() == 2 => {
                let (h, d) = split_heads(a.shape[1])?;
                let o = a.shape[0];
                reshaped(permute(&a, &[1, 0]), vec![h, d, o])
            }
            Layout::Conv => return Err(shape_err(4)),
            Layout::Flattened { c, h, w } => {
                return Err(FlaxError::Format {
                    path: key.to_owned(),
                    reason: format!("shape {:?} is not [out, {}]", a.shape, c * h * w),
                })
            }
            Layout::Transpose | Layout::Qkv { .. } | Layout::Out { .. } => {
                return Err(shape_err(2))
            }
            Layout::QkvBias { .. } => return Err(shape_err(1)),
        })
    }
}

/// (Flax leaf, flaxen leaf, layout) of one module kind; `None` when flaxen
/// has no such layer. `parent` is the kind of the module above the owner
/// (a recurrent cell's gates are Dense layers named `ii`, `hf`, ...).
fn leaves_of(
    owner: &str,
    parent: Option<&str>,
) -> Option<&'static [(&'static str, &'static str, Layout)]> {
    use Layout::*;
    const DENSE: &[(&str, &str, Layout)] =
        &[("kernel", "weight", Transpose), ("bias", "bias", Keep)];
    Some(match owner {
        "Conv" => &[("kernel", "weight", Conv), ("bias", "bias", Keep)],
        "Dense" => DENSE,
        "BatchNorm" => &[
            ("scale", "scale", Keep),
            ("bias", "bias", Keep),
            ("mean", "running_mean", Keep),
            ("var", "running_var", Keep),
        ],
        "LayerNorm" => &[("scale", "gamma", Keep), ("bias", "beta", Keep)],
        "query" | "key" | "value" => &[
            ("kernel", "weight", Qkv { heads: 0 }),
            ("bias", "bias", QkvBias { heads: 0 }),
        ],
        "out" => &[
            ("kernel", "weight", Out { heads: 0 }),
            ("bias", "bias", Keep),
        ],
        "Embed" => &[("embedding", "embedding", Keep)],
        _ if parent.is_some_and(|p| p.ends_with("Cell")) => DENSE,
        _ => return None,
    })
}

/// Flax's collection of a flaxen leaf: BatchNorm's running statistics are
/// `batch_stats`, everything else `params`.
pub(crate) fn collection(flaxen_leaf: &str) -> &'static str {
    match flaxen_leaf {
        "running_mean" | "running_var" => "batch_stats",
        _ => "params",
    }
}

fn permute(a: &Array, perm: &[usize]) -> Array {
    let shape: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
    let mut strides = vec![1; a.shape.len()];
    for i in (0..a.shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * a.shape[i + 1];
    }
    let mut data = Vec::with_capacity(a.data.len());
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..a.data.len() {
        let src: usize = idx.iter().zip(perm).map(|(&i, &p)| i * strides[p]).sum();
        data.push(a.data[src]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Array { shape, data }
}

fn reshaped(a: Array, shape: Vec<usize>) -> Array {
    Array {
        shape,
        data: a.data,
    }
}

/// A Flax path (modules, then the leaf) and its array -> the flaxen key
/// and the array in flaxen's layout.
pub(crate) fn to_flaxen(path: &[String], a: Array) -> Result<(String, Array), FlaxError> {
    let joined = path.join("/");
    let unmapped = || FlaxError::Unmapped {
        path: joined.clone(),
    };
    let (leaf, modules) = path.split_last().ok_or_else(unmapped)?;
    let (owner, above) = modules.split_last().ok_or_else(unmapped)?;
    let table = leaves_of(kind(owner), above.last().map(|p| kind(p))).ok_or_else(unmapped)?;
    let &(_, name, layout) = table
        .iter()
        .find(|(f, ..)| f == leaf)
        .ok_or_else(unmapped)?;
    let a = layout.to_flaxen(a, &joined)?;
    let mut key: Vec<String> = modules
        .iter()
        .map(|m| if kind(m) != m { snake(m) } else { m.clone() })
        .collect();
    key.push(name.to_owned());
    Ok((key.join("."), a))
}

/// Flax's path (modules, then the leaf) of a flaxen key, and the layout
/// of its array: the name half of [`to_flax`].
pub(crate) fn flax_names(key: &str) -> Result<(Vec<String>, Layout), FlaxError> {
    let unmapped = || FlaxError::Unmapped {
        path: key.to_owned(),
    };
    let parts: Vec<&str> = key.split('.').collect();
    let (leaf, modules) = parts.split_last().ok_or_else(unmapped)?;
    let mut path: Vec<String> = modules
        .iter()
        .map(|m| {
            let k = kind(m);
            if k != *m {
                format!("{}{}", camel(k), &m[k.len()..])
            } else {
                (*m).to_owned()
            }
        })
        .collect();
    let (owner, above) = path.split_last().ok_or_else(unmapped)?;
    let table = leaves_of(kind(owner), above.last().map(|p| kind(p))).ok_or_else(unmapped)?;
    let &(flax_leaf, _, layout) = table
        .iter()
        .find(|(_, n, _)| n == leaf)
        .ok_or_else(unmapped)?;
    path.push(flax_leaf.to_owned());
    Ok((path, layout))
}

/// The inverse of [`to_flaxen`]: a flaxen key and array -> the Flax path
/// (modules, then the leaf) and the array in Flax's layout. `heads` gives
/// the number of heads of the attention module that owns the key (its
/// flaxen prefix), which flaxen's flattened kernels do not record.
pub(crate) fn to_flax(
    key: &str,
    a: Array,
    heads: impl Fn(&str) -> Option<usize>,
) -> Result<(Vec<String>, Array), FlaxError> {
    let (path, layout) = flax_names(key)?;
    let layout = match layout.heads_needed() {
        false => layout,
        true => {
            let modules: Vec<&str> = key.split('.').collect();
            let attention = modules[..modules.len().saturating_sub(2)].join(".");
            let h = heads(&attention).ok_or_else(|| FlaxError::Heads {
                key: key.to_owned(),
                module: attention.clone(),
            })?;
            layout.with_heads(h)
        }
    };
    let a = layout.to_flax(a, key)?;
    Ok((path, a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(shape: &[usize]) -> Array {
        let n = shape.iter().product::<usize>();
        Array {
            shape: shape.to_vec(),
            data: (0..n).map(|i| i as f64).collect(),
        }
    }

    fn path(p: &str) -> Vec<String> {
        p.split('/').map(str::to_owned).collect()
    }

    #[test]
    fn names_follow_the_macro() {
        assert_eq!(snake("SelfAttention"), "self_attention");
        assert_eq!(snake("LSTMCell"), "lstm_cell");
        assert_eq!(camel("lstm_cell"), "LSTMCell");
        assert_eq!(camel("encoder_block"), "EncoderBlock");
        assert_eq!(kind("Conv_12"), "Conv");
        assert_eq!(kind("query"), "query");
    }

    #[test]
    fn every_layout_round_trips() {
        let heads = |m: &str| (m == "encoder_block_1.self_attention_0").then_some(2);
        for (flax, shape, key) in [
            ("Conv_0/kernel", &[3, 2, 4, 5][..], "conv_0.weight"),
            (
                "EncoderBlock_1/Dense_0/kernel",
                &[3, 4],
                "encoder_block_1.dense_0.weight",
            ),
            ("BatchNorm_0/mean", &[4], "batch_norm_0.running_mean"),
            ("LayerNorm_0/scale", &[4], "layer_norm_0.gamma"),
            ("Embed_0/embedding", &[7, 3], "embed_0.embedding"),
            ("LSTMCell_0/hf/kernel", &[3, 5], "lstm_cell_0.hf.weight"),
            (
                "EncoderBlock_1/SelfAttention_0/query/kernel",
                &[6, 2, 3],
                "encoder_block_1.self_attention_0.query.weight",
            ),
            (
                "EncoderBlock_1/SelfAttention_0/key/bias",
                &[2, 3],
                "encoder_block_1.self_attention_0.key.bias",
            ),
            (
                "EncoderBlock_1/SelfAttention_0/out/kernel",
                &[2, 3, 6],
                "encoder_block_1.self_attention_0.out.weight",
            ),
        ] {
            let a = arr(shape);
            let (k, mapped) = to_flaxen(&path(flax), a.clone()).unwrap();
            assert_eq!(k, key);
            let (p, back) = to_flax(&k, mapped, heads).unwrap();
            assert_eq!((p.join("/"), back), (flax.to_owned(), a), "{flax}");
        }
    }

    #[test]
    fn layouts_match_flax_keys_py() {
        // HWIO (1, 1, 2, 3) -> OIHW (3, 2, 1, 1): weight[o][i] = kernel[i][o].
        let (_, w) = to_flaxen(&path("Conv_0/kernel"), arr(&[1, 1, 2, 3])).unwrap();
        assert_eq!(w.shape, [3, 2, 1, 1]);
        assert_eq!(w.data, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        // (F=2, H=1, D=2) -> (H*D, F) = kernel.reshape(F, -1).T
        let (_, q) = to_flaxen(&path("SelfAttention_0/query/kernel"), arr(&[2, 1, 2])).unwrap();
        assert_eq!((q.shape, q.data), (vec![2, 2], vec![0.0, 2.0, 1.0, 3.0]));
    }

    #[test]
    fn unknown_layers_are_named() {
        let err = to_flaxen(&path("Foo_0/kernel"), arr(&[2])).unwrap_err();
        assert!(err.to_string().contains("Foo_0/kernel"), "{err}");
        let err = to_flax("self_attention_0.query.weight", arr(&[4, 2]), |_| None).unwrap_err();
        assert!(err.to_string().contains("self_attention_0"), "{err}");
    }
}
