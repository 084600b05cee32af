//! Compiles `gpu-kernels` to PTX with rustc's own NVPTX backend (through
//! `ibp-kernel-builder`, which user crates use the same way) and embeds it.
//!
//! Only with the `cuda` feature: the CPU-only build needs no nightly target.
//! The nested cargo gets its own target directory (sharing the outer one would
//! deadlock on cargo's build lock) and a scrubbed environment (the outer
//! build's `RUSTC`, `RUSTFLAGS` and friends are for the host target).

use std::env;
use std::path::PathBuf;
use std::process::{Command, exit};

use ibp_kernel_builder::KernelBuilder;

/// PTX baselines we build. `sm_80` runs on A100, H100/H200 and later through
/// the driver's JIT.
const ARCHES: &[&str] = &["sm_80"];

const INSTALL_HINT: &str = "run `rustup toolchain install` in the ibp repository root \
     (it reads rust-toolchain.toml: nightly-2026-10-01 with rust-src and llvm-bitcode-linker), \
     or run scripts/setup.sh, which does that and everything else the build needs";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=gpu-kernels/src");
    println!("cargo:rerun-if-changed=gpu-kernels/Cargo.toml");
    println!("cargo:rerun-if-env-changed=IBP_KERNEL_PROFILE");
    // The commit, for benchmark results files.
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output();
    if let Ok(o) = head
        && o.status.success()
    {
        let dirty = Command::new("git")
            .args(["status", "--porcelain", "--untracked-files=no"])
            .output()
            .map(|o| !o.stdout.is_empty())
            .unwrap_or(false);
        let c = String::from_utf8_lossy(&o.stdout).trim().to_string();
        println!(
            "cargo:rustc-env=IBP_GIT_COMMIT={c}{}",
            if dirty { "-dirty" } else { "" }
        );
    }
    // A new commit moves HEAD's ref; the index is left out on purpose (every
    // `git add` would rebuild the crate).
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    let kernels = manifest_dir.join("gpu-kernels");
    // OUT_DIR is <target>/<profile>/build/ibp-<hash>/out; keep the nested
    // build beside the outer one so it is reused across profiles.
    let target_root = out_dir.ancestors().nth(4).unwrap_or(&out_dir).to_path_buf();
    let profile = env::var("IBP_KERNEL_PROFILE").unwrap_or_else(|_| "release".into());
    for arch in ARCHES {
        KernelBuilder::new(&kernels)
            .arch(arch)
            .profile(&profile)
            .target_dir(target_root.join(format!("ibp-kernels-{arch}")))
            .copy_to(out_dir.join(format!("ibp_kernels_{arch}.ptx")))
            .build()
            .unwrap_or_else(|e| fail(&format!("{e}. For ibp: {INSTALL_HINT}")));
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: ibp kernel build: {msg}");
    println!("cargo:warning=ibp kernel build failed: {msg}");
    exit(1);
}
