//! Fit and compression on the GPU (`ibp_kernels::detail::encode`).
//!
//! ```text
//! let fit = Fitter::new(&gpu).fit_blocking(&rows_on_gpu, row_bytes, &FitOptions::default())?; // same codebook as ibp::fit::fit
//! let comp = Compressor::new(&gpu, &fit.codebook)?;
//! let packed = comp.compress_blocking(&rows_on_gpu, Layout::Packed)?;        // stays on the device
//! let host: Packed = packed.to_packed_blocking()?;                             // byte-identical to the CPU's
//! // Host data: read zero-copy in batches, compressed batches handed back as they land.
//! comp.compress_host_blocking(&pinned_rows, &HostOptions::default(), |batch| { ...; Ok(()) })?;
//! ```
//!
//! The pipelines, on one stream:
//! - packed, rows of whole 4-byte words, a codebook at least a fifth
//!   invariant, device memory to spare:
//!   `ibp_encode_slots_c*` into scratch slots (each tensor's stored form and
//!   length), the three-kernel scan (offsets, flag bitmap), `ibp_compact`
//!   (the stored forms to their offsets);
//! - packed otherwise, and per batch of host data: `ibp_size` (stored length
//!   of every tensor), the scan, `ibp_encode_clear` and `ibp_encode_c*`;
//! - fixed-stride: `ibp_encode_slots_c*` into the output's slots and the
//!   scan's flag bitmap (rows of whole 4-byte words), or `ibp_size`, the
//!   scan, a memset and `ibp_encode_c*`.
//!
//! The output is byte-identical to [`crate::layout::compress_packed`] and
//! [`crate::layout::compress_fixed`].

use cust::memory::{CopyDestination, DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::{
    ClearParams, CompactParams, ENCODE_SLOTS_SCRATCH, EncodeParams, MeasureParams, SCAN_BLOCK,
    SCAN_TILE, ScanParams,
};

use super::driver::copy_to_host_blocking;
use super::driver::{
    copy_elements, copy_prefix, device_buffer, ensure, new_stream, out_of_memory, sync, zero_async,
    zero_from_async,
};
use super::kernels::{self, Kernel};
use super::launch::resident_blocks;
use super::memory::{GpuReadable, PinnedBuffer};
use super::{Gpu, cuda_err};
use crate::codebook::Codebook;
use crate::error::{Error, Result};
use crate::kernel_tables::{encoder_book, encoder_flags};
use crate::layout::{FixedStride, Layout, Packed, SizeReport, flag_bytes};

/// Threads per block of the warp-per-tensor kernels.
///
/// Q: why blocks of only two warps?
/// A: the warps are independent (no shared memory, no barriers), and
/// registers are granted per block: at 80–90 registers a thread, blocks of
/// eight warps leave a third of the register file unused, blocks of two fill
/// it (more warps in flight to hide latency).
pub(crate) const WARP_BLOCK: u32 = 64;

/// Tensors a warp of the size kernel and the encoders ([`wave_grid`]).
pub(crate) const WAVE_TENSORS: u64 = 8;

// The encoder gives each warp of its block a ring of shared memory, sized
// for blocks of WARP_BLOCK threads.
const _: () = assert!(WARP_BLOCK == 32 * ibp_kernels::detail::pack::RING_WARPS);

/// Bytes to allocate, and zero, for `len` bytes of encoder output.
///
/// Q: why more than `len`?
/// A: the encoder writes whole 4-byte words, and ORs the last one when the
/// stream ends inside it, so it touches up to 3 bytes past the stream's
/// end; and the decoder reads device-resident data in whole 128-byte lines
/// ([`crate::gpu::dataset`] pads uploaded payloads the same way), so a
/// buffer the decoder takes over must cover its last line.
pub(crate) const fn encoder_out_bytes(len: usize) -> usize {
    len.next_multiple_of(128)
}

/// Longest tensor the GPU fit and compression take: a lane's count of saved
/// bits is a u32 (`8 L < 2^32`).
pub const MAX_ROW_BYTES: usize = 1 << 28;

/// A codebook in device memory, as the size query and the encoder read it
/// (what a [`Compressor`] holds).
pub struct GpuCodebook {
    pub(crate) cb: Codebook,
    pub(crate) book: DeviceBuffer<u64>,
    /// The encoder's `EncodeParams::flags` for this codebook.
    pub(crate) flags: u64,
}

impl GpuCodebook {
    /// Upload `cb`'s tables (allocates device memory for them). A CUDA
    /// context must be current (a [`Gpu`]).
    pub fn new(cb: &Codebook) -> Result<Self> {
        Ok(Self {
            cb: cb.clone(),
            book: DeviceBuffer::from_slice(&encoder_book(cb))
                .map_err(cuda_err("uploading the codebook"))?,
            flags: encoder_flags(cb),
        })
    }

    /// Make this the GPU form of `cb`, in the device memory it already
    /// holds when that is large enough (no allocation and no free: what a
    /// loop that fits and compresses again and again pays is one copy of
    /// the tables). No compression may still be running with it: the
    /// blocking calls it was passed to have returned.
    ///
    /// Q: what does this save over [`GpuCodebook::new`]?
    /// A: an allocation and the free of the old buffer, which waits for
    /// the device (`ibp bench --section compress --stages` times both;
    /// `docs/archive/PERF-NOTES-2026-11-28.md` has the numbers).
    pub fn replace(&mut self, cb: &Codebook) -> Result<()> {
        let book = encoder_book(cb);
        if self.book.len() >= book.len() {
            self.book
                .index(..book.len())
                .copy_from(&book)
                .map_err(cuda_err("uploading the codebook"))?;
        } else {
            self.book =
                DeviceBuffer::from_slice(&book).map_err(cuda_err("uploading the codebook"))?;
        }
        self.cb = cb.clone();
        self.flags = encoder_flags(cb);
        Ok(())
    }

    /// The codebook.
    pub fn codebook(&self) -> &Codebook {
        &self.cb
    }
}

/// A dataset compressed on the device (by [`Compressor::compress_blocking`]
/// or [`Compressor::compress_into_blocking`], which reuses its buffers).
pub struct DeviceCompressed {
    pub(crate) layout: Layout,
    pub(crate) rows: usize,
    pub(crate) row_bytes: usize,
    pub(crate) work: Work,
    pub(crate) data: DeviceBuffer<u8>,
    pub(crate) data_len: usize,
    /// Slots the packed layout is encoded into before `ibp_compact` moves
    /// the stored forms to their offsets (as large as the input; kept for
    /// the next compression into this result, freed with it).
    pub(crate) scratch: DeviceBuffer<u8>,
    pub(crate) total: PinnedBuffer<u64>,
    pub(crate) stream: Stream,
}

impl DeviceCompressed {
    /// An empty result, to compress into: allocates its stream and small
    /// buffers, which compressions grow. A CUDA context must be current.
    pub fn empty() -> Result<Self> {
        Ok(Self {
            layout: Layout::Packed,
            rows: 0,
            row_bytes: 0,
            work: Work::new(0)?,
            data: device_buffer(0, "allocating the compressed output")?,
            data_len: 0,
            scratch: device_buffer(0, "allocating the compression's scratch")?,
            total: PinnedBuffer::zeroed(1)?,
            stream: new_stream()?,
        })
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Number of tensors.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes of device memory held as scratch for packed compression
    /// through slots (as large as the input once used; see
    /// [`Compressor::compress_blocking`]).
    #[doc(hidden)]
    pub fn scratch_bytes(&self) -> usize {
        self.scratch.len()
    }

    /// Bytes of payload (packed) or slots (fixed-stride).
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// Device address of the payload or slots (`data_len` bytes).
    pub fn data_addr(&self) -> u64 {
        self.data.as_device_ptr().as_raw()
    }

    /// Device address of the offsets (`rows + 1` u64; packed layout).
    pub fn offsets_addr(&self) -> u64 {
        self.work.offsets.as_device_ptr().as_raw()
    }

    /// Device address of the flag bitmap (`⌈rows / 8⌉` bytes).
    pub fn flags_addr(&self) -> u64 {
        self.work.flags.as_device_ptr().as_raw()
    }

    /// Take the result apart, for a [`super::GpuDataset`] over it, once its
    /// stream has finished.
    pub(crate) fn into_parts(self) -> Result<CompressedParts> {
        self.stream
            .synchronize()
            .map_err(cuda_err("waiting for the compression"))?;
        Ok(CompressedParts {
            layout: self.layout,
            rows: self.rows,
            row_bytes: self.row_bytes,
            data: self.data,
            data_len: self.data_len,
            offsets: self.work.offsets,
            flags: self.work.flags,
        })
    }

    /// Copy a packed result to the host.
    pub fn to_packed_blocking(&self) -> Result<Packed> {
        if self.layout != Layout::Packed {
            return Err(Error::invalid("this result is in the fixed-stride layout"));
        }
        Ok(Packed {
            row_bytes: self.row_bytes,
            rows: self.rows,
            flags: copy_prefix(&self.work.flags, flag_bytes(self.rows))?,
            offsets: copy_prefix(&self.work.offsets, self.rows + 1)?,
            payload: copy_prefix(&self.data, self.data_len)?,
        })
    }

    /// Copy a fixed-stride result to the host.
    pub fn to_fixed_blocking(&self) -> Result<FixedStride> {
        if self.layout != Layout::FixedStride {
            return Err(Error::invalid("this result is in the packed layout"));
        }
        Ok(FixedStride {
            row_bytes: self.row_bytes,
            rows: self.rows,
            flags: copy_prefix(&self.work.flags, flag_bytes(self.rows))?,
            slots: copy_prefix(&self.data, self.data_len)?,
        })
    }
}

/// A finished [`DeviceCompressed`], taken apart.
pub(crate) struct CompressedParts {
    pub layout: Layout,
    pub rows: usize,
    pub row_bytes: usize,
    pub data: DeviceBuffer<u8>,
    pub data_len: usize,
    pub offsets: DeviceBuffer<u64>,
    pub flags: DeviceBuffer<u8>,
}

/// Rows of `row_bytes` in `src`, validated.
pub(crate) fn row_count<S: GpuReadable + ?Sized>(src: &S, row_bytes: usize) -> Result<usize> {
    if row_bytes == 0 {
        return Err(Error::invalid("row length is 0 bytes"));
    }
    if row_bytes > MAX_ROW_BYTES {
        return Err(Error::unsupported(format!(
            "tensors of {row_bytes} bytes; the GPU fit and compression take up to {MAX_ROW_BYTES}"
        )));
    }
    if !src.byte_len().is_multiple_of(row_bytes) {
        return Err(Error::invalid(format!(
            "{} bytes do not split into tensors of {row_bytes} bytes",
            src.byte_len()
        )));
    }
    Ok(src.byte_len() / row_bytes)
}

/// Device buffers of one pipeline (a whole dataset, or one batch).
pub(crate) struct Work {
    pub(crate) sizes: DeviceBuffer<u64>,
    pub(crate) offsets: DeviceBuffer<u64>,
    pub(crate) flags: DeviceBuffer<u8>,
    pub(crate) partials: DeviceBuffer<u64>,
}

impl Work {
    /// Grow every buffer to hold `rows` tensors.
    pub(crate) fn ensure(&mut self, rows: usize) -> Result<()> {
        // Q: why test the offsets too? A: an empty `Work` still holds one
        // element a buffer (`device_buffer` never allocates 0), so its sizes
        // passed for one row while its offsets, which need `rows + 1`, did
        // not: compressing a single row into a fresh output failed with
        // "copy larger than its buffers" (found by tests/gpu_stress.rs).
        if self.sizes.len() < rows || self.offsets.len() < rows + 1 {
            *self = Work::new(rows)?;
        }
        Ok(())
    }

    pub(crate) fn new(rows: usize) -> Result<Self> {
        Ok(Self {
            sizes: device_buffer(rows, "allocating sizes")?,
            offsets: device_buffer(rows + 1, "allocating offsets")?,
            flags: device_buffer(flag_bytes(rows), "allocating flags")?,
            partials: device_buffer(
                (rows as u64).div_ceil(SCAN_TILE) as usize,
                "allocating scan partials",
            )?,
        })
    }
}

/// Blocks for a warp-per-tensor kernel over `tensors` tensors.
pub(crate) fn warp_grid<P>(gpu: &Gpu, kernel: Kernel<P>, tensors: u64) -> Result<u32> {
    let per_block = (WARP_BLOCK / 32) as u64;
    let want = tensors.div_ceil(per_block).max(1);
    let full = resident_blocks(gpu, kernel, WARP_BLOCK, 0)? as u64;
    Ok(want.min(full) as u32)
}

/// Blocks for the size kernel and the encoders over `tensors` tensors:
/// [`WAVE_TENSORS`] tensors a warp, as many waves of blocks as that
/// takes, rather than one resident wave that loops over them all.
///
/// Q: why many short-lived blocks?
/// A: measured on the H200 (docs/archive/PERF-NOTES-2026-11-28.md, "Short waves for the
/// encoders"): with one resident wave, each warp a fixed share of
/// ~380 rows, the bf16 slots encoder kept 21.3 warps an SM active of
/// the 28 launched (Nsight Compute): warps that had finished their
/// share. Blocks of 8 rows a warp, which the block scheduler replaces
/// as they finish, keep 27.6 active, and the encoders and the size
/// kernel run 7–14% faster; 32 rows a warp came between the two. The
/// fit's kernels, which pay a warp's set-up (books, totals) per warp,
/// ran slower that way and keep [`warp_grid`].
pub(crate) fn wave_grid(tensors: u64) -> u32 {
    let per_block = (WARP_BLOCK / 32) as u64;
    tensors
        .div_ceil(per_block * WAVE_TENSORS)
        .clamp(1, i32::MAX as u64) as u32
}

/// Compression on one GPU under one codebook: the size query, the
/// compression of rows in device memory (or host memory the GPU reads),
/// and of host rows in batches. Holds the codebook's device tables
/// ([`GpuCodebook`]); the output's buffers are the caller's
/// ([`DeviceCompressed`], [`HostCompressor`](super::HostCompressor)).
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
        Ok(Self::with_book(gpu, GpuCodebook::new(codebook)?))
    }

    /// A compressor over tables already on the device (uploaded while
    /// `gpu`'s context was current).
    pub fn with_book(gpu: &'g Gpu, book: GpuCodebook) -> Self {
        Self { gpu, book }
    }

    /// Compress under `cb` from now on, reusing the tables' device memory
    /// when it is large enough ([`GpuCodebook::replace`]).
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
        if rows == 0 {
            return Ok(());
        }
        let tiles = (rows as u64).div_ceil(SCAN_TILE);
        let p = ScanParams {
            sizes: work.sizes.as_device_ptr().as_raw(),
            rows: rows as u64,
            row_bytes: row_bytes as u64,
            offsets: work.offsets.as_device_ptr().as_raw(),
            flags: work.flags.as_device_ptr().as_raw(),
            partials: work.partials.as_device_ptr().as_raw(),
            tiles,
            total,
        };
        let smem = 33 * 8;
        // SAFETY: the Work buffers were sized for at least `rows` tensors;
        // ScanParams is the kernels' type; 33 u64 of shared memory as the
        // block scan needs.
        unsafe {
            self.gpu.launch(
                kernels::SCAN_TILES,
                tiles as u32,
                SCAN_BLOCK,
                smem,
                stream,
                p,
            )?;
            if offsets {
                self.gpu
                    .launch(kernels::SCAN_PARTIALS, 1, SCAN_BLOCK, smem, stream, p)?;
                self.gpu.launch(
                    kernels::SCAN_APPLY,
                    tiles as u32,
                    SCAN_BLOCK,
                    smem,
                    stream,
                    p,
                )?;
            }
        }
        Ok(())
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
    /// can read: a [`PinnedBuffer`] or [`Registered`](super::Registered)) into `layout`, in
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
