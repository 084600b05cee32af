//! The progress hook of the long operations: compressing a dataset
//! ([`crate::layout::LayoutOptions`]), a document
//! ([`crate::pipeline::CompressOptions`]) and restoring one
//! ([`crate::container::RestoreOptions`]).

use std::fmt;

/// A progress hook: called with `(done, total)` in bytes of the operation's
/// input (its output for a restore), from any worker thread and possibly
/// out of order (take the maximum when drawing a bar), once per block of
/// work rather than once per tensor.
///
/// Options structs carry it as `Option<Progress>`, `None` by default; set
/// it with their `with_progress` setter:
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use ibp::layout::LayoutOptions;
///
/// let seen = AtomicU64::new(0);
/// let hook = |done: u64, _total: u64| {
///     seen.fetch_max(done, Ordering::Relaxed);
/// };
/// let opts = LayoutOptions::default().with_progress(&hook);
/// assert!(opts.progress.is_some());
/// ```
#[derive(Clone, Copy)]
pub struct Progress<'a> {
    hook: &'a (dyn Fn(u64, u64) + Sync),
}

impl<'a> Progress<'a> {
    /// Report to `hook`.
    pub fn new(hook: &'a (dyn Fn(u64, u64) + Sync)) -> Self {
        Progress { hook }
    }

    /// Report `done` bytes out of `total`.
    pub fn report(self, done: u64, total: u64) {
        (self.hook)(done, total)
    }
}

impl fmt::Debug for Progress<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Progress(..)")
    }
}

/// Report to `progress`, if there is one.
pub(crate) fn notify(progress: Option<Progress<'_>>, done: u64, total: u64) {
    if let Some(p) = progress {
        p.report(done, total);
    }
}
