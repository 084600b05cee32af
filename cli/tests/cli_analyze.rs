//! `ibp analyze`, `--clusters` and `ibp plot` through the real binary: the
//! issue's acceptance numbers, measured through the CLI on Cora and on the
//! MiniLM weights (skipped, visibly, where the weights are absent), the
//! clustered groups, and the plots.

#[path = "../../tests/common/mod.rs"]
mod common;
#[macro_use]
mod cli_harness;

use std::path::{Path, PathBuf};

use ibp::io::{DType, ParseOptions, SourceFormat};
use serde_json::{Value, json};

use cli_harness::*;

// ---- the acceptance checks, through the CLI ----------------------

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

/// A real results file of an H200 run, frozen at e732fa5 so that the
/// figures checked below stay put when `ibp bench` writes a new one.
fn h200_results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/nvidia-h200-e732fa5.md")
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

/// Issue 36: `--plot` starts with the savings of every tensor weighted by
/// its bytes, and draws the candidates of the tensors that hold the bytes,
/// largest first (it drew the first 16 by name, an 864-byte one first).
#[test]
fn analyze_plot_draws_the_largest_tensors_first() {
    let dir = Scratch::new("analyze-plot-bytes");
    let input = dir.write(
        "m.safetensors",
        &safetensors(&[
            ("a_small", "F32", &[24, 8], f32_bytes(&features(24, 8, 1))),
            ("b_big", "F32", &[400, 64], f32_bytes(&features(400, 64, 2))),
            ("c_mid", "F32", &[100, 32], f32_bytes(&features(100, 32, 3))),
            ("d.bias", "F32", &[64], f32_bytes(&features(1, 64, 4))),
        ]),
    );
    let out = dir.path("m.svg");
    ok(&args!["analyze", &input, "--device", "cpu", "--plot", &out]);
    let s = svg(&out);
    let at = |t: &str| {
        s.find(t)
            .unwrap_or_else(|| panic!("{t} missing from the plot"))
    };
    // The bar chart first, then the candidates by size.
    let bars = at("savings per tensor, largest first");
    assert!(bars < at("b_big: savings per (threshold, chunk)"));
    assert!(at("b_big: savings per") < at("c_mid: savings per"));
    assert!(at("c_mid: savings per") < at("a_small: savings per"));
    assert!(s.contains("all tensors: ") && s.contains("% saved"));
    // Bars are labelled with their tensors' names (the widest ones).
    let bar_labels = &s[bars..at("b_big: savings per")];
    assert!(
        bar_labels.contains(">b_big<") || bar_labels.contains(">\nb_big"),
        "{bar_labels}"
    );
}

/// Issue 36: `--cast bf16` says beside its figures that no command writes
/// that bf16 file.
#[test]
fn analyze_cast_says_no_command_writes_the_cast_file() {
    let dir = Scratch::new("analyze-cast");
    let input = dir.write(
        "w.safetensors",
        &safetensors(&[("w", "F32", &[200, 32], f32_bytes(&features(200, 32, 5)))]),
    );
    let t = ok(&args![
        "analyze", &input, "--device", "cpu", "--cast", "bf16"
    ]);
    assert!(t.contains("no ibp command writes"), "{t}");
    let j = ok_json(&args![
        "analyze", &input, "--device", "cpu", "--cast", "bf16", "--json"
    ]);
    assert!(
        j["cast_note"]
            .as_str()
            .unwrap()
            .contains("no ibp command writes"),
        "{j}"
    );
    let plain = ok(&args!["analyze", &input, "--device", "cpu"]);
    assert!(!plain.contains("no ibp command writes"), "{plain}");
}
