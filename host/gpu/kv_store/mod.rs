//! The appendable compressed KV store: [`KvStore`] (its documentation
//! describes the design), its options and page arithmetic (`plan`).

pub(crate) mod plan;

use std::ops::Range;

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::detail::kv;
use ibp_kernels::params::KvAppendParams;

use plan::Slots;
pub use plan::{KvStoreOptions, PageWrites};

use super::book::DeviceBook;
use super::compress::{GpuCodebook, WARP_BLOCK, row_count, warp_grid};
use super::decode::{DecodeOptions, DecodeStatus, Decoder, GatherIndex, Request, Shape};
use super::driver::event::LastUses;
use super::driver::{
    self, Event, copy_to_host_blocking, device_buffer, new_stream, sync, wait, zero_async,
};
use super::fit::Fitter;
use super::kernels;
use super::memory::{GpuReadable, PinnedBuffer};
use super::rows_view::RowsView;
use super::{Gpu, cuda_err};
use crate::codebook::Codebook;
use crate::error::{Error, Result};

/// Bytes of each of the two device staging halves an append encodes into
/// (a piece of an append holds at most this many bytes of rows).
pub(crate) const STAGE_BYTES: usize = 32 << 20;

/// One codebook's run of rows.
struct Segment {
    first: u64,
    rows: u64,
    fitted_savings: f64,
    gcb: GpuCodebook,
    /// The codebook's decoder tables (the rows are the store's pages, flags
    /// and lengths, from the segment's first row).
    book: DeviceBook,
}

/// A segment as [`KvStore::segments`] reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SegmentInfo {
    /// The store row of the segment's row 0.
    pub first_row: u64,
    /// Rows appended to the segment.
    pub rows: u64,
    /// Savings its fit predicted on the rows it was fitted on.
    pub fitted_savings: f64,
}

/// An appendable compressed KV cache: fitted on the prefill, compressed on
/// the GPU every decode step into pinned host pages, and fetched back by
/// token rows into device memory (issue 12; the InfiniGen and FlexGen
/// pattern of the paper's §6).
///
/// ```text
/// let mut store = KvStore::create(&gpu, &prefill_rows, 768, &KvStoreOptions::default())?;
/// let rows = store.append(&gpu, &step_rows, 768, &stream)?;          // enqueued, no sync
/// store.gather(&gpu, 0, &ids, &mut out, &status, &stream)?;          // enqueued, no sync
/// stream.synchronize()?; status.check_blocking()?;
/// ```
///
/// # Bounded size: fixed-stride slots
/// Every row (one token's keys or values of one layer, `heads × head_dim`
/// elements) owns a slot of `L` bytes, its stored form a prefix of the slot
/// (`docs/FORMAT.md` §3.1). A slot's size is known before the row is
/// compressed, so a serving system reserves exactly `page_rows ·
/// page_budget · L` bytes of host memory for its KV cache, whatever the
/// data; compression saves PCIe traffic (a gather reads only the stored
/// prefix of each slot) rather than host memory.
///
/// # The append path
/// Per piece of at most [`KvStoreOptions::step_rows`] rows (and at most
/// 32 MiB of them), on the caller's stream, into buffers reserved when the
/// store was created: one kernel, `ibp_kv_append_c*`. For rows up to 2 KiB
/// (up to 1024 bf16 values: MiniLM's 384 here; a 7B model's 4096-value
/// rows are wider) a row is split over the warps of a block, one warp per 256
/// bytes: each encodes its part, the block's barrier hands the parts'
/// widths over, and each writes its span of the stored form into the
/// row's slot of a device staging half (in L2), zeroing the slot past it;
/// warp 0 records the row's stored length in the store's device length
/// table and its encoded flag in the device flag bitmap. Then, with
/// [`PageWrites::Kernel`] (the default), each block copies its finished
/// slots into the pinned pages with 16-byte stores while other blocks still
/// encode. Wider rows take a warp each, and their pieces go to the pages
/// by DMA, as with [`PageWrites::Dma`]: there, an append of one piece runs
/// wholly on the caller's stream, and an append of several copies each
/// piece on the store's own copy stream while the caller's stream encodes
/// the next into the other half, events ordering the two, and the
/// caller's stream waits for the last copy. Either way later work on the
/// caller's stream sees the rows in the pages. Nothing is allocated,
/// nothing waits on the host.
///
/// Q: why do the kernel's blocks write the pages, when one DMA copy moves a
/// step's slots at the link's rate?
/// A: a decode step is 288 KB. Measured on the H200 (2026-11-26): the
/// kernel 6.5 µs, the DMA of the slots alone 8.3–9.0 µs, and the step with
/// the copy 21.8–22.6 µs: the copy waits for the kernel's end and then
/// starts, and that hand-over between the engines costs as much as the
/// copy. With the blocks sending their own slots the step took 14.1–15.9
/// µs in the same runs, and bulk appends 51.8 GB/s against 50.1 by DMA.
///
/// Q: then why through the staging half at all?
/// A: the stored form is written in 32-bit words, some of them OR-ed (the
/// words two warps' spans share). Measured on the H200 (b0c9c01), those
/// stores and ORs made straight into mapped host memory ran at 4.9 GB/s
/// (a step 83 µs). Written into L2 first and sent as whole 16-byte pieces,
/// each byte crosses the link once, in full lines.
///
/// # Pages
/// Q: why are all pages reserved up front, in one range?
/// A: pinning host memory (`cuMemHostAlloc`) is slow and synchronises with
/// the device, so it cannot happen on the append path; and with one mapped
/// range the decoder reads the store as one fixed-stride dataset (one view,
/// one launch per gather), where separate allocations would need one launch
/// per page with the requested rows split among them on the device. Pages
/// are the unit of the budget and of [`KvStore::pages_used`]; the store
/// never grows by reallocation or copying, it fills its reserved pages.
///
/// # Segments and refits
/// [`KvStore::refit_blocking`] fits a new codebook (on rows the caller gives, e.g.
/// the latest step's) and starts a new segment with it for later appends;
/// earlier rows keep their codebook. A segment starts on a multiple of 8
/// rows (its flags start on a byte), so a refit may leave up to 7 empty
/// slots. Gathers name a segment and take row numbers within it (the
/// decoder reads one codebook per launch); with no refit, segment 0's rows
/// are the store's rows. [`KvStore::savings_blocking`] measures each
/// segment's savings, to tell when a refit pays.
///
/// # Streams
/// Appends must be ordered among themselves (one stream, or events between
/// streams): they share the store's scratch. A gather sees the rows
/// appended before it was called; it must be ordered after those appends
/// (the same stream, or an event).
pub struct KvStore {
    slots: Slots,
    /// Every page, one mapped range (see "Pages" above).
    pages: PinnedBuffer<u8>,
    /// Encoded flag of every row, bit `r % 8` of byte `r / 8`, in whole
    /// 32-bit words (`⌈capacity / 32⌉`: the append sets bits atomically).
    flags: DeviceBuffer<u32>,
    /// Stored length of every row.
    lengths: DeviceBuffer<u32>,
    /// Rows per piece of an append: `step_rows`, at most `STAGE_BYTES`.
    piece_rows: usize,
    /// Two device halves of `piece_rows` slots each, encoded into on the
    /// caller's stream and copied to the pages on `copies`.
    stage: [DeviceBuffer<u8>; 2],
    /// Recorded on the caller's stream once a half is encoded.
    encoded: [Event; 2],
    /// Recorded on `copies` once a half is in the pages.
    copied: [Event; 2],
    /// The half the next piece uses.
    half: usize,
    /// The store's copy stream (staging halves to pages).
    copies: Stream,
    fit: crate::fit::FitOptions,
    page_writes: PageWrites,
    segments: Vec<Segment>,
    next: u64,
    closed: bool,
    /// The last append and gather on each caller's stream, for the waits
    /// of [`KvStore::lengths_blocking`] and of the drop.
    uses: LastUses,
}

impl KvStore {
    /// Reserve the pages and device tables of `opts`, fit a codebook on
    /// `prefill` (rows of `row_bytes` in device memory, or host memory the
    /// GPU reads) on the GPU, and append the prefill as the store's first
    /// rows. Allocates, and returns when the prefill is stored.
    pub fn create<S: GpuReadable + ?Sized>(
        gpu: &Gpu,
        prefill: &S,
        row_bytes: usize,
        opts: &KvStoreOptions,
    ) -> Result<Self> {
        let slots = Slots::new(row_bytes, opts)?;
        let n = row_count(prefill, row_bytes)? as u64;
        if n == 0 {
            return Err(Error::invalid(
                "a KV store is fitted on its prefill: give it at least one row",
            ));
        }
        slots.take(0, prefill.byte_len(), row_bytes)?;
        let cap = slots.capacity() as usize;
        let piece_rows = opts.step_rows.min((STAGE_BYTES / row_bytes).max(1));
        let half = || device_buffer::<u8>(piece_rows * row_bytes, "allocating a staging half");
        let mut store = KvStore {
            slots,
            // Q: why more than the slots? A: the decoder reads whole
            // 128-byte lines (`ibp_kernels::detail::decode`, as `Payload::new` pads a
            // dataset's payload), so the last line of the last page must be
            // inside the allocation: unpadded, a gather of the last rows
            // read up to 8 bytes past it (compute-sanitizer memcheck under
            // tests/gpu_fuzz.rs, on the H200).
            pages: PinnedBuffer::zeroed((slots.bytes() as usize).max(1).next_multiple_of(128))?,
            flags: DeviceBuffer::zeroed(cap.div_ceil(32)).map_err(cuda_err("allocating flags"))?,
            lengths: DeviceBuffer::zeroed(cap).map_err(cuda_err("allocating lengths"))?,
            piece_rows,
            stage: [half()?, half()?],
            encoded: [Event::new()?, Event::new()?],
            copied: [Event::new()?, Event::new()?],
            half: 0,
            copies: new_stream()?,
            fit: opts.fit.clone(),
            page_writes: opts.page_writes,
            segments: Vec::new(),
            next: 0,
            closed: false,
            uses: LastUses::default(),
        };
        store.segments.push(store.segment(gpu, prefill, 0)?);
        let stream = new_stream()?;
        store.append(gpu, prefill, row_bytes, &stream)?;
        sync(&stream, "storing the prefill")?;
        Ok(store)
    }

    /// Fit a codebook on `rows` and make a segment of it at `first`.
    fn segment<S: GpuReadable + ?Sized>(&self, gpu: &Gpu, rows: &S, first: u64) -> Result<Segment> {
        let fit = Fitter::new(gpu).fit_blocking(rows, self.slots.row_bytes as usize, &self.fit)?;
        Ok(Segment {
            first,
            rows: 0,
            fitted_savings: fit.savings(),
            gcb: GpuCodebook::new(&fit.codebook)?,
            book: DeviceBook::new(&fit.codebook)?,
        })
    }

    /// Enqueue on `stream`: compress `rows` (rows of `row_bytes` in device
    /// memory) with the current segment's codebook into the next slots,
    /// with their stored lengths and flags. Returns the store rows they
    /// took. No allocation, no host synchronisation.
    ///
    /// Fails, leaving the store as it was (and readable), when `row_bytes`
    /// is not the store's, the bytes do not split into rows, the store is
    /// closed, or the rows would go past the page budget.
    pub fn append<S: GpuReadable + ?Sized>(
        &mut self,
        gpu: &Gpu,
        rows: &S,
        row_bytes: usize,
        stream: &Stream,
    ) -> Result<Range<u64>> {
        let r = self.enqueue_append(gpu, rows, row_bytes, stream);
        // Noted also after an error: what was enqueued before it still runs.
        let noted = self.uses.record(stream);
        let taken = r?;
        noted.map(|()| taken)
    }

    /// [`KvStore::append`], without noting the use.
    fn enqueue_append<S: GpuReadable + ?Sized>(
        &mut self,
        gpu: &Gpu,
        rows: &S,
        row_bytes: usize,
        stream: &Stream,
    ) -> Result<Range<u64>> {
        if self.closed {
            return Err(Error::invalid(
                "append to a closed KV store; it stays readable, but takes no more rows",
            ));
        }
        let taken = self.slots.take(self.next, rows.byte_len(), row_bytes)?;
        let seg = self
            .segments
            .last()
            .ok_or_else(|| Error::invalid("a KV store without a segment"))?;
        let book = seg.gcb.book.as_device_ptr().as_raw();
        let chunk = seg.gcb.cb.chunk().bytes();
        let l = self.slots.row_bytes;
        // Slots of a width that is a multiple of 4 are whole words: the
        // kernel writes every byte of them. Otherwise neighbours share a
        // word, which the kernel ORs into a zeroed half.
        let zero_tail = l.is_multiple_of(4);
        let kernel = kernels::kv_append(chunk);
        // One piece (a decode step) runs wholly on the caller's stream: no
        // event and no second stream in its path. Several pieces overlap:
        // the copy of one on `copies` with the encode of the next.
        let overlap = taken.end - taken.start > self.piece_rows as u64;
        // Rows of whole words up to 2 KiB: a row split over the warps of a
        // block, one block per R rows (the kernel makes the same test);
        // otherwise a warp per row. With a block per R rows the kernel may
        // also write the pages itself (`PageWrites`).
        let shape = kv::block_shape(l).filter(|_| zero_tail);
        let direct = shape.is_some() && self.page_writes == PageWrites::Kernel;
        let mut at = taken.start;
        while at < taken.end {
            let n = (taken.end - at).min(self.piece_rows as u64);
            let src = rows.device_addr() + (at - taken.start) * l;
            let h = self.half;
            let stage = &self.stage[h];
            let bytes = (n * l) as usize;
            // The half's last copy to the pages must be done before it is
            // written again (a copy on the caller's stream, or one covered by
            // the wait that ended an earlier append, already is).
            if overlap {
                wait(stream, &self.copied[h])?;
            }
            if !zero_tail {
                zero_async(stage, bytes, stream)?;
            }
            let out = stage.as_device_ptr().as_raw();
            let p = KvAppendParams {
                src,
                rows: n,
                row_bytes: l,
                book,
                lengths: self.lengths.as_device_ptr().as_raw(),
                flags: self.flags.as_device_ptr().as_raw(),
                first: at,
                out,
                pages: if direct {
                    self.pages.device_addr() + self.slots.slot_offset(at)
                } else {
                    0
                },
                zero_tail: zero_tail as u32,
            };
            let (grid, block) = match shape {
                Some((per_row, rows_per_block)) => (
                    u32::try_from(n.div_ceil(rows_per_block))
                        .map_err(|_| Error::invalid("too many rows in one append piece"))?,
                    (32 * per_row * rows_per_block) as u32,
                ),
                _ => (warp_grid(gpu, kernel, n)?, WARP_BLOCK),
            };
            // SAFETY: `src` holds n rows of L bytes (row_count via `take`);
            // rows at .. at + n lie inside the store (`take`), so the length
            // table holds at + n u32 and the bitmap ⌈(at + n) / 32⌉ words,
            // zeroed at creation and only ever OR-ed; the half holds
            // piece_rows ≥ n slots, zeroed just before on this stream when
            // the slots share words, and no copy reads it (the wait above);
            // KvAppendParams is the kernel's type.
            unsafe { gpu.launch(kernel, grid, block, 0, stream, p)? };
            if direct {
                // The kernel wrote the slots into the pages (`p.pages`: the
                // slots at .. at + n, inside the store by `take`, written by
                // no one else, as for the copy below).
                self.half ^= 1;
                at += n;
                continue;
            }
            self.copy_to_pages(h, at, out, bytes, overlap, stream)?;
            self.half ^= 1;
            at += n;
        }
        // Copies are ordered on their stream: the last one recorded covers
        // them all.
        if overlap {
            wait(stream, &self.copied[self.half ^ 1])?;
        }
        if let Some(seg) = self.segments.last_mut() {
            seg.rows += taken.end - taken.start;
        }
        self.next = taken.end;
        Ok(taken)
    }

    /// Copy the `bytes` bytes of staging half `h` (device address `out`)
    /// into the pages' slots from store row `at` on: on the caller's
    /// stream, or (`overlap`) on the store's copy stream after the encode,
    /// recording `copied[h]`.
    fn copy_to_pages(
        &mut self,
        h: usize,
        at: u64,
        out: u64,
        bytes: usize,
        overlap: bool,
        stream: &Stream,
    ) -> Result<()> {
        let copies = if overlap {
            self.encoded[h].record(stream)?;
            wait(&self.copies, &self.encoded[h])?;
            &self.copies
        } else {
            stream
        };
        let dst = &mut self.pages[self.slots.slot_offset(at) as usize..][..bytes];
        // SAFETY: `dst` is `bytes` bytes of the pinned pages (the slots
        // from `at` on, inside the store by `take`), written by no one
        // else: each slot is appended once, and readers order themselves
        // after the append (the copy is on the caller's stream, or the
        // caller's stream waits for it at the end of the append). The
        // half's first `bytes` bytes were encoded before the copy: on the
        // same stream, or before `encoded[h]`, which the copy stream waits
        // for; the half is not written again before the copy is done (same
        // stream, or the wait on `copied[h]`, recorded after the copy).
        unsafe {
            driver::copy::dtoh_async(
                dst.as_mut_ptr(),
                out,
                bytes,
                copies,
                "copying a step's slots to the pages",
            )?
        };
        if overlap {
            self.copied[h].record(&self.copies)?;
        }
        Ok(())
    }

    /// Enqueue on `stream`: output row `i` of `out` (`ids.len()` rows of
    /// `L` bytes, device memory) receives row `ids[i]` of segment
    /// `segment` (row numbers within the segment; [`SegmentInfo`] gives its
    /// first store row), decoded from the pinned pages. Rows not appended
    /// (yet) are zero-filled and reported in `status` as out of range. No
    /// allocation, no host synchronisation.
    pub fn gather<I: GatherIndex>(
        &self,
        gpu: &Gpu,
        segment: usize,
        ids: &DeviceSlice<I>,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        self.enqueue(gpu, segment, &Request::gather(ids), out, status, stream)
    }

    /// Enqueue one decode of segment `segment`'s rows (row numbers within
    /// the segment), as [`Decoder::enqueue`] does for a dataset: a gather
    /// or a range, decoded or read as the ideal baseline
    /// ([`super::Mode::Ideal`]). No allocation, no host synchronisation.
    pub fn enqueue(
        &self,
        gpu: &Gpu,
        segment: usize,
        req: &Request<'_>,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        let seg = self.segments.get(segment).ok_or_else(|| {
            Error::invalid(format!(
                "segment {segment} of a KV store with {} segments",
                self.segments.len()
            ))
        })?;
        let l = self.slots.row_bytes;
        // Q: why size a decoder per call?
        // A: it allocates nothing (an occupancy query), and a segment's
        // rows grow with every append.
        let shape = Shape {
            max_stored: l,
            host: true,
            clustered: false,
        };
        let dec = Decoder::for_book(gpu, &seg.book, shape, &DecodeOptions::default())?;
        // The segment's window of the store: its slots in the pinned pages
        // (whole 128-byte lines, padded at creation), its lengths and its
        // flags (segments start on a multiple of 8 rows, so on a byte of
        // the bitmap: `plan`).
        let rows = RowsView {
            src: self.pages.device_addr() + self.slots.slot_offset(seg.first),
            offsets: 0,
            lengths: self.lengths.as_device_ptr().as_raw() + 4 * seg.first,
            flags: self.flags.as_device_ptr().as_raw() + seg.first / 8,
            rows: seg.rows,
            offset_base: 0,
            clusters: None,
            host: true,
            fetch: None,
        };
        dec.launch(gpu, &rows, req, 0, out, status, stream)?;
        self.uses.record(stream)
    }

    /// Fit a new codebook on `rows` (rows of the store's width, device
    /// memory or host memory the GPU reads: e.g. the latest step's) and
    /// start a new segment with it; later appends use it, earlier rows keep
    /// theirs. Returns the new segment's number. Allocates and waits (a
    /// fit), so it belongs between steps, not on the append path; it waits
    /// for no stream of the caller's.
    pub fn refit_blocking<S: GpuReadable + ?Sized>(
        &mut self,
        gpu: &Gpu,
        rows: &S,
    ) -> Result<usize> {
        if self.closed {
            return Err(Error::invalid("refit of a closed KV store"));
        }
        let n = row_count(rows, self.slots.row_bytes as usize)?;
        if n == 0 {
            return Err(Error::invalid("a refit needs at least one row to fit on"));
        }
        let first = self.slots.segment_start(self.next)?;
        let seg = self.segment(gpu, rows, first)?;
        self.segments.push(seg);
        self.next = first;
        Ok(self.segments.len() - 1)
    }

    /// Close the store: later appends and refits fail; gathers go on.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Whether [`KvStore::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Bytes per row (`L`, the slot size).
    pub fn row_bytes(&self) -> usize {
        self.slots.row_bytes as usize
    }

    /// Rows in use, the empty slots a refit leaves included (the next
    /// append's first store row).
    pub fn rows(&self) -> u64 {
        self.next
    }

    /// Rows the reserved pages hold.
    pub fn capacity(&self) -> u64 {
        self.slots.capacity()
    }

    /// Every reserved page, as the host sees them: row `r`'s slot is
    /// `[r·L, (r+1)·L)`, its stored form a prefix. Synchronise the streams
    /// of earlier appends first: the GPU writes these bytes.
    pub fn pages_host(&self) -> &[u8] {
        &self.pages[..self.slots.bytes() as usize]
    }

    /// Bytes of one page (`page_rows · L`).
    pub fn page_bytes(&self) -> u64 {
        self.slots.page_bytes()
    }

    /// The page holding store row `row`'s slot, and the slot's byte offset
    /// in that page.
    pub fn slot_location(&self, row: u64) -> (u64, u64) {
        self.slots.page_of(row)
    }

    /// Pages holding at least one row.
    pub fn pages_used(&self) -> u64 {
        self.slots.pages_used(self.next)
    }

    /// Bytes of pinned host memory reserved (every page).
    pub fn reserved_bytes(&self) -> u64 {
        self.slots.bytes()
    }

    /// The segments, oldest first.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segments
            .iter()
            .map(|s| SegmentInfo {
                first_row: s.first,
                rows: s.rows,
                fitted_savings: s.fitted_savings,
            })
            .collect()
    }

    /// Segment `segment`'s codebook.
    pub fn codebook(&self, segment: usize) -> Option<&Codebook> {
        self.segments.get(segment).map(|s| s.gcb.codebook())
    }

    /// The stored length of every row in use, copied from the device
    /// (waits for the appends and gathers enqueued before, on every stream
    /// they ran on, and for nothing else).
    pub fn lengths_blocking(&self) -> Result<Vec<u32>> {
        // A synchronous copy waits only for the legacy stream, not for the
        // non-blocking streams appends run on.
        self.uses.synchronize()?;
        let mut v = copy_to_host_blocking(&self.lengths)?;
        v.truncate(self.next as usize);
        Ok(v)
    }

    /// Each segment's savings so far, `1 − stored / raw` over its appended
    /// rows (0 for an empty segment): the drift a refit answers. Waits, as
    /// [`KvStore::lengths_blocking`] does.
    pub fn savings_blocking(&self) -> Result<Vec<f64>> {
        let lengths = self.lengths_blocking()?;
        let l = self.slots.row_bytes;
        Ok(self
            .segments
            .iter()
            .map(|s| {
                let rows = &lengths[s.first as usize..(s.first + s.rows) as usize];
                let stored: u64 = rows.iter().map(|&n| n as u64).sum();
                if s.rows == 0 {
                    0.0
                } else {
                    1.0 - stored as f64 / (s.rows * l) as f64
                }
            })
            .collect())
    }
}

impl Drop for KvStore {
    fn drop(&mut self) {
        // The pages and the staging halves are freed after this: no kernel
        // or copy may still read or write them. A one-piece append's copy
        // and the gathers run on the callers' streams, which the store does
        // not hold: wait for the last use on each (and for the copy stream,
        // which an append that failed half-way may have left busy).
        let _ = self.uses.synchronize();
        let _ = self.copies.synchronize();
    }
}
