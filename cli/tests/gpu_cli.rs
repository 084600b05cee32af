//! The `ibp` binary on a GPU: `compress --device gpu` writes byte for byte
//! the container `--device cpu` writes (Cora, MiniLM's embeddings; packed
//! and fixed) and says it used the GPU; Ctrl-C during a GPU run leaves no
//! `.partial` file; the GPU run stays under docs/GUARANTEES.md's 512 MiB of
//! anonymous memory; `ibp bench FILE --json` parses and reports every
//! measurement bit-exact. Prints `skipped: no CUDA device` without a GPU (a
//! failure with `IBP_REQUIRE_GPU=1`).
//!
//! The binary: `$IBP_BIN`, else `.device/bin/ibp.bin` (where
//! `scripts/stage-device.sh` puts it on the GPU machine), else cargo's.
#![cfg(feature = "cuda")]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{data_file, gpu_or_skip, notice};
use serde_json::Value;

macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$(OsString::from($a)),*]
    };
}

fn bin() -> PathBuf {
    if let Some(b) = std::env::var_os("IBP_BIN") {
        return b.into();
    }
    let staged = PathBuf::from(".device/bin/ibp.bin");
    if staged.is_file() {
        return staged;
    }
    PathBuf::from(env!("CARGO_BIN_EXE_ibp"))
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ibp-gpu-cli-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ok(args: &[OsString]) -> Output {
    let o = Command::new(bin())
        .args(args)
        .output()
        .expect("running ibp");
    assert!(
        o.status.success(),
        "ibp {args:?} failed ({}):\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).expect("--json prints JSON")
}

fn cora() -> PathBuf {
    data_file("cora-features.npz")
        .or_else(|| Some(PathBuf::from("data/cora-features.npz")).filter(|p| p.is_file()))
        .expect("data/cora-features.npz")
}

/// Compress `input` (plus `extra`) on both devices in both layouts and
/// compare the files byte for byte.
fn same_on_both(dir: &Path, input: &Path, extra: &[&str]) {
    for layout in ["packed", "fixed"] {
        let mut outs = Vec::new();
        for device in ["cpu", "gpu"] {
            let out = dir.join(format!("{device}.{layout}.ibp"));
            let mut a = args![
                "compress", input, "-o", &out, "--force", "--layout", layout, "--device", device,
                "--json"
            ]
            .to_vec();
            a.extend(extra.iter().map(OsString::from));
            let j = json(&ok(&a));
            assert_eq!(j["device"]["used"], device, "{j}");
            if device == "gpu" {
                assert!(j["device"]["groups_on_gpu"].as_u64().unwrap() >= 1, "{j}");
                eprintln!(
                    "{} {layout} on the GPU: {:.2} GB/s",
                    input.display(),
                    j["device"]["compress_gb_per_s"].as_f64().unwrap()
                );
            }
            outs.push(std::fs::read(&out).unwrap());
        }
        assert!(
            outs[0] == outs[1],
            "{} ({layout}): --device gpu wrote {} bytes that differ from --device cpu's {}",
            input.display(),
            outs[1].len(),
            outs[0].len()
        );
    }
}

#[test]
fn gpu_and_cpu_write_the_same_container() {
    let Some(_gpu) = gpu_or_skip("gpu_and_cpu_write_the_same_container") else {
        return;
    };
    let dir = scratch("same");
    same_on_both(&dir, &cora(), &[]);
    // Small batches: the CPU path in many batches, the GPU's sections read
    // back in many pieces.
    same_on_both(&dir, &cora(), &["--batch-bytes", "100000"]);
    match data_file("model.safetensors") {
        Some(m) => same_on_both(&dir, &m, &[]),
        None => notice("MiniLM skipped: model.safetensors not found (IBP_DATA_DIR)"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A raw f32 file of `rows × 1024` with invariant high bits.
fn big_input(dir: &Path, rows: usize) -> PathBuf {
    let mut rng = common::Rng(7);
    let mut data = Vec::with_capacity(rows * 4096);
    for _ in 0..rows * 1024 {
        let v = (rng.next() % 64) as f32 / 64.0;
        data.extend_from_slice(&v.to_le_bytes());
    }
    let p = dir.join("big.f32");
    std::fs::write(&p, data).unwrap();
    p
}

/// `ibp compress` of [`big_input`]'s `rows` to `out` on the GPU, with
/// `extra` flags, started (stdout discarded, stderr piped).
fn start_gpu_compress(
    input: &Path,
    rows: usize,
    out: &Path,
    extra: &[&str],
) -> std::process::Child {
    let shape = format!("{rows},1024");
    Command::new(bin())
        .args(args![
            "compress", input, "--dtype", "f32", "--shape", shape, "-o", out, "--device", "gpu"
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn ctrl_c_during_a_gpu_run_leaves_no_partial_file() {
    let Some(_gpu) = gpu_or_skip("ctrl_c_during_a_gpu_run_leaves_no_partial_file") else {
        return;
    };
    let dir = scratch("sigint");
    let rows = 256 << 10; // 1 GiB
    let input = big_input(&dir, rows);
    let out = dir.join("big.ibp");
    let partials = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".partial"))
            .count()
    };
    let mut child = start_gpu_compress(&input, rows, &out, &[]);
    let start = Instant::now();
    while partials() == 0 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(partials() > 0, "no temporary output appeared");
    // SAFETY: kill with a valid pid and signal.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status}");
    assert_eq!(partials(), 0, "a .partial file was left");
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_gpu_run_stays_under_the_memory_bound() {
    let Some(_gpu) = gpu_or_skip("a_gpu_run_stays_under_the_memory_bound") else {
        return;
    };
    let dir = scratch("memory");
    let rows = 256 << 10; // 1 GiB
    let input = big_input(&dir, rows);
    let out = dir.join("big.ibp");
    for layout in ["packed", "fixed"] {
        let mut child = start_gpu_compress(&input, rows, &out, &["--force", "--layout", layout]);
        let status_file = format!("/proc/{}/status", child.id());
        let mut peak_kib = 0u64;
        let status = loop {
            if let Some(kib) = std::fs::read_to_string(&status_file).ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("RssAnon:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            }) {
                peak_kib = peak_kib.max(kib);
            }
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(status.success(), "compress --device gpu failed: {status}");
        eprintln!(
            "--device gpu, {layout}, 1 GiB: peak RssAnon {:.1} MiB",
            peak_kib as f64 / 1024.0
        );
        assert!(
            peak_kib < 512 << 10,
            "peak RssAnon {peak_kib} KiB over 512 MiB"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_file_json_reports_bit_exact_measurements() {
    let Some(_gpu) = gpu_or_skip("bench_file_json_reports_bit_exact_measurements") else {
        return;
    };
    let o = ok(&args![
        "bench",
        cora(),
        "--json",
        "--real-bytes",
        (64u64 << 20).to_string()
    ]);
    let j = json(&o);
    assert_eq!(j["schema"], "ibp-bench-file/1");
    assert_eq!(j["tensors"], serde_json::json!(["features"]));
    assert_eq!(j["row_bytes"], 5732);
    assert!(j["codebook"]["savings"].as_f64().unwrap() > 0.9, "{j}");
    for c in [
        "h2d_dma_copy_gb_per_s",
        "zero_copy_read_gb_per_s",
        "device_copy_gb_per_s",
    ] {
        assert!(j["ceilings"][c].as_f64().unwrap() > 0.0, "{c}: {j}");
    }
    let m = j["measurements"].as_array().unwrap();
    let ids: Vec<&str> = m.iter().map(|m| m["id"].as_str().unwrap()).collect();
    for id in [
        "range_pinned_zero_copy",
        "range_pinned_dma",
        "gather_pinned_4096",
        "range_device",
        "range_pinned_auto",
        "compress_host",
        "compress_device",
    ] {
        assert!(ids.contains(&id), "{id} missing: {ids:?}");
    }
    // range_auto timed both paths on its first call and reports how its
    // choice compares with the faster path of the same run.
    let a = &j["range_auto_calibration"];
    assert!(
        ["dma", "zero_copy"].contains(&j["range_auto"].as_str().unwrap()),
        "{j}"
    );
    assert!(a["sample_rows"].as_u64().unwrap() >= 1, "{a}");
    assert!(a["zero_copy_seconds"].as_f64().unwrap() > 0.0, "{a}");
    assert!(a["dma_seconds"].as_f64().unwrap() > 0.0, "{a}");
    let of_faster = a["chosen_of_faster"].as_f64().unwrap();
    assert!(of_faster > 0.0 && of_faster <= 1.0, "{a}");
    for x in m {
        assert_eq!(x["bit_exact"], true, "{x}");
        assert!(x["gb_per_s"].as_f64().unwrap() > 0.0, "{x}");
    }
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
}
