//! Writing the commands' output files, and their progress bars.
//!
//! An output is written to a temporary file next to its destination and
//! renamed over it only when complete, flushed to disk and checked, so a
//! failure (corrupt input, full disk, a bug) never leaves a half-written
//! file under the name the user asked for.
//!
//! Q: why next to the destination and not in the system's temp folder?
//! A: a rename is only atomic within one file system, and /tmp is often
//! another one (or too small for a model's weights).

use std::fs::File;
use std::io::{BufWriter, IsTerminal};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ibp::{Error, Result};

/// Check, before any work is done, that `dest` may be written: it must not
/// be a directory or the input itself, and must not exist unless `force`.
pub fn check_output(dest: &Path, force: bool, input: &Path) -> Result<()> {
    if dest.is_dir() {
        return Err(Error::invalid(format!(
            "{} is a directory; give a file name with -o",
            dest.display()
        )));
    }
    if !dest.exists() {
        return Ok(());
    }
    let same = std::fs::canonicalize(dest)
        .ok()
        .zip(std::fs::canonicalize(input).ok())
        .is_some_and(|(d, i)| d == i);
    if same {
        return Err(Error::invalid(format!(
            "{} is the input file; choose another output path with -o",
            dest.display()
        )));
    }
    if !force {
        return Err(Error::invalid(format!(
            "{} already exists; pass --force to overwrite it, or choose another path with -o",
            dest.display()
        )));
    }
    Ok(())
}

/// A temporary file, deleted when dropped unless it was renamed into place.
struct TempPath {
    path: PathBuf,
    renamed: bool,
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if !self.renamed {
            // Best effort: the error that got us here matters more.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// An output file being written: a temporary file next to its destination.
/// Dropping it (on any error) deletes the temporary file.
pub struct OutputFile {
    // Declared before `tmp`, so the file is closed before it is deleted.
    writer: BufWriter<File>,
    tmp: TempPath,
    dest: PathBuf,
    force: bool,
}

impl OutputFile {
    /// Create the temporary file for `dest` (see [`check_output`]).
    pub fn create(dest: &Path, force: bool) -> Result<Self> {
        let name = dest
            .file_name()
            .ok_or_else(|| Error::invalid(format!("{}: not a file name", dest.display())))?;
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // A hidden name that says what it is, so that one left behind by a
        // killed process is easy to recognise and delete.
        let stem = format!(".{}.{}.partial", name.to_string_lossy(), std::process::id());
        let mut attempt = 0u32;
        loop {
            let path = dir.join(if attempt == 0 {
                stem.clone()
            } else {
                format!("{stem}{attempt}")
            });
            match File::options().write(true).create_new(true).open(&path) {
                Ok(f) => {
                    return Ok(OutputFile {
                        writer: BufWriter::with_capacity(1 << 20, f),
                        tmp: TempPath {
                            path,
                            renamed: false,
                        },
                        dest: dest.to_path_buf(),
                        force,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1;
                }
                Err(e) => {
                    return Err(Error::io(
                        format!("writing {} (through {})", dest.display(), path.display()),
                        e,
                    ));
                }
            }
        }
    }

    /// Where the bytes go.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        &mut self.writer
    }

    /// Flush everything to disk and close the file, so that it can be read
    /// back and checked before it is renamed into place.
    pub fn finish(self) -> Result<WrittenFile> {
        let OutputFile {
            writer,
            tmp,
            dest,
            force,
        } = self;
        let ctx = || format!("writing {}", tmp.path.display());
        let file = writer
            .into_inner()
            .map_err(|e| Error::io(ctx(), e.into_error()))?;
        // Q: why fsync? A: without it, a crash soon after the rename can
        // leave the destination naming a file whose data never reached the
        // disk.
        file.sync_all().map_err(|e| Error::io(ctx(), e))?;
        drop(file);
        Ok(WrittenFile { tmp, dest, force })
    }
}

/// A complete output file, still under its temporary name. Dropping it
/// deletes it.
pub struct WrittenFile {
    tmp: TempPath,
    dest: PathBuf,
    force: bool,
}

impl WrittenFile {
    /// The temporary file, to read back.
    pub fn path(&self) -> &Path {
        &self.tmp.path
    }

    /// Rename the file into place.
    pub fn commit(mut self) -> Result<()> {
        // The destination was checked before the work started; check again
        // so that a file created meanwhile is not silently replaced.
        if !self.force && self.dest.exists() {
            return Err(Error::invalid(format!(
                "{} appeared while ibp was writing; pass --force to overwrite it",
                self.dest.display()
            )));
        }
        std::fs::rename(&self.tmp.path, &self.dest).map_err(|e| {
            Error::io(
                format!(
                    "renaming {} to {}",
                    self.tmp.path.display(),
                    self.dest.display()
                ),
                e,
            )
        })?;
        self.tmp.renamed = true;
        Ok(())
    }
}

/// A bar of bytes done on stderr, drawn only when stderr is a terminal,
/// fed from the library's `(done, total)` progress hooks.
pub struct ByteProgress {
    bar: indicatif::ProgressBar,
    /// The furthest `done` reported so far.
    ///
    /// Q: why keep a maximum? A: the hooks are called from worker threads
    /// and may arrive out of order; adding only the increase past the
    /// maximum keeps the bar monotonic without a lock.
    max: AtomicU64,
}

impl ByteProgress {
    /// A bar for `total` bytes, labelled with `verb` ("compressing").
    pub fn new(total: u64, verb: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return ByteProgress {
                bar: indicatif::ProgressBar::hidden(),
                max: AtomicU64::new(0),
            };
        }
        let bar = indicatif::ProgressBar::new(total);
        let template =
            format!("{{spinner}} {verb} [{{wide_bar}}] {{bytes}}/{{total_bytes}} {{eta}}");
        if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        // Fitting a large tensor's codebook reports no bytes for a while;
        // the spinner shows that ibp is still at work.
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        ByteProgress {
            bar,
            max: AtomicU64::new(0),
        }
    }

    /// Record that `done` bytes are done.
    pub fn update(&self, done: u64) {
        let prev = self.max.fetch_max(done, Ordering::Relaxed);
        if done > prev {
            self.bar.inc(done - prev);
        }
    }

    /// Remove the bar from the terminal.
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for ByteProgress {
    fn drop(&mut self) {
        // On an error path too: the message must not share a line with a
        // half-drawn bar.
        self.bar.finish_and_clear();
    }
}
