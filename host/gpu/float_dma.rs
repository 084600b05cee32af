//! A float-coded group's payload in pinned host memory
//! ([`PinnedFloatRows`]), and the DMA range path that decodes it
//! ([`FloatDecoder::range_dma`]): the rows' stored bytes copied by the copy
//! engine into a [`DmaScratch`]'s two device pieces, each piece decoded
//! from device memory while the next one is copied, as
//! [`super::Decoder::range_dma`] does for IBP groups.
//!
//! ```text
//! let dec = FloatDecoder::new_staged(&gpu, &coded)?;      // index and table on the device
//! let host = PinnedFloatRows::new(&coded)?;               // the payload, pinned
//! let mut scratch = DmaScratch::new(DEFAULT_DMA_PIECE_BYTES)?;
//! dec.range_dma(&gpu, first, count, &host, &mut out, &status, &mut scratch, &stream)?; // no sync
//! ```
//!
//! # A piece in a ring buffer
//! The decoder reads row `t` at `payload + start(t)`, its start in the
//! group's payload, and checks that the row ends at or before
//! `payload_len`. A piece of rows `a .. b` copies the payload bytes
//! `from .. start(b)` (`from`: `start(a)` rounded down to 128) to the start
//! of a device piece at `ring`, and launches the one decode kernel with
//! `payload = ring − from` (modulo 2^64: the device's address arithmetic
//! wraps as the host's `wrapping_sub` does, so `payload + start(t)` is
//! `ring + start(t) − from`) and `payload_len = start(b)`: every row of the
//! piece lies in the piece, and one past it is reported corrupt, never
//! read. The unchanged kernel, no per-piece index.
//!
//! Q: why round `from` down to 128, when the decoder needs 16?
//! A: the payload address is then aligned as a staging area
//! ([`super::STAGING_ALIGN`]) is for [`FloatDecoder::range_staged`]; the
//! cost is at most 127 bytes more a piece of megabytes.

use cust::memory::DeviceSlice;
use cust::stream::Stream;
use ibp_kernels::params::FloatDecodeParams;

use super::decode::{DecodeStatus, DmaScratch};
use super::driver::{self, wait};
use super::float_decode::{FloatDecoder, Launch, index_fingerprint};
use super::memory::{GpuWritable, PinnedBuffer, Span, SpanMut};
use super::{Gpu, STAGING_ALIGN};
use crate::error::{Error, Result};
use crate::float_code::FloatCoded;

/// Bytes past a row the decoder may read: the 16-byte piece it ends in
/// and the next (`ibp_kernels::params::FloatDecodeParams`).
pub(crate) const READ_PAST: usize = 32;

/// A float-coded group's payload in mapped pinned host memory (zero-padded
/// as [`FloatDecoder::staging_image`] is), with its row starts on the
/// host: what [`FloatDecoder::range_dma`] copies pieces of, what
/// [`FloatDecoder::gather_staged`] and [`FloatDecoder::range_staged`] read
/// zero-copy ([`PinnedFloatRows::span`]), and where a
/// [`super::FloatFeatureCache`] reads its misses.
pub struct PinnedFloatRows {
    payload: PinnedBuffer<u8>,
    /// Row `t`'s stored bytes are `starts[t] .. starts[t + 1]`.
    starts: Vec<u64>,
    row_bytes: usize,
    /// The group's index fingerprint (checked against a decoder's).
    index_hash: u64,
    /// The most bytes any one row's piece copies (its stored bytes and up
    /// to 127 before them, [`next_piece`]'s alignment).
    widest: u64,
}

impl std::fmt::Debug for PinnedFloatRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedFloatRows")
            .field("rows", &self.rows())
            .field("row_bytes", &self.row_bytes)
            .field("payload_bytes", &self.payload_bytes())
            .finish()
    }
}

impl PinnedFloatRows {
    /// A pinned copy of `coded`'s payload, padded as
    /// [`FloatDecoder::staging_image`]. Allocates pinned memory (a CUDA
    /// context must be current) and copies.
    ///
    /// Errors with [`crate::ErrorKind::Corrupt`] for an inconsistent index,
    /// and as [`FloatDecoder::new`] for a group the GPU does not decode.
    pub fn new(coded: &FloatCoded) -> Result<Self> {
        let img = coded.device_image()?;
        let n = coded.rows();
        let mut starts = Vec::with_capacity(n + 1);
        for t in 0..n {
            starts.push(coded.row_range(t)?.start as u64);
        }
        starts.push(coded.payload().len() as u64);
        let widest = starts
            .windows(2)
            .map(|w| w[1] - (w[0] & !(STAGING_ALIGN as u64 - 1)))
            .max()
            .unwrap_or(0);
        let len = coded.payload().len();
        let mut payload = PinnedBuffer::<u8>::zeroed(len.next_multiple_of(16) + 16)?;
        payload[..len].copy_from_slice(coded.payload());
        Ok(Self {
            payload,
            starts,
            row_bytes: coded.row_bytes(),
            index_hash: index_fingerprint(&img),
            widest,
        })
    }

    /// Rows of the group.
    pub fn rows(&self) -> u64 {
        self.starts.len() as u64 - 1
    }

    /// Bytes of a row, decoded.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Bytes of the payload (without its padding).
    pub fn payload_bytes(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    /// The payload and its padding as a staging area in mapped pinned
    /// memory, for [`FloatDecoder::range_staged`] and
    /// [`FloatDecoder::gather_staged`] (read zero-copy).
    pub fn span(&self) -> Span<'_> {
        // SAFETY: the whole buffer, allocated and mapped by `self`, which
        // the span borrows; nothing writes it after `new`.
        unsafe { Span::from_raw_parts(self.payload.device_ptr(), self.payload.len()) }
    }

    /// Row `t`'s stored bytes in the payload (`t < rows`).
    pub(crate) fn row(&self, t: u64) -> std::ops::Range<u64> {
        self.starts[t as usize]..self.starts[t as usize + 1]
    }

    /// The payload's device address (mapped pinned memory; 16-aligned,
    /// readable to its length rounded up to 16 plus 16 bytes).
    pub(crate) fn device_addr(&self) -> u64 {
        self.payload.device_ptr()
    }

    /// The payload on the host.
    pub(crate) fn host_bytes(&self) -> &[u8] {
        &self.payload[..self.payload_bytes() as usize]
    }

    /// Refuse a decoder whose index is not this payload's.
    fn check(&self, dec: &FloatDecoder) -> Result<()> {
        if dec.index_hash != self.index_hash {
            return Err(Error::invalid(
                "these pinned rows are another group's than the decoder's (their indexes differ)",
            ));
        }
        Ok(())
    }
}

/// The next piece of a range from row `a` (exclusive end `end`): its end
/// row `b` (at least `a + 1`) and the payload bytes `from .. to` it copies
/// (`from`: `starts[a]` rounded down to 128; `to = starts[b]`), as many
/// rows as keep `to − from` within `cap`. `None` when row `a` alone does
/// not fit.
pub(crate) fn next_piece(starts: &[u64], a: u64, end: u64, cap: u64) -> Option<(u64, u64, u64)> {
    let from = starts[a as usize] & !(STAGING_ALIGN as u64 - 1);
    if starts[a as usize + 1] - from > cap {
        return None;
    }
    // The last row whose end fits: starts are ascending.
    let rows = &starts[a as usize + 1..=end as usize];
    let fit = rows.partition_point(|&s| s - from <= cap) as u64;
    let b = a + fit;
    Some((b, from, starts[b as usize]))
}

impl FloatDecoder {
    /// Enqueue the pipelined range path: output row `i` receives row
    /// `first + i`, as [`FloatDecoder::range`] does, but the rows' stored
    /// bytes travel from `host` (the group's payload in pinned memory) by
    /// DMA (`cuMemcpyHtoDAsync`) into `scratch`'s two device pieces, piece
    /// by piece, and each piece is decoded from device memory while the
    /// next one is copied. Works with a decoder of either kind
    /// ([`FloatDecoder::new`] or [`FloatDecoder::new_staged`]: the payload
    /// read is `host`'s). No host synchronisation and no allocation: the
    /// copies run on the scratch's own stream, ordered against `stream` by
    /// its events; a later call (of this or of [`super::Decoder`]'s DMA
    /// paths) with the same scratch waits for this one's decodes before it
    /// overwrites a piece.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for `host` of
    /// another group, rows past the end, an output shorter than
    /// `count · L` or not aligned to the element, or a row whose stored
    /// bytes (with up to 127 before it, its piece's alignment) exceed a
    /// scratch piece less 32 bytes; nothing is enqueued then.
    ///
    /// Q: why offer this beside zero-copy ([`FloatDecoder::range_staged`]
    /// on [`PinnedFloatRows::span`])?
    /// A: a copy engine moves a contiguous range at the link's rate, and
    /// the decode then reads device memory; a kernel reading mapped host
    /// memory has its reads cross the link as it decodes. Which is faster
    /// depends on the machine and the table: `ibp bench` measures both
    /// (*overlapped* and *zero-copy* in its float rows).
    #[allow(clippy::too_many_arguments)]
    pub fn range_dma<O: GpuWritable + ?Sized>(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        host: &PinnedFloatRows,
        out: &mut O,
        status: &DecodeStatus,
        scratch: &mut DmaScratch,
        stream: &Stream,
    ) -> Result<()> {
        host.check(self)?;
        let end = first
            .checked_add(count)
            .filter(|&e| e <= host.rows())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "rows {first}..{first}+{count} of a group of {} rows",
                    host.rows()
                ))
            })?;
        let l = self.row_bytes() as u64;
        if count
            .checked_mul(l)
            .is_none_or(|n| n > out.writable_len() as u64)
        {
            return Err(Error::invalid(format!(
                "{count} rows of {l} bytes need {} output bytes; the output holds {}",
                count.saturating_mul(l),
                out.writable_len()
            )));
        }
        let base = out.device_addr_mut();
        if !base.is_multiple_of(u64::from(self.params.elem_bytes)) {
            return Err(Error::invalid(format!(
                "the output at {base:#x} is not aligned to the {}-byte elements",
                self.params.elem_bytes
            )));
        }
        let cap = scratch_capacity(&scratch.bufs[0]);
        // Q: why the widest row first? A: a look at every row of the range
        // is host work in proportion to its rows, done before the first
        // copy is enqueued (the bench's overlapped rate on MiniLM bf16 fell
        // from 77 to 49 GB/s when the path moved here with that look); the
        // group's widest row answers for all of them unless it is too wide.
        if let Some(t) = (host.widest > cap)
            .then(|| (first..end).find(|&t| next_piece(&host.starts, t, t + 1, cap).is_none()))
            .flatten()
        {
            return Err(Error::invalid(format!(
                "row {t} stores {} bytes, which with its piece's alignment exceed the DMA scratch piece ({cap} usable bytes); make the scratch larger",
                host.row(t).end - host.row(t).start
            )));
        }
        if count == 0 {
            return Ok(());
        }
        // The scratch's pieces may still be read by an earlier call's decode.
        scratch.start.record(stream)?;
        wait(&scratch.copy_stream, &scratch.start)?;
        let mut a = first;
        let mut k = 0usize;
        while a < end {
            let (b, from, to) = next_piece(&host.starts, a, end, cap)
                .ok_or_else(|| Error::invalid("a row larger than a DMA piece"))?;
            let buf = k % 2;
            // The piece's device buffer may still be read by the decode of
            // piece k − 2, or of an earlier call (an event never recorded
            // is no wait).
            wait(&scratch.copy_stream, &scratch.decoded[buf])?;
            let ring = scratch.bufs[buf].as_device_ptr().as_raw();
            // SAFETY: `from .. to` lies inside the pinned payload (the
            // starts were read from a validated group, `to` at most its
            // length); the device piece holds `cap + READ_PAST >= to −
            // from` bytes (`next_piece`); both outlive the copy (`host` and
            // the scratch are borrowed for the call, and later calls wait
            // on the scratch's events; `host` is dropped by its owner only
            // after the work it enqueued is done, as every pinned source).
            unsafe {
                driver::copy::htod_async(
                    ring,
                    host.payload.as_ptr().add(from as usize),
                    (to - from) as usize,
                    &scratch.copy_stream,
                    "DMA copy of a float-coded range",
                )?
            };
            scratch.copied[buf].record(&scratch.copy_stream)?;
            wait(stream, &scratch.copied[buf])?;
            let group = FloatDecodeParams {
                payload_len: to,
                ..self.params
            };
            let at = Launch {
                payload: ring.wrapping_sub(from),
                ids: 0,
                first: a,
                count: b - a,
            };
            // SAFETY: rows `a − first .. b − first` of `out` lie inside it
            // (count · L bytes checked above); `out` is borrowed mutably
            // for the call, and the pieces' parts are disjoint and written
            // in order on one stream.
            let mut part =
                unsafe { SpanMut::from_raw_parts(base + (a - first) * l, ((b - a) * l) as usize) };
            // The launch's reads stay in the piece: rows a..b end at or
            // before `to` (checked by the kernel against payload_len), start
            // at or after `from`, and the piece is readable `READ_PAST`
            // bytes past `to − from` (see the module notes).
            self.enqueue_as(gpu, &group, at, &mut part, status, stream)?;
            scratch.decoded[buf].record(stream)?;
            a = b;
            k += 1;
        }
        Ok(())
    }
}

/// Stored bytes a piece of a scratch's device buffer `buf` may hold: its
/// length less the bytes the decoder reads past a row.
fn scratch_capacity(buf: &DeviceSlice<u8>) -> u64 {
    buf.len().saturating_sub(READ_PAST) as u64
}

#[cfg(test)]
mod tests {
    use super::next_piece;

    #[test]
    fn pieces_hold_whole_rows_from_an_aligned_start() {
        // Rows of 100 stored bytes from 0.
        let starts: Vec<u64> = (0..=20).map(|i| 100 * i).collect();
        // From row 0: rows 0..5 end at 500 <= 500.
        assert_eq!(next_piece(&starts, 0, 20, 500), Some((5, 0, 500)));
        // From row 3 (start 300, aligned down to 256): 256..700 fits 444.
        assert_eq!(next_piece(&starts, 3, 20, 444), Some((7, 256, 700)));
        assert_eq!(next_piece(&starts, 3, 20, 443), Some((6, 256, 600)));
        // The range's end bounds the piece.
        assert_eq!(next_piece(&starts, 3, 5, 1 << 20), Some((5, 256, 500)));
        // A row that does not fit alone (with its alignment): none.
        assert_eq!(next_piece(&starts, 3, 20, 143), None);
        assert_eq!(next_piece(&starts, 3, 20, 144), Some((4, 256, 400)));
        // Walking a range covers every row once, each piece within cap.
        // (A row of 100 bytes from any start fits 227: 127 of alignment.)
        for cap in [227u64, 300, 1000, 1 << 20] {
            let (mut a, mut seen) = (2u64, 0u64);
            while a < 19 {
                let (b, from, to) = next_piece(&starts, a, 19, cap).unwrap();
                assert!(b > a && b <= 19 && to - from <= cap, "cap {cap}");
                assert_eq!(from % 128, 0);
                assert!(from <= starts[a as usize] && to == starts[b as usize]);
                seen += b - a;
                a = b;
            }
            assert_eq!(seen, 17);
        }
        // Empty rows ride along with the next.
        let starts = [0u64, 0, 0, 40, 40];
        assert_eq!(next_piece(&starts, 0, 4, 40), Some((4, 0, 40)));
    }
}
