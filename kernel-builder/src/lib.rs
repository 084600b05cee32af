//! Build a Rust kernel crate to PTX from a host crate's `build.rs`, with
//! rustc's own NVPTX backend: the role `cuda_builder` plays in Rust-CUDA,
//! with the same shape.
//!
//! ```no_run
//! // build.rs of a host crate whose kernels live in ./kernels
//! let ptx = ibp_kernel_builder::KernelBuilder::new("kernels")
//!     .arch("sm_80")
//!     .copy_to(std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("kernels.ptx"))
//!     .build()
//!     .unwrap_or_else(|e| panic!("{e}"));
//! println!("cargo:rerun-if-changed=kernels/src");
//! # let _ = ptx;
//! ```
//!
//! and in the host crate, `include_str!(concat!(env!("OUT_DIR"),
//! "/kernels.ptx"))` loaded with `cust::module::Module::from_ptx`.
//!
//! The kernel crate is an ordinary `#![no_std]` library crate (it may depend
//! on `ibp-kernels` for ibp's device code) with `extern "ptx-kernel"` entry
//! points and a panic handler; the builder compiles it with
//! `cargo rustc --crate-type cdylib --target nvptx64-nvidia-cuda
//! -Zbuild-std=core`, the chosen `-Ctarget-cpu`, and a scrubbed
//! environment.
//!
//! Q: why rustc's NVPTX backend and not `rustc_codegen_nvvm`?
//! A: Rust-CUDA's backend (behind `cuda_builder` and `cuda_std`) generates
//! NVVM IR for NVIDIA's libNVVM; for sm_90 it needs the LLVM 7 of CUDA's
//! older libNVVM, which no reachable registry provides, and its LLVM 19 mode
//! targets compute_100 and newer only. rustc's own `nvptx64-nvidia-cuda`
//! target needs nothing but a nightly toolchain with `rust-src` and
//! `llvm-bitcode-linker`, and its PTX is JIT-compiled by the driver for
//! any GPU from the chosen baseline on.
//!
//! Q: why a scrubbed environment?
//! A: inside a build script, cargo exports `RUSTC`, `RUSTFLAGS`,
//! `CARGO_TARGET_DIR`, `CARGO_ENCODED_RUSTFLAGS` and wrappers meant for the
//! host build; any of them leaking into the nested build breaks the nvptx
//! build or deadlocks it on the outer target directory's lock. Only what
//! cargo and rustup need to find toolchains, registries and proxies passes
//! through.

use std::env;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a kernel build failed, with what to do about it.
#[derive(Debug)]
pub struct BuildError {
    message: String,
}

impl BuildError {
    fn new(message: impl Into<String>) -> Self {
        BuildError {
            message: message.into(),
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BuildError {}

/// What the nightly toolchain needs for the nvptx build, and how to get it.
pub const INSTALL_HINT: &str = "the nvptx build needs a nightly rustc with the rust-src and \
     llvm-bitcode-linker components: `rustup toolchain install nightly --component rust-src \
     --component llvm-bitcode-linker` (ibp pins its nightly in rust-toolchain.toml; \
     `rustup toolchain install` in its repository installs it)";

/// A kernel crate to build to PTX.
#[derive(Clone, Debug)]
pub struct KernelBuilder {
    path: PathBuf,
    arch: String,
    profile: String,
    target_dir: Option<PathBuf>,
    copy_to: Option<PathBuf>,
    features: Vec<String>,
    rustc: Option<OsString>,
    max_registers: Vec<(String, u32)>,
}

impl KernelBuilder {
    /// The kernel crate at `path` (its folder, holding its `Cargo.toml`).
    pub fn new(path: impl AsRef<Path>) -> Self {
        KernelBuilder {
            path: path.as_ref().to_path_buf(),
            arch: "sm_80".into(),
            profile: "release".into(),
            target_dir: None,
            copy_to: None,
            features: Vec::new(),
            rustc: None,
            max_registers: Vec::new(),
        }
    }

    /// The PTX baseline (`-Ctarget-cpu`), `sm_80` by default: A100,
    /// H100/H200 and later run it through the driver's JIT.
    pub fn arch(mut self, arch: &str) -> Self {
        self.arch = arch.into();
        self
    }

    /// The cargo profile of the kernel crate, `release` by default.
    pub fn profile(mut self, profile: &str) -> Self {
        self.profile = profile.into();
        self
    }

    /// Where the nested build puts its files. Default: inside the build
    /// script's `OUT_DIR` when there is one, else the kernel crate's own
    /// `target/`. It must not be the calling build's target directory
    /// (cargo's lock would deadlock).
    pub fn target_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.target_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Also copy the PTX here (the usual destination: a file in `OUT_DIR`).
    pub fn copy_to(mut self, path: impl AsRef<Path>) -> Self {
        self.copy_to = Some(path.as_ref().to_path_buf());
        self
    }

    /// Cargo features of the kernel crate to enable.
    pub fn features<I, S>(mut self, features: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.features = features.into_iter().map(Into::into).collect();
        self
    }

    /// The rustc whose toolchain builds the kernels. Default: `$RUSTC` (in
    /// a build script, the outer build's compiler), else `rustc` (rustup
    /// then picks the toolchain of the current folder).
    pub fn rustc(mut self, rustc: impl Into<OsString>) -> Self {
        self.rustc = Some(rustc.into());
        self
    }

    /// Cap the registers of every entry point whose name starts with
    /// `prefix` at `n` a thread (PTX `.maxnreg`), so that more warps fit
    /// on an SM; the driver's JIT then spills what does not fit. The build
    /// fails when no entry point matches.
    ///
    /// Q: why a builder option and not an attribute on the kernel?
    /// A: rustc's NVPTX backend has no attribute for `.maxnreg`; the
    /// builder adds the directive to the PTX it hands back.
    pub fn max_registers(mut self, prefix: &str, n: u32) -> Self {
        self.max_registers.push((prefix.into(), n));
        self
    }

    /// Build, and return the PTX's path (the `copy_to` path when set).
    pub fn build(&self) -> Result<PathBuf, BuildError> {
        let manifest = self.path.join("Cargo.toml");
        if !manifest.exists() {
            return Err(BuildError::new(format!(
                "no kernel crate at {}: {} does not exist",
                self.path.display(),
                manifest.display()
            )));
        }
        let rustc = self
            .rustc
            .clone()
            .or_else(|| env::var_os("RUSTC"))
            .unwrap_or_else(|| OsString::from("rustc"));
        let sysroot = check_toolchain(&rustc)?;
        // Q: why name the toolchain's own cargo and rustc?
        // A: with the environment scrubbed, a bare `cargo`/`rustc` would be
        // whatever rustup picks for the kernel folder; naming the binaries
        // of the checked nightly toolchain removes the guesswork.
        let cargo = sysroot.join("bin").join("cargo");
        let cargo = if cargo.exists() {
            cargo.into_os_string()
        } else {
            env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"))
        };
        let target_dir = self.target_dir.clone().unwrap_or_else(|| {
            env::var_os("OUT_DIR")
                .map(|d| PathBuf::from(d).join(format!("kernels-{}", self.arch)))
                .unwrap_or_else(|| self.path.join("target"))
        });
        let mut cmd = self.nvptx_command(&cargo, &sysroot, &target_dir);
        // A build script's stdout is parsed for `cargo:` directives: keep the
        // nested cargo's output on stderr.
        cmd.stdout(std::io::stderr());
        let status = cmd
            .status()
            .map_err(|e| BuildError::new(format!("cannot run {cargo:?}: {e}")))?;
        if !status.success() {
            return Err(BuildError::new(format!(
                "the nvptx64 build of {} ({}) failed: see the output above; {INSTALL_HINT}",
                self.path.display(),
                self.arch
            )));
        }
        let dir = if self.profile == "dev" {
            "debug"
        } else {
            &self.profile
        };
        let name = crate_name(&manifest)?;
        let ptx = target_dir
            .join("nvptx64-nvidia-cuda")
            .join(dir)
            .join(format!("{}.ptx", name.replace('-', "_")));
        if !ptx.exists() {
            return Err(BuildError::new(format!(
                "the nvptx build produced no {}",
                ptx.display()
            )));
        }
        self.deliver(&ptx)
    }

    /// The nested cargo's command: the nvptx64 build of the kernel crate
    /// with `-Zbuild-std=core`, in a scrubbed environment that keeps only
    /// what finding the toolchain and the registry needs.
    fn nvptx_command(&self, cargo: &OsString, sysroot: &Path, target_dir: &Path) -> Command {
        let mut cmd = Command::new(cargo);
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
        // Q: why target-cpu through CARGO_ENCODED_RUSTFLAGS, not a profile
        // key?
        // A: -Zbuild-std compiles `core` with these flags too; a `core`
        // built for another target-cpu fails to link with an ABI-mismatch
        // error.
        cmd.env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("-Ctarget-cpu={}", self.arch),
        );
        cmd.env("RUSTC", sysroot.join("bin").join("rustc"));
        cmd.current_dir(&self.path)
            .args([
                "rustc",
                "--lib",
                "--crate-type",
                "cdylib",
                "--target",
                "nvptx64-nvidia-cuda",
            ])
            .args([
                "-Zbuild-std=core",
                "--profile",
                &self.profile,
                "--target-dir",
            ])
            .arg(target_dir);
        if !self.features.is_empty() {
            cmd.args(["--features", &self.features.join(",")]);
        }
        cmd
    }

    /// Hands back the built `ptx`: copied to `copy_to` when set, with the
    /// register caps added when there are any.
    fn deliver(&self, ptx: &Path) -> Result<PathBuf, BuildError> {
        let out = self.copy_to.clone().unwrap_or_else(|| ptx.to_path_buf());
        if self.max_registers.is_empty() {
            if out != ptx {
                std::fs::copy(ptx, &out).map_err(|e| {
                    BuildError::new(format!(
                        "cannot copy {} to {}: {e}",
                        ptx.display(),
                        out.display()
                    ))
                })?;
            }
            return Ok(out);
        }
        let text = std::fs::read_to_string(ptx)
            .map_err(|e| BuildError::new(format!("cannot read {}: {e}", ptx.display())))?;
        let capped = cap_registers(&text, &self.max_registers)?;
        std::fs::write(&out, capped)
            .map_err(|e| BuildError::new(format!("cannot write {}: {e}", out.display())))?;
        Ok(out)
    }
}

/// `ptx` with a `.maxnreg n` directive after the parameter list of every
/// entry point whose name starts with a `(prefix, n)` of `caps` (the first
/// that matches). An entry that already has one keeps it, so running this
/// twice changes nothing. Errors when a prefix matches no entry.
pub fn cap_registers(ptx: &str, caps: &[(String, u32)]) -> Result<String, BuildError> {
    let mut out = String::with_capacity(ptx.len() + 64 * caps.len());
    let mut used = vec![false; caps.len()];
    // The cap of the entry whose parameter list is open.
    let mut pending: Option<u32> = None;
    let mut lines = ptx.lines().peekable();
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        if let Some(name) = line.trim_start().strip_prefix(".visible .entry ") {
            pending = caps
                .iter()
                .position(|(p, _)| name.starts_with(p.as_str()))
                .map(|i| {
                    used[i] = true;
                    caps[i].1
                });
        } else if let Some(n) = pending
            && line.trim_start().starts_with(')')
        {
            pending = None;
            if !lines
                .peek()
                .is_some_and(|l| l.trim_start().starts_with(".maxnreg"))
            {
                out.push_str(&format!(".maxnreg {n}\n"));
            }
        }
    }
    if let Some(i) = used.iter().position(|u| !u) {
        return Err(BuildError::new(format!(
            "max_registers: no entry point starts with {:?}",
            caps[i].0
        )));
    }
    Ok(out)
}

/// The `[package] name` of a `Cargo.toml` (the one line the builder needs;
/// no TOML parser for it).
fn crate_name(manifest: &Path) -> Result<String, BuildError> {
    let text = std::fs::read_to_string(manifest)
        .map_err(|e| BuildError::new(format!("cannot read {}: {e}", manifest.display())))?;
    let mut in_package = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_package = t == "[package]";
        } else if in_package
            && let Some(rest) = t.strip_prefix("name")
            && let Some(value) = rest.trim_start().strip_prefix('=')
        {
            return Ok(value.trim().trim_matches('"').to_string());
        }
    }
    Err(BuildError::new(format!(
        "{} has no [package] name",
        manifest.display()
    )))
}

/// Check that the toolchain of `rustc` (run from the current folder, so
/// rustup applies its toolchain file: a build script runs in its package's
/// folder) can build for nvptx64: nightly, with `rust-src` and
/// `llvm-bitcode-linker`. Returns its sysroot.
pub fn check_toolchain(rustc: &OsString) -> Result<PathBuf, BuildError> {
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .ok_or_else(|| {
            BuildError::new(format!(
                "cannot run {rustc:?} to find its sysroot; {INSTALL_HINT}"
            ))
        })?;
    let nightly = Command::new(rustc)
        .arg("-vV")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("-nightly"))
        .unwrap_or(false);
    if !nightly {
        return Err(BuildError::new(format!(
            "the nvptx build needs a nightly rustc (-Zbuild-std); {INSTALL_HINT}"
        )));
    }
    let src = sysroot.join("lib/rustlib/src/rust/library/core");
    if !src.exists() {
        return Err(BuildError::new(format!(
            "component rust-src is missing ({}); {INSTALL_HINT}",
            src.display()
        )));
    }
    let host = Command::new(rustc)
        .arg("-vV")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        })
        .unwrap_or_default();
    let linker = sysroot.join(format!(
        "lib/rustlib/{host}/bin/self-contained/llvm-bitcode-linker"
    ));
    let linker_alt = sysroot.join(format!("lib/rustlib/{host}/bin/llvm-bitcode-linker"));
    if !linker.exists() && !linker_alt.exists() {
        return Err(BuildError::new(format!(
            "component llvm-bitcode-linker is missing; {INSTALL_HINT}"
        )));
    }
    Ok(sysroot)
}

#[cfg(test)]
mod tests {
    use super::cap_registers;

    const PTX: &str = ".visible .entry k_one(\n\t.param .u64 k_one_param_0\n)  // @k_one\n{\n\tret;\n}\n.visible .entry other(\n)\n{\n\tret;\n}\n";

    #[test]
    fn caps_the_matching_entries_once() {
        let caps = [("k_".to_string(), 96)];
        let once = cap_registers(PTX, &caps).unwrap();
        assert_eq!(
            once,
            ".visible .entry k_one(\n\t.param .u64 k_one_param_0\n)  // @k_one\n.maxnreg 96\n{\n\tret;\n}\n.visible .entry other(\n)\n{\n\tret;\n}\n"
        );
        assert_eq!(cap_registers(&once, &caps).unwrap(), once);
    }

    #[test]
    fn a_prefix_that_matches_nothing_is_an_error() {
        let caps = [("missing".to_string(), 64)];
        assert!(cap_registers(PTX, &caps).is_err());
    }
}
