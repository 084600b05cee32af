//! [`Compressor`]: one codebook's compression on one GPU, its public calls
//! and the pipelines' stages (`enqueue_*`), over the buffers of `super`.

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::{
    ClearParams, CompactParams, ENCODE_SLOTS_SCRATCH, EncodeParams, MeasureParams,
};

use super::{
    DeviceCompressed, GpuCodebook, WARP_BLOCK, Work, encoder_out_bytes, row_count, warp_grid,
    wave_grid,
};
use crate::codebook::Codebook;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::gpu::driver::{
    copy_elements, copy_to_host_blocking, device_buffer, ensure, new_stream, out_of_memory, sync,
    zero_async, zero_from_async,
};
use crate::gpu::kernels;
use crate::gpu::memory::GpuReadable;
use crate::layout::{Layout, SizeReport};

/// Compression on one GPU under one codebook: the size query, the
/// compression of rows in device memory (or host memory the GPU reads),
/// and of host rows in batches. Holds the codebook's device tables
/// (`GpuCodebook`); the output's buffers are the caller's
/// ([`DeviceCompressed`], [`HostCompressor`](crate::gpu::HostCompressor)).
///
/// Every call allocates what it needs on its own stream and returns when
/// done (`_blocking`); several threads may compress with one `Compressor`.
pub struct Compressor<'g> {
    gpu: &'g Gpu,
    book: GpuCodebook,
}

impl<'g> Compressor<'g> {
    /// A compressor for `codebook` on `gpu` (uploads its tables; `gpu`'s
    /// context must be current).
    pub fn new(gpu: &'g Gpu, codebook: &Codebook) -> Result<Self> {
        Ok(Self {
            gpu,
            book: GpuCodebook::new(codebook)?,
        })
    }

    /// Compress under `cb` from now on, reusing the tables' device memory
    /// when it is large enough (no allocation and no free: what a loop
    /// that fits and compresses again and again pays is one copy of the
    /// tables; `ibp bench --section compress --stages` times both).
    pub fn replace(&mut self, cb: &Codebook) -> Result<()> {
        self.book.replace(cb)
    }

    /// The codebook.
    pub fn codebook(&self) -> &Codebook {
        &self.book.cb
    }

    /// The GPU.
    pub fn gpu(&self) -> &'g Gpu {
        self.gpu
    }

    /// Enqueue `ibp_size` over rows `src` (`rows` tensors, `stride` apart).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enqueue_size(
        &self,
        src: u64,
        rows: usize,
        sizes: &DeviceSlice<u64>,
        stage: Option<(u64, u64)>,
        stream: &Stream,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let l = self.book.cb.row_bytes() as u64;
        let p = MeasureParams {
            src,
            stride: l,
            rows: rows as u64,
            sample: rows as u64,
            row_bytes: l,
            book: self.book.book.as_device_ptr().as_raw(),
            sizes: sizes.as_device_ptr().as_raw(),
            stage: stage.map_or(0, |s| s.0),
            stage_stride: stage.map_or(0, |s| s.1),
            chunk: self.book.cb.chunk().bytes(),
            ..Default::default()
        };
        let grid = wave_grid(rows as u64);
        // SAFETY: `src` covers rows × L bytes, the book is this codebook's,
        // `sizes` holds `rows` u64 and the stage (when given) rows × stride
        // bytes (the callers' buffers); MeasureParams is the kernel's type.
        unsafe {
            self.gpu
                .launch(kernels::SIZE, grid, WARP_BLOCK, 0, stream, p)
        }
    }

    /// Enqueue the scan of `rows` sizes: flags always, offsets when
    /// `offsets` (and the total to `total` when not 0).
    pub(crate) fn enqueue_scan(
        &self,
        work: &Work,
        rows: usize,
        row_bytes: usize,
        offsets: bool,
        total: u64,
        stream: &Stream,
    ) -> Result<()> {
        super::enqueue_scan(self.gpu, work, rows, row_bytes, offsets, total, stream)
    }

    /// Enqueue `ibp_encode_clear`: zero the groups of the packed output
    /// `out` (`padded` bytes, `data_len` of them stored) where the
    /// encoder's writes meet ([`ClearParams`]), for the regions `work`'s
    /// sizes and offsets give (computed for these rows earlier on
    /// `stream`).
    ///
    /// Q: why not zero the whole output, as the fixed-stride layout does?
    /// A: for dense tables the output is most of the input (MiniLM f32:
    /// 87%), and a memset of it is a pass over that many bytes (0.2 ms a
    /// GiB on the H200); the encoder stores every other group whole, so
    /// two 32-byte sectors per tensor do.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enqueue_clear(
        &self,
        rows: usize,
        work: &Work,
        data_len: usize,
        out: &DeviceSlice<u8>,
        padded: usize,
        stream: &Stream,
    ) -> Result<()> {
        if padded > out.len() || !padded.is_multiple_of(32) || data_len > padded {
            return Err(Error::invalid(format!(
                "clearing {padded} bytes ({data_len} stored) of an output of {}",
                out.len()
            )));
        }
        let p = ClearParams {
            sizes: work.sizes.as_device_ptr().as_raw(),
            offsets: work.offsets.as_device_ptr().as_raw(),
            offset_base: 0,
            rows: rows as u64,
            row_bytes: self.book.cb.row_bytes() as u64,
            chunk: self.book.cb.chunk().bytes() as u64,
            out: out.as_device_ptr().as_raw(),
            data_len: data_len as u64,
            out_len: padded as u64,
        };
        let threads = rows as u64 + 1;
        let grid = threads.div_ceil(256).min(1 << 16) as u32;
        // SAFETY: sizes and offsets were computed for these rows earlier on
        // this stream (the caller's contract), so every region lies inside
        // the first `data_len ≤ padded` bytes of `out`, which holds `padded`
        // (a multiple of 32) bytes (checked above) from a 256-aligned
        // allocation; ClearParams is the kernel's type.
        unsafe {
            self.gpu
                .launch(kernels::ENCODE_CLEAR, grid, 256, 0, stream, p)
        }
    }

    /// Enqueue `ibp_encode_c*` into `out` (zeroed where writes meet, see
    /// [`Compressor::enqueue_clear`]; wholly for the fixed-stride layout), packed
    /// when `offsets`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enqueue_encode(
        &self,
        src: (u64, u64),
        rows: usize,
        work: &Work,
        offsets: bool,
        out: &DeviceSlice<u8>,
        stream: &Stream,
    ) -> Result<()> {
        let offsets = if offsets {
            work.offsets.as_device_ptr().as_raw()
        } else {
            0
        };
        let sizes = work.sizes.as_device_ptr().as_raw();
        let out = out.as_device_ptr().as_raw();
        // SAFETY: sizes (and offsets) were computed for these rows by the
        // size and scan kernels earlier on this stream, so every region lies
        // inside `out` (sized by the caller from them).
        unsafe { self.enqueue_encode_at(src, rows, sizes, offsets, out, None, stream) }
    }

    /// Enqueue `ibp_encode_slots_c*`, the fixed-stride layout with nothing
    /// measured first: each row encoded into its slot of
    /// `out` (`rows · L` bytes, need not be zeroed), stored raw when its
    /// stream outgrows the slot, the slot's bytes past the stored form
    /// zeroed (unless `scratch`: slots for [`Compressor::enqueue_compact`], whose
    /// bytes past the stored forms are left as they were), and each stored
    /// length written to `work`'s sizes. `L` must be a multiple of 4 (slots
    /// of whole 4-byte words: a 16-byte group two slots share is written
    /// word by word, each word by its slot's warp).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enqueue_encode_slots(
        &self,
        src: (u64, u64),
        rows: usize,
        work: &Work,
        out: &DeviceSlice<u8>,
        scratch: bool,
        stream: &Stream,
    ) -> Result<()> {
        let l = self.book.cb.row_bytes();
        if !l.is_multiple_of(4) || out.len() < rows * l {
            return Err(Error::invalid(format!(
                "unmeasured slots need rows of a multiple of 4 bytes and {} bytes of output; have {l}-byte rows and {}",
                rows * l,
                out.len()
            )));
        }
        let sizes = work.sizes.as_device_ptr().as_raw();
        let out = out.as_device_ptr().as_raw();
        // SAFETY: `out` holds every slot (checked), device allocations are
        // 256-aligned and L a multiple of 4 so every slot is 4-aligned;
        // `work.sizes` holds at least `rows` u64 (ensured by the caller).
        unsafe { self.enqueue_encode_at(src, rows, sizes, 0, out, Some(scratch), stream) }
    }

    /// Enqueue `ibp_compact`: the packed layout in `out` (`padded` bytes,
    /// zeroed past the stored ones) from the stored forms in `slots`
    /// (`rows` slots of `L` bytes, as [`Compressor::enqueue_encode_slots`] wrote
    /// them, its sizes scanned into `work`'s offsets earlier on `stream`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enqueue_compact(
        &self,
        rows: usize,
        row_bytes: usize,
        work: &Work,
        slots: &DeviceSlice<u8>,
        out: &DeviceSlice<u8>,
        padded: usize,
        stream: &Stream,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        if !row_bytes.is_multiple_of(4)
            || slots.len() < rows * row_bytes
            || !padded.is_multiple_of(16)
            || padded > out.len()
        {
            return Err(Error::invalid(format!(
                "compacting {rows} slots of {row_bytes} bytes ({} held) into {padded} bytes of {}",
                slots.len(),
                out.len()
            )));
        }
        let p = CompactParams {
            src: slots.as_device_ptr().as_raw(),
            stride: row_bytes as u64,
            rows: rows as u64,
            offsets: work.offsets.as_device_ptr().as_raw(),
            out: out.as_device_ptr().as_raw(),
            out_len: padded as u64,
        };
        let grid = warp_grid(self.gpu, kernels::COMPACT, rows as u64)?;
        // SAFETY: the slots hold `rows` slots of L bytes (checked; device
        // allocations are 256-aligned and L a multiple of 4), the offsets
        // were scanned from their stored lengths earlier on this stream
        // (the caller's contract), and `out` holds `padded` bytes, a
        // multiple of 16 that covers the total (the caller sized it from
        // the offsets' last entry); CompactParams is the kernel's type.
        unsafe {
            self.gpu
                .launch(kernels::COMPACT, grid, WARP_BLOCK, 0, stream, p)
        }
    }

    /// [`Compressor::enqueue_encode`] with every buffer given by its device
    /// address: `sizes` (`rows` u64), `offsets` (`rows + 1` u64, or 0 for
    /// the fixed-stride layout) and `out` (device memory or mapped pinned
    /// host memory).
    ///
    /// # Safety
    /// `src` holds `rows` tensors `src.1` bytes apart; `sizes` (and
    /// `offsets`) were computed for these rows under the codebook earlier on
    /// `stream`; `out` is writable and zeroed over every region they give
    /// (`rows · L` bytes for the fixed-stride layout), or, packed, over the
    /// groups [`Compressor::enqueue_clear`] zeroes. With `slots`
    /// ([`Compressor::enqueue_encode_slots`], `ibp_encode_slots_c*`; `Some(true)`
    /// for scratch slots) the kernel writes `sizes` instead, and `out`
    /// holds `rows` 4-aligned slots, not zeroed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn enqueue_encode_at(
        &self,
        src: (u64, u64),
        rows: usize,
        sizes: u64,
        offsets: u64,
        out: u64,
        slots: Option<bool>,
        stream: &Stream,
    ) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let chunk = self.book.cb.chunk().bytes();
        let kernel = if slots.is_some() {
            kernels::encode_slots(chunk)
        } else {
            kernels::encode(chunk)
        };
        let p = EncodeParams {
            src: src.0,
            stride: src.1,
            rows: rows as u64,
            row_bytes: self.book.cb.row_bytes() as u64,
            book: self.book.book.as_device_ptr().as_raw(),
            sizes,
            offsets,
            offset_base: 0,
            out,
            flags: self.book.flags
                | if slots == Some(true) {
                    ENCODE_SLOTS_SCRATCH
                } else {
                    0
                },
        };
        let grid = wave_grid(rows as u64);
        // SAFETY: the caller's contract covers every address;
        // EncodeParams is the kernel's type; WARP_BLOCK is the kernel's
        // RING_WARPS warps (checked where WARP_BLOCK is defined).
        unsafe { self.gpu.launch(kernel, grid, WARP_BLOCK, 0, stream, p) }
    }

    /// Stored length of every tensor of `src` under the codebook. Allocates the
    /// sizes and blocks until they are on the host.
    pub fn size_query_blocking<S: GpuReadable + ?Sized>(&self, src: &S) -> Result<SizeReport> {
        let rows = row_count(src, self.book.cb.row_bytes())?;
        let stream = new_stream()?;
        let sizes = device_buffer::<u64>(rows, "allocating sizes")?;
        self.enqueue_size(src.device_addr(), rows, &sizes, None, &stream)?;
        sync(&stream, "measuring sizes")?;
        let mut stored = copy_to_host_blocking(&sizes)?;
        stored.truncate(rows);
        let l = self.book.cb.row_bytes() as u64;
        let encoded_rows = stored.iter().filter(|&&s| s < l).count() as u64;
        Ok(SizeReport {
            total_stored: stored.iter().sum(),
            raw_rows: rows as u64 - encoded_rows,
            encoded_rows,
            stored,
        })
    }

    /// Compress the rows in `src` (device memory, or host memory the GPU
    /// can read: a [`PinnedBuffer`](crate::gpu::PinnedBuffer) or [`Registered`](crate::gpu::Registered)) into `layout`, in
    /// device memory. Blocks until done. See [`Compressor::compress_into_blocking`] to reuse
    /// the output's buffers.
    ///
    /// Reads `src` once for rows of whole 4-byte words (into slots; packed,
    /// when at least a fifth of the codebook's bits are invariant, through a
    /// scratch buffer as large as `src`, allocated when the device has the
    /// memory and kept in the result for its reuse), else twice
    /// (sizes, then the stored forms): for host memory,
    /// [`Compressor::compress_host_blocking`] reads it once, in batches.
    pub fn compress_blocking<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        layout: Layout,
    ) -> Result<DeviceCompressed> {
        let mut out = DeviceCompressed::empty()?;
        self.compress_into_blocking(src, layout, &mut out)?;
        Ok(out)
    }

    /// [`Compressor::compress_blocking`] into `out`, whose device buffers are reused when
    /// they are large enough (and grown otherwise), on `out`'s own stream.
    /// Blocks until done (the sizes come back to the host to size the
    /// output).
    pub fn compress_into_blocking<S: GpuReadable + ?Sized>(
        &self,
        src: &S,
        layout: Layout,
        out: &mut DeviceCompressed,
    ) -> Result<()> {
        let l = self.book.cb.row_bytes();
        let rows = row_count(src, l)?;
        out.work.ensure(rows)?;
        let src = (src.device_addr(), l as u64);
        // Q: why does the fixed-stride layout skip the size pass?
        // A: a row's slot is known before its size, so the encoder writes
        // each row into its slot as it goes, stores it raw when it turns
        // out not to fit, and zeroes the slot's tail itself: one pass over
        // the input instead of three (size, memset, encode). Slots of whole
        // 4-byte words only: the writer's stores are words or groups, so
        // a slot that ends inside a word would share it with the next.
        // Q: why does the packed layout go through scratch slots?
        // A: for the same reason: the packed encoder needs every offset
        // before it writes, so a size pass (a second read of the input)
        // and a clear of the groups where writes meet come first. Into
        // slots the encoder needs neither; `ibp_compact` then moves the
        // stored bytes, which at high savings are a small part of the
        // input. It needs a scratch buffer as large as the input; without
        // the memory for one, or for codebooks that can save little
        // (`pays_through_slots`), the measured path runs instead.
        let data_len = match layout {
            Layout::Packed if rows > 0 && l.is_multiple_of(4) => {
                match self.packed_through_slots(src, rows, out)? {
                    Some(n) => n,
                    None => self.measured(src, rows, true, out)?,
                }
            }
            Layout::Packed => self.measured(src, rows, true, out)?,
            Layout::FixedStride if l.is_multiple_of(4) => self.fixed_into_slots(src, rows, out)?,
            Layout::FixedStride => self.measured(src, rows, false, out)?,
        };
        out.layout = layout;
        out.rows = rows;
        out.row_bytes = l;
        out.data_len = data_len;
        Ok(())
    }

    /// The packed layout through scratch slots and `ibp_compact`, when the
    /// codebook pays for it and the memory allows: the stored bytes, or
    /// `None` for the measured path (the scratch is freed again when the
    /// output does not fit beside it).
    fn packed_through_slots(
        &self,
        src: (u64, u64),
        rows: usize,
        out: &mut DeviceCompressed,
    ) -> Result<Option<usize>> {
        let l = src.1 as usize;
        let stream = &out.stream;
        if !pays_through_slots(&self.book.cb)
            || !grow(
                &mut out.scratch,
                rows * l,
                "allocating the compression's scratch",
            )?
        {
            return Ok(None);
        }
        let work = &out.work;
        self.enqueue_encode_slots(src, rows, work, &out.scratch, true, stream)?;
        self.enqueue_scan(work, rows, l, true, 0, stream)?;
        copy_elements(&work.offsets, rows, &mut out.total, 1, stream)?;
        sync(stream, "compressing into slots")?;
        let data_len = out.total[0] as usize;
        let padded = encoder_out_bytes(data_len);
        if grow(&mut out.data, padded, "allocating the compressed output")? {
            self.enqueue_compact(rows, l, work, &out.scratch, &out.data, padded, stream)?;
            sync(stream, "compacting")?;
            return Ok(Some(data_len));
        }
        // The output does not fit beside the scratch: free the scratch
        // and compress again the measured way, which needs none.
        out.scratch = device_buffer(0, "allocating the compression's scratch")?;
        Ok(None)
    }

    /// Fixed-stride slots of whole words, written by the encoder in one
    /// pass; the flag bitmap from the sizes it wrote.
    fn fixed_into_slots(
        &self,
        src: (u64, u64),
        rows: usize,
        out: &mut DeviceCompressed,
    ) -> Result<usize> {
        let l = src.1 as usize;
        let stream = &out.stream;
        let padded = encoder_out_bytes(rows * l);
        ensure(&mut out.data, padded, "allocating the compressed output")?;
        zero_from_async(&out.data, rows * l, padded, stream)?;
        self.enqueue_encode_slots(src, rows, &out.work, &out.data, false, stream)?;
        self.enqueue_scan(&out.work, rows, l, false, 0, stream)?;
        sync(stream, "compressing")?;
        Ok(rows * l)
    }

    /// The measured path: a size pass, a scan, the output cleared where
    /// writes meet (packed) or zeroed (fixed-stride), then the encoder.
    fn measured(
        &self,
        src: (u64, u64),
        rows: usize,
        packed: bool,
        out: &mut DeviceCompressed,
    ) -> Result<usize> {
        let l = src.1 as usize;
        let stream = &out.stream;
        let work = &out.work;
        self.enqueue_size(src.0, rows, &work.sizes, None, stream)?;
        self.enqueue_scan(work, rows, l, packed, 0, stream)?;
        let data_len = if packed {
            if rows == 0 {
                0
            } else {
                copy_elements(&work.offsets, rows, &mut out.total, 1, stream)?;
                sync(stream, "scanning sizes")?;
                out.total[0] as usize
            }
        } else {
            rows * l
        };
        let padded = encoder_out_bytes(data_len);
        ensure(&mut out.data, padded, "allocating the compressed output")?;
        if packed {
            // Only where writes meet: the rest is stored whole.
            self.enqueue_clear(rows, &out.work, data_len, &out.data, padded, stream)?;
        } else {
            zero_async(&out.data, padded, stream)?;
        }
        self.enqueue_encode(src, rows, &out.work, packed, &out.data, stream)?;
        sync(stream, "compressing")?;
        Ok(data_len)
    }
}

/// Is packed compression through scratch slots worth it for this
/// codebook: at least a fifth of its bits invariant?
///
/// Q: why a fifth?
/// A: the compaction moves the stored bytes (about 0.62 ms a GiB of them
/// on the H200), where the measured path pays the size pass and the clear
/// (0.45–0.75 ms a GiB of input): they break even near 15% savings, and a
/// codebook's invariant share runs about 5 points above what it saves (its
/// participation bits, and tensors that miss the mask). MiniLM's f32
/// embeddings (18.8% invariant, 12.8% saved) measured within ±2% either
/// way; below the line the measured path also needs no scratch.
/// `docs/archive/PERF-NOTES-2026-11-28.md` has the stage times.
fn pays_through_slots(cb: &Codebook) -> bool {
    5 * cb.invariant_bits() >= 8 * cb.row_bytes() as u64
}

/// Grow `buf` to at least `len` bytes: false when the device has not the
/// memory for it (the buffer is then left as it was).
fn grow(buf: &mut DeviceBuffer<u8>, len: usize, what: &str) -> Result<bool> {
    match ensure(buf, len, what) {
        Ok(()) => Ok(true),
        Err(e) if out_of_memory(&e) => Ok(false),
        Err(e) => Err(e),
    }
}
