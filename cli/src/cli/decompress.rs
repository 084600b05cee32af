//! `ibp decompress`: an `.ibp` container back into the file it was made
//! from, byte for byte, checked against the fingerprint the container
//! records.

use std::path::PathBuf;

use ibp::container::RestoreOptions;
use ibp::io::{Fingerprint, InputFile};
use ibp::{Error, Result};

use super::input::{is_stdin, open_container};
use super::output::{ByteProgress, Contents, OutputFile, Unreadable, check_output};
use super::table::{emit, hex, human};

/// Arguments of `ibp decompress`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The .ibp container (`-`: read it from standard input).
    input: PathBuf,
    /// Where to write the restored file (`-`: standard output; the report
    /// then goes to stderr). Default: the input's name without `.ibp`
    /// (`model.safetensors.ibp` → `model.safetensors`), never overwritten
    /// without --force; an input whose name does not end in `.ibp` (or `-`)
    /// needs -o.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args) -> Result<()> {
    let output = match &args.output {
        Some(o) => o.clone(),
        None => default_output(&args.input)?,
    };
    let target = check_output(
        &output,
        args.force,
        Some(args.input.as_path()).filter(|p| !is_stdin(p)),
    )?;
    let file = open_container(&args.input)?;
    // A restore needs the original's fingerprint (`IbpFile::restore` refuses
    // a container without it); refuse before an output is created.
    let src = file.source().cloned().ok_or_else(|| {
        Error::corrupt(format!(
            "{} records no length and hash of the original file, so a restore could not be checked; it is damaged or was not written by ibp",
            args.input.display()
        ))
    })?;
    let total = src.fingerprint.len;
    let bar = ByteProgress::new(total, "restoring");
    let mut out = OutputFile::create(&target, args.force, Unreadable::Stream)?;
    // The restore itself checks every group's hash and, while streaming,
    // the whole file's.
    let progress = |done, _| bar.update(done);
    let restore = RestoreOptions::default().with_progress(&progress);
    file.restore(out.writer(), &restore)?;
    let written = out.finish()?;
    bar.clear();

    // Q: why hash again what the restore already hashed on the way out?
    // A: that hash saw the bytes handed to the writer; this one sees the
    // file as the operating system gives it back, after flush and fsync,
    // which is what the user will use.
    let got = match written.contents() {
        Contents::File(p) => Fingerprint::of(InputFile::open(p)?.bytes()),
        // Streamed to a pipe or device: the restore checked the hash of
        // what it wrote.
        Contents::Gone => src.fingerprint,
    };
    if got != src.fingerprint {
        return Err(Error::corrupt(format!(
            "the written file ({} bytes, xxh3 {}) differs from the original recorded in {} ({} bytes, xxh3 {}); nothing was written to {}; check the disk and try again",
            got.len,
            hex(got.xxh3),
            args.input.display(),
            src.fingerprint.len,
            hex(src.fingerprint.xxh3),
            output.display()
        )));
    }
    written.commit()?;

    let s = format!(
        "restored {} ({}) from {}\nverified: {} bytes, xxh3 {}, equal to the original {} file recorded in the container\n",
        output.display(),
        human(total),
        args.input.display(),
        got.len,
        hex(got.xxh3),
        src.format
    );
    if target.is_stdout() {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), s.as_bytes());
        Ok(())
    } else {
        emit(&s)
    }
}

/// Where `ibp decompress FILE.ibp` writes without `-o`: FILE, the name
/// `ibp compress FILE` started from.
///
/// Q: why not the name recorded in the container? A: a container records
/// the original's format, length and hash, not its name; the name is all
/// there is to go by, and a name without `.ibp` gives nothing to go by.
fn default_output(input: &std::path::Path) -> Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let stem = input
        .file_name()
        .and_then(|n| n.as_bytes().strip_suffix(b".ibp"))
        .filter(|s| !s.is_empty() && !is_stdin(input));
    match stem {
        Some(stem) => Ok(input.with_file_name(std::ffi::OsStr::from_bytes(stem))),
        None => Err(Error::invalid(format!(
            "cannot tell what to call the restored file: {} does not end in .ibp; give -o FILE (or -o - for standard output)",
            if is_stdin(input) {
                "standard input".to_string()
            } else {
                input.display().to_string()
            }
        ))),
    }
}
