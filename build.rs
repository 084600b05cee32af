//! Compiles `gpu-kernels` to PTX with rustc's own NVPTX backend and embeds it.
//!
//! Only with the `cuda` feature: the CPU-only build needs no nightly target.
//! The nested cargo gets its own target directory (sharing the outer one would
//! deadlock on cargo's build lock) and a scrubbed environment (the outer
//! build's `RUSTC`, `RUSTFLAGS` and friends are for the host target).

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, exit};

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
    let sysroot = check_toolchain();
    // Q: why name the toolchain's own cargo and rustc?
    // A: with the environment scrubbed, a bare `cargo`/`rustc` would be
    // whatever rustup picks for the kernel folder; naming the binaries of the
    // outer build's (checked, nightly) toolchain removes the guesswork.
    let cargo = sysroot.join("bin").join("cargo");
    let cargo = if cargo.exists() {
        cargo.into_os_string()
    } else {
        env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"))
    };
    let rustc = sysroot.join("bin").join("rustc");
    for arch in ARCHES {
        let target_dir = target_root.join(format!("ibp-kernels-{arch}"));
        let ptx = build_ptx(&cargo, &rustc, &kernels, &target_dir, arch);
        let dest = out_dir.join(format!("ibp_kernels_{arch}.ptx"));
        std::fs::copy(&ptx, &dest).unwrap_or_else(|e| {
            fail(&format!(
                "cannot copy {} to {}: {e}",
                ptx.display(),
                dest.display()
            ))
        });
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: ibp kernel build: {msg}");
    println!("cargo:warning=ibp kernel build failed: {msg}");
    exit(1);
}

/// Fail early, with the command that fixes it, when the nightly pieces that
/// the nvptx build needs are missing.
fn check_toolchain() -> PathBuf {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_else(|| {
            fail(&format!(
                "cannot run rustc to find its sysroot; {INSTALL_HINT}"
            ))
        });
    let version = Command::new(&rustc).arg("-vV").output().ok();
    let is_nightly = version
        .as_ref()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("-nightly"))
        .unwrap_or(false);
    if !is_nightly {
        fail(&format!(
            "the `cuda` feature needs a nightly rustc (-Zbuild-std); {INSTALL_HINT}"
        ));
    }
    let src = sysroot.join("lib/rustlib/src/rust/library/core");
    if !src.exists() {
        fail(&format!(
            "component rust-src is missing ({}); {INSTALL_HINT}",
            src.display()
        ));
    }
    let host = env::var("HOST").unwrap_or_default();
    let linker = sysroot.join(format!(
        "lib/rustlib/{host}/bin/self-contained/llvm-bitcode-linker"
    ));
    let linker_alt = sysroot.join(format!("lib/rustlib/{host}/bin/llvm-bitcode-linker"));
    if !linker.exists() && !linker_alt.exists() {
        fail(&format!(
            "component llvm-bitcode-linker is missing; {INSTALL_HINT}"
        ));
    }
    sysroot
}

fn build_ptx(
    cargo: &OsString,
    rustc: &Path,
    kernels: &Path,
    target_dir: &Path,
    arch: &str,
) -> PathBuf {
    let profile = env::var("IBP_KERNEL_PROFILE").unwrap_or_else(|_| "release".into());
    let mut cmd = Command::new(cargo);
    // Q: why env_clear?
    // A: the outer cargo exports RUSTC, RUSTFLAGS, CARGO_TARGET_DIR,
    // CARGO_ENCODED_RUSTFLAGS, RUSTUP_TOOLCHAIN and a wrapper or two, all meant
    // for the host build; any of them leaking in breaks the nvptx build or
    // deadlocks it on the outer target-dir lock. Only what cargo and rustup
    // need to find toolchains, registries and proxies passes through.
    cmd.env_clear();
    for (k, v) in env::vars_os() {
        let key = k.to_string_lossy();
        let keep = matches!(
            key.as_ref(),
            "PATH" | "HOME" | "RUSTUP_HOME" | "CARGO_HOME" | "TMPDIR"
        ) || key.starts_with("CARGO_NET_")
            || key.starts_with("CARGO_HTTP_")
            || key.starts_with("CARGO_REGISTRIES_")
            || key.to_ascii_lowercase().ends_with("_proxy")
            || key.starts_with("SSL_CERT");
        if keep {
            cmd.env(&k, &v);
        }
    }
    // Q: why target-cpu through CARGO_ENCODED_RUSTFLAGS, not a profile key?
    // A: -Zbuild-std compiles `core` with these flags too; a `core` built for
    // another target-cpu fails to link with an ABI-mismatch error.
    cmd.env("CARGO_ENCODED_RUSTFLAGS", format!("-Ctarget-cpu={arch}"));
    cmd.env("RUSTC", rustc);
    cmd.current_dir(kernels)
        .args([
            "rustc",
            "--lib",
            "--crate-type",
            "cdylib",
            "--target",
            "nvptx64-nvidia-cuda",
        ])
        .args(["-Zbuild-std=core", "--profile", &profile, "--target-dir"])
        .arg(target_dir);
    // Build-script stdout is parsed for `cargo:` directives; keep the nested
    // cargo's chatter on stderr.
    cmd.stdout(std::io::stderr());
    let status = cmd
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run cargo: {e}")));
    if !status.success() {
        fail(&format!(
            "nested `cargo rustc` for nvptx64 ({arch}) failed: see the output above; {INSTALL_HINT}"
        ));
    }
    let dir = if profile == "dev" {
        "debug"
    } else {
        profile.as_str()
    };
    let ptx = target_dir
        .join("nvptx64-nvidia-cuda")
        .join(dir)
        .join("ibp_kernels.ptx");
    if !ptx.exists() {
        fail(&format!("the nvptx build produced no {}", ptx.display()));
    }
    ptx
}
