//! Writing the commands' output files, and their progress bars.
//!
//! A regular output file is written to a temporary file next to its
//! destination and renamed over it only when complete, flushed to disk and
//! checked, so a failure (corrupt input, full disk, a bug, Ctrl-C) never
//! leaves a half-written file under the name the user asked for.
//!
//! - A symlink is resolved first: the file it points to is replaced, and
//!   the link stays.
//! - Character devices (`/dev/null`), FIFOs and `-` (standard output) are
//!   written directly, never replaced; nothing that is not a regular file is
//!   ever unlinked or renamed over.
//! - Without `--force` the final name is created exclusively (`renameat2`
//!   with `RENAME_NOREPLACE`, or a hard link), so of two runs racing for one
//!   name exactly one succeeds.
//! - The temporary file is `.NAME.ibp-HOST-PID.partial`. It is removed on
//!   any error and on SIGINT, SIGTERM and SIGHUP (see [`super::interrupt`]);
//!   one left by a killed run on this machine (its PID no longer running) is
//!   removed by the next run that writes NAME.
//!
//! Q: why next to the destination and not in the system's temp folder?
//! A: a rename is only atomic within one file system, and /tmp is often
//! another one (or too small for a model's weights).
//!
//! An output that cannot be read back (standard output, a device, a FIFO)
//! and must be checked before anything reaches it ([`Unreadable::Spool`],
//! `compress`) is spooled to a file in the system's temp folder
//! (`ibp-spool-PID-N`, removed like a partial file), then copied to the
//! stream once checked: memory stays bounded whatever the output's size.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use ibp::{Error, Result};

use super::interrupt;
pub use super::progress_bar::ByteProgress;

/// Where an output goes, decided before any work is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `-`: standard output.
    Stdout,
    /// A character device or FIFO, written in place.
    Direct(PathBuf),
    /// A regular file (or a name to create), symlinks resolved: written
    /// through a temporary file and renamed.
    File(PathBuf),
}

impl Target {
    /// Is the output standard output (so reports must go to stderr)?
    pub fn is_stdout(&self) -> bool {
        *self == Target::Stdout
    }
}

/// Symlinks followed before giving up (Linux's own limit is 40).
const MAX_SYMLINKS: usize = 40;

/// `path` with its last component's symlinks followed, even when the final
/// target does not exist yet (a dangling link names the file to create);
/// `None` when the chain reaches a descriptor link ([`is_descriptor_path`]),
/// whose target is no path at all.
fn resolve_symlinks(path: &Path) -> Result<Option<PathBuf>> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_SYMLINKS {
        if is_descriptor_path(&p) {
            return Ok(None);
        }
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)
                    .map_err(|e| Error::io(format!("reading the link {}", p.display()), e))?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(Some(p)),
        }
    }
    Err(Error::invalid(format!(
        "{}: more than {MAX_SYMLINKS} symbolic links in a row; give the real path with -o",
        path.display()
    )))
}

/// `/dev/stdout` and the other names of this process's standard output:
/// written to file descriptor 1 itself, which keeps what the shell set up
/// (a pipe, `>` or `>>` to a file).
fn is_own_stdout(path: &Path) -> bool {
    ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"]
        .iter()
        .any(|p| path == Path::new(p))
}

/// Is `meta` the file (pipe, FIFO or regular file) this process's standard
/// output is open on? Then the output is written to descriptor 1 and the
/// report goes to stderr, instead of the two mixing. (Character devices are
/// left out: `-o /dev/null` with stdout on `/dev/null` too keeps its report
/// where it was.)
fn is_stdout(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    if std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type()) {
        return false;
    }
    // SAFETY: fstat writes into the zeroed struct we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; descriptor 1 may be closed, which fstat reports.
    let ok = unsafe { libc::fstat(1, &mut st) } == 0;
    ok && st.st_dev as u64 == meta.dev() && st.st_ino as u64 == meta.ino()
}

/// Is `path` one of the kernel's per-process descriptor links (`/dev/fd/N`,
/// `/dev/stdin`, `/dev/stdout`, `/dev/stderr`, anything under `/proc`)?
fn is_descriptor_path(path: &Path) -> bool {
    path.starts_with("/proc")
        || path.starts_with("/dev/fd")
        || ["/dev/stdin", "/dev/stdout", "/dev/stderr"]
            .iter()
            .any(|p| path == Path::new(p))
}

#[cfg(unix)]
fn is_stream_node(kind: &std::fs::FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    kind.is_char_device() || kind.is_fifo()
}

#[cfg(not(unix))]
fn is_stream_node(_: &std::fs::FileType) -> bool {
    false
}

/// Check, before any work is done, that `dest` may be written, and decide
/// how: `-` is standard output; character devices and FIFOs are written
/// directly; otherwise (after following symlinks) it must not be a
/// directory, another kind of special file, or the input itself, and must
/// not exist unless `force`.
pub fn check_output(dest: &Path, force: bool, input: Option<&Path>) -> Result<Target> {
    if dest.as_os_str() == "-" || is_own_stdout(dest) {
        // Refused before any work is done (and checked again when opened).
        stdout_is_open()?;
        return Ok(Target::Stdout);
    }
    let Some(real) = resolve_symlinks(dest)? else {
        // `/dev/fd/N`, `/proc/PID/fd/N` (or a link to one): a link to an
        // open file description (often `pipe:[1234]`, which names no
        // path), not a file to replace; opening it opens what it stands
        // for.
        return match std::fs::metadata(dest) {
            Ok(m) if m.is_dir() => Err(Error::invalid(format!(
                "{} is a directory; give a file name with -o",
                dest.display()
            ))),
            Ok(m) if is_stdout(&m) => Ok(Target::Stdout),
            Ok(_) => Ok(Target::Direct(dest.to_path_buf())),
            Err(e) => Err(Error::io(format!("checking {}", dest.display()), e)),
        };
    };
    let meta = match std::fs::metadata(&real) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::File(real)),
        Err(e) => return Err(Error::io(format!("checking {}", dest.display()), e)),
    };
    let kind = meta.file_type();
    if kind.is_dir() {
        return Err(Error::invalid(format!(
            "{} is a directory; give a file name with -o",
            dest.display()
        )));
    }
    if is_stdout(&meta) {
        return Ok(Target::Stdout);
    }
    if is_stream_node(&kind) {
        return Ok(Target::Direct(real));
    }
    if !kind.is_file() {
        return Err(Error::invalid(format!(
            "{} is not a regular file, character device or FIFO; ibp does not replace it; choose another path with -o",
            dest.display()
        )));
    }
    let same = input.is_some_and(|input| {
        std::fs::canonicalize(&real)
            .ok()
            .zip(std::fs::canonicalize(input).ok())
            .is_some_and(|(d, i)| d == i)
    });
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
    Ok(Target::File(real))
}

/// A temporary file, deleted when dropped unless it was renamed into place.
struct TempPath {
    path: PathBuf,
    renamed: bool,
    /// Removes the file on SIGINT/SIGTERM/SIGHUP/SIGBUS while it lives.
    _registration: interrupt::Registration,
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if !self.renamed {
            // Best effort: the error that got us here matters more.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What the writer of [`OutputFile`] must do with outputs that cannot be
/// read back (standard output, devices, FIFOs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// Spool the bytes to a temporary file until they are checked, then
    /// copy them to the stream (compress: nothing unchecked reaches the
    /// output, and memory stays bounded).
    Spool,
    /// Write them through as they come (decompress: the restore checks the
    /// original's hash while streaming, and reports a mismatch as an error).
    Stream,
}

/// An output being written. Dropping it (on any error) deletes the
/// temporary file.
pub struct OutputFile {
    inner: Pending,
}

enum Pending {
    Temp {
        // Declared before `tmp`, so the file is closed before it is deleted.
        writer: BufWriter<File>,
        tmp: TempPath,
        dest: PathBuf,
        force: bool,
    },
    Spool {
        // Declared before `tmp`, so the file is closed before it is deleted.
        writer: SpoolWriter,
        tmp: TempPath,
        target: Target,
    },
    Stream {
        writer: BufWriter<Box<dyn Write>>,
    },
}

/// Open a character device or FIFO, or take standard output, for writing
/// in place (never created, truncated or replaced).
fn open_direct(target: &Target) -> Result<Box<dyn Write>> {
    match target {
        Target::Stdout => {
            stdout_is_open()?;
            Ok(Box::new(std::io::stdout().lock()))
        }
        Target::Direct(p) => File::options()
            .write(true)
            .open(p)
            .map(|f| Box::new(f) as Box<dyn Write>)
            .map_err(|e| Error::io(format!("opening {}", p.display()), e)),
        Target::File(p) => Err(Error::invalid(format!(
            "{} is a regular file, not a stream",
            p.display()
        ))),
    }
}

/// Whether descriptor 1 was closed when the process started, recorded
/// before Rust's runtime starts.
///
/// Q: why before the runtime? A: the runtime opens `/dev/null` on any of
/// descriptors 0–2 that is closed, before `main`; after that a closed
/// standard output looks like `>/dev/null`, and the output vanished while
/// ibp reported success.
static STDOUT_CLOSED_AT_START: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Records [`STDOUT_CLOSED_AT_START`]; run by the C runtime from
/// `.init_array`, before Rust's own start-up.
#[cfg(target_os = "linux")]
extern "C" fn record_stdout_at_start() {
    // SAFETY: F_GETFD only reads the descriptor's flags; no memory is
    // passed, and nothing else runs yet.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
        STDOUT_CLOSED_AT_START.store(true, Ordering::Relaxed);
    }
}

// SAFETY: `.init_array` holds pointers to `extern "C" fn()` that the C
// runtime calls once before `main`; this one only makes one system call
// and stores an atomic.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static RECORD_STDOUT_AT_START: extern "C" fn() = record_stdout_at_start;

/// Fail unless descriptor 1 is open (and was when the process started).
///
/// Q: why ask? A: Rust's standard output treats a closed descriptor 1
/// (`>&-`) as a sink that accepts everything, so `decompress -o - >&-`
/// wrote nothing, exited 0 and said "verified".
fn stdout_is_open() -> Result<()> {
    // SAFETY: F_GETFD only reads the descriptor's flags; no memory is
    // passed.
    let closed_now = unsafe { libc::fcntl(1, libc::F_GETFD) } == -1;
    if closed_now || STDOUT_CLOSED_AT_START.load(Ordering::Relaxed) {
        return Err(Error::io(
            "writing to standard output (it is closed; redirect it to a file or pipe, or give -o FILE)",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The writer of a spool: a write that fails (a full disk) names the
/// folder, which is `$TMPDIR`'s, and what to do.
struct SpoolWriter {
    inner: BufWriter<File>,
    dir: PathBuf,
}

impl SpoolWriter {
    fn explain(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(
            e.kind(),
            format!(
                "{e}; the output is spooled in {} until it is checked: set TMPDIR to a folder with room for the container",
                self.dir.display()
            ),
        )
    }
}

impl Write for SpoolWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.explain(e))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().map_err(|e| self.explain(e))
    }
}

/// An output spooled to the system's temp folder for `target`, a stream.
fn spool(target: &Target) -> Result<OutputFile> {
    let dir = std::env::temp_dir();
    let mut attempt = 0u32;
    loop {
        let path = dir.join(format!("ibp-spool-{}-{attempt}", std::process::id()));
        // Registered before it exists: see `OutputFile::create`.
        let registration = interrupt::register(&path);
        match File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                return Ok(OutputFile {
                    inner: Pending::Spool {
                        writer: SpoolWriter {
                            inner: BufWriter::with_capacity(1 << 20, f),
                            dir: dir.clone(),
                        },
                        tmp: TempPath {
                            path,
                            renamed: false,
                            _registration: registration,
                        },
                        target: target.clone(),
                    },
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
            }
            Err(e) => {
                return Err(Error::io(
                    format!(
                        "spooling the output in {} (set TMPDIR to a folder with room for the container)",
                        dir.display()
                    ),
                    e,
                ));
            }
        }
    }
}

impl OutputFile {
    /// Start writing to `target` (see [`check_output`]).
    pub fn create(target: &Target, force: bool, unreadable: Unreadable) -> Result<Self> {
        let dest = match target {
            Target::File(dest) => dest,
            _ if unreadable == Unreadable::Spool => return spool(target),
            _ => {
                return Ok(OutputFile {
                    inner: Pending::Stream {
                        writer: BufWriter::with_capacity(1 << 20, open_direct(target)?),
                    },
                });
            }
        };
        let name = dest
            .file_name()
            .ok_or_else(|| Error::invalid(format!("{}: not a file name", dest.display())))?;
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        remove_stale_partials(&dir, &name.to_string_lossy());
        let stem = partial_name(&name.to_string_lossy(), &this_host(), std::process::id());
        let mut attempt = 0u32;
        loop {
            let path = dir.join(if attempt == 0 {
                stem.clone()
            } else {
                format!("{stem}{attempt}")
            });
            // Q: why register the file for removal before creating it?
            // A: a signal that came between the creation and the
            // registration left the file behind (seen in CI: SIGINT sent
            // as soon as the file appeared). Registered first, a signal
            // before the creation removes nothing, one after removes it.
            // A name that exists already (our host and pid: a dead
            // process's leftover) is unregistered before the next attempt.
            let registration = interrupt::register(&path);
            match File::options().write(true).create_new(true).open(&path) {
                Ok(f) => {
                    return Ok(OutputFile {
                        inner: Pending::Temp {
                            writer: BufWriter::with_capacity(1 << 20, f),
                            tmp: TempPath {
                                path,
                                renamed: false,
                                _registration: registration,
                            },
                            dest: dest.clone(),
                            force,
                        },
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
    pub fn writer(&mut self) -> &mut dyn Write {
        match &mut self.inner {
            Pending::Temp { writer, .. } => writer,
            Pending::Spool { writer, .. } => writer,
            Pending::Stream { writer } => writer,
        }
    }

    /// Flush everything (to disk, for a file) and close it, so that it can
    /// be read back and checked before it takes the destination's name.
    pub fn finish(self) -> Result<WrittenFile> {
        match self.inner {
            Pending::Temp {
                writer,
                tmp,
                dest,
                force,
            } => {
                let ctx = || format!("writing {}", tmp.path.display());
                let file = writer
                    .into_inner()
                    .map_err(|e| Error::io(ctx(), e.into_error()))?;
                // Q: why fsync? A: without it, a crash soon after the rename
                // can leave the destination naming a file whose data never
                // reached the disk.
                file.sync_all().map_err(|e| Error::io(ctx(), e))?;
                drop(file);
                Ok(WrittenFile {
                    inner: Done::Temp { tmp, dest, force },
                })
            }
            Pending::Spool {
                mut writer,
                tmp,
                target,
            } => {
                writer
                    .flush()
                    .map_err(|e| Error::io(format!("writing {}", tmp.path.display()), e))?;
                drop(writer);
                Ok(WrittenFile {
                    inner: Done::Spool { tmp, target },
                })
            }
            Pending::Stream { mut writer } => {
                writer
                    .flush()
                    .map_err(|e| Error::io("writing the output", e))?;
                Ok(WrittenFile {
                    inner: Done::Streamed,
                })
            }
        }
    }
}

/// The temporary name of an output called `name` written by process `pid`
/// on machine `host` ([`this_host`]).
fn partial_name(name: &str, host: &str, pid: u32) -> String {
    format!(".{}.ibp-{host}-{pid}.partial", partial_stem(name))
}

/// `name` as temporary names show it: whole, or for a name too long to
/// take the additions within a file system's 255 bytes, its first 100
/// bytes and a hash of the rest.
fn partial_stem(name: &str) -> std::borrow::Cow<'_, str> {
    const LONGEST: usize = 150;
    if name.len() <= LONGEST {
        return name.into();
    }
    let mut cut = 100;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let hash = xxhash_rust::xxh3::xxh3_64(name.as_bytes());
    format!("{}~{hash:016x}", &name[..cut]).into()
}

/// This machine's name as it goes into temporary names: at most 24 of its
/// letters, digits, dots and underscores (`-` separates the PID).
///
/// Q: why the machine's name at all? A: a PID means nothing on another
/// machine (an NFS share) or in another PID namespace (a container with its
/// own hostname); a later run must only remove what a run on its own
/// machine left, where it can tell that the process is gone.
fn this_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let host: String = buf[..end]
        .iter()
        .map(|&b| b as char)
        .filter(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
        .take(24)
        .collect();
    if ok && !host.is_empty() {
        host
    } else {
        "localhost".into()
    }
}

/// Who wrote `file`, if it is a temporary file of an output called `name`:
/// `(Some(host), pid)` for `.NAME.ibp-HOST-PID.partial`, `(None, pid)` for
/// `.NAME.PID.partial` as ibp 0.1 named it (on this machine, as far as
/// anyone can tell), either with a retry number appended.
fn partial_owner<'f>(file: &'f str, name: &str) -> Option<(Option<&'f str>, u32)> {
    let rest = file
        .strip_prefix('.')?
        .strip_prefix(&*partial_stem(name))?
        .strip_prefix('.')?;
    let (who, tail) = rest.split_once(".partial")?;
    if !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (host, pid) = match who.strip_prefix("ibp-") {
        Some(hp) => {
            let (host, pid) = hp.rsplit_once('-')?;
            (Some(host), pid)
        }
        None => (None, who),
    };
    let pid = pid.parse().ok().filter(|&p| p > 0)?;
    Some((host, pid))
}

/// Is process `pid` running (or unknowable, which counts as running)?
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Remove the temporary files a killed run left for the output `name` in
/// `dir`: regular files named as [`partial_name`] by this machine whose
/// process is gone.
/// Best effort: a file that cannot be removed is left for the user.
fn remove_stale_partials(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let host = this_host();
    for e in entries.flatten() {
        let file = e.file_name();
        let file = file.to_string_lossy();
        let Some((owner, pid)) = partial_owner(&file, name) else {
            continue;
        };
        if owner.is_some_and(|h| h != host) {
            continue;
        }
        let regular = e.file_type().is_ok_and(|t| t.is_file());
        if regular && !process_alive(pid) && std::fs::remove_file(e.path()).is_ok() {
            eprintln!(
                "ibp: removed {}, left by an earlier run that was stopped",
                e.path().display()
            );
        }
    }
}

/// A complete output, not yet under its final name (a file), not yet
/// written (standard output or a device under [`Unreadable::Spool`]), or
/// already written through ([`Unreadable::Stream`]). Dropping it deletes a
/// temporary file.
pub struct WrittenFile {
    inner: Done,
}

enum Done {
    Temp {
        tmp: TempPath,
        dest: PathBuf,
        force: bool,
    },
    Spool {
        tmp: TempPath,
        target: Target,
    },
    Streamed,
}

/// What can be read back of a [`WrittenFile`].
pub enum Contents<'a> {
    /// The temporary file (or the spool of a stream).
    File(&'a Path),
    /// Nothing: the bytes went straight to a stream.
    Gone,
}

impl WrittenFile {
    /// What was written, to read back and check.
    pub fn contents(&self) -> Contents<'_> {
        match &self.inner {
            Done::Temp { tmp, .. } => Contents::File(&tmp.path),
            Done::Spool { tmp, .. } => Contents::File(&tmp.path),
            Done::Streamed => Contents::Gone,
        }
    }

    /// Put the output in place: rename the file (exclusively unless
    /// `--force` was given), or copy the spool to its stream.
    pub fn commit(self) -> Result<()> {
        match self.inner {
            Done::Temp {
                mut tmp,
                dest,
                force,
            } => {
                let ctx = |e| {
                    Error::io(
                        format!("renaming {} to {}", tmp.path.display(), dest.display()),
                        e,
                    )
                };
                if force {
                    // The destination was checked before the work started;
                    // never rename over something that became a directory,
                    // device or link meanwhile.
                    if let Ok(m) = std::fs::symlink_metadata(&dest)
                        && !m.file_type().is_file()
                    {
                        return Err(Error::invalid(format!(
                            "{} is no longer a regular file; nothing was written to it",
                            dest.display()
                        )));
                    }
                    std::fs::rename(&tmp.path, &dest).map_err(ctx)?;
                    tmp.renamed = true;
                    return Ok(());
                }
                match rename_exclusive(&tmp.path, &dest) {
                    Ok(Moved::Renamed) => {
                        tmp.renamed = true;
                        Ok(())
                    }
                    // The temporary name is removed when `tmp` drops.
                    Ok(Moved::Linked) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Err(Error::invalid(format!(
                            "{} appeared while ibp was writing (another run?); it was left alone; pass --force to overwrite it",
                            dest.display()
                        )))
                    }
                    Err(e) => Err(ctx(e)),
                }
            }
            Done::Spool { tmp, target } => {
                let mut spooled = File::open(&tmp.path)
                    .map_err(|e| Error::io(format!("reading {}", tmp.path.display()), e))?;
                let mut w = BufWriter::with_capacity(1 << 20, open_direct(&target)?);
                std::io::copy(&mut spooled, &mut w)
                    .and_then(|_| w.flush())
                    .map_err(|e| Error::io("writing the output", e))
                // `tmp` is removed as it drops.
            }
            Done::Streamed => Ok(()),
        }
    }
}

/// How [`rename_exclusive`] put the file in place.
enum Moved {
    /// Renamed: the temporary name is gone.
    Renamed,
    /// Hard-linked: the temporary name still exists.
    Linked,
}

/// Give `from` the name `to` only if `to` does not exist, atomically:
/// `renameat2(RENAME_NOREPLACE)`, or where the file system lacks it, a hard
/// link (which also fails when the name exists).
fn rename_exclusive(from: &Path, to: &Path) -> std::io::Result<Moved> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes());
        if let (Ok(f), Ok(t)) = (c(from), c(to)) {
            // SAFETY: both are NUL-terminated paths that outlive the call.
            let r = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    f.as_ptr(),
                    libc::AT_FDCWD,
                    t.as_ptr(),
                    libc::RENAME_NOREPLACE,
                )
            };
            if r == 0 {
                return Ok(Moved::Renamed);
            }
            let e = std::io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
                return Err(e);
            }
        }
    }
    std::fs::hard_link(from, to).map(|()| Moved::Linked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ibp-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn exclusive_rename_never_replaces_an_existing_name() {
        let d = scratch("exclusive");
        let (from, to) = (d.join("from"), d.join("to"));
        std::fs::write(&from, b"new").unwrap();
        std::fs::write(&to, b"theirs").unwrap();
        let e = rename_exclusive(&from, &to).err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&to).unwrap(), b"theirs");
        std::fs::remove_file(&to).unwrap();
        rename_exclusive(&from, &to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"new");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_stream_output_is_spooled_to_a_file_and_the_spool_removed() {
        let target = check_output(Path::new("/dev/null"), false, None).unwrap();
        let mut out = OutputFile::create(&target, false, Unreadable::Spool).unwrap();
        out.writer().write_all(b"checked first").unwrap();
        let written = out.finish().unwrap();
        let spool = match written.contents() {
            Contents::File(p) => p.to_path_buf(),
            _ => panic!("a spooled output reads back from its file"),
        };
        assert_eq!(std::fs::read(&spool).unwrap(), b"checked first");
        written.commit().unwrap();
        assert!(!spool.exists(), "the spool outlived the commit");
    }

    #[test]
    fn a_name_taken_during_the_run_is_left_alone() {
        let d = scratch("taken");
        let dest = d.join("out.ibp");
        let target = check_output(&dest, false, None).unwrap();
        let mut out = OutputFile::create(&target, false, Unreadable::Spool).unwrap();
        out.writer().write_all(b"ours").unwrap();
        let written = out.finish().unwrap();
        // Another run commits first.
        std::fs::write(&dest, b"theirs").unwrap();
        let e = written.commit().unwrap_err();
        assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
        assert_eq!(std::fs::read(&dest).unwrap(), b"theirs");
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(left.len(), 1, "the temporary file was not removed");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn partial_names_are_recognised() {
        let name = "m.ibp";
        let host = this_host();
        assert!(!host.is_empty() && !host.contains('-'));
        let mine = partial_name(name, &host, 42);
        assert_eq!(mine, format!(".m.ibp.ibp-{host}-42.partial"));
        assert_eq!(partial_owner(&mine, name), Some((Some(host.as_str()), 42)));
        assert_eq!(
            partial_owner(".m.ibp.ibp-gpu7.lab-42.partial3", name),
            Some((Some("gpu7.lab"), 42))
        );
        assert_eq!(partial_owner(".m.ibp.42.partial", name), Some((None, 42)));
        // A name of 250 bytes still gets a temporary name under 255.
        let long = "é".repeat(125);
        let tmp = partial_name(&long, &host, u32::MAX);
        assert!(tmp.len() < 255, "{}", tmp.len());
        assert_eq!(
            partial_owner(&tmp, &long),
            Some((Some(host.as_str()), u32::MAX))
        );
        assert_eq!(partial_owner(&tmp, &"é".repeat(124)), None);
        for other in [
            "m.ibp",
            ".m.ibp.ibp-h-42.partial.bak",
            ".m.ibpx.ibp-h-42.partial",
            ".n.ibp.ibp-h-42.partial",
            ".m.ibp.ibp-h-0.partial",
            ".m.ibp.ibp-h-x.partial",
            ".m.ibp.ibp-42.partial",
        ] {
            assert_eq!(partial_owner(other, name), None, "{other}");
        }
    }
}
