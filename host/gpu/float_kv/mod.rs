//! The KV store on the float coding: [`FloatKvStore`] (its documentation
//! describes the design), its options and arithmetic (`plan`) and its
//! piece encoder (`coder`).

mod coder;
mod plan;

use std::ops::Range;

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::FloatKvPlaceParams;

use coder::Coder;
pub use plan::FloatKvOptions;
use plan::{Layout, slot_by_rule};

use super::driver::event::LastUses;
use super::driver::{copy_to_host_blocking, new_stream, sync};
use super::float_decode::{DirectIndex, FloatDecoder};
use super::float_encode::FloatEncoder;
use super::memory::{GpuReadable, GpuWritable, PinnedBuffer};
use super::{DecodeStatus, Gpu, cuda_err, kernels};
use crate::error::{Error, ErrorKind, Result};
use crate::float_code::{FloatType, Table};

/// Bytes of rows one piece of an append encodes at most (its stage).
const STAGE_BYTES: usize = 32 << 20;

/// Threads a block of the placement (a warp a row).
const PLACE_BLOCK: u32 = 256;

/// What a [`FloatKvStore`] holds and reserves ([`FloatKvStore::stats_blocking`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloatKvStats {
    /// Rows appended (refused ones included: they keep their row number).
    pub rows: u64,
    /// Rows the store holds at most.
    pub capacity: u64,
    /// Bytes of a raw row (`L`).
    pub row_bytes: u64,
    /// Bytes of a slot (`S`).
    pub slot_bytes: u64,
    /// Overflow entries reserved.
    pub overflow_entries: u64,
    /// Overflow entries taken by rows longer than a slot.
    pub overflow_used: u64,
    /// Rows not stored because the overflow area was full.
    pub refused: u64,
    /// Pinned host memory reserved (slots, overflow area, padding).
    pub pinned_bytes: u64,
    /// Device memory of the direct index (12 bytes a row of capacity).
    pub index_bytes: u64,
    /// `pinned_bytes + index_bytes`.
    pub reserved_bytes: u64,
    /// Rows per byte reserved over raw rows per byte:
    /// `capacity · L / reserved_bytes`.
    pub capacity_ratio: f64,
}

/// An appendable KV cache on the float coding (`docs/FORMAT.md` §7): a
/// table fitted on the prefill, each row coded on the GPU every decode
/// step into a fixed-size slot of pinned host pages reserved up front, and
/// fetched back by row ids into device memory, decoded.
///
/// ```text
/// let mut store = FloatKvStore::create(&gpu, FloatType::BF16, &prefill, 768, &FloatKvOptions::default())?;
/// let rows = store.append(&gpu, &step_rows, 768, &stream)?;      // enqueued, no sync
/// store.gather(&gpu, &ids, &mut out, &status, &stream)?;         // enqueued, no sync
/// stream.synchronize()?; status.check_blocking()?; store.check_blocking()?;
/// ```
///
/// # Bounded size: slots from the prefill, and an overflow area
/// No lossless code bounds every row below its raw size, and the float
/// coding's worst case is the raw row (a row is stored coded or raw,
/// never longer). So at creation the table is fitted on the prefill, every
/// prefill row is sized under it on the GPU, and the slot length `S` is
/// chosen from those sizes by a stated rule
/// ([`FloatKvOptions::slot_fraction`], [`FloatKvOptions::slot_margin`]:
/// by default the smallest multiple of 16 bytes holding 95% of the
/// prefill's rows). A row whose stored form is longer than `S` goes into
/// the overflow area instead, reserved up front
/// ([`FloatKvOptions::overflow_fraction`] of the capacity's rows, one raw
/// row rounded up to 16 each), its entry handed out by a counter on the
/// device. Every row takes at most its slot, or its slot and one overflow
/// entry, so the bytes reserved are fixed at creation whatever the data:
///
/// - pinned host memory: `capacity · S + entries · ⌈L⌉₁₆` (and 32 bytes of
///   padding, [`FloatKvStats::pinned_bytes`]);
/// - device memory: the direct index, a start (u64) and a length (u32) a
///   row of capacity (12 bytes), read by the decoder.
///
/// [`FloatKvStore::capacity_ratio`] counts both: rows per GiB reserved
/// over raw rows per GiB.
///
/// Q: why not slots of the raw size, as [`super::KvStore`]?
/// A: then compression saves only link traffic, not host memory: the
/// float-coded store holds more rows per GiB of pinned memory than raw
/// rows, which is what a host-offloaded KV cache runs out of.
///
/// Q: why the prefill's sizes, not a bound from the table?
/// A: the table's longest codes bound nothing useful (a row of rare
/// exponents is longer than raw, hence stored raw); the prefill's sizes
/// are what the decode steps' rows look like, and the overflow area takes
/// the drift.
///
/// Q: when the overflow area is full?
/// A: the row is not stored: its index entry says so (a length the
/// decoder refuses, so a gather of it reports it damaged and zeroes its
/// output row), the store's counters record the first such row, and
/// [`FloatKvStore::check_blocking`] returns an
/// [`ErrorKind::OutOfMemory`] error naming it. Rows stored before, and
/// rows that fit their slots after, stay readable: nothing is lost but
/// the refused rows.
///
/// # The append path
/// Per piece of at most [`FloatKvOptions::step_rows`] rows (and at most 32
/// MiB of them), on the caller's stream, into buffers reserved at
/// creation: the GPU encoder's size pass, a memset and its write pass into
/// a device stage, a row every `⌈L⌉₁₆` bytes (`ibp_float_size`,
/// `ibp_float_encode_strided`: no scan, no index; the store's
/// table), then `ibp_float_kv_place`: a warp a row copies
/// the row's stored form from the stage into its slot, or into the next
/// overflow entry, in 16-byte stores, and writes the row's index entry.
/// Nothing is allocated, nothing waits on the host.
///
/// Q: why through a device stage, not the encoder's ORs straight into the
/// pages?
/// A: the encoder ORs 32-bit words; into mapped host memory that ran at
/// 4.9 GB/s for [`super::KvStore`] (its Q/A). From the stage, in L2, each
/// byte crosses the link once, in 16-byte pieces of whole lines.
///
/// # Gathers
/// [`FloatKvStore::gather`] is [`FloatDecoder`]'s direct-index gather: the
/// span is the pinned pages' mapped device address (zero-copy: only the
/// rows asked for cross the link, each its stored bytes), row `t` the
/// `lens[t]` bytes at `starts[t]`.
///
/// # Streams
/// Appends must be ordered among themselves (one stream, or events between
/// streams): they share the stage. A gather sees the rows appended before
/// it was called, once ordered after those appends (the same stream, or
/// an event); unordered, it reads index entries not yet written, which
/// the decoder checks (never out of the span).
pub struct FloatKvStore {
    layout: Layout,
    table: Table,
    /// Sizes, stage and launch shapes of a piece.
    coder: Coder,
    /// The span: every slot, then the overflow area, one mapped range.
    pages: PinnedBuffer<u8>,
    /// The direct index: every row's start in the span, and its length.
    starts: DeviceBuffer<u64>,
    lens: DeviceBuffer<u32>,
    /// The next overflow entry, and the first refused store row
    /// (`u64::MAX`: none).
    counters: DeviceBuffer<u64>,
    decoder: FloatDecoder,
    next: u64,
    /// The last append and gather on each caller's stream, for the waits
    /// of the blocking calls and of the drop.
    uses: LastUses,
}

impl std::fmt::Debug for FloatKvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloatKvStore")
            .field("layout", &self.layout)
            .field("rows", &self.next)
            .finish()
    }
}

impl FloatKvStore {
    /// Fit a table of type `t` on `prefill` (rows of `row_bytes` in device
    /// memory, or host memory the GPU reads; 4-aligned) on the GPU, size
    /// every prefill row under it, choose the slot by `opts`' rule, reserve
    /// the pages, the index and the scratch, and append the prefill as the
    /// store's first rows. Allocates, and returns when the prefill is
    /// stored.
    ///
    /// Errors with [`ErrorKind::InvalidArgument`] for an empty prefill,
    /// bytes that are not whole rows, options out of range, or a prefill
    /// past the capacity; as [`crate::float_code::fit`] for the fit; with
    /// [`ErrorKind::Unsupported`] for rows that are not whole 4-byte words;
    /// with [`ErrorKind::OutOfMemory`] when the prefill's own rows
    /// overflowed the overflow area (a slot forced too small).
    pub fn create<S: GpuReadable + ?Sized>(
        gpu: &Gpu,
        t: FloatType,
        prefill: &S,
        row_bytes: usize,
        opts: &FloatKvOptions,
    ) -> Result<Self> {
        // Checked first with a slot of the raw size (the options and the
        // width), then with the chosen slot.
        Layout::new(
            row_bytes as u64,
            (row_bytes as u64).next_multiple_of(16),
            opts,
        )?;
        let bytes = prefill.byte_len();
        if bytes == 0 || !bytes.is_multiple_of(row_bytes) {
            return Err(Error::invalid(format!(
                "a float-coded KV store is fitted on its prefill: give it at least one whole row ({bytes} bytes of {row_bytes}-byte rows)"
            )));
        }
        let n = bytes / row_bytes;
        let table = FloatEncoder::new(gpu, n, bytes)?.fit(t, prefill, row_bytes, &opts.fit)?;
        let piece_rows = opts.step_rows.min((STAGE_BYTES / row_bytes).max(1));
        let coder = Coder::new(gpu, &table, row_bytes, piece_rows)?;
        let stream = new_stream()?;
        let slot_bytes = match opts.slot_bytes {
            Some(s) => s,
            None => {
                let mut sizes = Vec::with_capacity(n);
                let mut at = 0;
                while at < n {
                    let k = piece_rows.min(n - at);
                    let src = prefill.device_addr() + (at * row_bytes) as u64;
                    sizes.extend(coder.sizes_blocking(gpu, src, k, &stream)?);
                    at += k;
                }
                slot_by_rule(
                    &sizes,
                    row_bytes as u64,
                    opts.slot_fraction,
                    opts.slot_margin,
                )?
            }
        };
        let layout = Layout::new(row_bytes as u64, slot_bytes, opts)?;
        layout.take(0, bytes, row_bytes)?;
        let cap = layout.capacity as usize;
        let mut store = FloatKvStore {
            layout,
            coder,
            pages: PinnedBuffer::zeroed(layout.pinned_bytes() as usize)?,
            starts: DeviceBuffer::zeroed(cap).map_err(cuda_err("allocating row starts"))?,
            lens: DeviceBuffer::zeroed(cap).map_err(cuda_err("allocating row lengths"))?,
            counters: DeviceBuffer::from_slice(&[0, u64::MAX])
                .map_err(cuda_err("allocating the overflow counters"))?,
            decoder: FloatDecoder::for_table(gpu, &table, row_bytes)?,
            table,
            next: 0,
            uses: LastUses::default(),
        };
        store.append(gpu, prefill, row_bytes, &stream)?;
        sync(&stream, "storing the prefill")?;
        store.check_blocking()?;
        Ok(store)
    }

    /// Enqueue on `stream`: code `rows` (rows of `row_bytes` in device
    /// memory or memory the GPU reads, 4-aligned) with the store's table,
    /// each into its slot or an overflow entry, with its index entry.
    /// Returns the store rows they took. No allocation, no host
    /// synchronisation.
    ///
    /// Fails before enqueuing anything, leaving the store as it was, when
    /// `row_bytes` is not the store's, the bytes do not split into rows or
    /// are not 4-aligned, or the rows would go past the capacity. A full
    /// overflow area is reported later, by [`FloatKvStore::check_blocking`].
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

    /// [`FloatKvStore::append`], without noting the use.
    fn enqueue_append<S: GpuReadable + ?Sized>(
        &mut self,
        gpu: &Gpu,
        rows: &S,
        row_bytes: usize,
        stream: &Stream,
    ) -> Result<Range<u64>> {
        let taken = self.layout.take(self.next, rows.byte_len(), row_bytes)?;
        if !rows.device_addr().is_multiple_of(4) {
            return Err(Error::invalid(format!(
                "rows at {:#x}; the float-coded KV store reads rows from a 4-aligned address",
                rows.device_addr()
            )));
        }
        let l = self.layout.row_bytes;
        let mut at = taken.start;
        while at < taken.end {
            let n = (taken.end - at).min(self.coder.piece_rows as u64);
            let src = rows.device_addr() + (at - taken.start) * l;
            self.coder.enqueue(gpu, src, n as usize, stream)?;
            let p = FloatKvPlaceParams {
                stage: self.coder.stage.as_device_ptr().as_raw(),
                stage_stride: self.coder.stride,
                sizes: self.coder.sizes.as_device_ptr().as_raw(),
                rows: n,
                first: at,
                pages: self.pages.device_addr(),
                slot_bytes: self.layout.slot_bytes,
                overflow_at: self.layout.overflow_at(),
                entry_bytes: self.layout.entry_bytes,
                overflow_entries: self.layout.overflow_entries,
                counters: self.counters.as_device_ptr().as_raw(),
                starts: self.starts.as_device_ptr().as_raw(),
                lens: self.lens.as_device_ptr().as_raw(),
            };
            let grid = u32::try_from(n.div_ceil(u64::from(PLACE_BLOCK / 32)).min(1 << 20))
                .map_err(|_| Error::invalid("too many rows in one append piece"))?;
            // SAFETY: the stage (16-aligned: a device allocation) holds
            // this piece's stored forms, a row every `stride` bytes (a
            // multiple of 16, at least L), their sizes in `sizes` (n u64,
            // each at most L ≤ entry_bytes), written before on this
            // stream; the pages are mapped pinned
            // memory of `pinned_bytes ≥ span_len` bytes, 16-aligned (page
            // aligned), holding the slots of rows at .. at + n (inside the
            // capacity by `take`) and the overflow area, each slot and
            // entry a multiple of 16 (`Layout::new`), written by no one
            // else (each slot once; each entry handed out once by the
            // counter); the counters two u64; starts and lens `capacity ≥
            // at + n` entries; FloatKvPlaceParams is the kernel's type.
            unsafe {
                gpu.launch(
                    kernels::FLOAT_KV_PLACE,
                    grid.max(1),
                    PLACE_BLOCK,
                    0,
                    stream,
                    p,
                )?
            };
            at += n;
        }
        self.next = taken.end;
        Ok(taken)
    }

    /// Enqueue on `stream`: output row `i` of `out` (`ids.len()` rows of
    /// `L` bytes, device memory) receives store row `ids[i]`, decoded from
    /// the pinned pages (zero-copy). Rows not appended (yet), and rows
    /// refused by a full overflow area, are zero-filled and reported in
    /// `status`. No allocation, no host synchronisation.
    ///
    /// Errors with [`ErrorKind::InvalidArgument`] for an `out` shorter than
    /// `ids.len() · L` or not aligned to the element size.
    pub fn gather<O: GpuWritable + ?Sized>(
        &self,
        gpu: &Gpu,
        ids: &DeviceSlice<u64>,
        out: &mut O,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        let rows = self.direct_index();
        // SAFETY: the index is as DirectIndex says: `starts` and `lens`
        // hold `capacity ≥ next` entries in device memory (zeroed at
        // creation, then written by the appends), the span is the mapped
        // pinned pages, 16-aligned, readable `pinned_bytes ≥ span_len + 32`
        // bytes (the pieces around each row and the 16 after it), alive
        // while `self` is, which the drop makes outlive every gather (the
        // uses noted below); `ids` holds `ids.len()` u64 of device memory.
        let r = unsafe {
            self.decoder.gather_direct(
                gpu,
                &rows,
                ids.as_device_ptr().as_raw(),
                0,
                ids.len() as u64,
                out,
                status,
                stream,
            )
        };
        let noted = self.uses.record(stream);
        r?;
        noted
    }

    /// The direct index of the rows appended so far.
    fn direct_index(&self) -> DirectIndex {
        DirectIndex {
            span: self.pages.device_addr(),
            span_len: self.layout.span_len(),
            starts: self.starts.as_device_ptr().as_raw(),
            lens: self.lens.as_device_ptr().as_raw(),
            rows: self.next,
        }
    }

    /// Waits for the appends and gathers enqueued so far (on every stream
    /// they ran on, and nothing else), then reads the counters: the next
    /// overflow entry and the first refused row.
    fn counters_blocking(&self) -> Result<(u64, u64)> {
        self.uses.synchronize()?;
        let c = copy_to_host_blocking(&self.counters)?;
        Ok((c[0], c[1]))
    }

    /// Whether every row appended so far was stored: waits for the
    /// appends (as [`FloatKvStore::stats_blocking`]); errors with
    /// [`ErrorKind::OutOfMemory`] when the overflow area was full for some
    /// row, naming the first (those rows read as damaged; every other row
    /// stays readable).
    pub fn check_blocking(&self) -> Result<()> {
        let (used, first) = self.counters_blocking()?;
        if first == u64::MAX {
            return Ok(());
        }
        let entries = self.layout.overflow_entries;
        Err(Error::new(
            ErrorKind::OutOfMemory,
            format!(
                "the float-coded KV store's overflow area ({entries} entries of {} bytes) is full: {} rows longer than their {}-byte slots were not stored, the first store row {first}; their gathers report them damaged, every other row stays readable (create the store with a larger FloatKvOptions::overflow_fraction or slot)",
                self.layout.entry_bytes,
                used.saturating_sub(entries),
                self.layout.slot_bytes
            ),
        ))
    }

    /// What the store holds and reserves; waits for the appends and
    /// gathers enqueued before (on every stream they ran on, and nothing
    /// else).
    pub fn stats_blocking(&self) -> Result<FloatKvStats> {
        let (used, _) = self.counters_blocking()?;
        let l = &self.layout;
        Ok(FloatKvStats {
            rows: self.next,
            capacity: l.capacity,
            row_bytes: l.row_bytes,
            slot_bytes: l.slot_bytes,
            overflow_entries: l.overflow_entries,
            overflow_used: used.min(l.overflow_entries),
            refused: used.saturating_sub(l.overflow_entries),
            pinned_bytes: l.pinned_bytes(),
            index_bytes: l.index_bytes(),
            reserved_bytes: self.reserved_bytes(),
            capacity_ratio: l.capacity_ratio(),
        })
    }

    /// Every appended row's index entry, copied from the device (waits as
    /// [`FloatKvStore::stats_blocking`]): its start in the span and its
    /// stored length (`u32::MAX` for a refused row).
    pub fn index_blocking(&self) -> Result<(Vec<u64>, Vec<u32>)> {
        self.uses.synchronize()?;
        let n = self.next as usize;
        let mut starts = copy_to_host_blocking(&self.starts)?;
        let mut lens = copy_to_host_blocking(&self.lens)?;
        starts.truncate(n);
        lens.truncate(n);
        Ok((starts, lens))
    }

    /// The table every row is coded with (fitted on the prefill).
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Bytes per raw row (`L`).
    pub fn row_bytes(&self) -> usize {
        self.layout.row_bytes as usize
    }

    /// Bytes of a slot (`S`).
    pub fn slot_bytes(&self) -> u64 {
        self.layout.slot_bytes
    }

    /// Rows appended (the next append's first store row).
    pub fn rows(&self) -> u64 {
        self.next
    }

    /// Rows the store holds at most.
    pub fn capacity(&self) -> u64 {
        self.layout.capacity
    }

    /// Overflow entries reserved.
    pub fn overflow_entries(&self) -> u64 {
        self.layout.overflow_entries
    }

    /// Bytes reserved: the pinned pages and the device index.
    pub fn reserved_bytes(&self) -> u64 {
        self.layout.pinned_bytes() + self.layout.index_bytes()
    }

    /// Capacity against raw rows: rows per GiB reserved (pages and index)
    /// over raw rows per GiB.
    pub fn capacity_ratio(&self) -> f64 {
        self.layout.capacity_ratio()
    }

    /// The span as the host sees it: row `r`'s slot at `r · S`, the
    /// overflow entries after the slots. Synchronise the streams of
    /// earlier appends first: the GPU writes these bytes.
    pub fn pages_host(&self) -> &[u8] {
        &self.pages[..self.layout.span_len() as usize]
    }
}

impl Drop for FloatKvStore {
    fn drop(&mut self) {
        // The pages, the stage and the index are freed after this: no
        // kernel may still read or write them. Appends and gathers run on
        // the callers' streams, which the store does not hold: wait for
        // the last use on each.
        let _ = self.uses.synchronize();
    }
}
