//! The device-API tutorial's crate (docs/DEVICE-API.md), outside the
//! repository: its listings marked `file:…`, pasted in order into a new
//! crate beside a link to this repository, and its kernel crate built to PTX
//! with the builder the way the page's `build.rs` does. Its host program is
//! compiled as a doctest of the library (host/lib.rs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ibp_kernel_builder::KernelBuilder;

/// The tutorial whose listings this test builds.
const TUTORIAL: &str = "docs/DEVICE-API.md";

/// The files of the tutorial's crate: every one must have a listing.
const FILES: &[&str] = &[
    "rust-toolchain.toml",
    "Cargo.toml",
    "build.rs",
    "src/main.rs",
    "kernels/Cargo.toml",
    "kernels/src/lib.rs",
];

/// A kernel the tutorial does not show (it reaches into ibp's `detail`,
/// which a user crate should not), appended to its kernel crate for
/// `tests/gpu_device_api.rs`: ibp's own bit arithmetic called from a user
/// kernel.
const TEST_KERNEL: &str = r#"
/// Writes the low-`n`-bits mask through ibp's own bit arithmetic.
///
/// # Safety
/// `out` is a writable u64.
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn user_low_mask(out: *mut u64, n: u32) {
    // SAFETY: the caller's contract.
    unsafe { *out = ibp_kernels::detail::bits::low_mask(n) };
}
"#;

/// The listings of a Markdown page that name a file (a fenced block whose
/// info string holds `file:PATH`), joined by file in the page's order: what
/// a reader who pastes them in order gets.
fn listings(page: &str) -> BTreeMap<String, String> {
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    // Inside a block: `Some(file)`, where `file` is its file name, if any.
    let mut block: Option<Option<String>> = None;
    for line in page.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&block, fence) {
            (Some(_), Some(_)) => block = None,
            (Some(Some(path)), None) => {
                let text = files.entry(path.clone()).or_default();
                text.push_str(line);
                text.push('\n');
            }
            (Some(None), None) | (None, None) => {}
            (None, Some(info)) => {
                let path = info
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("file:"))
                    .map(str::to_string);
                // A file's later listings follow a blank line.
                if let Some(text) = path.as_ref().and_then(|p| files.get_mut(p)) {
                    text.push('\n');
                }
                block = Some(path);
            }
        }
    }
    files
}

/// Writes the tutorial's crate into `dir/row-sums`, beside `dir/ibp`, a
/// link to the repository at `repo` (the page's paths, `../ibp`, name it
/// so), with [`TEST_KERNEL`] appended to its kernel crate, and two changes
/// that keep ibp's GPU build out of this test (the library's doctest
/// compiles the host program against it): `[dependencies]` (ibp alone) is
/// left out of `Cargo.toml`, and `src/main.rs` is an empty `main`. The
/// toolchain file, the build dependency, `build.rs` and the kernel crate are
/// the page's. Returns the crate's folder.
fn write_tutorial_crate(dir: &Path, repo: &Path) -> PathBuf {
    let page = std::fs::read_to_string(repo.join(TUTORIAL)).unwrap();
    let mut files = listings(&page);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    let mut want = FILES.to_vec();
    want.sort_unstable();
    assert_eq!(names, want, "{TUTORIAL}: the listings' files");
    files
        .get_mut("kernels/src/lib.rs")
        .unwrap()
        .push_str(TEST_KERNEL);
    let manifest = files.get_mut("Cargo.toml").unwrap();
    *manifest = without_ibp_dependency(manifest);
    files.insert("src/main.rs".into(), "fn main() {}\n".into());
    std::fs::create_dir_all(dir).unwrap();
    std::os::unix::fs::symlink(repo, dir.join("ibp")).unwrap();
    let krate = dir.join("row-sums");
    for (name, text) in &files {
        let path = krate.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    krate
}

/// `manifest` without its `[dependencies]` table, which must hold the ibp
/// line and nothing else.
fn without_ibp_dependency(manifest: &str) -> String {
    let mut out = String::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_deps = line.trim() == "[dependencies]";
        }
        if in_deps {
            let t = line.trim();
            assert!(
                t.is_empty() || t == "[dependencies]" || t.starts_with("ibp = "),
                "{TUTORIAL}: the host crate depends on more than ibp: {line}"
            );
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    assert_ne!(
        out, manifest,
        "{TUTORIAL}: the host crate has no [dependencies]"
    );
    out
}

/// Builds the crate at `krate` as its reader would, `cargo build` in its
/// folder (rustup then applies the page's toolchain file), so that its
/// `build.rs` builds the kernel crate with the builder. Returns the PTX
/// the build script left in its `OUT_DIR`.
fn run_build_script(krate: &Path, target_dir: &Path) -> PathBuf {
    let mut cmd = Command::new("cargo");
    // Q: why drop these variables? A: they are this test's own build's
    // (the repository's toolchain, its target folder, its flags), and the
    // crate must be built as in a fresh shell in its folder.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        let ours = (k.starts_with("CARGO")
            && k != "CARGO_HOME"
            && !k.starts_with("CARGO_NET_")
            && !k.starts_with("CARGO_HTTP_")
            && !k.starts_with("CARGO_REGISTRIES_"))
            || k.starts_with("RUSTUP_TOOLCHAIN")
            || k.starts_with("RUSTC")
            || k.starts_with("RUSTDOC")
            || k == "RUSTFLAGS";
        if ours {
            cmd.env_remove(&k);
        }
    }
    let out = cmd
        .current_dir(krate)
        .args(["build", "--quiet", "--message-format=json", "--target-dir"])
        .arg(target_dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "the tutorial's crate does not build");
    // The build script's OUT_DIR, from cargo's JSON messages.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let out_dir = stdout
        .lines()
        .filter(|l| l.contains(r#""reason":"build-script-executed""#) && l.contains("row-sums"))
        .find_map(|l| l.split(r#""out_dir":""#).nth(1)?.split('"').next())
        .expect("cargo reports the build script's OUT_DIR");
    let ptx = Path::new(out_dir).join("kernels.ptx");
    assert!(
        ptx.is_file(),
        "{TUTORIAL}: the build script left no {}",
        ptx.display()
    );
    ptx
}

/// The page pins the nightly of ibp's own toolchain file.
fn check_toolchain_listing(krate: &Path, repo: &Path) {
    let channel = |p: &Path| {
        let text = std::fs::read_to_string(p).unwrap();
        text.lines()
            .find(|l| l.trim_start().starts_with("channel"))
            .map(|l| l.trim().to_string())
            .unwrap_or_else(|| panic!("{}: no channel", p.display()))
    };
    assert_eq!(
        channel(&krate.join("rust-toolchain.toml")),
        channel(&repo.join("rust-toolchain.toml")),
        "{TUTORIAL}'s rust-toolchain.toml pins another nightly than ibp's"
    );
}

/// The PTX holds the tutorial's kernels and the test's for sm_80, the prelude's shared array
/// in the shared state space, and none of ibp's own kernels.
fn check_ptx(text: &str) {
    assert!(
        text.contains(".entry row_sums("),
        "the tutorial's kernel is missing from the PTX:\n{}",
        &text[..text.len().min(2000)]
    );
    assert!(text.contains(".target sm_80"), "not built for sm_80");
    assert!(
        text.contains(".entry user_low_mask("),
        "the test's own kernel is missing from the PTX"
    );
    // The prelude: `#[kernel]` gives a real entry, `shared_array!` a
    // variable in the shared state space (not global memory).
    assert!(text.contains(".entry reverse("), "#[kernel] gave no entry");
    assert!(
        text.contains(".shared .align 16 .b8 ibp_shared_TILE[128]"),
        "shared_array! is not in .shared memory"
    );
    // The user crate asked for the device API alone: ibp's own kernels
    // stay out of its PTX.
    assert!(
        !text.contains(".entry ibp_decode"),
        "ibp's built-in kernels leaked into a user crate built without them"
    );
}

/// ptxas (scripts/setup.sh installs it; `IBP_PTXAS`) must accept the PTX
/// for the GPUs ibp targets. Nothing to check without it.
fn check_ptxas(ptx: &Path) {
    let Some(ptxas) = std::env::var_os("IBP_PTXAS").filter(|p| Path::new(p).exists()) else {
        return;
    };
    for arch in ["sm_80", "sm_90"] {
        let out = Command::new(&ptxas)
            .args(["-arch", arch, "-o", "/dev/null"])
            .arg(ptx)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ptxas {arch}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_device_api_tutorials_crate_builds_to_ptx() {
    // Q: why the variable cargo sets when it runs the test, before the one
    // compiled in?
    // A: a target folder shared by two checkouts of the repository keeps a
    // test binary built in the other one (its sources are no newer), and
    // the compiled-in path then names that checkout, which may be gone.
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let repo = Path::new(&manifest).parent().unwrap();
    let dir = std::env::temp_dir().join(format!("ibp-tutorial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let krate = write_tutorial_crate(&dir, repo);
    check_toolchain_listing(&krate, repo);
    let ptx = run_build_script(&krate, &dir.join("target"));
    check_ptx(&std::fs::read_to_string(&ptx).unwrap());
    check_ptxas(&ptx);
    // `scripts/stage-device.sh` takes this PTX to the GPU machine, where
    // `tests/gpu_device_api.rs` runs its kernels.
    if let Some(dst) = std::env::var_os("IBP_USER_PTX_OUT") {
        std::fs::copy(&ptx, &dst).unwrap_or_else(|e| panic!("copying the PTX out: {e}"));
    }
    // A folder without a kernel crate is a clear error, not a panic.
    let e = KernelBuilder::new(dir.join("nowhere")).build().unwrap_err();
    assert!(e.to_string().contains("no kernel crate"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
