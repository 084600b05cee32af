//! The one error type of ibp.
//!
//! Callers branch on [`Error::kind`]; the message says what went wrong and,
//! where there is one, what to do about it.

use std::fmt;

/// What kind of failure an [`Error`] is. New kinds may be added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input is damaged: a checksum, a length or a bit pattern does not
    /// agree with the format.
    Corrupt,
    /// The input ends before the format says it should.
    Truncated,
    /// An argument is out of range or inconsistent (wrong buffer size, bad
    /// chunk size, threshold out of range, ...).
    InvalidArgument,
    /// The input is valid but uses something this build does not support.
    Unsupported,
    /// The CUDA driver reported an error, or no CUDA device is usable.
    Cuda,
    /// Reading or writing a file failed.
    Io,
    /// The memory the input needs could not be allocated. The message says
    /// how much and for what; nothing was written.
    OutOfMemory,
}

impl ErrorKind {
    /// Process exit code used by the `ibp` command line for this kind.
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::InvalidArgument => 2,
            ErrorKind::Io => 3,
            ErrorKind::Corrupt | ErrorKind::Truncated => 4,
            ErrorKind::Unsupported => 5,
            ErrorKind::Cuda => 6,
            ErrorKind::OutOfMemory => 7,
        }
    }
}

/// An ibp error: a [`ErrorKind`] plus a message for people.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// The CUDA driver's result code, for [`ErrorKind::Cuda`] errors that
    /// came from the driver.
    cuda: Option<u32>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The CUDA driver's `CUresult` code of "no CUDA-capable device is
/// detected" (`CUDA_ERROR_NO_DEVICE`).
#[cfg(feature = "cuda")]
pub(crate) const CUDA_ERROR_NO_DEVICE: u32 = 100;

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            cuda: None,
            source: None,
        }
    }

    /// A [`ErrorKind::Cuda`] error carrying the driver's result code.
    pub fn cuda_code(message: impl Into<String>, code: u32) -> Self {
        let mut e = Self::new(ErrorKind::Cuda, message);
        e.cuda = Some(code);
        e
    }

    /// The CUDA driver's result code (`CUresult`, e.g. 2 for out of memory,
    /// 100 for `CUDA_ERROR_NO_DEVICE`), when the error came from the driver.
    pub fn cuda_result(&self) -> Option<u32> {
        self.cuda
    }

    /// Attach the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The kind, for branching.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Shorthand for [`ErrorKind::Corrupt`].
    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }

    /// Shorthand for [`ErrorKind::Truncated`].
    pub fn truncated(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Truncated, message)
    }

    /// Shorthand for [`ErrorKind::InvalidArgument`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// Shorthand for [`ErrorKind::Unsupported`].
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// Shorthand for [`ErrorKind::Cuda`].
    pub fn cuda(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Cuda, message)
    }

    /// An [`ErrorKind::OutOfMemory`] error: `bytes` could not be allocated
    /// for `what`.
    pub fn out_of_memory(bytes: impl fmt::Display, what: &str) -> Self {
        Self::new(
            ErrorKind::OutOfMemory,
            format!(
                "cannot allocate {bytes} bytes for {what}; free some memory or raise the process's memory limit"
            ),
        )
    }

    /// An I/O error about `path`.
    pub fn io(context: impl Into<String>, err: std::io::Error) -> Self {
        let context = context.into();
        Self::new(ErrorKind::Io, format!("{context}: {err}")).with_source(err)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ErrorKind::Corrupt => "corrupt data",
            ErrorKind::Truncated => "truncated data",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Cuda => "CUDA",
            ErrorKind::Io => "I/O",
            ErrorKind::OutOfMemory => "out of memory",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A cust error as an [`ErrorKind::Cuda`] error, the driver's result code
/// kept ([`Error::cuda_result`]), so that `?` works on cust calls (device
/// buffers, streams) in a function that returns [`Result`].
///
/// Q: why, when ibp's own calls already return [`Error`]?
/// A: a host app mixes them with cust's: it makes the stream and the
/// buffers a gather writes into. Without this, each of those calls needs a
/// `map_err`, and the README's GPU quick start did not compile as pasted.
/// ibp's own calls still say what they were doing; a bare cust error can
/// only say which call failed from the caller's `?`.
#[cfg(feature = "cuda")]
impl From<cust::error::CudaError> for Error {
    fn from(e: cust::error::CudaError) -> Self {
        let code = e as u32;
        let hint = if code == CUDA_ERROR_NO_DEVICE {
            "; no CUDA-capable device is usable here"
        } else {
            ""
        };
        Error::cuda_code(
            format!("a CUDA call failed: {e} (CUresult {code}){hint}"),
            code,
        )
        .with_source(e)
    }
}

/// `len` copies of `value`, or an [`ErrorKind::OutOfMemory`] error naming
/// `what` when the memory cannot be had.
///
/// Q: why not `vec![value; len]`? A: a failed allocation aborts the process
/// (SIGABRT, under a memory limit for example); allocations sized by the
/// data go through here so that running out of memory is an error that
/// says what needed it.
pub(crate) fn try_vec<T: bytemuck::Pod>(len: usize, value: T, what: &str) -> Result<Vec<T>> {
    if len > 0 && size_of::<T>() > 0 && bytemuck::bytes_of(&value).iter().all(|&b| b == 0) {
        return try_zeroed_vec(len, what);
    }
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| Error::out_of_memory(len.saturating_mul(size_of::<T>()), what))?;
    v.resize(len, value);
    Ok(v)
}

/// `len` zero values, allocated zeroed.
///
/// Q: why not reserve and fill?
/// A: the allocator hands large zeroed blocks out as fresh pages that the
/// kernel zeroes on first touch; filling them writes every byte once more
/// (a packed payload is tens of MB, written again by the encoder), which is
/// what `vec![0; n]` avoids and a fallible allocation should too.
fn try_zeroed_vec<T: bytemuck::Zeroable>(len: usize, what: &str) -> Result<Vec<T>> {
    let fail = || Error::out_of_memory(len.saturating_mul(size_of::<T>()), what);
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| fail())?;
    // SAFETY: `layout` has a non-zero size (len > 0 and T is not zero-sized,
    // checked by the caller).
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if p.is_null() {
        return Err(fail());
    }
    // SAFETY: `p` was allocated by the global allocator with `T`'s layout for
    // `len` elements, all zero bytes, a valid `T` each (`Zeroable`); length
    // and capacity are `len`.
    Ok(unsafe { Vec::from_raw_parts(p, len, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `?` on a cust call in a function returning ibp's `Result`.
    #[cfg(feature = "cuda")]
    fn cust_call(e: cust::error::CudaError) -> Result<()> {
        let r: std::result::Result<(), cust::error::CudaError> = Err(e);
        r?;
        Ok(())
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn a_cust_error_converts_to_a_cuda_error_with_its_code() {
        use cust::error::CudaError;
        let e = cust_call(CudaError::OutOfMemory).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Cuda);
        assert_eq!(e.cuda_result(), Some(2));
        assert!(e.message().contains("CUresult 2"), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let e = cust_call(CudaError::NoDevice).unwrap_err();
        assert_eq!(e.cuda_result(), Some(CUDA_ERROR_NO_DEVICE));
        assert!(e.message().contains("no CUDA-capable device"), "{e}");
        assert_eq!(e.kind().exit_code(), 6);
    }

    #[test]
    fn an_allocation_too_large_is_an_error_not_an_abort() {
        let e = try_vec(usize::MAX / 2, 0u8, "a test buffer").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfMemory);
        assert!(e.message().contains("a test buffer"), "{e}");
        assert_eq!(try_vec(3, 7u16, "three").unwrap(), [7, 7, 7]);
    }
}
