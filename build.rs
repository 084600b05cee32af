//! Compiles `gpu-kernels` to PTX with rustc's own NVPTX backend (through
//! `ibp-kernel-builder`, which user crates use the same way) and embeds it.
//!
//! Only with the `cuda` feature: the CPU-only build needs no nightly target.
//! The nested cargo gets its own target directory (sharing the outer one would
//! deadlock on cargo's build lock) and a scrubbed environment (the outer
//! build's `RUSTC`, `RUSTFLAGS` and friends are for the host target).

use std::env;
use std::path::{Path, PathBuf};
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
    println!("cargo:rerun-if-changed=gpu-kernels/macros");
    println!("cargo:rerun-if-changed=examples/fused-kernels/src");
    println!("cargo:rerun-if-changed=examples/fused-kernels/Cargo.toml");
    println!("cargo:rerun-if-env-changed=IBP_KERNEL_PROFILE");
    git_commit();
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    // Q: why no kernels on docs.rs? A: its builders have neither the pinned
    // nightly's NVPTX pieces nor network access for a nested build, and
    // rustdoc only needs the crate to compile: the embedded PTX is a comment
    // there (loading it would fail, and nothing loads it).
    if env::var_os("DOCS_RS").is_some() {
        for name in ["ibp_kernels_sm_80.ptx", "fused_kernels.ptx"] {
            let path = out_dir.join(name);
            std::fs::write(&path, "// docs.rs build: no kernels\n")
                .unwrap_or_else(|e| fail(&format!("writing {}: {e}", path.display())));
        }
        return;
    }
    let kernels = manifest_dir.join("gpu-kernels");
    // Keep the nested build in the outer target folder, beside the
    // profiles, so that every profile (dev, test, release) reuses one PTX
    // build. Q: why look for CACHEDIR.TAG instead of counting folders up
    // from OUT_DIR? A: cargo's layout of OUT_DIR changed (<profile>/build/
    // ibp-<hash>/out became <profile>/build/ibp/<hash>/out), and a fixed
    // count then landed inside one profile's folder, so each profile
    // compiled the kernels again; cargo marks its target folder's root
    // with that file.
    let target_root = out_dir
        .ancestors()
        .skip(1)
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .unwrap_or(&out_dir)
        .to_path_buf();
    let profile = env::var("IBP_KERNEL_PROFILE").unwrap_or_else(|_| "release".into());
    for arch in ARCHES {
        KernelBuilder::new(&kernels)
            .arch(arch)
            .profile(&profile)
            .target_dir(target_root.join(format!("ibp-kernels-{arch}")))
            .copy_to(out_dir.join(format!("ibp_kernels_{arch}.ptx")))
            // The bulk encoders (packed, and unmeasured slots): a ceiling
            // of 96 registers (ten blocks of two
            // warps an SM). Since its 32-bit rewrite it needs 72–83, and
            // caps of 64 and 72 measured no faster. The size pass: 64
            // registers (from 78) hold 32 warps an SM, measured 5–14%
            // faster, no spills (ptxas, sm_90). The fit's evaluation: 88
            // (from 108: 22 warps an SM instead of 18; it is latency-bound
            // at 25% occupancy; 80 and under spill). See docs/DESIGN-GPU.md and the notebook entries it links.
            // Chunks of 1 and 2 bytes take three lane words a step (86–96
            // registers under the cap of 96). The slots kernels at 80: twelve
            // blocks an SM instead of ten, no spills for sm_80 or sm_90,
            // measured 1–3.5% faster on MiniLM bf16. The measured path's
            // at 88 (eleven blocks): at 80 they spill for sm_80 (4 and 20
            // bytes), at 84 `_c1` still does. A warp's registers come from
            // one of an SM's four 16384-register partitions: 80 registers
            // hold six warps a partition, 88 and 92 five. The 4- and 8-byte
            // slots kernels (a step's words joined, `encode_rows`) want 92;
            // at 80 they do not spill and measured 2–6% faster.
            .max_registers("ibp_encode_c1", 88)
            .max_registers("ibp_encode_c2", 88)
            .max_registers("ibp_encode_slots_c1", 80)
            .max_registers("ibp_encode_slots_c2", 80)
            .max_registers("ibp_encode_slots_c4", 80)
            .max_registers("ibp_encode_slots_c8", 80)
            .max_registers("ibp_encode_c", 96)
            .max_registers("ibp_size", 64)
            .max_registers("ibp_fit_eval", 88)
            // The compaction (packed through slots): 40 registers (from
            // 48, no spills) hold 50 warps an SM; it waits on memory.
            .max_registers("ibp_compact", 40)
            .build()
            .unwrap_or_else(|e| fail(&format!("{e}. For ibp: {INSTALL_HINT}")));
    }
    // The fused examples' kernel crate (examples/fused-kernels), built the
    // way a user's build.rs builds theirs; the examples and
    // tests/gpu_device_api.rs embed it. Q: why here and not in a build
    // script of the examples? A: cargo examples have no build script of
    // their own; the package's is theirs. Q: why the same target folder?
    // A: `core` (built by -Zbuild-std with the same flags) is reused.
    KernelBuilder::new(manifest_dir.join("examples/fused-kernels"))
        .arch(ARCHES[0])
        .profile(&profile)
        .target_dir(target_root.join(format!("ibp-kernels-{}", ARCHES[0])))
        .copy_to(out_dir.join("fused_kernels.ptx"))
        .build()
        .unwrap_or_else(|e| fail(&format!("{e}. For ibp: {INSTALL_HINT}")));
}

/// The commit, for benchmark results files (`IBP_GIT_COMMIT`), and the git
/// files to watch so that a new commit rebuilds the crate.
///
/// Q: why ask git for the paths instead of naming `.git/HEAD`?
/// A: in a crate copy without git (a vendored or downloaded crate) a watched
/// path that does not exist makes cargo rerun this script, and rebuild the
/// crate, on every build; and in a git worktree `.git` is a file, so
/// `.git/HEAD` never exists there either. `git rev-parse --git-path` names
/// the real files, and only those that exist are watched.
fn git_commit() {
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    // A crate copy inside another project's repository (vendored) must not
    // report that project's commit as its own.
    let top = git(&["rev-parse", "--show-toplevel"]).map(PathBuf::from);
    let ours = match (top, manifest_dir) {
        (Some(t), Some(m)) => t
            .canonicalize()
            .ok()
            .is_some_and(|t| m.canonicalize().ok() == Some(t)),
        _ => false,
    };
    if !ours {
        return;
    }
    if let Some(c) = git(&["rev-parse", "--short=12", "HEAD"]) {
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        println!(
            "cargo:rustc-env=IBP_GIT_COMMIT={c}{}",
            if dirty { "-dirty" } else { "" }
        );
    }
    // A new commit moves HEAD's ref (or HEAD itself when detached); the
    // index is left out on purpose (every `git add` would rebuild the crate).
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    for name in watch {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

/// `git ARGS` in the manifest directory: its trimmed stdout, or `None` when
/// git is missing or fails (no repository).
fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn fail(msg: &str) -> ! {
    eprintln!("error: ibp kernel build: {msg}");
    println!("cargo:warning=ibp kernel build failed: {msg}");
    exit(1);
}
