//! A kernel crate outside the repository, built to PTX with the builder the
//! way a host crate's `build.rs` would: it depends on ibp's device crate
//! (`ibp-kernels`) and calls its bit arithmetic from its own kernel.

use std::path::{Path, PathBuf};
use std::process::Command;

use ibp_kernel_builder::KernelBuilder;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The user crate's manifest; `{ibp_kernels}` is the path of ibp's device
/// crate.
const MANIFEST: &str = r#"[package]
name = "user-kernels"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["rlib"]

[dependencies]
ibp-kernels = { path = "{ibp_kernels}", default-features = false }

[workspace]

[profile.release]
panic = "abort"

[profile.dev]
panic = "abort"
"#;

/// The user crate's source: kernels through ibp's bit arithmetic, its
/// device prelude and its device API.
const LIB_RS: &str = r#"#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]

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

/// The device prelude's names, as a `cuda_std` user writes them: a block
/// of 32 threads reverses 32 words through a `.shared` array.
///
/// # Safety
/// `data` holds 32 writable u32; one block of 32 threads.
#[cfg(target_arch = "nvptx64")]
#[ibp_kernels::prelude::kernel]
pub unsafe fn user_reverse(data: *mut u32) {
    use ibp_kernels::prelude::*;
    let tile = shared_array!(USER_TILE: [u32; 32]);
    let i = thread::thread_idx_x() as usize;
    // SAFETY: i < 32, inside `data` and the tile.
    unsafe { tile.set(i, *data.add(i)) };
    thread::sync_threads();
    // SAFETY: 31 - i < 32; the barrier orders the writes before.
    let v = unsafe { tile.get(31 - i) };
    if warp::vote_all(i < 32) {
        // SAFETY: i < 32.
        unsafe { *data.add(i) = v };
    }
}

/// A consumer in registers: sums a row's bytes, each lane its own share.
#[cfg(target_arch = "nvptx64")]
struct ByteSum(u32);

#[cfg(target_arch = "nvptx64")]
impl ibp_kernels::step::Sink for ByteSum {
    fn put(&mut self, _ob: u32, w: [u32; 4], n: u32) {
        let mut i = 0;
        while i < n {
            self.0 += (w[(i / 4) as usize] >> (8 * (i % 4))) & 0xff;
            i += 1;
        }
    }
}

/// One warp per row: decode row `warp` of the dataset and write the sum of
/// its bytes (a stand-in for an embedding bag) — the row never reaches
/// memory.
///
/// # Safety
/// `view` is a dataset's device view; `out` holds one u32 per row; the
/// launch gives each warp `view.workspace_bytes()` of dynamic shared memory.
#[cfg(target_arch = "nvptx64")]
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn user_row_sums(
    view: ibp_kernels::device::DatasetView,
    out: *mut u32,
) {
    use ibp_kernels::{arch, hw};
    let (warp, _) = arch::global_warp();
    let ws = arch::dyn_smem_base() + arch::warp_in_block() * view.workspace_bytes();
    let mut sum = ByteSum(0);
    // SAFETY: the caller's contract.
    let r = unsafe {
        ibp_kernels::device::decode_row(&hw::Hw, &view, &hw::GlobalBook(view.book), ws, warp, &mut sum)
    };
    let total = ibp_kernels::simt::warp_sum64(&hw::Hw, sum.0 as u64) as u32;
    if arch::lane() == 0 && r.is_ok() {
        // SAFETY: warp < rows, inside `out`.
        unsafe { *out.add(warp as usize) = total };
    }
}
"#;

/// Writes the user crate into `dir`, depending on the device crate of the
/// repository at `repo`.
fn write_user_crate(dir: &Path, repo: &Path) {
    let ibp_kernels = repo.join("gpu-kernels");
    let manifest = MANIFEST.replace("{ibp_kernels}", &ibp_kernels.display().to_string());
    write(&dir.join("Cargo.toml"), &manifest);
    write(&dir.join("src/lib.rs"), LIB_RS);
}

/// The nightly of ibp's rust-toolchain.toml (this test runs inside the
/// repository, so rustup resolves `rustc` to it).
fn nightly_rustc() -> PathBuf {
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .expect("rustc runs");
    PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim())
        .join("bin")
        .join("rustc")
}

/// The PTX holds the user's kernels for sm_80, the prelude's shared array
/// in the shared state space, and none of ibp's own kernels.
fn check_ptx(text: &str) {
    assert!(
        text.contains(".entry user_low_mask"),
        "no kernel entry in the PTX:\n{}",
        &text[..text.len().min(2000)]
    );
    assert!(text.contains(".target sm_80"), "not built for sm_80");
    assert!(
        text.contains(".entry user_row_sums"),
        "the device-API kernel is missing from the PTX"
    );
    // The prelude: `#[kernel]` gives a real entry, `shared_array!` a
    // variable in the shared state space (not global memory).
    assert!(
        text.contains(".entry user_reverse"),
        "#[kernel] gave no entry"
    );
    assert!(
        text.contains(".shared .align 16 .b8 ibp_shared_USER_TILE[128]"),
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
fn a_user_kernel_crate_builds_to_ptx_with_ibp_kernels() {
    // Q: why the variable cargo sets when it runs the test, before the one
    // compiled in?
    // A: a target folder shared by two checkouts of the repository keeps a
    // test binary built in the other one (its sources are no newer), and
    // the compiled-in path then names that checkout, which may be gone.
    let manifest =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let repo = Path::new(&manifest).parent().unwrap();
    let dir = std::env::temp_dir().join(format!("ibp-user-kernels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    write_user_crate(&dir, repo);
    let ptx = KernelBuilder::new(&dir)
        .arch("sm_80")
        .rustc(nightly_rustc())
        .target_dir(dir.join("target"))
        .copy_to(dir.join("user.ptx"))
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ptx, dir.join("user.ptx"));
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
