//! Log files: JSON lines, and TensorBoard event files whose TFRecord framing
//! and masked CRC32C are checked here by an independent re-reading (and by
//! TensorBoard itself where it is installed).

#[path = "common/python.rs"]
mod python;

use std::path::PathBuf;

use flaxen::runtime::logging::tensorboard::{read_records, read_scalars, EventWriter};
use flaxen::runtime::logging::{JsonlWriter, LoggingError, MetricsLogger, Progress};

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("flaxen-log-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), bit by bit: an
/// implementation independent of the `crc32c` crate the writer uses.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn masked(data: &[u8]) -> u32 {
    let c = crc32c(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[test]
fn reference_crc32c() {
    // The check value of CRC-32C (RFC 3720, B.4).
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn event_file_framing_and_crcs() {
    let dir = tmp_dir("frame");
    let mut w = EventWriter::new(&dir).unwrap();
    w.add_scalar("train/loss", 1.5, 3).unwrap();
    w.add_scalar("test/accuracy", 0.25, 300).unwrap();
    w.flush().unwrap();
    let name = w.path().file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with("events.out.tfevents."), "{name}");

    // Walk the records by hand.
    let bytes = std::fs::read(w.path()).unwrap();
    let mut at = 0;
    let mut payloads = vec![];
    while at < bytes.len() {
        let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        let len_crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        assert_eq!(len_crc, masked(&bytes[at..at + 8]), "length CRC at {at}");
        let data = &bytes[at + 12..at + 12 + len];
        let data_crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
        assert_eq!(data_crc, masked(data), "data CRC at {at}");
        payloads.push(data.to_vec());
        at += 16 + len;
    }
    assert_eq!(at, bytes.len());
    assert_eq!(payloads.len(), 3);
    // Record 0: wall_time (field 1, fixed64) then file_version (field 3).
    let first = &payloads[0];
    assert_eq!(first[0], 0x09);
    assert_eq!(first[9], 0x1a);
    assert_eq!(&first[11..], b"brain.Event:2");
    // Record 1: wall_time, step = 3 (field 2, varint), summary (field 5) with
    // value (field 1) { tag (1) = "train/loss", simple_value (2, fixed32) = 1.5 }.
    let second = &payloads[1];
    assert_eq!(&second[9..11], &[0x10, 3]);
    let mut summary = vec![0x2a, 19, 0x0a, 17, 0x0a, 10];
    summary.extend_from_slice(b"train/loss");
    summary.push(0x15);
    summary.extend_from_slice(&1.5f32.to_le_bytes());
    assert_eq!(&second[11..], summary.as_slice());

    // The library's reader agrees.
    assert_eq!(read_records(w.path()).unwrap(), payloads);
    let scalars = read_scalars(w.path()).unwrap();
    let got: Vec<(&str, i64, f32)> = scalars
        .iter()
        .map(|s| (s.tag.as_str(), s.step, s.value))
        .collect();
    assert_eq!(
        got,
        vec![("train/loss", 3, 1.5), ("test/accuracy", 300, 0.25)]
    );
    assert!(scalars[0].wall_time > 1.6e9);
}

#[test]
fn damaged_event_files_are_detected() {
    let dir = tmp_dir("damage");
    let mut w = EventWriter::new(&dir).unwrap();
    w.add_scalar("x", 1.0, 1).unwrap();
    w.flush().unwrap();
    let good = std::fs::read(w.path()).unwrap();
    let path = dir.join("damaged");
    let mut flipped = good.clone();
    let n = flipped.len();
    flipped[n - 6] ^= 1;
    std::fs::write(&path, &flipped).unwrap();
    let err = read_records(&path).unwrap_err();
    assert!(matches!(err, LoggingError::Format { .. }));
    assert!(err.to_string().contains("data CRC mismatch") && err.to_string().contains("damaged"));
    std::fs::write(&path, &good[..n - 2]).unwrap();
    assert!(read_records(&path)
        .unwrap_err()
        .to_string()
        .contains("truncated record"));
}

#[test]
fn metrics_logger_writes_jsonl_and_events() {
    let dir = tmp_dir("metrics");
    {
        let mut log = MetricsLogger::new(&dir).unwrap();
        log.log(5, "train", &[("loss", 0.5), ("accuracy", 0.75)])
            .unwrap();
        log.log(5, "test", &[("loss", f64::NAN)]).unwrap();
    }
    // A resumed run appends to the same JSON lines.
    let mut log = MetricsLogger::new(&dir).unwrap();
    log.log(10, "train", &[("loss", 0.25), ("accuracy", 1.0)])
        .unwrap();
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            r#"{"step":5,"split":"train","loss":0.5,"accuracy":0.75}"#,
            r#"{"step":5,"split":"test","loss":null}"#,
            r#"{"step":10,"split":"train","loss":0.25,"accuracy":1.0}"#,
        ]
    );
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["step"].is_u64());
    }
    let scalars = read_scalars(log.events_path()).unwrap();
    assert_eq!(scalars.len(), 2);
    assert_eq!(scalars[1].tag, "train/accuracy");
    assert!(JsonlWriter::format_line(1, "train", &[("step", 1.0)]).is_err());
    // Numbers read back as the same value, in their shortest form.
    for v in [0.1f32 as f64, 0.1, 1e-7, 123456789.0, -2.5e300, 1.0 / 3.0] {
        let line = JsonlWriter::format_line(0, "x", &[("v", v)]).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        let back = parsed["v"].as_f64().unwrap();
        if (v as f32) as f64 == v {
            // Printed as the f32 it is: reads back as the same f32.
            assert_eq!(back as f32, v as f32, "{line}");
        } else {
            assert_eq!(back, v, "{line}");
        }
    }
    let line = JsonlWriter::format_line(0, "x", &[("v", 0.1f32 as f64)]).unwrap();
    assert!(line.ends_with(r#""v":0.1}"#), "{line}");
}

#[test]
fn progress_reports_rates() {
    let mut p = Progress::hidden(100, 160);
    std::thread::sleep(std::time::Duration::from_millis(20));
    p.update(10, 0.25, 0.875);
    let msg = p.message().to_string();
    assert!(msg.starts_with("loss 0.2500  acc 87.50%  "), "{msg}");
    let rate: f64 = msg.split_whitespace().nth(4).unwrap().parse().unwrap();
    // 1600 samples in at least 20 ms: at most 80,000 samples/s.
    assert!(rate > 0.0 && rate <= 80_000.0, "{msg}");
    p.finish();
}

#[test]
fn tensorboard_reads_the_events() {
    if !python::has_modules("tensorboard") {
        return;
    }
    let dir = tmp_dir("tb");
    let mut log = MetricsLogger::new(&dir).unwrap();
    for step in 1..=3u64 {
        log.log(step * 5, "train", &[("loss", 1.0 / step as f64)])
            .unwrap();
    }
    let scalars = python::read_with("read_tensorboard.py", &dir);
    assert_eq!(
        scalars["train/loss"],
        serde_json::json!([[5, 1.0], [10, 0.5], [15, 0.3333333432674408]])
    );
}
