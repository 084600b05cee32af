//! The `ibp` command line, run as a user runs it: the real binary, real
//! files, exit codes and `--json` output.
//!
//! - compress → inspect → decompress gives the input back byte for byte, for
//!   npz (Cora), hand-written safetensors (f32 and bf16, 1-D and 2-D), npy
//!   and raw files, in both layouts; what compress reports is what inspect
//!   reads back from the file;
//! - the fitting options reach the container;
//! - errors have the documented exit codes, say what to do, and never leave
//!   a partial output behind.
//!
//! `cli_analyze.rs` has the acceptance numbers, clusters and plots.

#[path = "../../tests/common/mod.rs"]
mod common;
#[macro_use]
mod cli_harness;

use ibp::container::{ContainerWriter, GroupData, GroupMeta, SourceInfo};
use ibp::io::{DType, Fingerprint, Segment, SourceFormat};
use serde_json::{Value, json};

use cli_harness::*;

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
            ("w.bias", "F32", &[96], f32_bytes(&w[..96])),
            ("emb", "BF16", &[128, 24], bf16_bytes(&e)),
            ("norm", "BF16", &[24], bf16_bytes(&e[..24])),
            ("scale", "F32", &[], f32_bytes(&[0.5])),
        ]),
    );
    for layout in ["packed", "fixed"] {
        let i = round_trip(&dir, &input, layout, &[]);
        assert_eq!(i["source"]["format"], json!("safetensors"));
        // `norm` (48 bytes) and `scale` (4) are under 256 bytes: kept
        // verbatim among the file's raw bytes, no group of their own.
        let names: Vec<&str> = i["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["w", "w.bias", "emb"], "{layout}");
        for (name, dtype, stored) in [
            ("w", "f32", layout),
            ("w.bias", "f32", "raw"),
            ("emb", "bf16", layout),
        ] {
            let g = group(&i, name);
            assert_eq!(g["dtype"], json!(dtype), "{name}");
            assert_eq!(g["layout"], json!(stored), "{name}");
        }
        assert_eq!(group(&i, "emb")["row_bytes"], json!(24 * 2));
        assert_eq!(group(&i, "w.bias")["shape"], json!([96]));
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
        args!["compress"].to_vec(),
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

/// Issue 36: without -o, `compress FILE` writes FILE.ibp and `decompress
/// FILE.ibp` writes FILE, neither overwriting without --force; a name that
/// gives nothing to go by needs -o.
#[test]
fn output_names_default_to_the_input_s() {
    let dir = Scratch::new("default-names");
    let input = dir.write("x.npy", &npy_f32(&[64, 16], &features(64, 16, 9)));
    let c = ok_json(&args!["compress", &input, "--json"]);
    let packed = dir.path("x.npy.ibp");
    assert_eq!(c["output"], json!(packed.display().to_string()));
    assert!(packed.exists());
    // Neither default replaces an existing file.
    let err = fails(&args!["compress", &input], EXIT_INVALID);
    assert!(
        err.contains("x.npy.ibp") && err.contains("--force"),
        "{err}"
    );
    let err = fails(&args!["decompress", &packed], EXIT_INVALID);
    assert!(err.contains("x.npy") && err.contains("--force"), "{err}");
    let original = std::fs::read(&input).unwrap();
    std::fs::remove_file(&input).unwrap();
    let d = ok(&args!["decompress", &packed]);
    assert!(d.contains("verified"), "{d}");
    assert_eq!(std::fs::read(&input).unwrap(), original);
    // A container not named .ibp, and standard input, need -o.
    let other = dir.path("x.bin");
    std::fs::copy(&packed, &other).unwrap();
    let err = fails(&args!["decompress", &other], EXIT_INVALID);
    assert!(
        err.contains("does not end in .ibp") && err.contains("-o"),
        "{err}"
    );
    let o = bin()
        .args(args!["compress", "-", "--dtype", "f32"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(EXIT_INVALID), "{}", stderr(&o));
    assert!(stderr(&o).contains("-o"), "{}", stderr(&o));
    assert_eq!(dir.listing(), ["x.bin", "x.npy", "x.npy.ibp"]);
}

/// Issue 35: `--version` names the commit (or says it is unknown) and
/// whether the build has the GPU path.
#[test]
fn version_names_the_commit_and_the_gpu_path() {
    let v = ok(&args!["--version"]);
    assert!(v.starts_with("ibp 0."), "{v}");
    assert!(v.contains("commit "), "{v}");
    let gpu = if cfg!(feature = "cuda") {
        "GPU path: built in"
    } else {
        "GPU path: not built"
    };
    assert!(v.contains(gpu), "{v}");
}

/// Issue 36: `compress --help` says that `-` reads standard input.
#[test]
fn compress_help_names_standard_input() {
    let h = ok(&args!["compress", "--help"]);
    assert!(h.contains("`-` reads standard input"), "{h}");
}

/// A safetensors file of `n` small 2-D tensors and two 1-D ones.
fn many_tensors(dir: &Scratch, n: usize) -> std::path::PathBuf {
    let mut tensors: Vec<(String, &str, Vec<u64>, Vec<u8>)> = (0..n)
        .map(|i| {
            let rows = 200 + 20 * i;
            (
                format!("layer{i:02}.weight"),
                "F32",
                vec![rows as u64, 32],
                f32_bytes(&features(rows, 32, i as u64 + 1)),
            )
        })
        .collect();
    // 320 bytes each: over the 256 under which a tensor stays verbatim.
    tensors.push(("a.bias".into(), "F32", vec![80], f32_bytes(&[1.0; 80])));
    tensors.push(("b.bias".into(), "F32", vec![80], f32_bytes(&[2.0; 80])));
    let refs: Vec<(&str, &str, &[u64], Vec<u8>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), *d, s.as_slice(), b.clone()))
        .collect();
    dir.write("many.safetensors", &safetensors(&refs))
}

/// Issue 36: `compress` and `inspect` print a summary by default (the ten
/// largest tensors, sections counted by kind) and everything with
/// --verbose; tensors stored raw are named, once per kind of reason.
#[test]
fn reports_summarise_unless_verbose() {
    let dir = Scratch::new("summaries");
    let input = many_tensors(&dir, 14);
    let out = dir.path("many.ibp");
    let t = ok(&args!["compress", &input, "-o", &out]);
    assert!(t.contains("the 10 largest of 16 tensors"), "{t}");
    assert!(
        t.contains("6 more tensors") && t.contains("--verbose"),
        "{t}"
    );
    // The largest first; the smallest are left to --verbose.
    assert!(
        t.contains("layer13.weight") && !t.contains("layer00.weight"),
        "{t}"
    );
    let raw: Vec<&str> = t.lines().filter(|l| l.starts_with("stored raw")).collect();
    assert_eq!(
        raw,
        ["stored raw, 1-D tensor (one row): a.bias, b.bias"],
        "{t}"
    );
    // The rate is labelled, and the end-to-end time is given beside it.
    let device = t.lines().find(|l| l.starts_with("device: ")).unwrap();
    assert!(
        device.contains("MB/s (fit, compress and write") && device.contains("end to end"),
        "{device}"
    );
    let gpu_notes = t.matches("no usable GPU").count() + t.matches("without the `cuda`").count();
    assert!(gpu_notes <= 1, "{t}");
    let v = ok(&args![
        "compress",
        &input,
        "-o",
        &out,
        "--force",
        "--verbose"
    ]);
    for i in 0..14 {
        assert!(v.contains(&format!("layer{i:02}.weight")), "{v}");
    }
    assert!(
        v.contains("stored raw: a.bias: 1-D tensor (one row)"),
        "{v}"
    );

    let i = ok(&args!["inspect", &out]);
    assert!(i.contains("the 10 largest of 16 tensors"), "{i}");
    assert!(
        i.contains("sections (") && i.contains("--verbose lists them"),
        "{i}"
    );
    assert!(!i.contains("required"), "no section table by default:\n{i}");
    let iv = ok(&args!["inspect", &out, "--verbose"]);
    assert!(
        iv.contains("layer00.weight") && iv.contains("required"),
        "{iv}"
    );
    assert!(iv.lines().count() > i.lines().count() + 20, "{iv}");
}

/// `--coding`: `auto` float-codes a dense bf16 tensor and keeps IBP for an
/// integer one, saying which and both sizes; `float` and `ibp` force one;
/// every file decompresses byte for byte; a bad value is refused.
#[test]
fn coding_picks_per_tensor_and_can_be_forced() {
    let dir = Scratch::new("coding");
    // Dense bf16 weights (IBP finds few invariant bits; the exponents are
    // concentrated) and small integers (IBP's case, not a float dtype).
    let dense: Vec<f32> = (0..256 * 64u32)
        .map(|i| {
            let x = (i.wrapping_mul(2_654_435_761) >> 8) as f32 / 16_777_216.0 - 0.5;
            x * x * x * 0.2 + x * 0.01
        })
        .collect();
    let ints: Vec<u8> = (0..200 * 32u32)
        .flat_map(|i| (i % 7).to_le_bytes())
        .collect();
    let input = dir.write(
        "mixed.safetensors",
        &safetensors(&[
            ("dense", "BF16", &[256, 64], bf16_bytes(&dense)),
            ("ints", "U32", &[200, 32], ints),
        ]),
    );
    let c = |coding: &str| -> (Value, Value) {
        let out = dir.path(&format!("mixed.{coding}.ibp"));
        let c = ok_json(&args![
            "compress", &input, "-o", &out, "--coding", coding, "--json"
        ]);
        // compress → inspect → decompress byte for byte, in a folder of
        // its own (round_trip names its files after the layout).
        let sub = Scratch::new(&format!("coding-{coding}"));
        let i = round_trip(&sub, &input, "packed", &["--coding", coding]);
        (c, i)
    };
    let (auto, i) = c("auto");
    assert_eq!(auto["coding"], json!("auto"));
    assert_eq!(group(&i, "dense")["layout"], json!("float"));
    assert!(
        group(&i, "dense")["float_code"]
            .as_str()
            .unwrap()
            .starts_with("bf16, symbol bits"),
        "{i}"
    );
    assert_eq!(group(&i, "ints")["layout"], json!("packed"));
    // Both sizes of the float-coded tensor, the chosen one smaller.
    let d = group(&auto, "dense");
    assert!(d["ibp_bytes"].as_u64().unwrap() > d["float_bytes"].as_u64().unwrap());
    assert_eq!(d["float_bytes"], d["stored_bytes"]);
    assert!(group(&auto, "ints").get("float_bytes").is_none());

    let (ibp_only, i) = c("ibp");
    for g in i["groups"].as_array().unwrap() {
        assert_ne!(g["layout"], json!("float"), "{g}");
    }
    assert!(ibp_only["output_bytes"].as_u64() > auto["output_bytes"].as_u64());
    let (_, i) = c("float");
    assert_eq!(group(&i, "dense")["layout"], json!("float"));
    assert_eq!(group(&i, "ints")["layout"], json!("packed"));

    // The table says which coding each tensor got, and the other's size.
    let out = dir.path("mixed.text.ibp");
    let t = ok(&args!["compress", &input, "-o", &out]);
    assert!(t.contains("coding auto: 1 of 2 tensors float-coded"), "{t}");
    assert!(t.contains("float (bf16, symbol bits"), "{t}");
    assert!(t.contains("; ibp "), "{t}");
    let t = ok(&args!["inspect", &out]);
    assert!(
        t.contains("float (bf16") && t.contains("float group"),
        "{t}"
    );

    let err = fails(
        &args![
            "compress",
            &input,
            "-o",
            dir.path("x.ibp"),
            "--coding",
            "zstd"
        ],
        EXIT_INVALID,
    );
    assert!(err.contains("--coding zstd"), "{err}");
}
