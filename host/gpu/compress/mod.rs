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

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::Stream;
use ibp_kernels::params::{SCAN_BLOCK, SCAN_TILE, ScanParams};

use super::driver::{copy_prefix, device_buffer, new_stream};
use super::kernels::{self, Kernel};
use super::launch::resident_blocks;
use super::memory::{GpuReadable, PinnedBuffer};
use super::{Gpu, cuda_err};
use crate::codebook::Codebook;
use crate::error::{Error, Result};
use crate::kernel_tables::{encoder_book, encoder_flags};
use crate::layout::{FixedStride, Layout, Packed, flag_bytes};

mod compressor;

pub use compressor::Compressor;

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
/// (what a [`Compressor`] holds; crate-internal since the compressor owns
/// it).
pub(crate) struct GpuCodebook {
    pub(crate) cb: Codebook,
    pub(crate) book: DeviceBuffer<u64>,
    /// The encoder's `EncodeParams::flags` for this codebook.
    pub(crate) flags: u64,
}

impl GpuCodebook {
    /// Upload `cb`'s tables (allocates device memory for them). A CUDA
    /// context must be current (a [`Gpu`]).
    pub(crate) fn new(cb: &Codebook) -> Result<Self> {
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
    pub(crate) fn replace(&mut self, cb: &Codebook) -> Result<()> {
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
    pub(crate) fn codebook(&self) -> &Codebook {
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

/// Enqueue the scan of `rows` sizes in `work` on `gpu`: flags always,
/// offsets when `offsets` (and the total to `total` when not 0).
pub(crate) fn enqueue_scan(
    gpu: &Gpu,
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
        gpu.launch(
            kernels::SCAN_TILES,
            tiles as u32,
            SCAN_BLOCK,
            smem,
            stream,
            p,
        )?;
        if offsets {
            gpu.launch(kernels::SCAN_PARTIALS, 1, SCAN_BLOCK, smem, stream, p)?;
            gpu.launch(
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
