//! Argument parsing and dispatch. Each subcommand lives in its own module;
//! errors become a message on stderr and an exit code by
//! [`ibp::ErrorKind::exit_code`].

mod analyze;
mod bench;
mod clusters;
mod compress;
mod decompress;
mod device;
mod eta;
mod input;
mod inspect;
mod interrupt;
mod kv_data;
mod output;
mod plot;
mod progress_bar;
mod table;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Invariant Bit Packing: lossless compression of ML tensors, decompressed on
/// the GPU.
#[derive(Parser, Debug)]
#[command(name = "ibp", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Report invariant bits, the chosen threshold and chunk size, and the
    /// space savings per tensor. With no FILE, analyzes the embedded Cora
    /// node features (2708 × 1433 f32).
    Analyze(analyze::Args),
    /// Compress a tensor file (.safetensors, .npy, .npz, raw) into an .ibp
    /// container that restores it byte for byte.
    Compress(compress::Args),
    /// Restore the original file from an .ibp container, checked against
    /// the fingerprint the container records.
    Decompress(decompress::Args),
    /// Show what an .ibp container holds: the original file's fingerprint,
    /// each tensor group and each section.
    Inspect(inspect::Args),
    /// GPU decompression benchmarks (the paper's Figure 7 grid, gathers,
    /// device-resident decode, real tables); writes docs/results/<gpu>.md.
    /// With FILE: the same measurements on that file's tensors.
    Bench(Box<bench::Args>),
    /// Draw a results file of `ibp bench` as SVG: decoded GB/s against
    /// savings per tensor size, the ideal, the link ceilings and the real
    /// tables (what `ibp bench` writes beside its results itself).
    Plot(bench::plot::Args),
    /// Make real KV-cache tables to compress: all-MiniLM-L6-v2 run over a
    /// text (default: its model card) by ibp's own forward pass, each
    /// layer's keys and values one row per token, as .safetensors.
    KvData(kv_data::Args),
    /// Write every embedded PTX image into a folder (used by CI's ptxas check).
    #[command(hide = true)]
    Ptx {
        /// Folder to write `ibp_kernels_<arch>.ptx` into.
        #[arg(long)]
        out: std::path::PathBuf,
    },
}

/// Parse the arguments, run, and return the process exit code.
pub fn run() -> i32 {
    // Before anything starts a thread (see interrupt's notes).
    interrupt::install();
    let version = version();
    let matches = Cli::command()
        .version(version)
        .long_version(version)
        .get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Every subcommand's `--json`, by its argument id.
    let json = matches
        .subcommand()
        .and_then(|(_, m)| m.try_get_one::<bool>("json").ok().flatten().copied())
        .unwrap_or(false);
    let result = match cli.command {
        Command::Analyze(a) => analyze::run(a),
        Command::Compress(a) => compress::run(a),
        Command::Decompress(a) => decompress::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Bench(a) => bench::run(*a),
        Command::Plot(a) => bench::plot::run(a),
        Command::KvData(a) => kv_data::run(a),
        Command::Ptx { out } => write_ptx(&out),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ibp: {e}");
            if json {
                // A script reading `--json` gets JSON on failure too; the
                // message stays on stderr for people.
                println!("{}", error_json(&e));
            }
            e.kind().exit_code()
        }
    }
}

/// `{"error": {"kind": "invalid argument", "exit_code": 2, "message":
/// "..."}}`: what a failed command prints on stdout under `--json`. `kind`
/// is the words the stderr message starts with.
fn error_json(e: &ibp::Error) -> String {
    let shown = e.to_string();
    let kind = shown
        .strip_suffix(e.message())
        .and_then(|k| k.strip_suffix(": "))
        .unwrap_or("error");
    serde_json::json!({
        "error": {
            "kind": kind,
            "exit_code": e.kind().exit_code(),
            "message": e.message(),
        }
    })
    .to_string()
}

/// What `ibp --version` prints after the name: the package version, the
/// commit it was built from (`IBP_GIT_COMMIT`, set by build.rs inside the
/// repository; "commit unknown" for a build outside git, such as a
/// published crate), and whether the build has the GPU path.
///
/// Q: why leaked? A: clap (without its `string` feature) keeps `&'static
/// str`; the string is built once per process.
fn version() -> &'static str {
    let commit = option_env!("IBP_GIT_COMMIT")
        .map(|c| format!("commit {c}"))
        .unwrap_or_else(|| "commit unknown: built outside a git checkout".into());
    let gpu = if cfg!(feature = "cuda") {
        "GPU path: built in (the cuda feature)"
    } else {
        "GPU path: not built, CPU only (rebuild with --features cuda)"
    };
    Box::leak(format!("{} ({commit}); {gpu}", env!("CARGO_PKG_VERSION")).into_boxed_str())
}

#[cfg(feature = "cuda")]
fn write_ptx(out: &std::path::Path) -> ibp::Result<()> {
    std::fs::create_dir_all(out)
        .map_err(|e| ibp::Error::io(format!("creating {}", out.display()), e))?;
    for (arch, text) in ibp::gpu::EMBEDDED_PTX {
        let p = out.join(format!("ibp_kernels_{arch}.ptx"));
        std::fs::write(&p, text)
            .map_err(|e| ibp::Error::io(format!("writing {}", p.display()), e))?;
        println!("{}", p.display());
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn write_ptx(_: &std::path::Path) -> ibp::Result<()> {
    Err(ibp::Error::unsupported(
        "this ibp was built without the `cuda` feature, so it embeds no PTX",
    ))
}
