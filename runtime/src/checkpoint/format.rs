//! The bytes of a checkpoint file: writing them deterministically, and
//! reading them back with every check a resume relies on (header, checksum,
//! `step`, finite values).

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::SafeTensors;
use safetensors::Dtype;

use super::element::{dtype_name, Element};
use super::{Checkpoint, CheckpointError, RawTensor, FORMAT, STEP_KEY, VERSION};

/// The CRC-32C over the step and every key, dtype, shape and byte, in key
/// order: a flipped bit anywhere in the data is detected.
pub(super) fn checksum(step: u64, tensors: &BTreeMap<String, RawTensor>) -> u32 {
    let mut crc = crc32c::crc32c(STEP_KEY.as_bytes());
    crc = crc32c::crc32c_append(crc, &step.to_le_bytes());
    for (key, t) in tensors {
        crc = crc32c::crc32c_append(crc, key.as_bytes());
        crc = crc32c::crc32c_append(crc, &[0]);
        crc = crc32c::crc32c_append(crc, dtype_name(t.dtype).as_bytes());
        for d in &t.shape {
            crc = crc32c::crc32c_append(crc, &(*d as u64).to_le_bytes());
        }
        crc = crc32c::crc32c_append(crc, &t.data);
    }
    crc
}

/// The index of the first NaN or ±infinity in `data` (little-endian values
/// of `dtype`); `None` for integer dtypes. Works on the bits, so `f16` and
/// `bf16` need no feature: a float is non-finite exactly when its exponent
/// bits are all ones.
pub(super) fn first_non_finite(dtype: Dtype, data: &[u8]) -> Option<usize> {
    fn scan<const N: usize>(data: &[u8], exp_mask: u64) -> Option<usize> {
        data.chunks_exact(N).position(|c| {
            let mut b = [0u8; 8];
            b[..N].copy_from_slice(c);
            u64::from_le_bytes(b) & exp_mask == exp_mask
        })
    }
    match dtype {
        Dtype::F16 => scan::<2>(data, 0x7c00),
        Dtype::BF16 => scan::<2>(data, 0x7f80),
        Dtype::F32 => scan::<4>(data, 0x7f80_0000),
        Dtype::F64 => scan::<8>(data, 0x7ff0_0000_0000_0000),
        _ => None,
    }
}

/// The safetensors bytes of `ckpt`, the same bytes for equal checkpoints.
///
/// Written here rather than by `safetensors::serialize`, whose header comes
/// from hash maps (key order changes from run to run), so that a checksum of
/// two files can confirm two runs reached the same state. The layout is the
/// one `safetensors` writes: an 8-byte little-endian header length, the JSON
/// header padded with spaces to a multiple of 8, then the tensors sorted by
/// element size (largest first, so every tensor is aligned) and then by key.
pub(super) fn to_bytes(ckpt: &Checkpoint) -> Result<Vec<u8>, CheckpointError> {
    let step = ckpt.step.to_le_bytes();
    let mut entries: Vec<(&str, Dtype, &[usize], &[u8])> =
        vec![(STEP_KEY, Dtype::U64, &[][..], &step[..])];
    for (key, t) in &ckpt.tensors {
        let numel: Option<usize> = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if numel.and_then(|n| n.checked_mul(t.dtype.size())) != Some(t.data.len()) {
            return Err(CheckpointError::Invalid {
                key: key.clone(),
                reason: format!(
                    "{} bytes of {} for shape {:?}",
                    t.data.len(),
                    dtype_name(t.dtype),
                    t.shape
                ),
            });
        }
        entries.push((key, t.dtype, &t.shape, &t.data));
    }
    entries.sort_by(|a, b| b.1.size().cmp(&a.1.size()).then(a.0.cmp(b.0)));

    // `serde_json::Map` is ordered by key (or by insertion with serde_json's
    // `preserve_order`, and insertion here is sorted too): deterministic.
    let mut header = serde_json::Map::new();
    let mut meta = serde_json::Map::new();
    meta.insert("crc32c".into(), format!("{:08x}", ckpt.checksum()).into());
    meta.insert("format".into(), FORMAT.into());
    meta.insert("version".into(), VERSION.into());
    header.insert("__metadata__".into(), meta.into());
    let mut offset = 0usize;
    let mut infos: Vec<(String, serde_json::Value)> = Vec::with_capacity(entries.len());
    for (key, dtype, shape, data) in &entries {
        let end = offset + data.len();
        infos.push((
            key.to_string(),
            serde_json::json!({
                "dtype": dtype_name(*dtype),
                "shape": shape,
                "data_offsets": [offset, end],
            }),
        ));
        offset = end;
    }
    infos.sort_by(|a, b| a.0.cmp(&b.0));
    header.extend(infos);
    let mut header = serde_json::Value::Object(header).to_string().into_bytes();
    header.resize(header.len().div_ceil(8) * 8, b' ');

    let mut out = Vec::with_capacity(8 + header.len() + offset);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for (_, _, _, data) in &entries {
        out.extend_from_slice(data);
    }
    Ok(out)
}

/// Parses and checks the bytes of a checkpoint; see [`Checkpoint::from_bytes`].
pub(super) fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let corrupt = |reason: String| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let parsed = SafeTensors::deserialize(bytes).map_err(|e| {
        corrupt(format!(
            "not a readable safetensors file ({e:?}); is it truncated or corrupt?"
        ))
    })?;
    let (_, meta) = SafeTensors::read_metadata(bytes)
        .map_err(|e| corrupt(format!("unreadable safetensors header ({e:?})")))?;
    // A missing entry is an error, not a skipped check: otherwise removing
    // the checksum from the header would let any corruption through.
    let meta = meta.metadata().clone().unwrap_or_default();
    let entry = |key: &str| {
        meta.get(key).ok_or_else(|| {
            corrupt(format!(
                "the header has no `{key}` entry: not a flaxen checkpoint, or its header was altered"
            ))
        })
    };
    let format = entry("format")?;
    if format != FORMAT {
        return Err(corrupt(format!(
            "the header's format is `{format}`, not `{FORMAT}`"
        )));
    }
    let version = entry("version")?;
    if version != VERSION {
        return Err(corrupt(format!(
            "checkpoint format version {version}; this flaxen reads version {VERSION}"
        )));
    }
    let stored = entry("crc32c")?;
    let mut step = None;
    let mut tensors = BTreeMap::new();
    for (key, view) in parsed.tensors() {
        if key == STEP_KEY {
            if view.dtype() != Dtype::U64 || !view.shape().is_empty() {
                return Err(corrupt(format!(
                    "`step` must be a U64 scalar, found {} of shape {:?}",
                    dtype_name(view.dtype()),
                    view.shape()
                )));
            }
            step = Some(u64::read_le(view.data()));
            continue;
        }
        let raw = RawTensor {
            dtype: view.dtype(),
            shape: view.shape().to_vec(),
            data: view.data().to_vec(),
        };
        tensors.insert(key, raw);
    }
    let step = step.ok_or_else(|| corrupt("no `step` tensor: not a flaxen checkpoint".into()))?;
    let ckpt = Checkpoint {
        step,
        tensors,
        path: path.to_path_buf(),
    };
    let computed = format!("{:08x}", ckpt.checksum());
    if *stored != computed {
        return Err(corrupt(format!(
            "checksum mismatch (stored crc32c {stored}, contents give {computed}): the file is corrupt"
        )));
    }
    ckpt.check_finite()?;
    Ok(ckpt)
}
