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
    /// then goes to stderr).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args) -> Result<()> {
    let target = check_output(
        &args.output,
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
            args.output.display()
        )));
    }
    written.commit()?;

    let s = format!(
        "restored {} ({}) from {}\nverified: {} bytes, xxh3 {}, equal to the original {} file recorded in the container\n",
        args.output.display(),
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
