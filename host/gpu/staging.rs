//! Large copies between ordinary (pageable) host memory and device memory
//! through two pinned pieces, the next piece in flight while the host works
//! on the last: `ibp compress --device gpu` loads its groups, reads the
//! compressed sections back and checks the decoded rows through it.
//!
//! Q: why not one synchronous `cuMemcpy` per piece, from or to the caller's
//! memory?
//! A: a copy from or to pageable memory is staged by the driver through its
//! own pinned buffer, on one thread, and returns only when done: the host
//! then writes the file or compares the rows while the copy engine idles,
//! and the copy engine moves bytes while the host idles. Measured on the
//! H200 (b4e03ea, 4.27 GB): reading the sections back and writing them took
//! 6.7 s, the check 4.2 s, against 0.03 s of kernels. Here the copy engine
//! fills one pinned piece while the host uses the other, and the host's
//! share (filling a piece from the input, comparing a piece) runs on the
//! thread pool.

use cust::stream::Stream;
use rayon::prelude::*;

use super::driver::{Event, copy};
use super::memory::PinnedBuffer;
use crate::error::Result;

/// Bytes of work per thread-pool task when filling or comparing a piece.
const TASK: usize = 1 << 20;

/// Two pinned pieces and their events; see the module notes.
pub(crate) struct Staging {
    bufs: [PinnedBuffer<u8>; 2],
    /// Recorded after the copy that last used each piece.
    done: [Event; 2],
}

impl Staging {
    /// Two pinned pieces of `piece` bytes each (at least one byte). A CUDA
    /// context must be current.
    pub(crate) fn new(piece: usize) -> Result<Self> {
        let piece = piece.max(1);
        Ok(Staging {
            bufs: [PinnedBuffer::zeroed(piece)?, PinnedBuffer::zeroed(piece)?],
            done: [Event::new()?, Event::new()?],
        })
    }

    /// Bytes of each piece.
    pub(crate) fn piece(&self) -> usize {
        self.bufs[0].len()
    }

    /// Copy `src` to device address `dst` (`src.len()` bytes of device
    /// memory), a piece at a time, and wait for the last copy; calls
    /// `progress` with the bytes sent so far. The thread pool fills piece
    /// `k + 1` while the copy engine moves piece `k`.
    ///
    /// # Safety
    /// `dst .. dst + src.len()` must be device memory of the current context
    /// that nothing else uses during the call.
    pub(crate) unsafe fn upload(
        &mut self,
        src: &[u8],
        dst: u64,
        stream: &Stream,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let r = self.upload_inner(src, dst, stream, progress);
        self.settle(r, stream)
    }

    /// Wait for both pieces' copies before returning `r`.
    ///
    /// Q: why wait on an error too?
    /// A: never return (and let the pieces be freed, refilled or handed
    /// out) while a copy may still read or write one; after a failed event
    /// record the events do not cover the last copy, the stream does.
    fn settle(&mut self, r: Result<()>, stream: &Stream) -> Result<()> {
        if r.is_err() {
            let _ = stream.synchronize();
        }
        let w = self.wait_both();
        r.and(w)
    }

    fn upload_inner(
        &mut self,
        src: &[u8],
        dst: u64,
        stream: &Stream,
        progress: &mut dyn FnMut(u64),
    ) -> Result<()> {
        let piece = self.piece();
        let mut at = 0usize;
        for (k, part) in src.chunks(piece).enumerate() {
            let i = k % 2;
            // The piece's last copy (k − 2) must have left it.
            self.done[i].synchronize()?;
            let buf = &mut self.bufs[i][..part.len()];
            buf.par_chunks_mut(TASK)
                .zip(part.par_chunks(TASK))
                .for_each(|(d, s)| d.copy_from_slice(s));
            // SAFETY: the pinned piece holds `part.len()` bytes and is not
            // touched again before `done[i]` (recorded next) completes; the
            // destination range lies inside `dst .. dst + src.len()`
            // (`upload`'s contract).
            unsafe {
                copy::htod_async(
                    dst + at as u64,
                    buf.as_ptr(),
                    part.len(),
                    stream,
                    "copying a group to the GPU",
                )?
            };
            self.done[i].record(stream)?;
            at += part.len();
            progress(at as u64);
        }
        Ok(())
    }

    /// Copy `len` bytes at device address `src` to `sink`, in order, a
    /// piece at a time: piece `k + 1` is copied while `sink` has piece `k`.
    /// Returns after the last piece was handed over; on an error from
    /// `sink` or the driver, after the copies in flight have finished.
    ///
    /// # Safety
    /// `src .. src + len` must be device memory of the current context that
    /// nothing writes during the call (work enqueued on `stream` before the
    /// call is ordered before the copies).
    pub(crate) unsafe fn download(
        &mut self,
        src: u64,
        len: u64,
        stream: &Stream,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let r = self.download_inner(src, len, stream, sink);
        self.settle(r, stream)
    }

    fn download_inner(
        &mut self,
        src: u64,
        len: u64,
        stream: &Stream,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let piece = self.piece() as u64;
        let pieces = len.div_ceil(piece);
        let size = |k: u64| (len - k * piece).min(piece) as usize;
        if pieces > 0 {
            self.enqueue_download(0, src, size(0), stream)?;
        }
        for k in 0..pieces {
            if k + 1 < pieces {
                // Its piece was handed to `sink` at k − 1, which returned.
                self.enqueue_download(
                    ((k + 1) % 2) as usize,
                    src + (k + 1) * piece,
                    size(k + 1),
                    stream,
                )?;
            }
            let i = (k % 2) as usize;
            self.done[i].synchronize()?;
            sink(&self.bufs[i][..size(k)])?;
        }
        Ok(())
    }

    fn enqueue_download(&mut self, i: usize, src: u64, n: usize, stream: &Stream) -> Result<()> {
        let buf = &mut self.bufs[i][..n];
        // SAFETY: the pinned piece holds `n` bytes and nothing reads it
        // before `done[i]` (recorded next) completes; the source range lies
        // inside the caller's (`download`'s contract).
        unsafe { copy::dtoh_async(buf.as_mut_ptr(), src, n, stream, "copying from the GPU")? };
        self.done[i].record(stream)
    }

    fn wait_both(&self) -> Result<()> {
        let a = self.done[0].synchronize();
        let b = self.done[1].synchronize();
        a.and(b)
    }
}

/// Are `a` and `b` equal? On the thread pool, a task per [`TASK`] bytes.
pub(crate) fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.par_chunks(TASK)
            .zip(b.par_chunks(TASK))
            .all(|(x, y)| x == y)
}
