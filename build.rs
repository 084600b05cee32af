//! Embeds the kernels' PTX (feature `cuda`): by default the PTX shipped in
//! `gpu-kernels/ptx/`, so that a host app builds the GPU path on stable Rust
//! with no nightly, no `rust-src` and no nested kernel build. With
//! `IBP_BUILD_KERNELS=1` it compiles `gpu-kernels` to PTX instead, with
//! rustc's own NVPTX backend on the pinned nightly (through
//! `ibp-kernel-builder`, which user crates use the same way), and also builds
//! the fused examples' kernels (`examples/fused-kernels`).
//!
//! Q: why an environment variable and not a feature?
//! A: features unify across a dependency graph: one crate anywhere asking
//! for a `build-kernels` feature would put every build of the graph on the
//! nightly. Rebuilding is a choice of the person who edits the kernels, on
//! their machine, which is what an environment variable says. The shipped
//! PTX is regenerated with `scripts/ptx.sh`, and CI checks that it is exactly
//! what the sources build (`scripts/ptx.sh --check`).
//!
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

/// The register cap (PTX `.maxnreg`) of every entry point whose name starts
/// with the prefix. The only declaration of the caps: the shipped PTX is
/// built by this script (`scripts/ptx.sh` runs it with `IBP_BUILD_KERNELS=1`).
///
/// The bulk encoders (packed, and unmeasured slots): a ceiling of 96
/// registers (ten blocks of two warps an SM). Since its 32-bit rewrite it
/// needs 72–83, and caps of 64 and 72 measured no faster. The size pass: 64
/// registers (from 78) hold 32 warps an SM, measured 5–14% faster, no spills
/// (ptxas, sm_90). The fit's evaluation: 88 (from 108: 22 warps an SM
/// instead of 18; it is latency-bound at 25% occupancy; 80 and under
/// spill). See docs/DESIGN-GPU.md and the notebook entries it links.
/// Chunks of 1 and 2 bytes take three lane words a step (86–96 registers
/// under the cap of 96). The slots kernels at 80: twelve blocks an SM
/// instead of ten, no spills for sm_80 or sm_90, measured 1–3.5% faster on
/// MiniLM bf16. The measured path's at 88 (eleven blocks): at 80 they spill
/// for sm_80 (4 and 20 bytes), at 84 `_c1` still does. A warp's registers
/// come from one of an SM's four 16384-register partitions: 80 registers
/// hold six warps a partition, 88 and 92 five. The 4- and 8-byte slots
/// kernels (a step's words joined, `encode_rows`) want 92; at 80 they do not
/// spill and measured 2–6% faster. The compaction (packed through slots): 40
/// registers (from 48, no spills) hold 50 warps an SM; it waits on memory.
const MAX_REGISTERS: &[(&str, u32)] = &[
    ("ibp_encode_c1", 88),
    ("ibp_encode_c2", 88),
    ("ibp_encode_slots_c1", 80),
    ("ibp_encode_slots_c2", 80),
    ("ibp_encode_slots_c4", 80),
    ("ibp_encode_slots_c8", 80),
    ("ibp_encode_c", 96),
    ("ibp_size", 64),
    ("ibp_fit_eval", 88),
    ("ibp_compact", 40),
];

const INSTALL_HINT: &str = "run `rustup toolchain install` in the ibp repository root \
     (it reads rust-toolchain.toml: nightly-2026-10-01 with rust-src and llvm-bitcode-linker), \
     or run scripts/setup.sh, which does that and everything else the build needs; \
     or unset IBP_BUILD_KERNELS to embed the shipped PTX (gpu-kernels/ptx/)";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=IBP_BUILD_KERNELS");
    println!("cargo:rerun-if-env-changed=IBP_KERNEL_PROFILE");
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    git_commit();
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let from_source = env::var("IBP_BUILD_KERNELS").is_ok_and(|v| v == "1");
    // The PTX the library embeds (host/gpu/mod.rs: include_str! of
    // IBP_KERNELS_PTX_SM_80, an absolute path; one variable an arch). Q: why a path in an environment
    // variable rather than a copy in OUT_DIR? A: include_str! then tracks the
    // shipped file itself (editing it rebuilds the crate), and a stable build
    // copies nothing.
    let shipped = manifest_dir.join("gpu-kernels/ptx");
    if !from_source {
        // Q: why watch the shipped files, when include_str! tracks them?
        // A: without a rerun-if-changed line naming a path, cargo reruns
        // this script whenever any file of the package changes.
        for arch in ARCHES {
            let ptx = shipped.join(format!("ibp_kernels_{arch}.ptx"));
            // Q: why a stand-in on docs.rs? A: a packaged crate may lack the
            // shipped file (cargo leaves out folders holding another
            // package, and gpu-kernels/ is one); rustdoc only needs the
            // crate to compile, and nothing loads the PTX there.
            if !ptx.is_file() && env::var_os("DOCS_RS").is_some() {
                let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
                let stand_in = out_dir.join(format!("ibp_kernels_{arch}.ptx"));
                std::fs::write(&stand_in, "// docs.rs build: no kernels\n")
                    .unwrap_or_else(|e| fail(&format!("writing {}: {e}", stand_in.display())));
                println!("cargo:rustc-env={}={}", ptx_var(arch), stand_in.display());
                continue;
            }
            if !ptx.is_file() {
                fail(&format!(
                    "{} is missing: it is generated by scripts/ptx.sh; \
                     set IBP_BUILD_KERNELS=1 to build the kernels from source instead",
                    ptx.display()
                ));
            }
            println!("cargo:rerun-if-changed={}", ptx.display());
            println!("cargo:rustc-env={}={}", ptx_var(arch), ptx.display());
        }
        // The fused examples' kernels (examples/fused_host/mod.rs includes
        // IBP_FUSED_PTX): only the shipped file's path is exported here; the
        // library builds nothing of them.
        let fused = manifest_dir.join("examples/fused-kernels/ptx/fused_kernels.ptx");
        println!("cargo:rerun-if-changed={}", fused.display());
        println!("cargo:rustc-env=IBP_FUSED_PTX={}", fused.display());
        return;
    }
    println!("cargo:rerun-if-changed=gpu-kernels/src");
    println!("cargo:rerun-if-changed=gpu-kernels/Cargo.toml");
    println!("cargo:rerun-if-changed=gpu-kernels/macros");
    println!("cargo:rerun-if-changed=examples/fused-kernels/src");
    println!("cargo:rerun-if-changed=examples/fused-kernels/Cargo.toml");
    // The locks and the toolchain file pin what the nested builds compile
    // with (the PTX changes with the nightly's LLVM).
    println!("cargo:rerun-if-changed=gpu-kernels/Cargo.lock");
    println!("cargo:rerun-if-changed=examples/fused-kernels/Cargo.lock");
    println!("cargo:rerun-if-changed=rust-toolchain.toml");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
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
    // The built PTX, also where scripts/ptx.sh picks it up (it does not
    // know OUT_DIR): <target>/ibp-ptx/.
    let picked = target_root.join("ibp-ptx");
    std::fs::create_dir_all(&picked)
        .unwrap_or_else(|e| fail(&format!("creating {}: {e}", picked.display())));
    let profile = env::var("IBP_KERNEL_PROFILE").unwrap_or_else(|_| "release".into());
    for arch in ARCHES {
        let name = format!("ibp_kernels_{arch}.ptx");
        let mut builder = KernelBuilder::new(&kernels)
            .arch(arch)
            .profile(&profile)
            .target_dir(target_root.join(format!("ibp-kernels-{arch}")))
            .copy_to(out_dir.join(&name));
        for (prefix, n) in MAX_REGISTERS {
            builder = builder.max_registers(prefix, *n);
        }
        let ptx = builder
            .build()
            .unwrap_or_else(|e| fail(&format!("{e}. For ibp: {INSTALL_HINT}")));
        copy(&ptx, &picked.join(&name));
        println!("cargo:rustc-env={}={}", ptx_var(arch), ptx.display());
    }
    // The fused examples' kernel crate (examples/fused-kernels), built the
    // way a user's build.rs builds theirs, only in this mode: the examples
    // and the GPU tests that launch them (through examples/fused_host)
    // embed what is built here. Q: why here and not in a build script of
    // the examples? A: cargo examples have no build script of their own; the
    // package's is theirs. Q: why the same target folder? A: `core` (built
    // by -Zbuild-std with the same flags) is reused.
    let fused = KernelBuilder::new(manifest_dir.join("examples/fused-kernels"))
        .arch(ARCHES[0])
        .profile(&profile)
        .target_dir(target_root.join(format!("ibp-kernels-{}", ARCHES[0])))
        .copy_to(out_dir.join("fused_kernels.ptx"))
        .build()
        .unwrap_or_else(|e| fail(&format!("{e}. For ibp: {INSTALL_HINT}")));
    copy(&fused, &picked.join("fused_kernels.ptx"));
    println!("cargo:rustc-env=IBP_FUSED_PTX={}", fused.display());
}

/// The variable naming the embedded PTX of `arch` (`IBP_KERNELS_PTX_SM_80`).
fn ptx_var(arch: &str) -> String {
    format!("IBP_KERNELS_PTX_{}", arch.to_uppercase())
}

/// Copy a built PTX file, or fail the build.
fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap_or_else(|e| {
        fail(&format!(
            "copying {} to {}: {e}",
            from.display(),
            to.display()
        ))
    });
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
