//! TensorBoard scalar event files, written without TensorFlow or protobuf
//! crates.
//!
//! An event file is a sequence of TFRecords. Each record is
//! `u64 length (LE) | u32 masked_crc32c(length bytes) | data | u32
//! masked_crc32c(data)`, where `masked(c) = ((c >> 15) | (c << 17)) +
//! 0xa282ead8`. The first record's data is an `Event { wall_time,
//! file_version: "brain.Event:2" }`; every scalar is an `Event { wall_time,
//! step, summary { value { tag, simple_value } } }`, hand-encoded protobuf
//! (field numbers from `tensorflow/core/util/event.proto` and
//! `tensorflow/core/framework/summary.proto`).
//!
//! [`read_scalars`] reads such a file back, checking every length and CRC.
//!
//! ```
//! use flaxen_runtime::logging::tensorboard::{read_scalars, EventWriter};
//!
//! let dir = std::env::temp_dir().join(format!("flaxen-tb-doc-{}", std::process::id()));
//! let mut w = EventWriter::new(&dir).unwrap();
//! w.add_scalar("train/loss", 0.5, 10).unwrap();
//! w.flush().unwrap();
//! let events = read_scalars(w.path()).unwrap();
//! assert_eq!((events[0].tag.as_str(), events[0].value, events[0].step), ("train/loss", 0.5, 10));
//! # std::fs::remove_dir_all(dir).unwrap();
//! ```

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::LoggingError;

/// The CRC TFRecord stores: CRC-32C, rotated and offset so that CRCs of
/// data that itself contains CRCs stay well distributed.
///
/// ```
/// use flaxen_runtime::logging::tensorboard::masked_crc32c;
///
/// // crc32c("123456789") = 0xe3069283, rotated right by 15, plus 0xa282ead8.
/// assert_eq!(masked_crc32c(b"123456789"), 0xe3069283u32.rotate_right(15).wrapping_add(0xa282ead8));
/// ```
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Frames `data` as one TFRecord.
///
/// ```
/// use flaxen_runtime::logging::tensorboard::{masked_crc32c, tfrecord};
///
/// let r = tfrecord(b"hi");
/// assert_eq!(&r[..8], &2u64.to_le_bytes());
/// assert_eq!(&r[8..12], &masked_crc32c(&2u64.to_le_bytes()).to_le_bytes());
/// assert_eq!(&r[12..14], b"hi");
/// assert_eq!(&r[14..], &masked_crc32c(b"hi").to_le_bytes());
/// ```
pub fn tfrecord(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A field key: `(field_number << 3) | wire_type`.
fn key(out: &mut Vec<u8>, field: u64, wire: u64) {
    varint(out, (field << 3) | wire);
}

fn bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    key(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// `Event { wall_time = 1 (double), step = 2 (int64), file_version = 3 }`.
fn event(wall_time: f64, step: Option<i64>, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut e = Vec::new();
    key(&mut e, 1, 1);
    e.extend_from_slice(&wall_time.to_le_bytes());
    if let Some(step) = step {
        key(&mut e, 2, 0);
        varint(&mut e, step as u64);
    }
    body(&mut e);
    e
}

/// The `Event` bytes of the first record: `file_version = "brain.Event:2"`.
///
/// ```
/// let e = flaxen_runtime::logging::tensorboard::file_version_event(0.0);
/// assert_eq!(&e[9..11], &[0x1a, 13]);
/// assert!(e.ends_with(b"brain.Event:2"));
/// ```
pub fn file_version_event(wall_time: f64) -> Vec<u8> {
    event(wall_time, None, |e| bytes_field(e, 3, b"brain.Event:2"))
}

/// The `Event` bytes of one scalar: `summary = 5 { value = 1 { tag = 1,
/// simple_value = 2 (float) } }`.
///
/// ```
/// let e = flaxen_runtime::logging::tensorboard::scalar_event(0.0, 7, "loss", 1.0);
/// assert_eq!(&e[9..11], &[0x10, 7]); // step
/// assert!(e.ends_with(&1.0f32.to_le_bytes()));
/// ```
pub fn scalar_event(wall_time: f64, step: i64, tag: &str, value: f32) -> Vec<u8> {
    let mut v = Vec::new();
    bytes_field(&mut v, 1, tag.as_bytes());
    key(&mut v, 2, 5);
    v.extend_from_slice(&value.to_le_bytes());
    let mut summary = Vec::new();
    bytes_field(&mut summary, 1, &v);
    event(wall_time, Some(step), |e| bytes_field(e, 5, &summary))
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn hostname() -> String {
    let from_kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let name = from_kernel
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

/// Writes scalars to `<dir>/events.out.tfevents.<unix seconds>.<host>` for
/// TensorBoard (`tensorboard --logdir <dir>`).
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// Creates the directory if needed and a new event file in it (a `.1`,
    /// `.2`, ... suffix if one of that name exists), starting with the
    /// file-version record.
    pub fn new(dir: impl AsRef<Path>) -> Result<Self, LoggingError> {
        let dir = dir.as_ref();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| LoggingError::Io { path, error }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let wall = now();
        let base = format!("events.out.tfevents.{}.{}", wall as u64, hostname());
        let mut n = 0;
        let (path, file) = loop {
            let name = if n == 0 {
                base.clone()
            } else {
                format!("{base}.{n}")
            };
            let path = dir.join(name);
            match File::options().write(true).create_new(true).open(&path) {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(io(&path)(e)),
            }
        };
        let mut w = Self {
            path,
            out: BufWriter::new(file),
        };
        w.write_record(&file_version_event(wall))?;
        w.flush()?;
        Ok(w)
    }

    /// The event file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records `value` under `tag` (e.g. `"train/loss"`) at `step`.
    pub fn add_scalar(&mut self, tag: &str, value: f32, step: u64) -> Result<(), LoggingError> {
        self.write_record(&scalar_event(now(), step as i64, tag, value))
    }

    fn write_record(&mut self, data: &[u8]) -> Result<(), LoggingError> {
        self.out
            .write_all(&tfrecord(data))
            .map_err(|error| LoggingError::Io {
                path: self.path.clone(),
                error,
            })
    }

    /// Flushes buffered events so TensorBoard sees them.
    pub fn flush(&mut self) -> Result<(), LoggingError> {
        self.out.flush().map_err(|error| LoggingError::Io {
            path: self.path.clone(),
            error,
        })
    }
}

/// One scalar read back from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarEvent {
    /// Seconds since the Unix epoch.
    pub wall_time: f64,
    /// The step.
    pub step: i64,
    /// The tag.
    pub tag: String,
    /// The value.
    pub value: f32,
}

/// Splits a TFRecord file into record payloads, checking every length and
/// both CRCs of every record.
///
/// ```
/// use flaxen_runtime::logging::tensorboard::{read_records, tfrecord};
///
/// let path = std::env::temp_dir().join(format!("flaxen-records-{}", std::process::id()));
/// std::fs::write(&path, [tfrecord(b"a"), tfrecord(b"bc")].concat()).unwrap();
/// assert_eq!(read_records(&path).unwrap(), vec![b"a".to_vec(), b"bc".to_vec()]);
/// # std::fs::remove_file(path).unwrap();
/// ```
pub fn read_records(path: impl AsRef<Path>) -> Result<Vec<Vec<u8>>, LoggingError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| LoggingError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let bad = |reason: String| LoggingError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let mut records = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let header = bytes
            .get(at..at + 12)
            .ok_or_else(|| bad(format!("truncated record header at byte {at}")))?;
        let len_bytes = &header[..8];
        let stored = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if stored != masked_crc32c(len_bytes) {
            return Err(bad(format!("length CRC mismatch at byte {at}")));
        }
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(len_bytes);
        let len = usize::try_from(u64::from_le_bytes(len8))
            .map_err(|_| bad(format!("record length too large at byte {at}")))?;
        let start = at + 12;
        let end = start
            .checked_add(len)
            .filter(|&e| e + 4 <= bytes.len())
            .ok_or_else(|| bad(format!("truncated record of {len} bytes at byte {at}")))?;
        let data = &bytes[start..end];
        let crc = u32::from_le_bytes([bytes[end], bytes[end + 1], bytes[end + 2], bytes[end + 3]]);
        if crc != masked_crc32c(data) {
            return Err(bad(format!("data CRC mismatch in the record at byte {at}")));
        }
        records.push(data.to_vec());
        at = end + 4;
    }
    Ok(records)
}

/// A protobuf field: number and value.
enum Field<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(&'a [u8]),
    Fixed32([u8; 4]),
}

fn read_varint(buf: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at)?;
        *at += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

fn fields(buf: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < buf.len() {
        let k = read_varint(buf, &mut at)?;
        let field = match k & 7 {
            0 => Field::Varint(read_varint(buf, &mut at)?),
            1 => {
                let b = buf.get(at..at + 8)?;
                at += 8;
                Field::Fixed64(b.try_into().ok()?)
            }
            2 => {
                let len = read_varint(buf, &mut at)? as usize;
                let b = buf.get(at..at.checked_add(len)?)?;
                at += len;
                Field::Bytes(b)
            }
            5 => {
                let b = buf.get(at..at + 4)?;
                at += 4;
                Field::Fixed32(b.try_into().ok()?)
            }
            _ => return None,
        };
        out.push((k >> 3, field));
    }
    Some(out)
}

/// Reads every scalar of an event file (framing and CRCs checked; events
/// other than scalars, such as the file-version record, are skipped).
pub fn read_scalars(path: impl AsRef<Path>) -> Result<Vec<ScalarEvent>, LoggingError> {
    let path = path.as_ref();
    let bad = |i: usize| LoggingError::Format {
        path: path.to_path_buf(),
        reason: format!("record {i} is not a valid Event protobuf"),
    };
    let mut out = Vec::new();
    for (i, record) in read_records(path)?.iter().enumerate() {
        let (mut wall_time, mut step) = (0.0, 0i64);
        let mut values = Vec::new();
        for (n, f) in fields(record).ok_or_else(|| bad(i))? {
            match (n, f) {
                (1, Field::Fixed64(b)) => wall_time = f64::from_le_bytes(b),
                (2, Field::Varint(v)) => step = v as i64,
                (5, Field::Bytes(summary)) => {
                    for (n, f) in fields(summary).ok_or_else(|| bad(i))? {
                        if let (1, Field::Bytes(value)) = (n, f) {
                            let (mut tag, mut simple) = (None, None);
                            for (n, f) in fields(value).ok_or_else(|| bad(i))? {
                                match (n, f) {
                                    (1, Field::Bytes(t)) => {
                                        tag = Some(String::from_utf8_lossy(t).into_owned())
                                    }
                                    (2, Field::Fixed32(v)) => simple = Some(f32::from_le_bytes(v)),
                                    _ => {}
                                }
                            }
                            if let (Some(tag), Some(value)) = (tag, simple) {
                                values.push((tag, value));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        out.extend(values.into_iter().map(|(tag, value)| ScalarEvent {
            wall_time,
            step,
            tag,
            value,
        }));
    }
    Ok(out)
}
