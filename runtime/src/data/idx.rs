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

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use super::{ArrayDataset, DataError};

/// The number of classes of MNIST (and of Fashion-MNIST, KMNIST): labels are
/// `0..=9`.
pub const MNIST_CLASSES: usize = 10;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

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

fn io_err(path: &Path, error: std::io::Error) -> DataError {
    DataError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Reads an IDX file of unsigned bytes, raw or gzip-compressed (one gzip
/// member or several concatenated, as `cat a.gz b.gz` or `pigz` write them).
///
/// Decompression stops one byte past the size the IDX header declares, so a
/// small `.gz` that expands to gigabytes is refused after reading only the
/// declared size, not held in memory whole.
///
/// ```no_run
/// let labels = flaxen_runtime::data::idx::read_idx("t10k-labels-idx1-ubyte.gz").unwrap();
/// assert_eq!(labels.dims, vec![10_000]);
/// ```
pub fn read_idx(path: impl AsRef<Path>) -> Result<IdxArray, DataError> {
    let path = path.as_ref();
    let meta = std::fs::metadata(path).map_err(|e| io_err(path, e))?;
    if meta.is_dir() {
        return Err(format_err(path, "is a directory, not an IDX file"));
    }
    let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let mut reader = BufReader::new(file);
    let head = reader.fill_buf().map_err(|e| io_err(path, e))?;
    if head.starts_with(&GZIP_MAGIC) {
        parse_stream(path, flate2::read::MultiGzDecoder::new(reader), None)
    } else {
        parse_stream(path, reader, Some(meta.len()))
    }
}

/// Parses the bytes of an IDX file (raw or gzip, see [`read_idx`]); `path`
/// only names the file in errors.
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
    if raw.starts_with(&GZIP_MAGIC) {
        parse_stream(path, flate2::read::MultiGzDecoder::new(raw), None)
    } else {
        parse_stream(path, raw, Some(raw.len() as u64))
    }
}

/// Reads into `buf` until it is full or the stream ends; returns the count.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Parses an IDX stream. `raw_len` is the total length of an uncompressed
/// file (to report exactly how many bytes trail the data); `None` means the
/// stream is gzip, whose read errors are corruption, not I/O failures.
fn parse_stream(
    path: &Path,
    mut r: impl Read,
    raw_len: Option<u64>,
) -> Result<IdxArray, DataError> {
    let read_err = |e: std::io::Error| match raw_len {
        Some(_) => io_err(path, e),
        None => format_err(path, format!("corrupt or truncated gzip stream: {e}")),
    };
    let mut magic = [0u8; 4];
    let got = read_up_to(&mut r, &mut magic).map_err(read_err)?;
    if got < 4 {
        return Err(format_err(
            path,
            format!("truncated: {got} bytes, shorter than the 4-byte magic number"),
        ));
    }
    let magic_value = u32::from_be_bytes(magic);
    if magic[0] != 0 || magic[1] != 0 {
        return Err(format_err(
            path,
            format!("bad magic number 0x{magic_value:08x}: an IDX file starts with two zero bytes (expected e.g. 0x00000803 for images, 0x00000801 for labels)"),
        ));
    }
    if magic[2] != 0x08 {
        return Err(format_err(
            path,
            format!(
                "bad magic number 0x{magic_value:08x}: element type 0x{:02x} is not supported (only 0x08, unsigned bytes)",
                magic[2]
            ),
        ));
    }
    let ndim = magic[3] as usize;
    if ndim == 0 {
        return Err(format_err(
            path,
            format!("bad magic number 0x{magic_value:08x}: zero dimensions"),
        ));
    }
    let header = 4 + 4 * ndim;
    let mut dim_bytes = vec![0u8; 4 * ndim];
    let got = read_up_to(&mut r, &mut dim_bytes).map_err(read_err)?;
    if got < dim_bytes.len() {
        return Err(format_err(
            path,
            format!(
                "truncated: the header of {ndim} dimensions needs {header} bytes, the file has {}",
                4 + got
            ),
        ));
    }
    let dims: Vec<usize> = dim_bytes
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format_err(path, format!("dimensions {dims:?} overflow")))?;
    // One byte more than declared is enough to know the file is too long;
    // reading no further bounds memory and time whatever the stream holds.
    // The vector grows with what is actually read, so a header that
    // declares a huge size does not allocate it up front.
    let mut body = Vec::new();
    r.take(expected as u64 + 1)
        .read_to_end(&mut body)
        .map_err(read_err)?;
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
        let extra = match raw_len {
            Some(total) => format!("{}", total.saturating_sub((header + expected) as u64)),
            None => "more".to_string(),
        };
        return Err(format_err(
            path,
            format!(
                "{extra} unexpected bytes after the {expected} bytes of data for dimensions {dims:?}"
            ),
        ));
    }
    Ok(IdxArray { dims, data: body })
}

/// Builds a dataset from an images array (`[count, rows, cols]`) and a labels
/// array (`[count]`) whose labels are all below `classes`; pixels are divided
/// by `scale` (255 for MNIST, 16 for the UCI digits) and examples get shape
/// `[1, rows, cols]` (NCHW).
///
/// The paths only name the files in errors.
pub(crate) fn images_and_labels(
    images: IdxArray,
    images_path: &Path,
    labels: IdxArray,
    labels_path: &Path,
    scale: f32,
    classes: usize,
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
    // A label past the last class would index out of bounds in the loss
    // (dfdx panics there, mid-training); refuse it here, naming the file.
    if let Some((i, &l)) = labels
        .data
        .iter()
        .enumerate()
        .find(|(_, &l)| l as usize >= classes)
    {
        return Err(format_err(
            labels_path,
            format!("label {l} of example {i} is out of range: there are {classes} classes (labels 0..={})", classes.saturating_sub(1)),
        ));
    }
    let features = images.data.iter().map(|&p| p as f32 / scale).collect();
    let labels = labels.data.iter().map(|&l| l as usize).collect();
    ArrayDataset::new(vec![1, images.dims[1], images.dims[2]], features, labels)
}

/// Loads a pair of IDX files (images `[count, rows, cols]`, labels
/// `[count]`) of a data set with `classes` classes: pixels scaled to
/// `[0, 1]` (divided by 255), examples of shape `[1, rows, cols]`.
///
/// Fails, naming the file, if a label is not below `classes`.
///
/// ```no_run
/// use flaxen_runtime::data::idx::load_idx_pair;
///
/// // EMNIST "balanced" has 47 classes.
/// let test = load_idx_pair("emnist-balanced-test-images-idx3-ubyte.gz",
///                          "emnist-balanced-test-labels-idx1-ubyte.gz", 47).unwrap();
/// ```
pub fn load_idx_pair(
    images: impl AsRef<Path>,
    labels: impl AsRef<Path>,
    classes: usize,
) -> Result<ArrayDataset, DataError> {
    let (ip, lp) = (images.as_ref(), labels.as_ref());
    images_and_labels(read_idx(ip)?, ip, read_idx(lp)?, lp, 255.0, classes)
}

/// Loads an MNIST-style pair of IDX files: [`load_idx_pair`] with
/// [`MNIST_CLASSES`] (10) classes.
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
    load_idx_pair(images, labels, MNIST_CLASSES)
}

/// The four files of an MNIST directory, as [`find_mnist_files`] found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MnistFiles {
    /// `train-images-idx3-ubyte[.gz]`.
    pub train_images: PathBuf,
    /// `train-labels-idx1-ubyte[.gz]`.
    pub train_labels: PathBuf,
    /// `t10k-images-idx3-ubyte[.gz]`.
    pub test_images: PathBuf,
    /// `t10k-labels-idx1-ubyte[.gz]`.
    pub test_labels: PathBuf,
}

/// Finds MNIST's four standard files in `dir` (`train-images-idx3-ubyte`,
/// `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`,
/// `t10k-labels-idx1-ubyte`), each raw or with a `.gz` suffix (the raw one
/// wins when both exist).
///
/// Fails naming the file if neither form exists, or if the name is taken by
/// a directory (or anything else that is not a file).
///
/// ```no_run
/// let files = flaxen_runtime::data::idx::find_mnist_files("mnist").unwrap();
/// println!("training images: {}", files.train_images.display());
/// ```
pub fn find_mnist_files(dir: impl AsRef<Path>) -> Result<MnistFiles, DataError> {
    let dir = dir.as_ref();
    let find = |stem: &str| -> Result<PathBuf, DataError> {
        let raw = dir.join(stem);
        let gz = dir.join(format!("{stem}.gz"));
        // A file wins; failing that, say what holds the name (a directory
        // named like the file is a likely slip when unpacking archives).
        let mut not_a_file = None;
        for p in [&raw, &gz] {
            // `metadata` follows links, as opening the file does.
            match std::fs::metadata(p) {
                Ok(m) if m.is_file() => return Ok(p.clone()),
                Ok(m) => {
                    let what = if m.is_dir() {
                        "is a directory, not an IDX file"
                    } else {
                        "is not a regular file"
                    };
                    not_a_file.get_or_insert_with(|| format_err(p, what));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(p, e)),
            }
        }
        Err(not_a_file.unwrap_or_else(|| {
            format_err(
                &raw,
                format!("not found: neither {stem} nor {stem}.gz exists in this directory"),
            )
        }))
    };
    Ok(MnistFiles {
        train_images: find("train-images-idx3-ubyte")?,
        train_labels: find("train-labels-idx1-ubyte")?,
        test_images: find("t10k-images-idx3-ubyte")?,
        test_labels: find("t10k-labels-idx1-ubyte")?,
    })
}

/// Loads MNIST's train and test sets from a directory holding the four
/// standard files (see [`find_mnist_files`]), with [`load_mnist`].
///
/// ```no_run
/// let (train, test) = flaxen_runtime::data::idx::load_mnist_dir("mnist").unwrap();
/// ```
pub fn load_mnist_dir(dir: impl AsRef<Path>) -> Result<(ArrayDataset, ArrayDataset), DataError> {
    let f = find_mnist_files(dir)?;
    let train = load_mnist(&f.train_images, &f.train_labels)?;
    let test = load_mnist(&f.test_images, &f.test_labels)?;
    Ok((train, test))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Counts the bytes a parser pulls through it.
    struct Counting<R> {
        inner: R,
        read: u64,
    }
    impl<R: Read> Read for Counting<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read += n as u64;
            Ok(n)
        }
    }

    fn labels_file(n: u32) -> Vec<u8> {
        let mut v = vec![0, 0, 8, 1];
        v.extend_from_slice(&n.to_be_bytes());
        v.extend((0..n).map(|i| (i % 10) as u8));
        v
    }

    #[test]
    fn reading_stops_one_byte_past_the_declared_size() {
        // An endless stream after a valid file: unbounded reading would
        // never return.
        let file = labels_file(100);
        let mut r = Counting {
            inner: Read::chain(&file[..], std::io::repeat(0)),
            read: 0,
        };
        let err = parse_stream(Path::new("endless"), &mut r, None).unwrap_err();
        assert!(err.to_string().contains("unexpected bytes after"), "{err}");
        assert_eq!(r.read, file.len() as u64 + 1);
    }

    #[test]
    fn a_gzip_bomb_is_refused_after_the_declared_size() {
        // A valid file followed by 64 MiB of zeros, compressed to ~64 KiB:
        // only the declared size + 1 byte is decompressed.
        let file = labels_file(1000);
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&file).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            enc.write_all(&zeros).unwrap();
        }
        let bomb = enc.finish().unwrap();
        assert!(bomb.len() < 1 << 20, "{}", bomb.len());
        let mut r = Counting {
            inner: flate2::read::MultiGzDecoder::new(&bomb[..]),
            read: 0,
        };
        let err = parse_stream(Path::new("bomb.gz"), &mut r, None).unwrap_err();
        assert!(err.to_string().contains("unexpected bytes after"), "{err}");
        assert_eq!(r.read, file.len() as u64 + 1);
        // The public entry point takes the same path.
        let err = parse_idx(Path::new("bomb.gz"), &bomb).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("bomb.gz: more unexpected bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_huge_declared_size_allocates_only_what_is_read() {
        // 4e9 × 4e9 × 1 bytes declared, 3 present: truncated, no allocation
        // of the declared size.
        let mut v = vec![0, 0, 8, 2];
        v.extend_from_slice(&4_000_000_000u32.to_be_bytes());
        v.extend_from_slice(&4_000_000_000u32.to_be_bytes());
        v.extend_from_slice(&[1, 2, 3]);
        let err = parse_idx(Path::new("huge"), &v).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }
}
