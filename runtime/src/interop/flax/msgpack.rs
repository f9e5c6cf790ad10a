//! The msgpack layout of `flax.serialization.to_bytes`: nested maps with
//! string keys whose leaves are arrays, each an ext value of type 1
//! (`ndarray`; type 3, `npscalar`, for a NumPy scalar) holding the msgpack
//! triple `(shape, dtype name, C-order bytes)`. Arrays over 1 GiB are split
//! by Flax into a `__msgpack_chunked_array__` map, read here too.

use std::collections::BTreeMap;

use rmpv::Value;

use super::FlaxError;

/// Flax's ext type codes (`flax.serialization._MsgpackExtType`).
const EXT_NDARRAY: i8 = 1;
const EXT_NPSCALAR: i8 = 3;
const CHUNKED: &str = "__msgpack_chunked_array__";
/// How deep the msgpack values of a file may nest (maps within maps, and
/// the array triple inside its ext): far above any model's tree.
const MAX_DEPTH: usize = 64;

/// One array of the tree, its values widened to f64 (exact for the float
/// types Flax stores).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

/// Leaves of the tree by path (module names, then the leaf's name).
pub(crate) type Leaves = BTreeMap<Vec<String>, Array>;

fn corrupt(path: &[String], reason: impl Into<String>) -> FlaxError {
    FlaxError::Format {
        path: path.join("/"),
        reason: reason.into(),
    }
}

/// Decodes `bytes` into its leaves; anything but maps of arrays (or
/// trailing bytes) is an error naming the path.
pub(crate) fn decode(bytes: &[u8]) -> Result<Leaves, FlaxError> {
    let mut rest = bytes;
    // A Flax tree is a few levels deep; a file nested deeper is refused
    // before its recursion could exhaust the stack.
    let value = rmpv::decode::read_value_with_max_depth(&mut rest, MAX_DEPTH).map_err(|e| {
        FlaxError::Msgpack {
            reason: format!("{e} (truncated or not a Flax msgpack file?)"),
        }
    })?;
    if !rest.is_empty() {
        return Err(FlaxError::Msgpack {
            reason: format!("{} trailing bytes after the tree", rest.len()),
        });
    }
    let mut out = Leaves::new();
    walk(&value, &mut Vec::new(), &mut out)?;
    Ok(out)
}

fn walk(value: &Value, path: &mut Vec<String>, out: &mut Leaves) -> Result<(), FlaxError> {
    match value {
        Value::Map(entries) if entries.iter().any(|(k, _)| k.as_str() == Some(CHUNKED)) => {
            out.insert(path.clone(), unchunk(entries, path)?);
        }
        Value::Map(entries) => {
            for (k, v) in entries {
                let name = k
                    .as_str()
                    .ok_or_else(|| corrupt(path, format!("a map key is not a string: {k}")))?;
                path.push(name.to_owned());
                walk(v, path, out)?;
                path.pop();
            }
        }
        Value::Ext(EXT_NDARRAY | EXT_NPSCALAR, data) => {
            out.insert(path.clone(), ndarray(data, path)?);
        }
        other => {
            return Err(corrupt(
                path,
                format!("is {}, not an array or a map", kind(other)),
            ))
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "a boolean",
        Value::Integer(_) | Value::F32(_) | Value::F64(_) => "a number",
        Value::String(_) => "a string",
        Value::Binary(_) => "raw bytes",
        Value::Array(_) => "a list",
        Value::Map(_) => "a map",
        Value::Ext(..) => "an unknown ext value",
    }
}

/// `(shape, dtype, bytes)` of one ext value.
fn ndarray(data: &[u8], path: &[String]) -> Result<Array, FlaxError> {
    let mut rest = data;
    let triple = rmpv::decode::read_value(&mut rest)
        .map_err(|e| corrupt(path, format!("unreadable array: {e}")))?;
    let bad = || corrupt(path, "an array is not (shape, dtype, bytes)");
    let [shape, dtype, buffer] = triple.as_array().map(Vec::as_slice).ok_or_else(bad)? else {
        return Err(bad());
    };
    let shape = shape
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(bad)?;
    let dtype = dtype
        .as_str()
        .or_else(|| dtype.as_slice().and_then(|s| std::str::from_utf8(s).ok()))
        .ok_or_else(bad)?;
    let buffer = buffer.as_slice().ok_or_else(bad)?;
    let (size, read): (usize, fn(&[u8]) -> f64) = match dtype {
        "float32" => (4, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64),
        "float64" => (8, |b| {
            f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
        }),
        "float16" => (2, |b| f16_to_f64(u16::from_le_bytes([b[0], b[1]]))),
        "bfloat16" => (2, |b| {
            f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) as f64
        }),
        other => {
            return Err(corrupt(
                path,
                format!("dtype `{other}` is not a float type flaxen loads"),
            ))
        }
    };
    // Checked: a corrupt shape must not overflow (a panic in debug builds).
    let count = checked_count(&shape)
        .ok_or_else(|| corrupt(path, format!("shape {shape:?} is too large")))?;
    if count.checked_mul(size) != Some(buffer.len()) {
        return Err(corrupt(
            path,
            format!(
                "{} bytes of {dtype} for shape {shape:?} ({count} values)",
                buffer.len()
            ),
        ));
    }
    let data = buffer.chunks_exact(size).map(read).collect();
    Ok(Array { shape, data })
}

/// The number of values of `shape`, `None` on overflow.
fn checked_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// IEEE half to f64 (exact).
fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let frac = f64::from(bits & 0x3ff);
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Flax's split form of a huge array: `shape` and `chunks` maps keyed
/// `"0"`, `"1"`, ...
fn unchunk(entries: &[(Value, Value)], path: &[String]) -> Result<Array, FlaxError> {
    let field = |name: &str| {
        entries
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .and_then(|(_, v)| v.as_map())
            .ok_or_else(|| corrupt(path, format!("chunked array without `{name}`")))
    };
    let shape_map = field("shape")?;
    let shape = (0..shape_map.len())
        .map(|i| {
            indexed(shape_map, i, path)?
                .as_u64()
                .and_then(|d| usize::try_from(d).ok())
                .ok_or_else(|| corrupt(path, "chunked array shape is not integers"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let chunks = field("chunks")?;
    let mut data = Vec::new();
    for i in 0..chunks.len() {
        match indexed(chunks, i, path)? {
            Value::Ext(EXT_NDARRAY, bytes) => data.extend(ndarray(bytes, path)?.data),
            _ => return Err(corrupt(path, "a chunk is not an array")),
        }
    }
    if Some(data.len()) != checked_count(&shape) {
        return Err(corrupt(path, "chunks do not fill the shape"));
    }
    Ok(Array { shape, data })
}

/// Entry `"i"` of one of a chunked array's maps.
fn indexed<'a>(m: &'a [(Value, Value)], i: usize, path: &[String]) -> Result<&'a Value, FlaxError> {
    let name = i.to_string();
    m.iter()
        .find(|(k, _)| k.as_str() == Some(name.as_str()))
        .map(|(_, v)| v)
        .ok_or_else(|| corrupt(path, format!("chunked array lacks entry {i}")))
}

/// How values are written: `float32` (f32 and narrower models: exact) or
/// `float64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    F32,
    F64,
}

/// One array as Flax's ext value.
pub(crate) fn ndarray_value(a: &Array, width: Width) -> Value {
    let (name, bytes) = match width {
        Width::F32 => (
            "float32",
            a.data
                .iter()
                .flat_map(|v| (*v as f32).to_le_bytes())
                .collect(),
        ),
        Width::F64 => (
            "float64",
            a.data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
    };
    let triple = Value::Array(vec![
        Value::Array(a.shape.iter().map(|&d| Value::from(d as u64)).collect()),
        Value::from(name),
        Value::Binary(bytes),
    ]);
    let mut buf = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut buf, &triple);
    Value::Ext(EXT_NDARRAY, buf)
}

/// A nested map of ext arrays, keys in sorted order.
pub(crate) fn encode(leaves: &Leaves, width: Width) -> Vec<u8> {
    #[derive(Default)]
    struct Node {
        children: BTreeMap<String, Node>,
        leaf: Option<Value>,
    }
    fn to_value(n: Node) -> Value {
        match n.leaf {
            Some(v) => v,
            None => Value::Map(
                n.children
                    .into_iter()
                    .map(|(k, c)| (Value::from(k), to_value(c)))
                    .collect(),
            ),
        }
    }
    let mut root = Node::default();
    for (path, a) in leaves {
        let mut node = &mut root;
        for name in path {
            node = node.children.entry(name.clone()).or_default();
        }
        node.leaf = Some(ndarray_value(a, width));
    }
    let mut buf = Vec::new();
    let _ = rmpv::encode::write_value(&mut buf, &to_value(root));
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(shape: &[u64], dtype: &str, bytes: Vec<u8>) -> Vec<u8> {
        let triple = Value::Array(vec![
            Value::Array(shape.iter().map(|&d| Value::from(d)).collect()),
            Value::from(dtype),
            Value::Binary(bytes),
        ]);
        let mut inner = Vec::new();
        rmpv::encode::write_value(&mut inner, &triple).unwrap();
        let tree = Value::Map(vec![(Value::from("a"), Value::Ext(EXT_NDARRAY, inner))]);
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &tree).unwrap();
        out
    }

    #[test]
    fn corrupt_arrays_are_errors_not_panics() {
        let huge = ext(&[u64::MAX, 4], "float32", vec![0; 8]);
        assert!(decode(&huge).unwrap_err().to_string().contains("too large"));
        let short = ext(&[3], "float32", vec![0; 8]);
        assert!(decode(&short)
            .unwrap_err()
            .to_string()
            .contains("8 bytes of float32"));
        let ints = ext(&[2], "int32", vec![0; 8]);
        assert!(decode(&ints).unwrap_err().to_string().contains("int32"));
    }

    #[test]
    fn hostile_files_are_errors_with_bounded_memory() {
        // 100,000 nested one-entry maps: refused at rmpv's depth limit, no
        // stack overflow.
        let mut deep = Vec::new();
        for _ in 0..100_000 {
            deep.extend_from_slice(&[0x81, 0xa1, b'a']);
        }
        deep.push(0xc0);
        assert!(matches!(decode(&deep), Err(FlaxError::Msgpack { .. })));
        // Headers claiming 4 GiB of entries / bytes with nothing behind
        // them: the decoder preallocates a bounded amount and fails on the
        // missing bytes.
        for claim in [
            vec![0xdf, 0xff, 0xff, 0xff, 0xff],       // map32
            vec![0xdd, 0xff, 0xff, 0xff, 0xff],       // array32
            vec![0xc6, 0xff, 0xff, 0xff, 0xff, 0x00], // bin32
            vec![0xc9, 0xff, 0xff, 0xff, 0xff, 0x01], // ext32
        ] {
            assert!(
                matches!(decode(&claim), Err(FlaxError::Msgpack { .. })),
                "{claim:?}"
            );
        }
        // Forged leaves: a string, an integer, an ext of another type, an
        // ndarray whose payload is not the triple.
        let leaf = |v: Value| {
            let mut out = Vec::new();
            rmpv::encode::write_value(&mut out, &Value::Map(vec![(Value::from("k"), v)])).unwrap();
            out
        };
        for forged in [
            leaf(Value::from("a string")),
            leaf(Value::from(7)),
            leaf(Value::Ext(42, vec![1, 2, 3])),
            leaf(Value::Ext(EXT_NDARRAY, vec![0xc0])),
        ] {
            let err = decode(&forged).unwrap_err();
            assert!(matches!(err, FlaxError::Format { .. }), "{err}");
            assert!(err.to_string().contains("`k`"), "{err}");
        }
    }

    #[test]
    fn half_precision_widens_exactly() {
        // 1.0 and -2.5 as float16 (0x3c00, 0xc100) and bfloat16 (0x3f80, 0xc020).
        let h = decode(&ext(&[2], "float16", vec![0x00, 0x3c, 0x00, 0xc1])).unwrap();
        let b = decode(&ext(&[2], "bfloat16", vec![0x80, 0x3f, 0x20, 0xc0])).unwrap();
        let key = vec!["a".to_owned()];
        assert_eq!(h[&key].data, [1.0, -2.5]);
        assert_eq!(b[&key].data, [1.0, -2.5]);
    }
}
