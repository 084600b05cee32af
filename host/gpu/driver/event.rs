//! Events: `cuEventCreate`, `cuEventRecord`, `cuEventSynchronize`,
//! `cuEventDestroy` and `cuStreamWaitEvent`, and [`Event`], the safe type
//! over them.
#![allow(clippy::disallowed_methods)]

use std::sync::Mutex;

use cust::stream::Stream;
use cust::sys as cu;

use super::check;
use crate::error::Result;

/// A new event without timing (for ordering, not measuring).
///
/// # Safety
/// A context is current on the calling thread; the event belongs to it and
/// must be destroyed ([`destroy`]) exactly once, while that context lives.
pub(crate) unsafe fn create() -> Result<cu::CUevent> {
    let mut e = std::ptr::null_mut();
    // SAFETY: `e` is a valid out-pointer and the flag a documented one; a
    // context is current (the caller's obligation).
    let r = unsafe { cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) };
    check(r, "creating an event").map(|()| e)
}

/// Record `event` on `stream`: it completes when the work enqueued on
/// `stream` before it does.
///
/// # Safety
/// `event` came from [`create`] and is not destroyed; `stream` belongs to
/// the event's context.
pub(crate) unsafe fn record(event: cu::CUevent, stream: &Stream) -> Result<()> {
    // SAFETY: live handles (the caller's obligation and `stream`'s borrow).
    check(
        unsafe { cu::cuEventRecord(event, stream.as_inner()) },
        "recording an event",
    )
}

/// Block until the work recorded before `event` is done (at once if it was
/// never recorded).
///
/// # Safety
/// `event` came from [`create`] and is not destroyed.
pub(crate) unsafe fn synchronize(event: cu::CUevent) -> Result<()> {
    // SAFETY: a live handle (the caller's obligation).
    check(
        unsafe { cu::cuEventSynchronize(event) },
        "waiting for an event",
    )
}

/// Is the work recorded before `event` done (true also when it was never
/// recorded)? Does not block.
///
/// # Safety
/// `event` came from [`create`] and is not destroyed.
pub(crate) unsafe fn query(event: cu::CUevent) -> Result<bool> {
    // SAFETY: a live handle (the caller's obligation).
    match unsafe { cu::cuEventQuery(event) } {
        cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => check(r, "asking whether an event is done").map(|()| true),
    }
}

/// Make the work enqueued on `stream` after this call wait for `event`.
///
/// # Safety
/// `event` came from [`create`] and is not destroyed (the driver may
/// destroy it only after the dependency resolves: [`destroy`] may follow
/// at once).
pub(crate) unsafe fn stream_wait(stream: &Stream, event: cu::CUevent) -> Result<()> {
    // SAFETY: live handles; flags must be 0.
    check(
        unsafe { cu::cuStreamWaitEvent(stream.as_inner(), event, 0) },
        "ordering streams",
    )
}

/// Destroy `event` (the driver defers it until work recorded on it is
/// done).
///
/// # Safety
/// `event` came from [`create`], and it is not used again.
pub(crate) unsafe fn destroy(event: cu::CUevent) {
    // SAFETY: the caller's obligation. Q: why drop the result? A: it runs
    // in `Drop`, where there is no one to tell.
    let _ = unsafe { cu::cuEventDestroy_v2(event) };
}

/// A CUDA event without timing, for ordering streams and waiting for
/// parts of a stream's work.
///
/// Q: why not cust's `Event`?
/// A: its `Stream::wait_event` takes the event by value (and destroys it),
/// and its raw handle is private; the pipelines reuse their events.
pub struct Event(cu::CUevent);

impl Event {
    /// A new event, in the context current on this thread (a [`Gpu`]'s).
    ///
    /// [`Gpu`]: crate::gpu::Gpu
    pub fn new() -> Result<Self> {
        // SAFETY: the handle is owned by the returned value and destroyed
        // once, in Drop. Q: and the current context? A: without one the
        // driver returns an error, which is returned.
        unsafe { create() }.map(Event)
    }

    /// Record on `stream` (of the event's context).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: a live event (owned by `self`).
        unsafe { record(self.0, stream) }
    }

    /// Block until the work recorded before the event is done.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live event (owned by `self`).
        unsafe { synchronize(self.0) }
    }

    /// Is the work recorded before the event done? Does not block.
    pub fn is_done(&self) -> Result<bool> {
        // SAFETY: a live event (owned by `self`).
        unsafe { query(self.0) }
    }

    /// Make the work enqueued on `stream` from now on wait for this event.
    pub fn wait_on(&self, stream: &Stream) -> Result<()> {
        // SAFETY: a live event (owned by `self`).
        unsafe { stream_wait(stream, self.0) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by `create` in `new`, destroyed once.
        unsafe { destroy(self.0) };
    }
}

// SAFETY: CUDA event handles may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: every method takes `&self` and is one thread-safe driver call.
unsafe impl Sync for Event {}

/// The last use of something (buffers that kernels and copies read or
/// write) on each stream that used it: an event recorded after the work
/// of each such stream. Waiting for them all waits for every use, and for
/// nothing else of the context.
///
/// Q: why not `cuCtxSynchronize`?
/// A: it waits for all the work of the context, on every stream, also
/// other users' (a serving loop's next step); and the uses run on the
/// caller's streams, which the owner does not hold.
#[derive(Default)]
pub(crate) struct LastUses {
    /// (stream handle, event recorded on it after its latest use).
    uses: Mutex<Vec<(usize, Event)>>,
}

impl LastUses {
    /// Note a use just enqueued on `stream`.
    pub(crate) fn record(&self, stream: &Stream) -> Result<()> {
        let key = stream.as_inner() as usize;
        let mut uses = self.uses.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, e)) = uses.iter().find(|(k, _)| *k == key) {
            return e.record(stream);
        }
        // Streams come and go: forget the uses that are done before noting
        // a new stream (a handle may be reused by a later stream, which is
        // harmless: its entry is recorded again).
        let mut kept = Vec::with_capacity(uses.len() + 1);
        for (k, e) in uses.drain(..) {
            // An entry whose state is unknown (an error) is kept.
            if !matches!(e.is_done(), Ok(true)) {
                kept.push((k, e));
            }
        }
        *uses = kept;
        let e = Event::new()?;
        e.record(stream)?;
        uses.push((key, e));
        Ok(())
    }

    /// Block until every use noted so far is done.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let uses = self.uses.lock().unwrap_or_else(|p| p.into_inner());
        let mut first_err = Ok(());
        for (_, e) in uses.iter() {
            let r = e.synchronize();
            if first_err.is_ok() {
                first_err = r;
            }
        }
        first_err
    }
}
