//! Opening the user's input: a file (safetensors, npy, npz, raw) or the
//! embedded Cora default, plus the options shared by analyze and compress;
//! and opening a container for decompress and inspect.

use std::path::{Path, PathBuf};

use ibp::codebook::{ChunkSize, Threshold};
use ibp::container::IbpFile;
use ibp::fit::{ChunkChoice, FitOptions, Sample};
use ibp::io::{self, DType, Document, ParseOptions};
use ibp::{Error, ErrorKind, Result};

/// The Cora node features (2708 × 1433 f32, binary bag-of-words), the
/// default input when no file is given.
pub const EMBEDDED_CORA: &[u8] = include_bytes!("../../../data/cora-features.npz");

/// Input selection, shared by `analyze` and `compress`.
#[derive(clap::Args, Debug, Clone)]
pub struct InputArgs {
    /// Input file: .safetensors, .npy, .npz, or raw bytes with --dtype and
    /// --shape; `-` reads standard input. Omit to use the embedded Cora
    /// features.
    pub file: Option<PathBuf>,
    /// Only these tensors (safetensors keys or npz members; repeatable). A
    /// .npy or raw file holds one tensor, named `array`; any other name is
    /// an error.
    #[arg(long = "tensor", value_name = "NAME")]
    pub tensors: Vec<String>,
    /// Element type of a raw input file (f32, bf16, f16, i8, ...).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Shape of a raw input file, e.g. 30522,384.
    #[arg(long, value_delimiter = ',')]
    pub shape: Option<Vec<u64>>,
}

/// Codebook choice, shared by `analyze` and `compress`.
#[derive(clap::Args, Debug, Clone)]
pub struct FitArgs {
    /// Chunk size in bytes (1, 2, 4, 8) or "auto" to try all four.
    #[arg(long, default_value = "auto")]
    pub chunk: String,
    /// Use this threshold (0.5–1.0) instead of sweeping 0.70…0.95.
    #[arg(long)]
    pub threshold: Option<f64>,
    /// Fit on a sample: a fraction (0.05) or a number of tensors (10000).
    #[arg(long)]
    pub sample: Option<String>,
    /// Elements per row (tensor); by default a tensor's first axis indexes
    /// its rows.
    #[arg(long)]
    pub row_len: Option<u64>,
}

impl FitArgs {
    /// The fit options these arguments describe.
    pub fn options(&self) -> Result<FitOptions> {
        let mut o = FitOptions::default();
        if self.chunk != "auto" {
            let bad =
                || ibp::Error::invalid(format!("--chunk {}: use 1, 2, 4, 8 or auto", self.chunk));
            let c: u32 = self.chunk.parse().map_err(|_| bad())?;
            o = o.with_chunk(ChunkChoice::Fixed(
                ChunkSize::try_from(c).map_err(|_| bad())?,
            ));
        }
        if let Some(t) = self.threshold {
            o = o.with_threshold(Threshold::from_fraction(t)?);
        }
        if let Some(s) = &self.sample {
            let sample = if s.contains('.') {
                Sample::Fraction(
                    s.parse().map_err(|_| {
                        ibp::Error::invalid(format!("--sample {s}: not a fraction"))
                    })?,
                )
            } else {
                Sample::Count(
                    s.parse()
                        .map_err(|_| ibp::Error::invalid(format!("--sample {s}: not a count")))?,
                )
            };
            o = o.with_sample(sample);
        }
        Ok(o)
    }
}

/// The input's bytes: a memory-mapped file or the embedded default.
pub enum Source {
    /// A file from the command line.
    File(io::InputFile, PathBuf),
    /// The embedded Cora features.
    Embedded,
}

impl Source {
    /// Open what the arguments name.
    pub fn open(args: &InputArgs) -> Result<Self> {
        match &args.file {
            Some(p) if is_stdin(p) => Ok(Source::File(
                io::InputFile::read_from(std::io::stdin().lock(), "standard input")?,
                p.clone(),
            )),
            Some(p) => Ok(Source::File(io::InputFile::open(p)?, p.clone())),
            None => Ok(Source::Embedded),
        }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Source::File(f, _) => f.bytes(),
            Source::Embedded => EMBEDDED_CORA,
        }
    }

    /// A name for messages.
    pub fn display(&self) -> String {
        match self {
            Source::File(_, p) => p.display().to_string(),
            Source::Embedded => "embedded Cora node features (cora-features.npz)".into(),
        }
    }

    /// Parse into a document.
    pub fn parse(&self, args: &InputArgs) -> Result<Document<'_>> {
        // One npz member in memory at a time (see Document::deferred).
        let mut opts = ParseOptions::default().with_deferred_inflate(true);
        if !args.tensors.is_empty() {
            opts = opts.with_select(args.tensors.iter().cloned());
        }
        if let Some(d) = &args.dtype {
            opts = opts.with_raw(DType::parse(d)?, args.shape.clone());
        }
        let path = match self {
            Source::File(_, p) => p.as_path(),
            Source::Embedded => std::path::Path::new("cora-features.npz"),
        };
        let format = if args.dtype.is_some() {
            io::SourceFormat::Raw
        } else {
            io::SourceFormat::detect(Some(path), self.bytes()).ok_or_else(|| {
                ibp::Error::unsupported(format!(
                    "{}: not a .safetensors, .npy or .npz file; for raw bytes pass --dtype (and --shape)",
                    path.display()
                ))
            })?
        };
        io::parse(self.bytes(), format, &opts)
    }
}

/// Is `path` the command line's name for standard input?
pub fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Open the container at `path` (`-`: read from standard input), checked
/// in full, with a hint on what to do when it is damaged.
pub fn open_container(path: &Path) -> Result<IbpFile<'static>> {
    let opened = if is_stdin(path) {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut v)
            .map_err(|e| ibp::Error::io("reading standard input", e))?;
        IbpFile::from_vec(v)
    } else {
        IbpFile::open(path)
    };
    opened.map_err(|e| {
        let hint = match e.kind() {
            ErrorKind::Truncated => {
                "copy it again if a transfer was cut short, or re-create it with `ibp compress`"
            }
            ErrorKind::Corrupt => {
                "if it is an .ibp file, it is damaged: re-create it with `ibp compress`"
            }
            _ => return e,
        };
        ibp::Error::new(e.kind(), format!("{}; {hint}", e.message()))
    })
}

/// Read the text file `path` whole, refusing what `compress` refuses
/// (character and block devices: `/dev/zero` never ends) and anything over
/// `limit` bytes (a pipe can be endless too), for inputs that are text:
/// `plot`'s results file, `kv-data --text`. `what` names the input in
/// messages ("the results file").
///
/// Too large is an invalid argument; bytes that are not UTF-8 are corrupt
/// data (the input is bad, not the disk); a file that cannot be read is an
/// I/O error.
pub fn read_text(path: &Path, limit: u64, what: &str) -> Result<String> {
    use std::io::Read;
    let ctx = || format!("reading {}", path.display());
    let file = std::fs::File::open(path).map_err(|e| Error::io(ctx(), e))?;
    let meta = file.metadata().map_err(|e| Error::io(ctx(), e))?;
    let kind = meta.file_type();
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_char_device() || kind.is_block_device() {
            return Err(Error::unsupported(format!(
                "{} is a device, not a file; give {what} as a regular file or a pipe",
                path.display()
            )));
        }
    }
    if kind.is_dir() {
        return Err(Error::invalid(format!(
            "{} is a directory; give {what} as a file",
            path.display()
        )));
    }
    let too_big = || {
        Error::invalid(format!(
            "{} is larger than {}, the most ibp reads as {what}; give a smaller file",
            path.display(),
            super::table::human(limit)
        ))
    };
    if kind.is_file() && meta.len() > limit {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(ctx(), e))?;
    if bytes.len() as u64 > limit {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::corrupt(format!(
            "{} is not UTF-8 text (byte {} is not valid); give {what} as UTF-8 text",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_reads_are_bounded_and_typed() {
        let dir = std::env::temp_dir().join(format!("ibp-read-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("ok.txt");
        std::fs::write(&ok, "héllo").unwrap();
        assert_eq!(read_text(&ok, 6, "text").unwrap(), "héllo");
        let e = read_text(&ok, 5, "text").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        let bad = dir.join("bad.txt");
        std::fs::write(&bad, b"ab\xffcd").unwrap();
        let e = read_text(&bad, 100, "text").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
        assert!(e.message().contains("byte 2"), "{e}");
        let e = read_text(Path::new("/dev/zero"), 100, "text").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        let e = read_text(&dir, 100, "text").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
