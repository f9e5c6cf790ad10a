//! The MNIST IDX reader: good files (raw and gzip) and crafted bad ones.

use std::path::PathBuf;

use flaxen::runtime::data::idx::{load_idx_pair, load_mnist, load_mnist_dir, read_idx};
use flaxen::runtime::data::{DataError, Dataset, Requirements};

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flaxen-data-idx-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn idx_bytes(type_code: u8, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, type_code, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

/// A gzip member with one stored (uncompressed) deflate block, written by
/// hand so the test needs no compression crate (RFC 1951 §3.2.4, RFC 1952).
fn gz(bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 65536);
    let mut v = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1];
    let len = bytes.len() as u16;
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&(!len).to_le_bytes());
    v.extend_from_slice(bytes);
    v.extend_from_slice(&crc32(bytes).to_le_bytes());
    v.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    v
}

/// CRC-32 (IEEE, reflected), bit by bit.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn images(n: u32) -> Vec<u8> {
    let px: Vec<u8> = (0..n * 4).map(|i| (i * 17 % 256) as u8).collect();
    idx_bytes(8, &[n, 2, 2], &px)
}

fn labels(n: u32) -> Vec<u8> {
    let l: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
    idx_bytes(8, &[n], &l)
}

fn format_error(e: DataError) -> (PathBuf, String) {
    match e {
        DataError::Format { path, reason } => (path, reason),
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn reads_raw_and_gzip_pairs() {
    let d = tmp_dir("good");
    let i = write(&d, "i", &images(3));
    let l = write(&d, "l", &labels(3));
    let igz = write(&d, "i.gz", &gz(&images(3)));
    let lgz = write(&d, "l.gz", &gz(&labels(3)));
    let raw = load_mnist(&i, &l).unwrap();
    let zipped = load_mnist(&igz, &lgz).unwrap();
    assert_eq!(raw, zipped);
    assert_eq!(raw.len(), 3);
    assert_eq!(raw.example_shape(), &[1, 2, 2]);
    assert_eq!(raw.labels(), &[0, 1, 2]);
    assert_eq!(raw.features()[1], 17.0 / 255.0);
}

#[test]
fn loads_a_directory_with_mixed_compression() {
    let d = tmp_dir("dir");
    write(&d, "train-images-idx3-ubyte.gz", &gz(&images(5)));
    write(&d, "train-labels-idx1-ubyte", &labels(5));
    write(&d, "t10k-images-idx3-ubyte", &images(2));
    write(&d, "t10k-labels-idx1-ubyte.gz", &gz(&labels(2)));
    let (train, test) = load_mnist_dir(&d).unwrap();
    assert_eq!((train.len(), test.len()), (5, 2));
    std::fs::remove_file(d.join("t10k-labels-idx1-ubyte.gz")).unwrap();
    let err = load_mnist_dir(&d).unwrap_err().to_string();
    assert!(err.contains("t10k-labels-idx1-ubyte"), "{err}");
}

#[test]
fn bad_magic_names_file_and_fault() {
    let d = tmp_dir("magic");
    let mut bytes = images(2);
    bytes[0] = 0x12;
    let p = write(&d, "bad-magic", &bytes);
    let (path, reason) = format_error(read_idx(&p).unwrap_err());
    assert_eq!(path, p);
    assert!(reason.contains("bad magic number 0x12000803"), "{reason}");
    let msg = read_idx(&p).unwrap_err().to_string();
    assert!(msg.contains("bad-magic") && msg.contains("magic"), "{msg}");

    let p = write(&d, "float", &idx_bytes(0x0d, &[1], &[0, 0, 0, 0]));
    let (_, reason) = format_error(read_idx(&p).unwrap_err());
    assert!(reason.contains("element type 0x0d"), "{reason}");
}

#[test]
fn truncated_files_are_errors() {
    let d = tmp_dir("trunc");
    let full = images(3);
    // Cut inside the data, inside the header, inside the magic.
    for (cut, fault) in [
        (full.len() - 1, "need 12 bytes of data, the file has 11"),
        (10, "header of 3 dimensions needs 16 bytes"),
        (2, "shorter than the 4-byte magic"),
    ] {
        let p = write(&d, &format!("cut{cut}"), &full[..cut]);
        let (path, reason) = format_error(read_idx(&p).unwrap_err());
        assert_eq!(path, p);
        assert!(
            reason.contains("truncated") && reason.contains(fault),
            "{reason}"
        );
    }
    // A truncated gzip stream.
    let z = gz(&full);
    let p = write(&d, "cut.gz", &z[..z.len() / 2]);
    let (_, reason) = format_error(read_idx(&p).unwrap_err());
    assert!(reason.contains("gzip"), "{reason}");
    // Trailing garbage is also refused.
    let mut long = full.clone();
    long.push(0);
    let p = write(&d, "long", &long);
    let (_, reason) = format_error(read_idx(&p).unwrap_err());
    assert!(reason.contains("1 unexpected bytes"), "{reason}");
}

#[test]
fn count_mismatch_and_wrong_dims() {
    let d = tmp_dir("pair");
    let i = write(&d, "imgs", &images(3));
    let l = write(&d, "lbls", &labels(4));
    let (path, reason) = format_error(load_mnist(&i, &l).unwrap_err());
    assert_eq!(path, l);
    assert!(
        reason.contains("count mismatch: 4 labels") && reason.contains("3 images"),
        "{reason}"
    );
    assert!(reason.contains("imgs"), "{reason}");

    // Images and labels swapped: images have 1 dimension.
    let (path, reason) = format_error(load_mnist(&l, &i).unwrap_err());
    assert_eq!(path, l);
    assert!(
        reason.contains("wrong dimensions: images need 3"),
        "{reason}"
    );
    let flat = write(&d, "flat-labels", &idx_bytes(8, &[2, 1], &[1, 2]));
    let (path, reason) = format_error(load_mnist(&i, &flat).unwrap_err());
    assert_eq!(path, flat);
    assert!(
        reason.contains("wrong dimensions: labels need 1"),
        "{reason}"
    );
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let err = read_idx("/nonexistent/flaxen/idx").unwrap_err();
    assert!(matches!(err, DataError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/flaxen/idx"));
}

#[test]
fn labels_past_the_last_class_are_refused_naming_the_file() {
    // dfdx's loss panicked on them mid-training (`Index out of bounds`).
    let d = tmp_dir("labels");
    let i = write(&d, "imgs", &images(3));
    for bad in [10u8, 200, 255] {
        let l = write(&d, &format!("lbls{bad}"), &idx_bytes(8, &[3], &[1, bad, 2]));
        let (path, reason) = format_error(load_mnist(&i, &l).unwrap_err());
        assert_eq!(path, l);
        assert!(
            reason.contains(&format!("label {bad} of example 1 is out of range"))
                && reason.contains("10 classes"),
            "{reason}"
        );
    }
    // Another class count: the same file is fine with 256 classes.
    let l = write(&d, "lbls-wide", &idx_bytes(8, &[3], &[1, 255, 2]));
    assert_eq!(load_idx_pair(&i, &l, 256).unwrap().labels(), &[1, 255, 2]);
    assert!(load_idx_pair(&i, &l, 255).is_err());
}

#[test]
fn a_directory_named_like_the_file_is_reported_as_one() {
    let d = tmp_dir("isdir");
    std::fs::create_dir_all(d.join("train-images-idx3-ubyte")).unwrap();
    write(&d, "train-labels-idx1-ubyte", &labels(5));
    write(&d, "t10k-images-idx3-ubyte", &images(2));
    write(&d, "t10k-labels-idx1-ubyte", &labels(2));
    let (path, reason) = format_error(load_mnist_dir(&d).unwrap_err());
    assert_eq!(path, d.join("train-images-idx3-ubyte"));
    assert_eq!(reason, "is a directory, not an IDX file");
    // read_idx on the directory says the same.
    let (_, reason) = format_error(read_idx(d.join("train-images-idx3-ubyte")).unwrap_err());
    assert_eq!(reason, "is a directory, not an IDX file");
    // A file next to it (the .gz) is used.
    write(&d, "train-images-idx3-ubyte.gz", &gz(&images(5)));
    assert_eq!(load_mnist_dir(&d).unwrap().0.len(), 5);
    // Neither: "not found", naming the raw name.
    std::fs::remove_file(d.join("t10k-images-idx3-ubyte")).unwrap();
    let (path, reason) = format_error(load_mnist_dir(&d).unwrap_err());
    assert_eq!(path, d.join("t10k-images-idx3-ubyte"));
    assert!(
        reason.contains("neither t10k-images-idx3-ubyte nor"),
        "{reason}"
    );
}

#[test]
fn a_multi_member_gzip_is_read_whole() {
    // `cat a.gz b.gz` and pigz write several members; GzDecoder stopped
    // after the first and reported the file truncated.
    let d = tmp_dir("multi");
    let full = images(7);
    let mut two = gz(&full[..10]);
    two.extend(gz(&full[10..]));
    let mut three = gz(&full[..3]);
    three.extend(gz(&full[3..20]));
    three.extend(gz(&full[20..]));
    for (name, bytes) in [("two.gz", two), ("three.gz", three)] {
        let p = write(&d, name, &bytes);
        let a = read_idx(&p).unwrap();
        assert_eq!(a.dims, vec![7, 2, 2]);
        assert_eq!(a.data, full[16..]);
    }
    // A second member that overflows the declared size is still refused.
    let mut long = gz(&full);
    long.extend(gz(&[0]));
    let p = write(&d, "long.gz", &long);
    let (_, reason) = format_error(read_idx(&p).unwrap_err());
    assert!(reason.contains("unexpected bytes after"), "{reason}");
}

fn check(
    need: &Requirements,
    images_bytes: &[u8],
    labels_bytes: &[u8],
    d: &std::path::Path,
) -> Result<(), DataError> {
    let i = write(d, "imgs", images_bytes);
    let l = write(d, "lbls", labels_bytes);
    let ds = load_mnist(&i, &l)?;
    need.check(&ds, &i, &l)
}

#[test]
fn requirements_name_the_file_and_the_fault() {
    // Empty, smaller than a batch, and images of another size: before, the
    // loader's errors named no file (and the test set's came only after an
    // epoch).
    let d = tmp_dir("req");
    let need = Requirements::new(vec![1, 2, 2], 10).min_len(4);
    let (path, reason) = format_error(check(&need, &images(0), &labels(0), &d).unwrap_err());
    assert_eq!(path, d.join("imgs"));
    assert_eq!(reason, "no examples: the data set is empty");
    let (path, reason) = format_error(check(&need, &images(3), &labels(3), &d).unwrap_err());
    assert_eq!(path, d.join("imgs"));
    assert_eq!(reason, "3 examples, fewer than one batch of 4");
    check(&need, &images(4), &labels(4), &d).unwrap();
    // 3×3 images for a model of 2×2 inputs.
    let big = idx_bytes(8, &[4, 3, 3], &[0; 36]);
    let (path, reason) = format_error(check(&need, &big, &labels(4), &d).unwrap_err());
    assert_eq!(path, d.join("imgs"));
    assert_eq!(reason, "examples of shape 1×3×3, but the model takes 1×2×2");
    // Fewer classes than the labels use: names the labels' file.
    let few = Requirements::new(vec![1, 2, 2], 3);
    let (path, reason) = format_error(check(&few, &images(4), &labels(4), &d).unwrap_err());
    assert_eq!(path, d.join("lbls"));
    assert!(
        reason.starts_with("label 3 of example 3 is out of range"),
        "{reason}"
    );
}

#[test]
fn an_io_error_prints_its_cause_once() {
    let err = read_idx("/nonexistent/flaxen/idx").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("No such file"), "{msg}");
    // Not chained again as a source: anyhow would print it twice.
    assert!(std::error::Error::source(&err).is_none());
}
