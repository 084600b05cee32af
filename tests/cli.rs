//! The `ibp` command line, run as a user runs it: the real binary, real
//! files, exit codes and `--json` output.
//!
//! - compress → inspect → decompress gives the input back byte for byte, for
//!   npz (Cora), hand-written safetensors (f32 and bf16, 1-D and 2-D), npy
//!   and raw files, in both layouts; what compress reports is what inspect
//!   reads back from the file;
//! - the fitting options reach the container;
//! - errors have the documented exit codes, say what to do, and never leave
//!   a partial output behind;
//! - the issue's acceptance numbers, measured through the CLI on Cora and
//!   on the MiniLM weights (skipped, visibly, where the weights are absent).

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ibp::container::{ContainerWriter, GroupData, GroupMeta, SourceInfo};
use ibp::io::{DType, Fingerprint, ParseOptions, Segment, SourceFormat};
use serde_json::{Value, json};

const EMBEDDINGS: &str = "embeddings.word_embeddings.weight";

/// Exit codes of `ibp::ErrorKind::exit_code`, written out so that a change
/// there shows up here.
const EXIT_INVALID: i32 = 2;
const EXIT_IO: i32 = 3;
const EXIT_CORRUPT: i32 = 4;

/// Command-line arguments, as an array: anything an `OsString` can be made
/// from (`&str`, `&Path`, `PathBuf`).
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$(OsString::from($a)),*]
    };
}

fn cora() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/cora-features.npz")
}

/// An empty folder for one test, under cargo's scratch space for tests;
/// removed again when the test passes.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{test}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Every file name in the folder, sorted (hidden ones included).
    fn listing(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn ibp(args: &[OsString]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ibp"))
        .args(args)
        .output()
        .expect("running the ibp binary")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Run `ibp args`, insist on success, and return stdout.
fn ok(args: &[OsString]) -> String {
    let o = ibp(args);
    assert!(
        o.status.success(),
        "ibp {args:?} failed ({}):\n{}",
        o.status,
        stderr(&o)
    );
    // Nothing on stderr when it is not a terminal: no progress bar in logs.
    // (analyze may say it counts on the CPU because no GPU is usable.)
    if args[0] != "analyze" {
        assert_eq!(stderr(&o), "", "ibp {args:?} wrote to stderr");
    }
    String::from_utf8(o.stdout).expect("stdout is UTF-8")
}

fn ok_json(args: &[OsString]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ibp {args:?}: not JSON ({e}):\n{out}"))
}

/// Run `ibp args`, insist that it fails with `code` and an `ibp: ` message
/// on stderr, and return the message.
fn fails(args: &[OsString], code: i32) -> String {
    let o = ibp(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "ibp {args:?}:\n{err}");
    assert!(
        o.stdout.is_empty(),
        "ibp {args:?} printed to stdout on failure"
    );
    assert!(!err.contains("panicked"), "ibp {args:?} panicked:\n{err}");
    err
}

fn same_bytes(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    // Not assert_eq: a failure should not print megabytes.
    assert!(
        x.len() == y.len() && x == y,
        "{} ({} bytes) differs from {} ({} bytes)",
        a.display(),
        x.len(),
        b.display(),
        y.len()
    );
}

fn hex(x: u64) -> String {
    format!("{x:016x}")
}

/// compress (with `extra` options) → inspect → decompress, checking the
/// restored file byte for byte and everything both reports say about the
/// file that can be checked from outside. Returns inspect's JSON.
fn round_trip(dir: &Scratch, input: &Path, layout: &str, extra: &[&str]) -> Value {
    let stem = input.file_name().unwrap().to_string_lossy().into_owned();
    let packed = dir.path(&format!("{stem}.{layout}.ibp"));
    let restored = dir.path(&format!("{stem}.{layout}.restored"));
    let mut compress = args![
        "compress", input, "-o", &packed, "--layout", layout, "--json"
    ]
    .to_vec();
    compress.extend(extra.iter().map(OsString::from));
    let c = ok_json(&compress);
    let i = ok_json(&args!["inspect", &packed, "--json"]);
    let d = ok(&args!["decompress", &packed, "-o", &restored,]);
    same_bytes(input, &restored);
    assert!(
        d.contains("verified"),
        "decompress does not say it verified:\n{d}"
    );

    let original = std::fs::read(input).unwrap();
    let fp = Fingerprint::of(&original);
    let file_len = std::fs::metadata(&packed).unwrap().len();
    assert_eq!(c["input_bytes"], json!(fp.len));
    assert_eq!(c["output_bytes"], json!(file_len));
    assert_eq!(c["layout"], json!(layout));
    let fs = c["file_savings"].as_f64().unwrap();
    assert!((fs - (1.0 - file_len as f64 / fp.len as f64)).abs() < 1e-9);

    assert_eq!(i["format_version"], json!(1));
    assert_eq!(i["file_bytes"], json!(file_len));
    assert_eq!(i["source"]["format"], c["input_format"]);
    assert_eq!(i["source"]["length"], json!(fp.len));
    assert_eq!(i["source"]["xxh3"], json!(hex(fp.xxh3)));
    assert_eq!(c["totals"], i["totals"]);
    // What compress reported is what the file holds (compress adds why a
    // group is raw, which only it knows).
    let mut groups = c["groups"].as_array().unwrap().clone();
    for g in &mut groups {
        let raw = g["layout"] == json!("raw");
        let reason = g.as_object_mut().unwrap().remove("raw_reason");
        assert_eq!(reason.is_some(), raw, "raw_reason of {g}");
    }
    assert_eq!(Value::Array(groups), i["groups"]);
    for g in i["groups"].as_array().unwrap() {
        let (raw, stored) = (
            g["raw_bytes"].as_f64().unwrap(),
            g["stored_bytes"].as_f64().unwrap(),
        );
        let n = g["rows"].as_u64().unwrap();
        assert_eq!(g["raw_bytes"], json!(n * g["row_bytes"].as_u64().unwrap()));
        assert_eq!(
            g["encoded_rows"].as_u64().unwrap() + g["raw_rows"].as_u64().unwrap(),
            n
        );
        if raw > 0.0 {
            assert!((g["savings"].as_f64().unwrap() - (1.0 - stored / raw)).abs() < 1e-9);
        }
        if g["layout"] == json!("raw") {
            assert_eq!(g["stored_bytes"], g["raw_bytes"]);
            assert_eq!(g["chunk_bytes"], Value::Null);
        } else {
            assert_eq!(g["layout"], json!(layout));
            assert!([1, 2, 4, 8].contains(&g["chunk_bytes"].as_u64().unwrap()));
            assert!(g["invariant_bits"].as_u64().unwrap() <= 8 * g["row_bytes"].as_u64().unwrap());
        }
    }
    // The sections tile the file as FORMAT.md §6.1 says.
    let mut at = 64;
    let sections = i["sections"].as_array().unwrap();
    for s in sections {
        assert_eq!(s["offset"], json!(at), "section {s}");
        at = (at + s["length"].as_u64().unwrap()).next_multiple_of(64);
    }
    assert_eq!(
        sections
            .iter()
            .filter(|s| s["kind"] == json!("manifest"))
            .count(),
        1
    );
    i
}

/// A safetensors file, header written by hand as the format describes it:
/// an 8-byte length, a JSON header padded with spaces to 8 bytes, data.
fn safetensors(tensors: &[(&str, &str, &[u64], Vec<u8>)]) -> Vec<u8> {
    let mut entries = vec![r#""__metadata__":{"format":"pt"}"#.to_string()];
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
        entries.push(format!(
            r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{},{}]}}"#,
            shape.join(","),
            data.len(),
            data.len() + bytes.len()
        ));
        data.extend_from_slice(bytes);
    }
    let mut header = format!("{{{}}}", entries.join(","));
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

/// A version-1.0 npy file of little-endian f32, C order.
fn npy_f32(shape: &[u64], values: &[f32]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let dims = if dims.len() == 1 {
        format!("{},", dims[0])
    } else {
        dims.join(", ")
    };
    let mut dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
    // Magic (6) + version (2) + length (2) + dict + '\n' is a multiple of 64.
    while !(10 + dict.len() + 1).is_multiple_of(64) {
        dict.push(' ');
    }
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((dict.len() as u16).to_le_bytes());
    out.extend(dict.as_bytes());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    out
}

/// f32 values that look like features: a few distinct magnitudes per
/// column, so high bits are invariant across rows and low bits are not.
fn features(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut rng = common::Rng(seed | 1);
    (0..rows * cols)
        .map(|i| {
            let r = rng.next();
            if r.is_multiple_of(8) {
                0.0
            } else {
                (1.0 + (r >> 40) as f32 / (1u64 << 24) as f32) * (1 + i % cols % 3) as f32
            }
        })
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect()
}

fn group<'a>(inspect: &'a Value, name: &str) -> &'a Value {
    inspect["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == json!(name))
        .unwrap_or_else(|| panic!("no group {name} in {inspect}"))
}

#[test]
fn cora_round_trips_in_both_layouts() {
    let dir = Scratch::new("cora");
    for layout in ["packed", "fixed"] {
        let i = round_trip(&dir, &cora(), layout, &[]);
        assert_eq!(i["source"]["format"], json!("npz"));
        let g = group(&i, "features");
        assert_eq!(g["dtype"], json!("f32"));
        assert_eq!(g["shape"], json!([2708, 1433]));
        assert_eq!(g["rows"], json!(2708));
        assert_eq!(g["row_bytes"], json!(1433 * 4));
        assert_eq!(g["layout"], json!(layout));
        let savings = g["savings"].as_f64().unwrap();
        if layout == "packed" {
            // Metadata included; analyze's figure without it is ≥ 0.95.
            assert!(savings > 0.9, "packed Cora saves {savings}");
        } else {
            assert!(
                savings <= 0.0,
                "a fixed-stride group cannot be smaller: {savings}"
            );
        }
    }
    // The human-readable reports name what matters.
    let t = ok(&args!["inspect", dir.path("cora-features.npz.packed.ibp"),]);
    for needle in [
        "version 1",
        "npz file",
        "128951 bytes",
        "features",
        "packed",
        "sections (",
        "manifest",
    ] {
        assert!(t.contains(needle), "inspect output lacks {needle:?}:\n{t}");
    }
}

#[test]
fn handwritten_safetensors_round_trips() {
    let dir = Scratch::new("safetensors");
    let w = features(96, 40, 1);
    let e = features(128, 24, 2);
    let input = dir.write(
        "model.safetensors",
        &safetensors(&[
            ("w", "F32", &[96, 40], f32_bytes(&w)),
            ("w.bias", "F32", &[40], f32_bytes(&w[..40])),
            ("emb", "BF16", &[128, 24], bf16_bytes(&e)),
            ("norm", "BF16", &[24], bf16_bytes(&e[..24])),
            ("scale", "F32", &[], f32_bytes(&[0.5])),
        ]),
    );
    for layout in ["packed", "fixed"] {
        let i = round_trip(&dir, &input, layout, &[]);
        assert_eq!(i["source"]["format"], json!("safetensors"));
        assert_eq!(i["groups"].as_array().unwrap().len(), 5);
        for (name, dtype, stored) in [
            ("w", "f32", layout),
            ("w.bias", "f32", "raw"),
            ("emb", "bf16", layout),
            ("norm", "bf16", "raw"),
            ("scale", "f32", "raw"),
        ] {
            let g = group(&i, name);
            assert_eq!(g["dtype"], json!(dtype), "{name}");
            assert_eq!(g["layout"], json!(stored), "{name}");
        }
        assert_eq!(group(&i, "emb")["row_bytes"], json!(24 * 2));
        assert_eq!(group(&i, "scale")["shape"], json!([]));
    }
}

#[test]
fn npy_round_trips() {
    let dir = Scratch::new("npy");
    let input = dir.write("x.npy", &npy_f32(&[200, 24], &features(200, 24, 3)));
    for layout in ["packed", "fixed"] {
        let i = round_trip(&dir, &input, layout, &[]);
        assert_eq!(i["source"]["format"], json!("npy"));
        let g = group(&i, "array");
        assert_eq!(g["shape"], json!([200, 24]));
        assert_eq!(g["layout"], json!(layout));
    }
}

#[test]
fn raw_round_trips_with_dtype_and_shape() {
    let dir = Scratch::new("raw");
    let input = dir.write("x.bin", &f32_bytes(&features(256, 64, 4)));
    for layout in ["packed", "fixed"] {
        let i = round_trip(
            &dir,
            &input,
            layout,
            &["--dtype", "f32", "--shape", "256,64"],
        );
        assert_eq!(i["source"]["format"], json!("raw"));
        let g = group(&i, "array");
        assert_eq!(g["shape"], json!([256, 64]));
        assert_eq!(g["rows"], json!(256));
        assert_eq!(g["layout"], json!(layout));
    }
}

/// --chunk, --threshold, --row-len and --tensor reach the container.
#[test]
fn fitting_options_reach_the_container() {
    let dir = Scratch::new("options");
    let input = dir.write("x.bin", &f32_bytes(&features(256, 64, 5)));
    let i = round_trip(
        &dir,
        &input,
        "packed",
        &[
            "--dtype",
            "f32",
            "--row-len",
            "64",
            "--chunk",
            "2",
            "--threshold",
            "0.8",
        ],
    );
    let g = group(&i, "array");
    assert_eq!(g["shape"], json!([256 * 64]), "no --shape: one dimension");
    assert_eq!(g["rows"], json!(256));
    assert_eq!(g["row_bytes"], json!(64 * 4));
    assert_eq!(
        g["layout"],
        json!("packed"),
        "--row-len lets a 1-D tensor be compressed"
    );
    assert_eq!(g["chunk_bytes"], json!(2));
    assert_eq!(g["threshold"], json!(0.8));

    let st = dir.write(
        "two.safetensors",
        &safetensors(&[
            ("a", "F32", &[64, 16], f32_bytes(&features(64, 16, 6))),
            ("b", "F32", &[64, 16], f32_bytes(&features(64, 16, 7))),
        ]),
    );
    let i = round_trip(&dir, &st, "packed", &["--tensor", "b"]);
    let names: Vec<&Value> = i["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["name"])
        .collect();
    assert_eq!(names, [&json!("b")], "only the selected tensor is a group");
}

#[test]
fn existing_output_needs_force() {
    let dir = Scratch::new("force");
    let out = dir.write("out.ibp", b"precious");
    let err = fails(&args!["compress", cora(), "-o", &out,], EXIT_INVALID);
    assert!(err.starts_with("ibp: ") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    ok(&args!["compress", cora(), "-o", &out, "--force",]);
    ok(&args!["inspect", &out]);

    let restored = dir.write("restored.npz", b"precious");
    let err = fails(&args!["decompress", &out, "-o", &restored,], EXIT_INVALID);
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&restored).unwrap(), b"precious");
    ok(&args!["decompress", &out, "-o", &restored, "--force",]);
    same_bytes(&cora(), &restored);

    // Not even --force lets the output replace the input.
    let err = fails(
        &args!["decompress", &out, "-o", &out, "--force",],
        EXIT_INVALID,
    );
    assert!(err.contains("is the input"), "{err}");
    assert_eq!(dir.listing(), ["out.ibp", "restored.npz"]);
}

#[test]
fn missing_input_is_an_io_error() {
    let dir = Scratch::new("missing");
    let missing = dir.path("nope.npz");
    let out = dir.path("out.ibp");
    let err = fails(&args!["compress", &missing, "-o", &out,], EXIT_IO);
    assert!(
        err.starts_with("ibp: I/O") && err.contains("nope.npz"),
        "{err}"
    );
    let err = fails(&args!["inspect", &missing], EXIT_IO);
    assert!(err.contains("nope.npz"), "{err}");
    fails(&args!["decompress", &missing, "-o", &out,], EXIT_IO);
    assert!(dir.listing().is_empty(), "left behind: {:?}", dir.listing());
}

#[test]
fn bad_arguments_are_invalid() {
    let dir = Scratch::new("badargs");
    let out = dir.path("out.ibp");
    for chunk in ["3", "16", "x", "0"] {
        let err = fails(
            &args!["compress", cora(), "-o", &out, "--chunk", chunk,],
            EXIT_INVALID,
        );
        assert!(
            err.starts_with("ibp: invalid argument") && err.contains("--chunk"),
            "{err}"
        );
    }
    let err = fails(
        &args!["compress", cora(), "-o", &out, "--row-len", "7",],
        EXIT_INVALID,
    );
    assert!(err.contains("--row-len"), "{err}");
    let err = fails(&args!["compress", cora(), "-o", &dir.0,], EXIT_INVALID);
    assert!(err.contains("directory"), "{err}");
    // clap's own usage errors keep clap's exit code.
    for args in [
        args!["compress", "x.npz"].to_vec(),
        args!["compress", "x.npz", "-o", "y", "--layout", "zigzag"].to_vec(),
        args!["inspect"].to_vec(),
    ] {
        let o = ibp(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).starts_with("error:"), "{args:?}: {}", stderr(&o));
    }
    assert!(dir.listing().is_empty(), "left behind: {:?}", dir.listing());
}

/// Every truncation and a flipped byte are typed errors with exit code 4,
/// from inspect and from decompress, and decompress leaves nothing behind.
#[test]
fn damaged_containers_are_refused() {
    let dir = Scratch::new("damaged");
    let good = dir.path("good.ibp");
    ok(&args!["compress", cora(), "-o", &good,]);
    let bytes = std::fs::read(&good).unwrap();
    let restored = dir.path("restored.npz");
    let bad = dir.path("bad.ibp");
    let mut cases: Vec<(String, Vec<u8>)> = [
        0,
        10,
        64,
        100,
        bytes.len() / 2,
        bytes.len() - 64,
        bytes.len() - 1,
    ]
    .into_iter()
    .map(|n| (format!("first {n} bytes"), bytes[..n].to_vec()))
    .collect();
    for at in [9, 300, bytes.len() / 2, bytes.len() - 100, bytes.len() - 10] {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        cases.push((format!("byte {at} flipped"), b));
    }
    cases.push(("an npz".into(), std::fs::read(cora()).unwrap()));
    for (what, b) in cases {
        std::fs::write(&bad, &b).unwrap();
        let err = fails(&args!["inspect", &bad], EXIT_CORRUPT);
        assert!(
            err.starts_with("ibp: corrupt data") || err.starts_with("ibp: truncated data"),
            "{what}: {err}"
        );
        assert!(
            err.contains("ibp compress"),
            "{what}: the message should say what to do: {err}"
        );
        let err2 = fails(&args!["decompress", &bad, "-o", &restored,], EXIT_CORRUPT);
        assert_eq!(err, err2, "{what}");
        assert_eq!(dir.listing(), ["bad.ibp", "good.ibp"], "{what}");
    }
}

/// A failure after the output was started leaves no output: a container
/// whose recorded fingerprint does not match what it restores (made with
/// the library's writer, every checksum intact).
#[test]
fn failed_restore_leaves_no_output() {
    let dir = Scratch::new("failed-restore");
    let data = f32_bytes(&features(8, 8, 8));
    let mut w = ContainerWriter::new(Vec::new()).unwrap();
    let mut fp = Fingerprint::of(&data);
    fp.xxh3 ^= 1;
    w.set_source(Some(SourceInfo::new(SourceFormat::Raw, fp)));
    let meta = GroupMeta::new("array", DType::F32, vec![8, 8], 8, 32, &data);
    w.add_group(meta, GroupData::Raw(&data)).unwrap();
    let (bytes, _) = w.finish(&[Segment::Group(0)]).unwrap();
    let ibp_file = dir.write("lying.ibp", &bytes);
    ok(&args!["inspect", &ibp_file]);
    let out = dir.path("out.bin");
    let err = fails(&args!["decompress", &ibp_file, "-o", &out,], EXIT_CORRUPT);
    assert!(err.contains("differs from the original"), "{err}");
    assert_eq!(dir.listing(), ["lying.ibp"]);
}

// ---- the issue's acceptance checks, through the CLI ----------------------

#[test]
fn analyze_cora_chunk_4_saves_95_percent() {
    let a = ok_json(&args!["analyze", cora(), "--json", "--chunk", "4",]);
    let t = &a["tensors"][0];
    assert_eq!(t["name"], json!("features"));
    assert_eq!(t["chunk_bytes"], json!(4));
    let s = t["savings"].as_f64().unwrap();
    assert!(s >= 0.95, "Cora savings {s} < 0.95");
    // Its round trip through a .ibp file is cora_round_trips_in_both_layouts.
}

#[test]
fn analyze_candidates_mark_the_chosen_one() {
    let a = ok_json(&args!["analyze", cora(), "--json", "--device", "cpu"]);
    let t = &a["tensors"][0];
    let cands = t["candidates"].as_array().unwrap();
    let chosen: Vec<&Value> = cands
        .iter()
        .filter(|c| c["chosen"] == json!(true))
        .collect();
    assert_eq!(chosen.len(), 1, "exactly one chosen candidate: {cands:?}");
    assert_eq!(chosen[0]["threshold"], t["threshold"]);
    assert_eq!(chosen[0]["chunk_bytes"], t["chunk_bytes"]);
    // The chosen one is the smallest (ties go to a larger threshold or chunk).
    let least = cands
        .iter()
        .map(|c| c["stored_bytes"].as_u64().unwrap())
        .min()
        .unwrap();
    assert_eq!(chosen[0]["stored_bytes"].as_u64(), Some(least));

    let table = ok(&args!["analyze", cora(), "--candidates", "--device", "cpu"]);
    let marked: Vec<&str> = table.lines().filter(|l| l.starts_with('*')).collect();
    let want = format!(
        "* t={:.2}  chunk={} B",
        t["threshold"].as_f64().unwrap(),
        t["chunk_bytes"]
    );
    assert_eq!(marked.len(), 1, "{table}");
    assert!(marked[0].starts_with(&want), "{:?} vs {want:?}", marked[0]);
    assert!(marked[0].ends_with("<- chosen"), "{}", marked[0]);
    let unmarked = table.lines().filter(|l| l.starts_with("  t=")).count();
    assert_eq!(unmarked + 1, cands.len(), "{table}");
}

fn minilm(test: &str) -> Option<PathBuf> {
    let p = common::data_file("model.safetensors");
    if p.is_none() {
        common::notice(&format!("{test}: skipped: model.safetensors not found"));
    }
    p
}

fn embedding_savings(model: &Path, cast: Option<&str>) -> (f64, String) {
    let mut args = args!["analyze", model, "--tensor", EMBEDDINGS, "--json"].to_vec();
    if let Some(c) = cast {
        args.extend(args!["--cast", c]);
    }
    let a = ok_json(&args);
    let t = &a["tensors"][0];
    assert_eq!(t["name"], json!(EMBEDDINGS));
    (
        t["savings"].as_f64().unwrap(),
        t["dtype"].as_str().unwrap().to_string(),
    )
}

#[test]
fn minilm_embeddings_f32() {
    let Some(model) = minilm("minilm_embeddings_f32") else {
        return;
    };
    let (s, dtype) = embedding_savings(&model, None);
    assert_eq!(dtype, "f32");
    assert!(s >= 0.12, "MiniLM f32 embedding savings {s} < 0.12");

    let dir = Scratch::new("minilm-f32");
    let i = round_trip(&dir, &model, "packed", &["--tensor", EMBEDDINGS]);
    let g = group(&i, EMBEDDINGS);
    assert_eq!(g["shape"], json!([30522, 384]));
    assert_eq!(g["layout"], json!("packed"));
    assert_eq!(i["groups"].as_array().unwrap().len(), 1);
}

#[test]
fn minilm_embeddings_bf16() {
    let Some(model) = minilm("minilm_embeddings_bf16") else {
        return;
    };
    let (s, dtype) = embedding_savings(&model, Some("bf16"));
    assert_eq!(dtype, "bf16");
    assert!(s >= 0.25, "MiniLM bf16 embedding savings {s} < 0.25");

    // The same table as a bf16 safetensors file of its own, rounded as
    // `--cast bf16` rounds it, through a .ibp and back.
    let bytes = std::fs::read(&model).unwrap();
    let doc = ibp::io::parse(
        &bytes,
        SourceFormat::Safetensors,
        &ParseOptions::default().with_select([EMBEDDINGS]),
    )
    .unwrap();
    let table = &doc.groups[0];
    assert_eq!(table.dtype, DType::F32);
    let values: Vec<f32> = table
        .data
        .as_chunks::<4>()
        .0
        .iter()
        .map(|b| f32::from_le_bytes(*b))
        .collect();
    let dir = Scratch::new("minilm-bf16");
    let input = dir.write(
        "embeddings-bf16.safetensors",
        &safetensors(&[(EMBEDDINGS, "BF16", &table.shape, bf16_bytes(&values))]),
    );
    drop(bytes);
    let i = round_trip(&dir, &input, "packed", &[]);
    let g = group(&i, EMBEDDINGS);
    assert_eq!(g["dtype"], json!("bf16"));
    assert_eq!(g["row_bytes"], json!(384 * 2));
    assert_eq!(g["layout"], json!("packed"));
}

/// f32 rows from two populations (sign and exponent of their own), which
/// two codebooks compress far better than one.
fn two_populations(rows: usize, cols: usize) -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..rows * cols)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let p = ((i / cols) % 2) as u32;
            f32::from_bits((p << 31) | ((100 + 9 * p) << 23) | (s as u32 & 0x007f_f000))
        })
        .collect()
}

#[test]
fn clusters_flag_writes_inspects_and_restores_clustered_groups() {
    let dir = Scratch::new("clusters");
    let input = dir.write("x.npy", &npy_f32(&[240, 64], &two_populations(240, 64)));
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let (off, auto, two) = (
        dir.path("off.ibp"),
        dir.path("auto.ibp"),
        dir.path("two.ibp"),
    );
    ok(&args!["compress", &input, "-o", &off]);
    ok(&args![
        "compress",
        &input,
        "-o",
        &auto,
        "--clusters",
        "auto"
    ]);
    let text = ok(&args!["compress", &input, "-o", &two, "--clusters", "2"]);
    assert!(text.contains("clustered: array k = 2"), "{text}");
    assert!(
        size(&auto) < size(&off),
        "{} vs {}",
        size(&auto),
        size(&off)
    );
    let i = ok_json(&args!["inspect", &two, "--json"]);
    let g = group(&i, "array");
    assert_eq!(
        (&g["layout"], &g["clusters"], &g["cluster_id_bits"]),
        (&json!("clustered"), &json!(2), &json!(1))
    );
    let text = ok(&args!["inspect", &two]);
    assert!(text.contains("clustered (k = 2, 1-bit ids)"), "{text}");
    assert!(text.contains("cluster ids"), "{text}");
    let back = dir.path("back.npy");
    ok(&args!["decompress", &two, "-o", &back]);
    same_bytes(&input, &back);

    for bad in ["0", "lots", "2x", "4097"] {
        let err = fails(
            &args![
                "compress",
                &input,
                "-o",
                dir.path("bad.ibp"),
                "--clusters",
                bad
            ],
            EXIT_INVALID,
        );
        assert!(err.contains("--clusters"), "{err}");
    }
    let err = fails(
        &args![
            "compress",
            &input,
            "-o",
            dir.path("bad.ibp"),
            "--clusters",
            "2",
            "--layout",
            "fixed"
        ],
        EXIT_INVALID,
    );
    assert!(err.contains("packed layout"), "{err}");
}

// ---- plots ---------------------------------------------------------------

/// The real results file of the H200 run.
fn h200_results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/nvidia-h200.md")
}

fn svg(p: &Path) -> String {
    let s = std::fs::read_to_string(p).unwrap();
    assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    s
}

#[test]
fn plot_draws_a_results_file_beside_it_or_where_asked() {
    let dir = Scratch::new("plot");
    let out = dir.path("h200.svg");
    assert_eq!(
        ok(&args!["plot", h200_results(), "-o", &out]).trim(),
        out.to_str().unwrap()
    );
    let s = svg(&out);
    for t in [
        "4 KB tensors, packed",
        "256 B ideal",
        "pinned DMA copy 55.4 GB/s",
        "Cora features f32 874",
    ] {
        assert!(s.contains(t), "{t}");
    }
    // Without -o: beside the results file.
    let md = dir.write("gpu.md", &std::fs::read(h200_results()).unwrap());
    ok(&args!["plot", &md]);
    assert_eq!(dir.listing(), ["gpu.md", "gpu.svg", "h200.svg"]);
}

#[test]
fn plot_errors_are_typed() {
    let dir = Scratch::new("plot-errors");
    let err = fails(&args!["plot", dir.path("missing.md")], EXIT_IO);
    assert!(err.contains("missing.md"), "{err}");
    let md = dir.write(
        "other.md",
        b"# ibp GPU benchmarks: X\n\n## Device-resident decode\n",
    );
    let err = fails(&args!["plot", &md], EXIT_INVALID);
    assert!(err.contains("Figure 7 grid"), "{err}");
    let bad = std::fs::read_to_string(h200_results())
        .unwrap()
        .replace("| 54.5 |", "| n/a |");
    let md = dir.write("bad.md", bad.as_bytes());
    let err = fails(&args!["plot", &md], EXIT_CORRUPT);
    assert!(err.contains("\"n/a\""), "{err}");
    assert_eq!(dir.listing(), ["bad.md", "other.md"]);
}

#[test]
fn analyze_plot_draws_the_candidates() {
    let dir = Scratch::new("analyze-plot");
    let out = dir.path("cands.svg");
    let a = ok_json(&args![
        "analyze",
        cora(),
        "--json",
        "--device",
        "cpu",
        "--plot",
        &out
    ]);
    let t = &a["tensors"][0];
    let s = svg(&out);
    assert!(s.contains("features: savings per (threshold, chunk)"));
    for chunk in [1, 2, 4, 8] {
        assert!(s.contains(&format!("chunk {chunk} B")), "{chunk}");
    }
    let want = format!(
        "chosen: t = {:.2}, chunk {} B",
        t["threshold"].as_f64().unwrap(),
        t["chunk_bytes"]
    );
    assert!(s.contains(&want), "{want}");
}

#[test]
fn analyze_clusters_plot_draws_the_sweep() {
    let dir = Scratch::new("clusters-plot");
    let out = dir.path("k.svg");
    let text = ok(&args![
        "analyze",
        cora(),
        "--clusters",
        "--max-clusters",
        "4",
        "--cluster-fit-rows",
        "256",
        "--cluster-eval-rows",
        "512",
        "--plot",
        &out
    ]);
    assert!(text.contains(&format!("plot: {}", out.display())), "{text}");
    let s = svg(&out);
    assert!(s.contains("Net space savings against number of clusters"));
    assert!(s.contains("clusters k (log scale)"));
}
