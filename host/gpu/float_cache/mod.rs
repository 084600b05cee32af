//! A GPU feature cache of float-coded rows ([`crate::float_code`]), the
//! float coding's IBP(C/M): a device *slab* holding hot rows in their
//! stored form (coded, or raw where a row does not shorten), misses read
//! in their stored form from the group's payload in mapped pinned host
//! memory (zero-copy), one launch a gather.
//!
//! ```text
//! let cache = FloatFeatureCache::new(&gpu, &coded, &hot, budget_bytes)?; // allocates, syncs
//! cache.gather(&gpu, &ids, &mut out, &status, &stream)?;                // enqueued, no sync
//! ```
//!
//! The gather is [`FloatDecoder`]'s kernel reading a *direct index*
//! (`ibp_kernels::params::FLOAT_DIRECT_INDEX`) built once on the host and
//! uploaded at creation: for every row of the group its start, a device
//! address (in the slab when the row is cached, in the mapped pinned
//! payload otherwise), and its stored length. A warp's group of lanes
//! looks its row up and decodes it from wherever it lies; the kernel does
//! not know which rows are hits.
//!
//! # The budget
//! The budget is every byte the cache allocates in device memory for the
//! group's rows: the index (12 bytes a row: a u64 start, a u32 length), then
//! the slab (the stored bytes of the rows it holds, rounded up to 16, plus
//! 16 bytes of padding the decoder may read). A budget too small for the
//! index is an error. Hot rows go in, in priority order, while they fit; a
//! row that does not fit is left out and later, smaller rows are still
//! tried. The decode table (at most 8 KiB) and the status words are not
//! counted, as [`super::FeatureCache`]'s codebook is not.
//!
//! Q: why does the index count against the budget, when
//! [`super::FeatureCache`]'s budget is its slab alone?
//! A: its index is 8 bytes a row, this one 12; at a 1% budget of a table
//! of 600-byte rows the index is 2% of the table, twice the budget. Left
//! out, the float cache would be compared with the others at a budget it
//! exceeds. Counted in, it is compared at the device bytes it takes.
//!
//! Q: why an index entry for every row, not for the cached ones only?
//! A: one launch that resolves any id with two loads and no search: the
//! kernel is [`FloatDecoder::gather_direct`]'s, unchanged. A sparse index
//! (a hash of the cached rows) would save device memory at a small budget
//! and cost a probe a row in the kernel; to be weighed when a table's
//! index does not fit a budget worth having.
//!
//! # Layout choices
//! Q: why are the slab's rows packed back to back, not each at a 16-aligned
//! start?
//! A: the decoder fetches a row in the 16-byte pieces that cover it, so a
//! row starting mid-piece reads at most one piece more than an aligned one
//! (a 600-byte row: 38 or 39 pieces, under 3%), and device memory serves
//! 32-byte sectors either way. Aligned starts would cost 7.5 bytes a row on
//! average (about 1.3% of a 600-byte bf16 row's stored form) of a budget
//! whose every byte is a cached row. It is also how [`FloatDecoder::new`]
//! lays the payload out in device memory, whose gather rate `ibp bench`
//! measures. Not measured against the aligned layout.
//!
//! Q: why does the cache copy the payload into pinned memory of its own
//! ([`PinnedFloatRows`]) rather than borrow the caller's?
//! A: the device index holds the pinned rows' addresses, so they must stay
//! allocated and unchanged for as long as a gather may run. Owning them
//! makes that hold by construction: no lifetime on the cache, no unsafe
//! promise from the caller. The copy runs once, at creation, beside the
//! page-locking that costs more. A caller that wants the pinned payload for
//! other paths ([`FloatDecoder::range_dma`], zero-copy
//! [`FloatDecoder::gather_staged`]) borrows the cache's
//! ([`FloatFeatureCache::host_rows`]) instead of pinning a second copy.
//!
//! # One GPU
//! Several GPUs are left out. The index holds addresses: a GPU reading
//! another's slab would need its own index (each GPU's addresses of the
//! peer slabs) and peer access, and [`super::FeatureCache`]'s measurements
//! found remote single-row reads far slower than local ones, so a
//! partitioned slab gains rows and loses rate. Replicating is simply one
//! cache per GPU: make a `FloatFeatureCache` on each (each pins its own
//! payload copy). No refill either: the hot set is fixed at creation.
//!
//! # Streams and lifetime
//! A gather only enqueues. The cache's buffers (slab, index, pinned
//! payload) are freed when it is dropped, which does not wait: synchronise
//! the streams its gathers ran on first, as for every ibp buffer.

pub(crate) mod plan;

use cust::memory::{DeviceBuffer, DeviceSlice};

use super::Gpu;
use super::cuda_err;
use super::decode::DecodeStatus;
use super::float_decode::{DirectIndex, FloatDecoder};
use super::float_dma::PinnedFloatRows;
use super::memory::GpuWritable;
use super::stream::GpuStream;
use crate::error::{Error, Result};
use crate::float_code::FloatCoded;

/// What a gather of some ids reads, computed on the host from the index
/// ([`FloatFeatureCache::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloatCacheStats {
    /// Ids looked at (ids past the end excluded).
    pub rows: u64,
    /// Ids found in the slab.
    pub hits: u64,
    /// Stored bytes of the misses, read from pinned host memory.
    pub host_bytes: u64,
    /// Decoded bytes delivered (`rows · L`).
    pub delivered_bytes: u64,
}

impl FloatCacheStats {
    /// Fraction of rows served from the slab.
    pub fn hit_rate(&self) -> f64 {
        self.hits as f64 / self.rows.max(1) as f64
    }
}

/// A feature cache of one float-coded group on one GPU (see the module
/// docs).
pub struct FloatFeatureCache {
    ordinal: u32,
    decoder: FloatDecoder,
    host: PinnedFloatRows,
    /// `None` when no row is cached.
    slab: Option<DeviceBuffer<u8>>,
    starts: DeviceBuffer<u64>,
    lens: DeviceBuffer<u32>,
    /// One bit a row: cached in the slab.
    cached: Vec<u64>,
    cached_rows: u64,
    used: u64,
    budget: u64,
}

impl std::fmt::Debug for FloatFeatureCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloatFeatureCache")
            .field("gpu", &self.ordinal)
            .field("rows", &self.rows())
            .field("cached_rows", &self.cached_rows)
            .field("slab_bytes_used", &self.used)
            .field("budget", &self.budget)
            .finish()
    }
}

impl FloatFeatureCache {
    /// A cache of the rows `hot` (hottest first) of `coded` on `gpu`, in
    /// `budget_bytes` of device memory (the index, then the slab: see the
    /// module docs). Pins a copy of the payload for the misses, allocates
    /// the slab and the index, fills them and waits for the copies; `gpu`'s
    /// context is made current.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for a budget that
    /// does not hold the index, a hot id past the end, or a group the GPU
    /// decoder does not take (as [`FloatDecoder::new`]);
    /// [`crate::ErrorKind::Corrupt`] for an inconsistent index;
    /// [`crate::ErrorKind::Cuda`] when memory cannot be allocated.
    pub fn new(gpu: &Gpu, coded: &FloatCoded, hot: &[u64], budget_bytes: u64) -> Result<Self> {
        gpu.make_current()?;
        let rows = coded.rows() as u64;
        let capacity = plan::slab_capacity(budget_bytes, rows)?;
        let host = PinnedFloatRows::new(coded)?;
        let stored = |t: u64| {
            let r = host.row(t);
            r.end - r.start
        };
        let placed = plan::place(hot, rows, stored, capacity)?;
        let slab = match plan::slab_alloc(placed.used) {
            0 => None,
            n => {
                let mut image = crate::error::try_vec(n as usize, 0u8, "the cache's slab image")?;
                let payload = host.host_bytes();
                for &(t, o) in &placed.rows {
                    let r = host.row(t);
                    image[o as usize..][..(r.end - r.start) as usize]
                        .copy_from_slice(&payload[r.start as usize..r.end as usize]);
                }
                Some(DeviceBuffer::from_slice(&image).map_err(cuda_err("filling a cache slab"))?)
            }
        };
        let slab_addr = slab.as_ref().map_or(0, |s| s.as_device_ptr().as_raw());
        let (mut starts, mut lens) = plan::direct_index(
            rows,
            |t| host.row(t).start,
            stored,
            &placed,
            slab_addr,
            host.device_addr(),
        );
        // Q: why an entry more for an empty group? A: a device buffer of
        // no elements has no address; the kernel never reads past `rows`.
        if rows == 0 {
            starts.push(0);
            lens.push(0);
        }
        let starts =
            DeviceBuffer::from_slice(&starts).map_err(cuda_err("uploading a cache index"))?;
        let lens = DeviceBuffer::from_slice(&lens).map_err(cuda_err("uploading a cache index"))?;
        let mut cached = vec![0u64; (rows as usize).div_ceil(64)];
        for &(t, _) in &placed.rows {
            cached[t as usize / 64] |= 1 << (t % 64);
        }
        let decoder = FloatDecoder::for_table(gpu, coded.table(), coded.row_bytes())?;
        Ok(Self {
            ordinal: gpu.ordinal(),
            decoder,
            host,
            slab,
            starts,
            lens,
            cached,
            cached_rows: placed.rows.len() as u64,
            used: placed.used,
            budget: budget_bytes,
        })
    }

    /// Enqueue: output row `i` of `out` (`ids.len()` rows of `L` bytes)
    /// receives row `ids[i]` of the group, decoded, on `gpu` (whose context
    /// must be current): one launch, hits read from the slab and misses
    /// from pinned host memory. An id past the end is reported by `status`
    /// and its output row zeroed. No host synchronisation, no allocation.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for another GPU
    /// than the cache's, or an `out` shorter than `ids.len() · L` or not
    /// aligned to the element size.
    pub fn gather<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        ids: &DeviceSlice<u64>,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        if gpu.ordinal() != self.ordinal {
            return Err(Error::invalid(format!(
                "this cache is on GPU {}, not GPU {}",
                self.ordinal,
                gpu.ordinal()
            )));
        }
        let index = DirectIndex {
            span: 0,
            span_len: u64::MAX,
            starts: self.starts.as_device_ptr().as_raw(),
            lens: self.lens.as_device_ptr().as_raw(),
            rows: self.rows(),
        };
        // SAFETY: the index is this cache's: `rows` starts (u64) and lengths
        // (u32) in device memory, each row's `lens[t]` bytes at its start in
        // the slab (a device allocation, 16-aligned, its used bytes rounded
        // up to 16 plus 16 bytes allocated) or in the pinned payload (mapped,
        // page-aligned, padded the same way), all owned by `self`, which the
        // caller keeps alive until the gather has run (as every buffer a
        // launch reads); with span 0 and span_len u64::MAX the starts are
        // those addresses. `ids` is a device slice of `ids.len()` u64.
        unsafe {
            self.decoder.gather_direct(
                gpu,
                &index,
                ids.as_device_ptr().as_raw(),
                0,
                ids.len() as u64,
                out,
                status,
                stream,
            )
        }
    }

    /// What gathering `ids` reads: hits, and the stored bytes of the misses
    /// (ids past the end are skipped).
    pub fn stats(&self, ids: &[u64]) -> FloatCacheStats {
        let mut s = FloatCacheStats::default();
        for &t in ids.iter().filter(|&&t| t < self.rows()) {
            s.rows += 1;
            if self.is_cached(t) {
                s.hits += 1;
            } else {
                let r = self.host.row(t);
                s.host_bytes += r.end - r.start;
            }
        }
        s.delivered_bytes = s.rows * self.row_bytes() as u64;
        s
    }

    /// Whether row `t` is in the slab (false past the end).
    pub fn is_cached(&self, t: u64) -> bool {
        t < self.rows() && self.cached[t as usize / 64] >> (t % 64) & 1 == 1
    }

    /// Rows held in the slab.
    pub fn cached_rows(&self) -> u64 {
        self.cached_rows
    }

    /// Stored bytes the slab's rows take.
    pub fn slab_bytes_used(&self) -> u64 {
        self.used
    }

    /// Bytes of the device index (12 a row).
    pub fn index_bytes(&self) -> u64 {
        self.rows() * plan::INDEX_BYTES_PER_ROW
    }

    /// Device bytes the budget pays for: the index and the slab's
    /// allocation (at most the budget).
    pub fn device_bytes(&self) -> u64 {
        self.index_bytes() + self.slab.as_ref().map_or(0, |s| s.len() as u64)
    }

    /// The budget the cache was made with.
    pub fn budget_bytes(&self) -> u64 {
        self.budget
    }

    /// Rows of the group.
    pub fn rows(&self) -> u64 {
        self.host.rows()
    }

    /// Bytes of a row, decoded.
    pub fn row_bytes(&self) -> usize {
        self.host.row_bytes()
    }

    /// The group's payload in pinned memory, which the misses are read
    /// from: for [`FloatDecoder::range_dma`] or zero-copy decodes of the
    /// same group without pinning it again.
    pub fn host_rows(&self) -> &PinnedFloatRows {
        &self.host
    }
}
