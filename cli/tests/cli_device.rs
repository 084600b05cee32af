//! `--device` of `ibp compress` and the errors of `ibp bench FILE`, on a
//! machine without a usable GPU (CI's): the CPU path works and says so,
//! `auto` falls back to it and names the reason, `--device gpu` is a typed
//! error; `ibp bench FILE` refuses a missing file and an unknown tensor
//! (listing the names) and, with a readable file, measures the CPU and says
//! the GPU part was skipped. The GPU side is `tests/gpu_cli.rs`.

#[path = "../../tests/common/mod.rs"]
mod common;
#[macro_use]
mod cli_harness;

use std::path::{Path, PathBuf};

use cli_harness::*;
use serde_json::Value;

/// `--device gpu` without a GPU: the driver's error (`Cuda`) in a build
/// with `cuda`; `Unsupported` in one without.
const EXIT_NO_GPU: i32 = if cfg!(feature = "cuda") { 6 } else { 5 };

fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-device-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether this machine has a usable GPU (then the no-GPU tests do not
/// apply; `tests/gpu_cli.rs` covers it).
fn has_gpu() -> bool {
    #[cfg(feature = "cuda")]
    {
        ibp::gpu::Gpu::first().is_ok()
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
    }
}

#[test]
fn device_cpu_and_auto_write_the_same_container_and_say_where() {
    let dir = scratch("cpu");
    let (cpu, auto) = (dir.join("cpu.ibp"), dir.join("auto.ibp"));
    for layout in ["packed", "fixed"] {
        let j: Value = serde_json::from_str(&ok(&args![
            "compress",
            cora(),
            "-o",
            &cpu,
            "--force",
            "--layout",
            layout,
            "--device",
            "cpu",
            "--json"
        ]))
        .unwrap();
        let d = &j["device"];
        assert_eq!(d["requested"], "cpu");
        assert_eq!(d["used"], "cpu");
        assert_eq!(d["groups_on_gpu"], 0);
        assert!(d.get("fallback_reason").is_none(), "{d}");
        assert!(d["compress_gb_per_s"].as_f64().unwrap() > 0.0, "{d}");
        assert!(d["compress_seconds"].as_f64().unwrap() > 0.0, "{d}");

        let report = ok(&args![
            "compress",
            cora(),
            "-o",
            &auto,
            "--force",
            "--layout",
            layout
        ]);
        let line = report
            .lines()
            .find(|l| l.starts_with("device: "))
            .unwrap_or_else(|| panic!("no device line:\n{report}"));
        // One unit (MB/s), the work's rate and the end-to-end one labelled.
        assert!(line.contains("MB/s (fit, compress and write"), "{line}");
        assert!(line.contains("end to end"), "{line}");
        if !has_gpu() {
            assert!(line.starts_with("device: CPU"), "{line}");
            // Why the CPU, said once, on a line of its own.
            let notes: Vec<&str> = report
                .lines()
                .filter(|l| l.starts_with("note: --device auto used the CPU: "))
                .collect();
            assert_eq!(notes.len(), 1, "{report}");
            let reasons = report.matches("no usable GPU").count()
                + report.matches("without the `cuda`").count();
            assert_eq!(reasons, 1, "{report}");
            assert!(!line.contains("GPU"), "{line}");
            assert!(
                std::fs::read(&cpu).unwrap() == std::fs::read(&auto).unwrap(),
                "--device auto ({layout}) wrote other bytes than --device cpu"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn device_gpu_without_a_gpu_is_a_clear_error_and_writes_nothing() {
    if has_gpu() {
        eprintln!("skipped: this machine has a GPU (tests/gpu_cli.rs covers --device gpu)");
        return;
    }
    let dir = scratch("gpu");
    let out = dir.join("out.ibp");
    let err = fails(
        &args!["compress", cora(), "-o", &out, "--device", "gpu"],
        EXIT_NO_GPU,
    );
    assert!(err.contains("--device gpu"), "{err}");
    assert!(err.contains("--device cpu"), "{err}");
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "left files");
    // A value clap refuses, listing the ones there are.
    let o = ibp(&args!["compress", cora(), "-o", &out, "--device", "tpu"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(EXIT_INVALID), "{err}");
    assert!(err.contains("auto") && err.contains("gpu"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_file_errors_are_typed() {
    let dir = scratch("bench");
    // The file is read before the GPU is looked for: these hold anywhere.
    let missing = dir.join("missing.safetensors");
    let err = fails(&args!["bench", &missing], EXIT_IO);
    assert!(err.contains("missing.safetensors"), "{err}");
    let err = fails(
        &args!["bench", cora(), "--tensor", "no_such_tensor"],
        EXIT_INVALID,
    );
    assert!(err.contains("no_such_tensor"), "{err}");
    // The names there are, so the user can pick one.
    assert!(err.contains("features"), "{err}");
    let junk = dir.join("junk.bin");
    std::fs::write(&junk, b"not a tensor file").unwrap();
    let err = fails(&args!["bench", &junk], 5);
    assert!(err.contains("--dtype"), "{err}");
    // --json errors are JSON on stdout too (and the message on stderr).
    let o = ibp(&args!["bench", &missing, "--json"]);
    assert_eq!(o.status.code(), Some(EXIT_IO));
    let j: Value = serde_json::from_slice(&o.stdout).expect("a JSON error");
    assert_eq!(j["error"]["exit_code"], 3, "{j}");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing.safetensors"),
        "{j}"
    );
    assert!(text(&o.stderr).starts_with("ibp: I/O"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 36: `ibp bench FILE` without a GPU gives the CPU's numbers for the
/// file (it was an error), per tensor, and says the GPU part was skipped.
#[test]
fn bench_file_without_a_gpu_measures_the_cpu() {
    if has_gpu() {
        common::notice("skipped: a GPU is usable (tests/gpu_cli.rs covers bench FILE there)");
        return;
    }
    let dir = scratch("bench-cpu");
    let input = dir.join("m.safetensors");
    std::fs::write(
        &input,
        safetensors(&[
            ("w", "F32", &[300, 32], f32_bytes(&features(300, 32, 1))),
            ("e", "BF16", &[200, 16], bf16_bytes(&features(200, 16, 2))),
            ("b", "F32", &[32], f32_bytes(&features(1, 32, 3))),
        ]),
    )
    .unwrap();
    let j = ok_json(&args!["bench", &input, "--json"]);
    assert_eq!(j["schema"], "ibp-bench-file-cpu/1", "{j}");
    let why = j["gpu_skipped"].as_str().unwrap();
    assert!(why.contains("GPU") || why.contains("cuda"), "{why}");
    let tensors = j["tensors"].as_array().unwrap();
    let names: Vec<&str> = tensors
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["w", "e"]);
    for t in tensors {
        for k in [
            "fit_mb_per_s",
            "compress_mb_per_s",
            "decompress_mb_per_s",
            "ratio",
        ] {
            assert!(t[k].as_f64().unwrap() > 0.0, "{k}: {t}");
        }
        assert_eq!(t["bit_exact"], true);
        let (b, s) = (
            t["bytes"].as_f64().unwrap(),
            t["stored_bytes"].as_f64().unwrap(),
        );
        assert!((t["ratio"].as_f64().unwrap() - b / s).abs() < 1e-9, "{t}");
    }
    assert_eq!(j["skipped"][0]["name"], "b");
    let t = ok(&args!["bench", &input]);
    assert!(t.contains("GPU:      skipped"), "{t}");
    assert!(
        t.contains("decompress MB/s") && t.contains("bit-exact"),
        "{t}"
    );
    // --tensor picks.
    let j = ok_json(&args!["bench", &input, "--json", "--tensor", "e"]);
    assert_eq!(j["tensors"].as_array().unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
