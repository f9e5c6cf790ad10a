//! A reader for the IDX format of MNIST (`train-images-idx3-ubyte`, ...),
//! raw or gzip-compressed (detected by the gzip magic, not the file name).
//!
//! Every error names the file and the fault: a bad magic number, a truncated
//! file, the wrong number of dimensions, or an image/label count mismatch.
//!
//! ```no_run
//! use flaxen_runtime::data::{idx, Dataset};
//!
//! let (train, test) = idx::load_mnist_dir("data/mnist").unwrap();
//! assert_eq!(train.example_shape(), &[1, 28, 28]);
//! assert_eq!(test.len(), 10_000);
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{ArrayDataset, DataError};

/// An IDX array of unsigned bytes (element type `0x08`, the one MNIST uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdxArray {
    /// Dimensions, outermost first.
    pub dims: Vec<usize>,
    /// Row-major values.
    pub data: Vec<u8>,
}

fn format_err(path: &Path, reason: impl Into<String>) -> DataError {
    DataError::Format {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads an IDX file of unsigned bytes, raw or gzip-compressed.
///
/// ```no_run
/// let labels = flaxen_runtime::data::idx::read_idx("t10k-labels-idx1-ubyte.gz").unwrap();
/// assert_eq!(labels.dims, vec![10_000]);
/// ```
pub fn read_idx(path: impl AsRef<Path>) -> Result<IdxArray, DataError> {
    let path = path.as_ref();
    let raw = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_idx(path, &raw)
}

/// Parses the bytes of an IDX file (raw or gzip); `path` only names the file
/// in errors.
///
/// ```
/// use flaxen_runtime::data::idx::parse_idx;
///
/// // magic 0x00000801 (unsigned bytes, one dimension), 3 items.
/// let bytes = [0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9];
/// let a = parse_idx("labels".as_ref(), &bytes).unwrap();
/// assert_eq!((a.dims, a.data), (vec![3], vec![7, 8, 9]));
/// assert!(parse_idx("labels".as_ref(), &bytes[..10]).is_err());
/// ```
pub fn parse_idx(path: &Path, raw: &[u8]) -> Result<IdxArray, DataError> {
    let decompressed;
    let bytes: &[u8] = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw)
            .read_to_end(&mut out)
            .map_err(|e| format_err(path, format!("corrupt or truncated gzip stream: {e}")))?;
        decompressed = out;
        &decompressed
    } else {
        raw
    };
    if bytes.len() < 4 {
        return Err(format_err(
            path,
            format!(
                "truncated: {} bytes, shorter than the 4-byte magic number",
                bytes.len()
            ),
        ));
    }
    let magic = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(format_err(
            path,
            format!("bad magic number 0x{magic:08x}: an IDX file starts with two zero bytes (expected e.g. 0x00000803 for images, 0x00000801 for labels)"),
        ));
    }
    if bytes[2] != 0x08 {
        return Err(format_err(
            path,
            format!(
                "bad magic number 0x{magic:08x}: element type 0x{:02x} is not supported (only 0x08, unsigned bytes)",
                bytes[2]
            ),
        ));
    }
    let ndim = bytes[3] as usize;
    if ndim == 0 {
        return Err(format_err(
            path,
            format!("bad magic number 0x{magic:08x}: zero dimensions"),
        ));
    }
    let header = 4 + 4 * ndim;
    if bytes.len() < header {
        return Err(format_err(
            path,
            format!(
                "truncated: the header of {ndim} dimensions needs {header} bytes, the file has {}",
                bytes.len()
            ),
        ));
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format_err(path, format!("dimensions {dims:?} overflow")))?;
    let body = &bytes[header..];
    if body.len() < expected {
        return Err(format_err(
            path,
            format!(
                "truncated: dimensions {dims:?} need {expected} bytes of data, the file has {}",
                body.len()
            ),
        ));
    }
    if body.len() > expected {
        return Err(format_err(
            path,
            format!(
                "{} unexpected bytes after the {expected} bytes of data for dimensions {dims:?}",
                body.len() - expected
            ),
        ));
    }
    Ok(IdxArray {
        dims,
        data: body.to_vec(),
    })
}

/// Builds a dataset from an images array (`[count, rows, cols]`) and a labels
/// array (`[count]`); pixels are divided by `scale` (255 for MNIST, 16 for
/// the UCI digits) and examples get shape `[1, rows, cols]` (NCHW).
///
/// The paths only name the files in errors.
pub(crate) fn images_and_labels(
    images: IdxArray,
    images_path: &Path,
    labels: IdxArray,
    labels_path: &Path,
    scale: f32,
) -> Result<ArrayDataset, DataError> {
    if images.dims.len() != 3 {
        return Err(format_err(
            images_path,
            format!(
                "wrong dimensions: images need 3 (count, rows, cols), found {} ({:?})",
                images.dims.len(),
                images.dims
            ),
        ));
    }
    if labels.dims.len() != 1 {
        return Err(format_err(
            labels_path,
            format!(
                "wrong dimensions: labels need 1 (count), found {} ({:?})",
                labels.dims.len(),
                labels.dims
            ),
        ));
    }
    if images.dims[0] != labels.dims[0] {
        return Err(format_err(
            labels_path,
            format!(
                "count mismatch: {} labels, but {} has {} images",
                labels.dims[0],
                images_path.display(),
                images.dims[0]
            ),
        ));
    }
    let features = images.data.iter().map(|&p| p as f32 / scale).collect();
    let labels = labels.data.iter().map(|&l| l as usize).collect();
    ArrayDataset::new(vec![1, images.dims[1], images.dims[2]], features, labels)
}

/// Loads an MNIST-style pair of IDX files: pixels scaled to `[0, 1]`
/// (divided by 255), examples of shape `[1, rows, cols]`.
///
/// ```no_run
/// use flaxen_runtime::data::idx::load_mnist;
///
/// let test = load_mnist("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz").unwrap();
/// ```
pub fn load_mnist(
    images: impl AsRef<Path>,
    labels: impl AsRef<Path>,
) -> Result<ArrayDataset, DataError> {
    let (ip, lp) = (images.as_ref(), labels.as_ref());
    images_and_labels(read_idx(ip)?, ip, read_idx(lp)?, lp, 255.0)
}

/// Loads MNIST's train and test sets from a directory holding the four
/// standard files (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
/// `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`), each raw or with a
/// `.gz` suffix.
///
/// ```no_run
/// let (train, test) = flaxen_runtime::data::idx::load_mnist_dir("mnist").unwrap();
/// ```
pub fn load_mnist_dir(dir: impl AsRef<Path>) -> Result<(ArrayDataset, ArrayDataset), DataError> {
    let dir = dir.as_ref();
    let find = |stem: &str| -> Result<PathBuf, DataError> {
        let raw = dir.join(stem);
        let gz = dir.join(format!("{stem}.gz"));
        if raw.is_file() {
            Ok(raw)
        } else if gz.is_file() {
            Ok(gz)
        } else {
            Err(DataError::Io {
                path: raw,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("neither {stem} nor {stem}.gz exists in this directory"),
                ),
            })
        }
    };
    let train = load_mnist(
        find("train-images-idx3-ubyte")?,
        find("train-labels-idx1-ubyte")?,
    )?;
    let test = load_mnist(
        find("t10k-images-idx3-ubyte")?,
        find("t10k-labels-idx1-ubyte")?,
    )?;
    Ok((train, test))
}
