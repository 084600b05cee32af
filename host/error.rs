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
        }
    }
}

/// An ibp error: a [`ErrorKind`] plus a message for people.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
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
