//! Input files, memory-mapped (or read) to be parsed in place.

use std::path::Path;

use crate::error::{Error, Result};

/// A file's bytes, memory-mapped (or read, for files that cannot be mapped),
/// to be parsed in place.
pub struct InputFile {
    bytes: InputBytes,
}

enum InputBytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl InputFile {
    /// Open `path` for parsing.
    ///
    /// A regular file is memory-mapped. Anything else that can be read to
    /// its end (a pipe or FIFO, `/dev/stdin`, a socket, a `/proc` file,
    /// which reports a size of 0) is read into memory. Character and block
    /// devices are refused ([`crate::ErrorKind::Unsupported`]): `/dev/zero`
    /// never ends, and a disk is not a tensor file.
    ///
    /// The file must not change while the returned value lives: a mapping
    /// shows other processes' writes, and a file that shrinks faults on
    /// access (SIGBUS; the `ibp` command line catches it and exits with an
    /// I/O error).
    pub fn open(path: &Path) -> Result<Self> {
        let ctx = || format!("opening {}", path.display());
        let file = std::fs::File::open(path).map_err(|e| Error::io(ctx(), e))?;
        let meta = file.metadata().map_err(|e| Error::io(ctx(), e))?;
        let kind = meta.file_type();
        if is_device(&kind) {
            return Err(Error::unsupported(format!(
                "{} is a device, not a file; ibp reads regular files, pipes and standard input",
                path.display()
            )));
        }
        // Q: why not map a regular file whose size is 0?
        // A: /proc and /sys files say 0 and still have contents; and an
        // empty mapping is an error on some systems. Reading gives the
        // truth in both cases.
        if !kind.is_file() || meta.len() == 0 {
            return InputFile::read_from(file, &path.display().to_string());
        }
        // SAFETY: the mapping is read-only and private to us. The remaining
        // obligation, that no one truncates or rewrites the file while it is
        // mapped, cannot be checked here; it is documented above, as every
        // mmap-based reader must.
        match unsafe { memmap2::Mmap::map(&file) } {
            Ok(map) => Ok(InputFile {
                bytes: InputBytes::Mapped(map),
            }),
            Err(_) => InputFile::read_from(file, &path.display().to_string()),
        }
    }

    /// Read everything `reader` gives (standard input, a pipe) into memory.
    /// Running out of memory is an [`crate::ErrorKind::Io`] error, not an
    /// abort.
    pub fn read_from(mut reader: impl std::io::Read, name: &str) -> Result<Self> {
        let mut v = Vec::new();
        reader
            .read_to_end(&mut v)
            .map_err(|e| Error::io(format!("reading {name}"), e))?;
        Ok(InputFile {
            bytes: InputBytes::Read(v),
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            InputBytes::Mapped(m) => m,
            InputBytes::Read(v) => v,
        }
    }
}

#[cfg(unix)]
fn is_device(kind: &std::fs::FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    kind.is_char_device() || kind.is_block_device()
}

#[cfg(not(unix))]
fn is_device(_: &std::fs::FileType) -> bool {
    false
}
