//! The harness of the README's "Guarantees" tests (`cli_guarantees.rs`,
//! `cli_guarantees_memory.rs`): the real `ibp` binary in a scratch folder,
//! exit codes, child processes to interrupt, and test data.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

#[macro_use]
#[path = "../cli_base/mod.rs"]
mod base;
pub use base::*;

/// Run `ibp args` and insist on success.
pub fn ok(args: &[OsString]) -> Output {
    let o = ibp(args);
    assert!(
        o.status.success(),
        "ibp {args:?} failed ({}):\n{}",
        o.status,
        text(&o.stderr)
    );
    o
}

/// f32 features with invariant high bits: `rows × cols`, deterministic.
pub fn features(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = crate::common::Rng(seed | 1);
    (0..rows * cols)
        .flat_map(|i| {
            let r = rng.next();
            let v = if r.is_multiple_of(8) {
                0.0
            } else {
                (1.0 + (r >> 40) as f32 / (1u64 << 24) as f32) * (1 + i % cols % 3) as f32
            };
            v.to_le_bytes()
        })
        .collect()
}

/// Compress `input` (raw f32 of `cols` columns) to `out`: the arguments.
pub fn compress_raw(input: &Path, cols: usize, out: &Path) -> Vec<OsString> {
    let bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0) as usize;
    let shape = format!("{},{cols}", bytes / 4 / cols);
    args![
        "compress", input, "--dtype", "f32", "--shape", &shape, "-o", out
    ]
    .to_vec()
}

/// Wait until `cond` holds, at most `secs` seconds.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Wait for `child` to end, killing it after `secs` seconds.
pub fn finish(mut child: Child, secs: u64) -> Output {
    if !wait_for(secs, || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
        panic!("ibp did not finish within {secs} s");
    }
    child.wait_with_output().unwrap()
}

pub fn restores_to(dir: &Scratch, container: &Path, want: &[u8]) {
    let back = dir.path("restored");
    let _ = std::fs::remove_file(&back);
    ok(&args!["decompress", container, "-o", &back]);
    let got = std::fs::read(&back).unwrap();
    assert!(
        got == want,
        "restored {} bytes, wanted {}",
        got.len(),
        want.len()
    );
}

// Finding 1: inputs that are not regular files.
