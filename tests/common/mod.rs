//! Shared test support: the GPU-or-visible-skip rule and test data lookup.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

/// Print a line that libtest's output capture does not swallow: the
/// "skipped" notices must be visible in CI logs even for passing tests.
pub fn notice(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// Whether `IBP_REQUIRE_GPU=1` turns a missing GPU into a failure.
pub fn gpu_required() -> bool {
    std::env::var("IBP_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// The GPU, or `None` after printing `skipped: no CUDA device` (a failure
/// instead when `IBP_REQUIRE_GPU=1`). Any other error fails the test.
#[cfg(feature = "cuda")]
pub fn gpu_or_skip(test: &str) -> Option<ibp::gpu::Gpu> {
    match ibp::gpu::Gpu::first() {
        Ok(g) => Some(g),
        Err(e) if ibp::gpu::is_no_device(&e) && !gpu_required() => {
            notice(&format!("{test}: skipped: no CUDA device ({e})"));
            None
        }
        Err(e) => panic!("{test}: GPU required but unusable: {e}"),
    }
}

/// A test data file: `$IBP_DATA_DIR/name`, then `.tools/data/name`, then
/// `../shared/data/name` (relative to the repository).
pub fn data_file(name: &str) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("IBP_DATA_DIR") {
        candidates.push(PathBuf::from(d).join(name));
    }
    candidates.push(root.join(".tools/data").join(name));
    // Relative to the working directory too: test binaries run on another
    // machine (the GPU host) from a copy of the repository.
    candidates.push(PathBuf::from("data").join(name));
    candidates.push(PathBuf::from(".device/data").join(name));
    candidates.push(root.join("data").join(name));
    candidates.push(root.join("../shared/data").join(name));
    candidates.into_iter().find(|p| p.is_file())
}

/// Deterministic xorshift64* generator for test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Bytes whose bits are set with probability about 2^-density (density 0
    /// gives all ones, 1 gives 1/2).
    pub fn bytes(&mut self, n: usize, density: u32) -> Vec<u8> {
        (0..n)
            .map(|_| {
                let mut b = 0xffu8;
                for _ in 0..density {
                    b &= self.next() as u8;
                }
                b
            })
            .collect()
    }
}
