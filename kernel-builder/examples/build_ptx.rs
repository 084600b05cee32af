//! The builder from the command line, for scripts that build a kernel crate
//! outside any build script (`scripts/ptx.sh` builds the fused examples'
//! kernels with it):
//!
//! ```text
//! cargo run --manifest-path kernel-builder/Cargo.toml --example build_ptx -- \
//!     CRATE_DIR OUT.ptx [--arch sm_80] [--target-dir DIR]
//! ```
//!
//! It runs on the toolchain of the folder it is started from (rustup reads
//! that folder's toolchain file), which must be a nightly with `rust-src`
//! and `llvm-bitcode-linker`.

use std::process::ExitCode;

use ibp_kernel_builder::KernelBuilder;

const USAGE: &str = "usage: build_ptx CRATE_DIR OUT.ptx [--arch sm_80] [--target-dir DIR]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let (mut arch, mut target_dir) = ("sm_80".to_string(), None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.as_str() {
            "--arch" | "--target-dir" => match it.next() {
                Some(v) => v.clone(),
                None => {
                    eprintln!("build_ptx: {a} needs a value; {USAGE}");
                    return ExitCode::from(2);
                }
            },
            _ => {
                positional.push(a.clone());
                continue;
            }
        };
        if a == "--arch" {
            arch = value;
        } else {
            target_dir = Some(value);
        }
    }
    let [krate, out] = positional.as_slice() else {
        eprintln!("build_ptx: {USAGE}");
        return ExitCode::from(2);
    };
    let mut builder = KernelBuilder::new(krate).arch(&arch).copy_to(out);
    if let Some(dir) = target_dir {
        builder = builder.target_dir(dir);
    }
    match builder.build() {
        Ok(ptx) => {
            eprintln!("build_ptx: {krate} ({arch}) -> {}", ptx.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("build_ptx: {e}");
            ExitCode::FAILURE
        }
    }
}
