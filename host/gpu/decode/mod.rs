//! GPU decompression: a decoder sized once for a dataset
//! ([`super::GpuDataset`]), the one decode launch it makes for a
//! [`Request`], the DMA paths over it, and a status word for corrupt input.
//!
//! ```text
//! let ds = GpuDataset::upload_packed(&gpu, &codebook, &packed.view(), Residency::Pinned)?;
//! let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default())?;
//! let status = DecodeStatus::new()?;
//! dec.gather(&gpu, &index, &mut out, &status, &stream)?;   // enqueued, no sync
//! stream.synchronize()?; status.check_blocking()?;
//! ```

mod decoder;
mod dma;
mod request;
mod rules;
mod staged;

use cust::memory::DeviceBuffer;
use ibp_kernels::params::{STATUS_BAD_INDEX, STATUS_CORRUPT};

pub use decoder::Decoder;
pub(crate) use decoder::Shape;
pub use dma::{
    DEFAULT_DMA_PIECE_BYTES, DmaScratch, RangeCalibration, RangePath, dma_range_piece_bytes,
};
pub use request::{Mode, Request};
pub use staged::STAGING_ALIGN;

use crate::gpu::rows_view::Fetch;

use super::cuda_err;
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
    /// Warps per block. `None`: 8 (in streaming mode 8, 16 or 24, by
    /// the rule of [`DecodeOptions::stream_book`]: most warps an SM, then
    /// least shared memory).
    pub warps_per_block: Option<u32>,
    /// How lines reach shared memory. `None`: by residency (see
    /// [`Fetch`]).
    pub fetch: Option<Fetch>,
    /// Turn the batch decoder's fast paths off (every step expanded by move
    /// masks, every step scanned): for tests and for measuring what the fast
    /// paths are worth. Output is identical either way.
    pub no_fast_paths: bool,
    /// In batch mode, decode two tensors at a time, one a half-warp
    /// (kernel `ibp_decode_pairs`), rather than one by the whole warp.
    /// `None`: where it pays, by a rule on the tensor length (rows of up to
    /// 256 bytes, or of 513 to 768; for books the uniform or periodic
    /// kernels decode, of up to 768), unless the fast paths are off or
    /// four a warp pay more ([`DecodeOptions::quads`]); `Some(true)`: two,
    /// never four.
    /// Clustered datasets and streaming mode always decode one at a time.
    /// Output is identical either way.
    pub pairs: Option<bool>,
    /// In batch mode, decode four tensors at a time, one a quarter-warp
    /// (kernels `ibp_decode_quads_uniform` and `ibp_decode_quads_periodic`),
    /// for a book the uniform or periodic kernels decode. `None`: where it
    /// pays, by a rule on the tensor length (rows of up to 768 bytes, and
    /// longer ones whose last half-warp step would be at most half full:
    /// `L mod 256` of 1 to 128 bytes, as 1,100) and on each launch (at
    /// least four tensors a warp of its grid), unless the fast paths are
    /// off or the caller chose the pairs (`DecodeOptions::pairs`);
    /// `Some(true)`: four at any launch size. Other books ignore it (and
    /// without fast paths, or with `uniform` off, no book takes those
    /// kernels). Output is identical either way.
    pub quads: Option<bool>,
    /// Decode a lane a tensor (kernel `ibp_decode_lanes`: 32 tensors a
    /// warp in lockstep) rather than a warp a tensor. `None`: where it
    /// pays, by a rule on the launch (tensors in device memory, not
    /// clustered, rows of at most 128 bytes, enough of them to fill the GPU
    /// a lane each). `Some(true)` still needs tensors in device
    /// memory, an unclustered dataset and its book in shared memory.
    /// Output is identical either way.
    pub lanes: Option<bool>,
    /// In streaming mode (tensors too long for batch mode), copy the decode
    /// book into shared memory once per block (`Some(true)`) or read it
    /// from global memory through L1 (`Some(false)`). `None`: in shared
    /// memory where it fits and costs no warp an SM against reading it
    /// through L1. Clustered datasets read theirs through L1, and a book
    /// forced into shared memory that does not fit there is read through
    /// L1 too. Output is identical either way.
    pub stream_book: Option<bool>,
    /// Decode a book whose every step is uniform (every column of a step
    /// shares one mask, bit value and width: a dense float table's,
    /// usually) with the uniform kernels, which read those shared fields
    /// once a step (`Some(true)` or `None`, the default), or with the
    /// others, from each chunk's own fields (`Some(false)`: to measure what
    /// the shared fields are worth). Clustered datasets use the others.
    /// The same choice takes the periodic kernel for a book whose every
    /// step is periodic (every byte of a chunk alike in its free bits, an
    /// fp8 table's, or every 16-bit half of a 4-byte chunk, an f16
    /// table's; batch mode, one, two or four tensors a warp). Output is
    /// identical either way.
    pub uniform: Option<bool>,
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

    /// Decode two tensors a warp in batch mode, or one (see
    /// [`DecodeOptions::pairs`]).
    pub fn with_pairs(mut self, on: bool) -> Self {
        self.pairs = Some(on);
        self
    }

    /// Decode four tensors a warp in batch mode where the book allows, or
    /// not (see [`DecodeOptions::quads`]).
    pub fn with_quads(mut self, on: bool) -> Self {
        self.quads = Some(on);
        self
    }

    /// Decode a lane a tensor, or a warp a tensor (see
    /// [`DecodeOptions::lanes`]).
    pub fn with_lanes(mut self, on: bool) -> Self {
        self.lanes = Some(on);
        self
    }

    /// Streaming mode's book in shared memory, or through L1 (see
    /// [`DecodeOptions::stream_book`]).
    pub fn with_stream_book(mut self, shared: bool) -> Self {
        self.stream_book = Some(shared);
        self
    }

    /// Decode steps whose columns are alike from their shared fields, or
    /// not (see [`DecodeOptions::uniform`]).
    pub fn with_uniform(mut self, on: bool) -> Self {
        self.uniform = Some(on);
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
