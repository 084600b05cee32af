//! `ibp kv-data`: real KV-cache tables to compress, made by running
//! all-MiniLM-L6-v2 over a text with ibp's own tokenizer and forward pass
//! (`ibp::kv`).

use std::path::PathBuf;
use std::time::Instant;

use ibp::io::DType;
use ibp::{Error, Result};
use ibp_testdata::kv::{KvOptions, MiniLm, MiniLmFiles};

use super::output::{OutputFile, Unreadable, check_output};
use super::table::human;

/// The longest `--text` read: about three million tokens, hours of the
/// forward pass on a CPU (and 24 GB of `/dev/zero` before it was bounded).
const MAX_TEXT_BYTES: u64 = 16 << 20;

/// Arguments of `ibp kv-data`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to write the `.safetensors` file of tables `layer.{i}.key` and
    /// `layer.{i}.value`, one row per token (`-`: standard output).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// The text to run (default: the model card of all-MiniLM-L6-v2 that
    /// scripts/setup.sh fetches).
    #[arg(long, value_name = "FILE")]
    text: Option<PathBuf>,
    /// Element type of the tables: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Tokens per window, [CLS] and [SEP] included (3 to 512).
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// Folder with model.safetensors, minilm-vocab.txt and minilm-card.md
    /// (default: $IBP_DATA_DIR, else .tools/data).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args) -> Result<()> {
    let dtype = DType::parse(&args.dtype)?;
    if !matches!(dtype, DType::BF16 | DType::F16 | DType::F32) {
        return Err(Error::invalid(format!(
            "--dtype {}: KV tables are bf16, f16 or f32",
            args.dtype
        )));
    }
    let target = check_output(&args.output, args.force, args.text.as_deref())?;
    let files = MiniLmFiles::in_dir(
        &args
            .data_dir
            .clone()
            .unwrap_or_else(MiniLmFiles::default_dir),
    );
    let (text, source) = match &args.text {
        Some(p) => (
            super::input::read_text(p, MAX_TEXT_BYTES, "the text")?,
            p.display().to_string(),
        ),
        None => (files.card_text()?, files.card.display().to_string()),
    };
    let model = MiniLm::load(&files)?;
    let t0 = Instant::now();
    let cache = model.kv_cache(&text, &KvOptions::default().with_window(args.window))?;
    let secs = t0.elapsed().as_secs_f64();
    let bytes = cache.to_safetensors(&dtype)?;

    let mut out = OutputFile::create(&target, args.force, Unreadable::Stream)?;
    out.writer()
        .write_all(&bytes)
        .map_err(|e| Error::io(format!("writing {}", args.output.display()), e))?;
    out.finish()?.commit()?;
    // The report goes to stderr, so that `-o -` leaves stdout to the file.
    eprintln!(
        "{}: {} tokens of {source} in {} windows ({secs:.1} s), {} layers × key/value of {} × {} {dtype} ({})",
        args.output.display(),
        cache.tokens,
        cache.windows,
        cache.layers(),
        cache.tokens,
        cache.width,
        human(bytes.len() as u64),
    );
    Ok(())
}
