//! GPU decompression: a decoder sized once for a dataset ([`GpuDataset`]),
//! and a status word for corrupt input.
//!
//! ```text
//! let ds = GpuDataset::upload_packed(&gpu, &codebook, &packed.view(), Residency::Pinned)?;
//! let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default())?;
//! let status = DecodeStatus::new()?;
//! dec.gather(&gpu, &index, &mut out, &status, &stream)?;   // enqueued, no sync
//! stream.synchronize()?; status.check_blocking()?;
//! ```

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::params::{STATUS_BAD_INDEX, STATUS_CORRUPT, workspace_bytes};

use super::dataset::{GpuDataset, Payload};
use super::{Gpu, cuda_err};
use crate::error::{Error, Result};

/// Options of a [`Decoder`].
#[derive(Clone, Debug, Default)]
pub struct DecodeOptions {
    /// Use at most this many SMs (the paper left 64 of an A100's 108 to the
    /// model's own kernels). `None`: all.
    pub max_sms: Option<u32>,
    /// Bytes of each warp's line ring (rounded to a power of two of 128-byte
    /// lines). `None`: sized from the tensor length.
    pub ring_bytes: Option<u32>,
    /// Warps per block. `None`: 8.
    pub warps_per_block: Option<u32>,
    /// How lines reach shared memory. `None`: by residency (see
    /// [`Fetch`]).
    pub fetch: Option<Fetch>,
    /// Turn the batch decoder's fast paths off (every step expanded by move
    /// masks, every step scanned): for tests and for measuring what the fast
    /// paths are worth. Output is identical either way.
    pub no_fast_paths: bool,
}

/// How the decoder moves source lines into shared memory.
///
/// Q: why not always `cp.async`, as the paper does?
/// A: measured on an H200 (driver 580.159.04, PCIe Gen5): `cp.async.cg`
/// reading mapped pinned host memory tops out at 29.5 GB/s, while 16-byte
/// loads plus shared stores reach the link's 51 GB/s (the same kernel
/// otherwise). From device memory `cp.async` is faster (its copies overlap
/// the decode of the previous batch): 623 against 577 GB/s decoded for 4 KB
/// tensors at 50% savings. So the default picks by residency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// `cp.async.cg`, 16 bytes per lane (default for device memory).
    CpAsync,
    /// 16-byte loads and shared-memory stores (default for pinned host
    /// memory).
    LoadStore,
}

impl DecodeOptions {
    /// Cap the SMs used.
    pub fn with_max_sms(mut self, sms: u32) -> Self {
        self.max_sms = Some(sms);
        self
    }

    /// Set the ring size per warp.
    pub fn with_ring_bytes(mut self, bytes: u32) -> Self {
        self.ring_bytes = Some(bytes);
        self
    }

    /// Set the warps per block.
    pub fn with_warps_per_block(mut self, warps: u32) -> Self {
        self.warps_per_block = Some(warps);
        self
    }

    /// Choose how lines are fetched.
    pub fn with_fetch(mut self, fetch: Fetch) -> Self {
        self.fetch = Some(fetch);
        self
    }

    /// Turn the fast paths on (the default) or off.
    pub fn with_fast_paths(mut self, on: bool) -> Self {
        self.no_fast_paths = !on;
        self
    }
}

/// Errors found by a decode, reported through device memory so that the
/// launch itself needs no synchronisation. One per stream in flight.
pub struct DecodeStatus {
    pub(crate) words: DeviceBuffer<u64>,
}

impl DecodeStatus {
    /// A cleared status, in two words of device memory it allocates.
    pub fn new() -> Result<Self> {
        let words = DeviceBuffer::from_slice(&[0u64, u64::MAX])
            .map_err(cuda_err("allocating the status"))?;
        Ok(Self { words })
    }

    /// Read (synchronously) and clear. Errors with
    /// [`crate::ErrorKind::Corrupt`] naming the first failed output row, or
    /// [`crate::ErrorKind::InvalidArgument`] for an index out of range.
    pub fn check_blocking(&mut self) -> Result<()> {
        let v = super::driver::copy_to_host_blocking(&self.words)?;
        cust::memory::CopyDestination::copy_from(&mut *self.words, &[0u64, u64::MAX][..])
            .map_err(cuda_err("clearing the status"))?;
        if v[0] & STATUS_BAD_INDEX != 0 {
            return Err(Error::invalid(format!(
                "index out of range for output row {} (and possibly others); that row was zero-filled",
                v[1]
            )));
        }
        if v[0] & STATUS_CORRUPT != 0 {
            return Err(Error::corrupt(format!(
                "the tensor for output row {} (and possibly others) is corrupt: its bits disagree with its stored length or padding; the row was zero-filled",
                v[1]
            )));
        }
        Ok(())
    }
}

/// A decoder for one dataset: launch geometry computed once, and the
/// dataset itself, borrowed.
///
/// Q: why does the decoder borrow its dataset instead of taking one per
/// call?
/// A: its shared-memory carving and tables are sized from that dataset; a
/// call with another dataset (longer tensors, another codebook) would let
/// the kernel read past the workspace or the book. Borrowing makes the
/// mismatch impossible to write: no call takes a dataset, and the decoder
/// cannot outlive the one it was sized for.
///
/// ```compile_fail,E0505
/// # use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset};
/// # fn f(gpu: &Gpu, ds: GpuDataset, out: &mut cust::memory::DeviceSlice<u8>,
/// #      st: &DecodeStatus, s: &cust::stream::Stream) -> ibp::Result<()> {
/// let dec = Decoder::new(gpu, &ds, &DecodeOptions::default())?;
/// drop(ds); // error[E0505]: cannot move out of `ds` because it is borrowed
/// dec.range(gpu, 0, 1, out, st, s)?;
/// # Ok(()) }
/// ```
pub struct Decoder<'ds> {
    pub(crate) ds: &'ds GpuDataset,
    pub(crate) flags: u32,
    pub(crate) book_smem_bytes: u32,
    pub(crate) grid: u32,
    pub(crate) block: u32,
    pub(crate) shared_bytes: u32,
    pub(crate) ring_lines: u32,
    pub(crate) pbuf_words: u32,
    pub(crate) batch: bool,
    pub(crate) load_store: bool,
}

/// Largest tensor span, in lines, that batch mode takes (half a ring).
const BATCH_MAX_LINES: u64 = 48;

impl<'ds> Decoder<'ds> {
    /// Size shared memory and the grid for `ds` on `gpu`. Allocates
    /// nothing.
    pub fn new(gpu: &Gpu, ds: &'ds GpuDataset, opts: &DecodeOptions) -> Result<Self> {
        let info = gpu.info();
        let l = ds.row_bytes;
        let k = l.div_ceil(ds.chunk as u64);
        let pbytes = k.div_ceil(8);
        // Lines a tensor of L bytes, and the largest stored tensor, can
        // touch at the worst alignment.
        let span_l = (l + 127).div_ceil(128);
        let span_max = (ds.max_stored.min(l).max(1) + 127).div_ceil(128);
        // Q: batch or streaming mode?
        // A: batch mode keeps whole tensors in half a ring, so it pays while
        // a tensor is a few KB; beyond that one tensor is enough work to
        // hide a round trip and streaming through a small ring saves shared
        // memory (more warps per SM).
        // Batch mode also needs its decode book in shared memory beside at
        // least one warp's workspace (always so for tensors of a few KB).
        let budget = info.max_shared_per_block as u64;
        // The book that batch mode copies into shared memory: a clustered
        // dataset's are all its clusters' (batch mode only when they fit;
        // streaming mode reads them through L1).
        let clustered = ds.clusters.is_some();
        let book = ds.book_bytes as u64 * ds.clusters.as_ref().map_or(1, |c| c.k as u64);
        let batch = span_l <= BATCH_MAX_LINES
            && opts
                .ring_bytes
                .is_none_or(|b| b as u64 >= 2 * span_max * 128)
            && book + 2 * span_max.max(16) * 128 + 16 <= budget;
        let (ring_lines, pbuf_words) = if batch {
            // At most 128 lines a half: the kernel keeps line counts in a
            // byte of each batch item.
            let half = match opts.ring_bytes {
                Some(b) => (b as u64 / 256).max(span_max).min(128),
                // Q: why do pinned tensors get smaller halves?
                // A: measured on the H200: halves for four tensors made
                // device-resident MiniLM f32 8% faster, and zero-copy reads
                // slower (Cora 875 -> 798 GB/s, 256 B rows at 50% savings
                // 0.94 -> 0.88 of ideal): larger batches spread the warps
                // over more host memory at once, and the IOMMU's cached
                // translations cover less of it (see `Window` in the
                // kernel).
                None if matches!(ds.payload, Payload::Pinned(_)) => span_max.max(16),
                None => {
                    // Two blocks per SM (what the kernel's registers allow
                    // at 8 warps a block): each gets half the SM's shared
                    // memory, less the 1 KB the driver reserves per block.
                    let warps = opts.warps_per_block.unwrap_or(8).clamp(1, 32) as u64;
                    let per_warp =
                        (info.shared_per_sm as u64 / 2).saturating_sub(1024 + book) / warps;
                    crate::kernel_tables::batch_half_lines(
                        span_max,
                        per_warp.saturating_sub(16) / 256,
                    )
                }
            };
            ((2 * half) as u32, 0u32)
        } else {
            // Participation buffer: whole u32 words, a multiple of 16 bytes.
            let pbuf_words = (k.div_ceil(32)).next_multiple_of(4) as u32;
            // The ring must hold the participation bytes plus two lines of
            // slack (phase 1 reads them in one go).
            let min_lines = (pbytes.div_ceil(128) + 2).next_power_of_two();
            let want = match opts.ring_bytes {
                Some(b) => (b as u64).div_ceil(128).next_power_of_two(),
                None => 32,
            };
            // At least 8 lines: one step of the decoder spans up to 512
            // payload bytes (five lines at the worst alignment), all
            // resident at once.
            (want.max(min_lines).max(8) as u32, pbuf_words)
        };
        let warp_bytes = workspace_bytes(pbuf_words, ring_lines) as u64;
        let mut warps = opts.warps_per_block.unwrap_or(8).clamp(1, 32) as u64;
        // Q: where is the decode book?
        // A: batch mode copies it into shared memory once per block (it is
        // at most 7 bytes per tensor byte for tensors of a few KB);
        // streaming mode, for long tensors, reads it through L1 and keeps
        // shared memory for the rings. The entry table that only the rare
        // general steps read stays in global memory in both modes.
        let table_smem = if batch { book } else { 0 };
        while warps > 1 && table_smem + warps * warp_bytes > budget {
            warps /= 2;
        }
        let shared = table_smem + warps * warp_bytes;
        if shared > budget {
            return Err(Error::unsupported(format!(
                "tensors of {l} bytes with {}-byte chunks need {shared} bytes of shared memory per warp; this GPU allows {budget}",
                ds.chunk
            )));
        }
        let block = (warps * 32) as u32;
        let per_sm = gpu.decode_blocks_per_sm(batch, clustered, block, shared as usize)?;
        let sms = opts
            .max_sms
            .unwrap_or(info.sm_count)
            .clamp(1, info.sm_count);
        Ok(Decoder {
            ds,
            flags: if opts.no_fast_paths {
                ibp_kernels::params::DECODE_FLAG_NO_CLASSES
                    | ibp_kernels::params::DECODE_FLAG_NO_PREFIX
            } else {
                0
            },
            book_smem_bytes: if batch { book as u32 } else { 0 },
            grid: per_sm * sms,
            block,
            shared_bytes: shared as u32,
            ring_lines,
            pbuf_words,
            batch,
            load_store: match opts.fetch {
                Some(f) => f == Fetch::LoadStore,
                None => matches!(ds.payload, Payload::Pinned(_)),
            },
        })
    }

    /// Threads per block, blocks in the grid and dynamic shared memory per
    /// block (for reports).
    pub fn geometry(&self) -> (u32, u32, u32) {
        (self.block, self.grid, self.shared_bytes)
    }

    /// Whether this decoder uses batch mode (whole tensors per half ring)
    /// rather than streaming mode.
    pub fn is_batch_mode(&self) -> bool {
        self.batch
    }

    /// Enqueue: output row `i` of `out` (`index.len()` rows of `L` bytes)
    /// receives tensor `index[i]`. Any order, repeats allowed; indices are
    /// `u32` or `u64`. No host synchronisation, no allocation.
    pub fn gather<I: GatherIndex>(
        &self,
        gpu: &Gpu,
        index: &DeviceSlice<I>,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        let row = self.ds.row_bytes as usize;
        self.gather_strided(gpu, index, out, row, status, stream)
    }

    /// [`Decoder::gather`] into rows `out_stride` bytes apart (`≥ L`): row
    /// `i` is `out[i·out_stride ..][..L]`, and the bytes between rows are
    /// left as they are (a column of a wider table, padded rows).
    pub fn gather_strided<I: GatherIndex>(
        &self,
        gpu: &Gpu,
        index: &DeviceSlice<I>,
        out: &mut DeviceSlice<u8>,
        out_stride: usize,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        let target = Target::Index {
            addr: index.as_device_ptr().as_raw(),
            len: index.len() as u64,
            wide: I::WIDE,
        };
        let via = LaunchVia {
            out_stride: Some(out_stride as u64),
            ..LaunchVia::default()
        };
        gpu.launch_decode(self, self.ds, target, out, status, false, via, stream)
    }

    /// Enqueue: output row `i` receives tensor `first + i`, for `count` rows.
    #[allow(clippy::too_many_arguments)]
    pub fn range(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        gpu.launch_decode(
            self,
            self.ds,
            Target::Range(first, count),
            out,
            status,
            false,
            LaunchVia::default(),
            stream,
        )
    }

    /// Benchmark baseline for [`Decoder::range`]: read exactly the stored
    /// bytes with the same aligned line copies, write `L` bytes per row,
    /// decode nothing (it needs the stored lengths: the packed layout, or a
    /// fixed-stride dataset with a length table).
    #[allow(clippy::too_many_arguments)]
    pub fn ideal_range(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        gpu.launch_decode(
            self,
            self.ds,
            Target::Range(first, count),
            out,
            status,
            true,
            LaunchVia::default(),
            stream,
        )
    }
}

/// Per-launch overrides used by the DMA paths.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LaunchVia {
    /// Read stored bytes from here instead of the dataset's payload.
    pub src: Option<u64>,
    /// Device address of the offsets table to use instead of the dataset's
    /// (a DMA gather piece's own, rebased).
    pub offsets: Option<u64>,
    /// Device address of the flag bitmap to use instead of the dataset's.
    pub flags: Option<u64>,
    /// Tensors behind `offsets` and `flags` (instead of the dataset's).
    pub rows: Option<u64>,
    /// Subtracted from every packed offset (`src` holds the payload from it).
    pub offset_base: u64,
    /// Output rows to skip (the piece's first row within the call); failures
    /// are reported as rows of the call (`DecodeParams::row_base`).
    pub out_skip_rows: u64,
    /// Force the fetch mode.
    pub load_store: Option<bool>,
    /// Bytes between output rows (default `L`).
    pub out_stride: Option<u64>,
    /// Device address of the fixed-stride length table to use instead of
    /// the dataset's (a KV store segment's, inside the store's table).
    pub lengths: Option<u64>,
    /// A clustered dataset's cluster ids to use instead of its own, and
    /// their bits (a DMA gather piece's, one u32 a row).
    pub clusters: Option<(u64, u32)>,
    /// Whether `src` is host memory the kernel reads over PCIe (default:
    /// no when `src` is given, else whether the payload is pinned).
    pub host_src: Option<bool>,
}

/// Which tensors a launch decodes.
pub(crate) enum Target {
    /// `len` indices at device address `addr`, u64 when `wide`, else u32.
    Index {
        addr: u64,
        len: u64,
        wide: bool,
    },
    Range(u64, u64),
}

/// The integer types a gather takes its row numbers in.
pub trait GatherIndex: cust::memory::DeviceCopy + sealed::Sealed {
    /// 8 bytes (else 4).
    const WIDE: bool;
}

impl GatherIndex for u32 {
    const WIDE: bool = false;
}

impl GatherIndex for u64 {
    const WIDE: bool = true;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}
