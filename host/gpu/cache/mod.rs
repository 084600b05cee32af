//! A GPU feature cache whose entries stay compressed, with misses served
//! compressed from pinned host memory: the paper's IBP(C/M) (§5).
//!
//! Each GPU owns one contiguous *slab* of device memory of the caller's byte
//! budget, holding hot rows back to back in their stored form (compressed,
//! or raw where a row does not compress); an index of one u64 per row (see
//! [`ibp_kernels::detail::cache`]) says where a cached row is. One launch gathers
//! any ids: each warp decodes its row from a slab when it is cached there
//! (its own GPU's, or a peer's through peer access) and from the dataset in
//! pinned host memory (zero-copy) otherwise, into a caller-owned buffer.
//!
//! ```text
//! let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned)?;
//! let hot = top_k_by_score(&degrees, 100_000);
//! let cache = FeatureCache::new(&[&gpu], &[&ds], &hot, &CacheOptions::new(budget))?;
//! cache.gather(&gpu, &ds, &ids, &mut out, &status, &stream)?;   // enqueued, no sync
//! ```
//!
//! # Host rows: packed or line-aligned
//! The dataset the misses are read from may be packed or fixed-stride with
//! a length table (`GpuDataset::upload_fixed(..)?.with_length_table(..)`);
//! the slabs are packed either way (device memory is what the budget
//! limits). Packed host rows need only the compressed bytes of host memory,
//! but a row starts anywhere in a 128-byte line and shares its first and
//! last lines with its neighbours, so over PCIe it costs nearly as many
//! lines as its raw form. Fixed-stride rows start every `L` bytes, on a
//! line when `L` is a multiple of 128 (MiniLM's 768- and 1536-byte rows),
//! and a row of `s` stored bytes costs `⌈s / 128⌉` lines, never more than
//! raw; host memory then holds `N · L` bytes, as the raw table does. Fewer
//! lines did not mean faster on the H200 (2026-11-23, `ibp bench --section
//! cache` at full scale): packed host rows were faster overall, 1.23× over
//! every IBP(M) and IBP(C/M) point, so packed is the default to reach for;
//! measure both on your own access pattern. [`CacheStats::host_bytes`]
//! counts either.
//!
//! ```text
//! let fixed = compress_fixed(&cb, rows, &LayoutOptions::default())?;
//! let host = GpuDataset::upload_fixed(&gpu, &cb, &fixed.view(), Residency::Pinned)?
//!     .with_length_table(&cb, &fixed.view())?;
//! let cache = FeatureCache::new(&[&gpu], &[&host], &hot, &CacheOptions::new(budget))?;
//! ```
//!
//! The baselines run through the same code: a dataset whose rows are all
//! stored raw gives the uncompressed cache with uncompressed host rows (what
//! DGL and Legion do), an empty hot set gives no cache, and
//! [`FeatureCache::with_slab_rows`] caches one dataset's rows (compressed)
//! in front of another's (raw) host rows.
//!
//! # Several GPUs
//! One slab per GPU (up to eight), one index per GPU. [`Placement::Partition`]
//! puts each hot row in one slab and the others read it over NVLink, so N
//! GPUs cache N budgets' worth of rows, but N − 1 of every N hits are
//! remote single-row reads, far slower than local ones;
//! [`Placement::Replicate`] puts the same rows in every slab, all hits
//! local but one budget's worth. With peer access between every pair the
//! default is between the two, [`Placement::Hybrid`]: every slab holds the
//! hottest rows, as many as [`replicated_rows`] predicts to read fastest
//! from the hot rows' stored bytes, their scores
//! ([`CacheOptions::hot_scores`]) and the read rates
//! ([`CacheOptions::rates`]), and the rest of the slabs is partitioned
//! over the next rows; each GPU's index points at its own copy of a
//! replicated row. Without peer access between every pair the default is
//! replication. A row in a slab a GPU cannot reach is a miss there, read
//! from host memory.
//!
//! To spread one mini-batch over the GPUs, [`FeatureCache::shares`] cuts
//! its ids into one contiguous share per GPU of about equal predicted time
//! (from the index and the read rates), and [`FeatureCache::gather_shares`]
//! enqueues each share's gather on its GPU: the batch takes as long as its
//! slowest share, not its slowest GPU's whole batch. One GPU is one share.
//!
//! # Refills and streams
//! [`FeatureCache::refill_blocking`] writes the new slab contents and index on the
//! stream it is given for each GPU: gathers enqueued on that stream before
//! it read the old rows, those after it the new ones. A gather on another
//! stream is not ordered with it: record an event after the refill and make
//! that stream wait for it (and have the refill stream wait for gathers
//! already in flight there), or a gather may read a slab while it is being
//! rewritten.

mod host_rows;
mod launch;
mod peer;
mod plan;
mod shares;

use cust::memory::{DeviceBuffer, DeviceSlice};
use cust::stream::Stream;
use ibp_kernels::detail::cache::{MAX_SLABS, NOT_CACHED, unpack};
use ibp_kernels::params::CacheParams;

pub use plan::{
    HOST_READ_RATE, LOCAL_READ_RATE, PEER_READ_RATE, Placement, ReadRates, access_counts,
    balanced_shares, replicated_rows, top_k_by_score,
};
pub use shares::ShareLane;

use super::Gpu;
use super::dataset::GpuDataset;
use super::decode::{DecodeStatus, GatherIndex};
use super::driver::{self, Event, copy};
use super::kernels::Kernel;
use super::memory::PinnedBuffer;
use crate::error::{Error, Result};
use host_rows::{HostRows, LINE, line_bytes};

/// Options of a [`FeatureCache`].
#[derive(Clone, Debug, Default)]
pub struct CacheOptions {
    /// Bytes of device memory per GPU for cached rows (the slab).
    pub budget_bytes: u64,
    /// Where hot rows go across GPUs. `None`: when every GPU reaches
    /// every other's memory, [`Placement::Hybrid`] with the hottest rows
    /// [`replicated_rows`] chooses (from `rates` and `hot_scores`) in
    /// every slab and the rest partitioned; otherwise replicate.
    pub placement: Option<Placement>,
    /// Warps per block of the gather. `None`: 8.
    pub warps_per_block: Option<u32>,
    /// The read rates the automatic placement weighs (default: the H200's,
    /// [`ReadRates::default`]).
    pub rates: ReadRates,
    /// The scores of the hot rows given to [`FeatureCache::new`]
    /// (`hot_scores[i]` of `hot[i]`: the degrees or access counts they
    /// were ranked by), the automatic placement's access-frequency proxy.
    /// `None`, a list of another length, and refills: `1 / (i + 1)` for
    /// the `i`-th hot row (a Zipf-like fall).
    pub hot_scores: Option<Vec<f64>>,
    /// Decode with the uniform gather (`ibp_cache_gather_uniform`) when
    /// every step of the dataset's book is uniform. `None`: yes; `false`
    /// takes the general gather (to measure what the uniform one is
    /// worth; the output is the same).
    pub uniform: Option<bool>,
}

impl CacheOptions {
    /// A slab of `budget_bytes` per GPU.
    pub fn new(budget_bytes: u64) -> Self {
        Self {
            budget_bytes,
            ..Self::default()
        }
    }

    /// Choose the placement across GPUs.
    pub fn with_placement(mut self, p: Placement) -> Self {
        self.placement = Some(p);
        self
    }

    /// Set the gather's warps per block.
    pub fn with_warps_per_block(mut self, warps: u32) -> Self {
        self.warps_per_block = Some(warps);
        self
    }

    /// Set the read rates of the automatic placement.
    pub fn with_rates(mut self, rates: ReadRates) -> Self {
        self.rates = rates;
        self
    }

    /// Take the uniform gather where the book allows it, or not (see
    /// [`CacheOptions::uniform`]).
    pub fn with_uniform(mut self, on: bool) -> Self {
        self.uniform = Some(on);
        self
    }

    /// Give the hot rows' scores (see [`CacheOptions::hot_scores`]).
    pub fn with_hot_scores(mut self, scores: Vec<f64>) -> Self {
        self.hot_scores = Some(scores);
        self
    }
}

/// What a gather of some ids moves, computed on the host from the index
/// ([`FeatureCache::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Ids looked at (bad ids excluded).
    pub rows: u64,
    /// Ids found in the GPU's own slab.
    pub local_hits: u64,
    /// Ids found in a peer GPU's slab.
    pub peer_hits: u64,
    /// Bytes read from host memory over PCIe for the misses: whole 128-byte
    /// lines, as the kernel fetches them.
    pub host_bytes: u64,
    /// Decoded bytes delivered (`rows · L`).
    pub delivered_bytes: u64,
}

impl CacheStats {
    /// Fraction of rows served from a slab.
    pub fn hit_rate(&self) -> f64 {
        (self.local_hits + self.peer_hits) as f64 / self.rows.max(1) as f64
    }
}

/// One GPU's share: its slab, its index and the gather's geometry there.
struct Part {
    ordinal: u32,
    slab: DeviceBuffer<u8>,
    index: DeviceBuffer<u64>,
    /// The index as uploaded (for [`FeatureCache::stats`]).
    host_index: Vec<u64>,
    /// Slab bases as this GPU reaches them (0: not reachable).
    slabs: [u64; MAX_SLABS],
    used: u64,
    block: u32,
    grid: u32,
    shared: u32,
    book_smem: u32,
    ws: u32,
    /// The gather kernel: uniform or general.
    kernel: Kernel<CacheParams>,
    /// The last refill's staging buffers, kept until its copies are done.
    staged: Option<(PinnedBuffer<u8>, PinnedBuffer<u64>, Event)>,
}

/// A compressed feature cache over one dataset, on one or more GPUs (see
/// the module docs).
pub struct FeatureCache {
    parts: Vec<Part>,
    reach: Vec<Vec<bool>>,
    /// The placement asked for (`None`: chosen at each fill).
    asked: Option<Placement>,
    rates: ReadRates,
    /// The placement of the last fill.
    placement: Placement,
    budget: u64,
    rows: u64,
    row_bytes: u64,
    /// Fingerprint of the datasets gathers read misses from.
    host: u64,
    /// Fingerprint of the dataset the slabs are filled from.
    source: u64,
}

impl FeatureCache {
    /// A cache of the rows `hot` (hottest first) of the dataset `host[i]`,
    /// one slab of `opts.budget_bytes` on each GPU `gpus[i]`; `host[i]` is
    /// the same dataset uploaded on `gpus[i]` (pinned host memory, packed or
    /// fixed-stride with a length table: see the module docs).
    /// Hot rows go in order while they fit; rows that do not fit are left
    /// out. Allocates and synchronises (each GPU's context is made current
    /// in turn; the first GPU's is left current).
    ///
    /// Errors: [`crate::ErrorKind::InvalidArgument`] when the hot set is not
    /// empty and its smallest row does not fit the budget, a hot id is out
    /// of range, or the datasets differ; `Unsupported` for a dataset that is
    /// not in pinned memory, or fixed-stride without its length table.
    pub fn new(
        gpus: &[&Gpu],
        host: &[&GpuDataset],
        hot: &[u64],
        opts: &CacheOptions,
    ) -> Result<Self> {
        let first = *host
            .first()
            .ok_or_else(|| Error::invalid("a cache needs at least one GPU and its dataset"))?;
        Self::with_slab_rows(gpus, host, first, hot, opts)
    }

    /// [`FeatureCache::new`] with the slabs filled from `slab_rows`, another
    /// upload of the same rows stored another way (e.g. compressed slabs in
    /// front of raw host rows: the paper's IBP(C)). Both must have the same
    /// shape and codebook; that they hold the same rows cannot be checked
    /// cheaply and is the caller's promise.
    pub fn with_slab_rows(
        gpus: &[&Gpu],
        host: &[&GpuDataset],
        slab_rows: &GpuDataset,
        hot: &[u64],
        opts: &CacheOptions,
    ) -> Result<Self> {
        let n = gpus.len();
        if n == 0 || n > MAX_SLABS || host.len() != n {
            return Err(Error::invalid(format!(
                "a cache spans 1 to {MAX_SLABS} GPUs with one dataset each; got {n} GPUs and {} datasets",
                host.len()
            )));
        }
        for (i, g) in gpus.iter().enumerate() {
            if gpus[..i].iter().any(|h| h.ordinal() == g.ordinal()) {
                return Err(Error::invalid(format!(
                    "GPU {} is named twice; a cache has one slab per GPU",
                    g.ordinal()
                )));
            }
        }
        gpus[0].make_current()?;
        check_device(host[0], gpus[0])?;
        let host_fp = fingerprint(host[0])?;
        for (i, ds) in host.iter().enumerate() {
            gpus[i].make_current()?;
            check_device(ds, gpus[i])?;
            if fingerprint(ds)? != host_fp {
                return Err(Error::invalid(format!(
                    "the dataset given for GPU {} differs from the one for GPU {}",
                    gpus[i].ordinal(),
                    gpus[0].ordinal()
                )));
            }
        }
        let src = slab_rows;
        one_codebook(src)?;
        owner(gpus, src)?.make_current()?;
        let same_shape = src.rows == host[0].rows
            && src.row_bytes == host[0].row_bytes
            && src.book.chunk == host[0].book.chunk;
        if !same_shape || book(src)? != book(host[0])? {
            return Err(Error::invalid(
                "the slab rows and the host rows need the same rows, tensor length and codebook",
            ));
        }
        let source = fingerprint(src)?;
        let reach = if n > 1 {
            peer::enable_all(gpus)?
        } else {
            vec![vec![true]]
        };
        let slab_bytes = opts.budget_bytes.next_multiple_of(LINE).max(LINE);
        let mut parts = Vec::with_capacity(n);
        for (i, gpu) in gpus.iter().enumerate() {
            gpu.make_current()?;
            let view = host[i].view();
            let kernel = launch::kernel(host[i], opts);
            let (block, grid, shared, book_smem) =
                launch::geometry(gpu, &view, kernel, opts.warps_per_block.unwrap_or(8))?;
            parts.push(Part {
                ordinal: gpu.ordinal(),
                slab: driver::device_buffer(slab_bytes as usize, "allocating a cache slab")?,
                index: driver::device_buffer(src.rows as usize, "allocating a cache index")?,
                host_index: Vec::new(),
                slabs: [0; MAX_SLABS],
                used: 0,
                block,
                grid,
                shared,
                book_smem,
                ws: view.workspace_bytes(),
                kernel,
                staged: None,
            });
        }
        let addrs: Vec<u64> = parts
            .iter()
            .map(|p| p.slab.as_device_ptr().as_raw())
            .collect();
        for (i, p) in parts.iter_mut().enumerate() {
            for (j, &a) in addrs.iter().enumerate() {
                p.slabs[j] = if reach[i][j] { a } else { 0 };
            }
        }
        let mut cache = FeatureCache {
            parts,
            reach,
            asked: opts.placement,
            rates: opts.rates,
            placement: opts.placement.unwrap_or(Placement::Replicate),
            budget: opts.budget_bytes,
            rows: src.rows,
            row_bytes: src.row_bytes,
            host: host_fp,
            source,
        };
        let scores = opts.hot_scores.as_deref().filter(|s| s.len() == hot.len());
        cache.write(gpus, src, hot, scores, None)?;
        gpus[0].make_current()?;
        Ok(cache)
    }

    /// Replace the cached rows by `hot` (hottest first), read from
    /// `slab_rows` (the dataset the cache was filled from). The slabs and
    /// indexes are written on `streams[i]` for GPU `gpus[i]` (see the module
    /// docs for readers on other streams). Waits for the previous refill's
    /// copies (host staging is kept until then), builds the new contents on
    /// the host, then enqueues without waiting; the first GPU's context is
    /// left current.
    pub fn refill_blocking(
        &mut self,
        gpus: &[&Gpu],
        slab_rows: &GpuDataset,
        hot: &[u64],
        streams: &[&Stream],
    ) -> Result<()> {
        if streams.len() != gpus.len() {
            return Err(Error::invalid("give each GPU of the cache its stream"));
        }
        self.write(gpus, slab_rows, hot, None, Some(streams))
    }

    /// Fill the slabs and indexes with `hot`: enqueued on `streams` through
    /// pinned staging (a refill), or copied synchronously from pageable
    /// memory when there are none (the first fill).
    ///
    /// Q: why not pinned staging for the first fill too?
    /// A: pinning gigabytes (a 25% budget of a large table) costs more than
    /// the copy itself, and the constructor synchronises anyway.
    fn write(
        &mut self,
        gpus: &[&Gpu],
        slab_rows: &GpuDataset,
        hot: &[u64],
        scores: Option<&[f64]>,
        streams: Option<&[&Stream]>,
    ) -> Result<()> {
        if gpus.len() != self.parts.len() {
            return Err(Error::invalid(format!(
                "this cache spans {} GPUs: give each its GPU and stream",
                self.parts.len()
            )));
        }
        owner(gpus, slab_rows)?.make_current()?;
        if fingerprint(slab_rows)? != self.source {
            return Err(Error::invalid(
                "refill from another dataset than the cache was filled from",
            ));
        }
        if let Some(&bad) = hot.iter().find(|&&t| t >= self.rows) {
            return Err(Error::invalid(format!(
                "hot row {bad} is out of range for a dataset of {} rows",
                self.rows
            )));
        }
        let rows = HostRows::of(slab_rows)?;
        let flags = driver::copy_to_host_blocking(&slab_rows.flags)?;
        let stored = |r: u64| Some(rows.stored(r));
        let encoded = |r: u64| flags[r as usize / 8] >> (r % 8) & 1 == 1;
        self.placement = self.choose(hot, scores, &stored);
        let slabs = plan::place(
            hot,
            self.rows,
            stored,
            gpus.len(),
            self.budget,
            self.placement,
        )?;
        for (i, gpu) in gpus.iter().enumerate() {
            if gpu.ordinal() != self.parts[i].ordinal {
                return Err(Error::invalid(format!(
                    "GPU {} given where the cache has GPU {}",
                    gpu.ordinal(),
                    self.parts[i].ordinal
                )));
            }
            gpu.make_current()?;
            // Own slab first, then the peers this GPU reaches.
            let order: Vec<usize> = std::iter::once(i)
                .chain((0..gpus.len()).filter(|&j| j != i && self.reach[i][j]))
                .collect();
            let words = plan::index_words(self.rows, &slabs, &order, encoded, stored)?;
            let part = &mut self.parts[i];
            if let Some((_, _, done)) = &part.staged {
                done.synchronize()?;
            }
            let used = slabs[i]
                .last()
                .map_or(0, |&(r, o)| o + stored(r).unwrap_or(0));
            let fill = |image: &mut [u8]| {
                for &(r, o) in &slabs[i] {
                    let b = rows.bytes(r);
                    image[o as usize..o as usize + b.len()].copy_from_slice(b);
                }
            };
            let (slab, index) = (
                part.slab.as_device_ptr().as_raw(),
                part.index.as_device_ptr().as_raw(),
            );
            // Slab first, then the index that points into it: a gather later
            // on the same stream sees both.
            match streams {
                Some(streams) => {
                    let mut image = PinnedBuffer::<u8>::zeroed(used as usize)?;
                    fill(&mut image);
                    let pinned = PinnedBuffer::<u64>::from_slice(&words)?;
                    let s = streams[i];
                    copy_async(slab, &image, used as usize, s)?;
                    copy_async(index, &pinned, 8 * words.len(), s)?;
                    let done = Event::new()?;
                    done.record(s)?;
                    part.staged = Some((image, pinned, done));
                }
                None => {
                    let mut image = vec![0u8; used as usize];
                    fill(&mut image);
                    // Q: why a stream and an event?
                    // A: a copy from pageable memory may return before its
                    // DMA lands, and the caller's non-blocking streams are
                    // not ordered after the legacy stream; the event
                    // recorded after the two copies waits for exactly them,
                    // not for the rest of the context's work.
                    let s = driver::new_stream()?;
                    let index_bytes: &[u8] = bytemuck::cast_slice(&words);
                    // SAFETY: the slab and the index are this part's device
                    // allocations of at least these lengths, which no
                    // gather reads during a fill (`&mut self`); the host
                    // bytes live until the event below is waited for.
                    unsafe {
                        copy_pageable_async(slab, &image, &s)?;
                        copy_pageable_async(index, index_bytes, &s)?;
                    }
                    let done = Event::new()?;
                    done.record(&s)?;
                    done.synchronize()?;
                }
            }
            part.host_index = words;
            part.used = used;
        }
        gpus[0].make_current()
    }

    /// The placement of a fill of `hot`: the one asked for; else, for one
    /// GPU, its one slab (`Partition`); else, when every GPU reaches every
    /// other, the hybrid with the rows
    /// [`replicated_rows`] chooses from the hot rows' stored bytes and
    /// scores (`scores[i]` of `hot[i]`, else `1 / (i + 1)`); else
    /// replication.
    fn choose(
        &self,
        hot: &[u64],
        scores: Option<&[f64]>,
        stored: &impl Fn(u64) -> Option<u64>,
    ) -> Placement {
        if let Some(p) = self.asked {
            return p;
        }
        if self.parts.len() == 1 {
            // One slab: nothing to replicate or share.
            return Placement::Partition;
        }
        if !self.reach.iter().flatten().all(|&r| r) {
            return Placement::Replicate;
        }
        let rows: Vec<(u64, f64)> = plan::cacheable(hot, self.rows, stored)
            .into_iter()
            .map(|(_, n, i)| {
                let s = scores.map_or(1.0 / (i + 1) as f64, |s| s[i]);
                (n, s)
            })
            .collect();
        let replicated = plan::replicated_rows(&rows, self.budget, self.parts.len(), &self.rates);
        Placement::Hybrid { replicated }
    }

    /// Enqueue: output row `i` of `out` (`ids.len()` rows of `L` bytes)
    /// receives row `ids[i]` of the dataset, decoded, on GPU `gpu`, whose
    /// context must be current. `ds` is the host dataset uploaded on that
    /// GPU (any upload of the same rows; another dataset is refused). Ids
    /// out of range are reported in `status` and their rows zeroed, as are
    /// corrupt rows. No host synchronisation, no allocation, with one
    /// exception: the first call with a `GpuDataset` value the cache has not
    /// seen (the ones given to [`FeatureCache::new`] are seen) hashes it to
    /// check it is the same dataset, which copies its flags from the device
    /// and reads its payload once; later calls with it reuse the hash.
    pub fn gather<I: GatherIndex>(
        &self,
        gpu: &Gpu,
        ds: &GpuDataset,
        ids: &DeviceSlice<I>,
        out: &mut DeviceSlice<u8>,
        status: &DecodeStatus,
        stream: &Stream,
    ) -> Result<()> {
        let part = self.part(gpu)?;
        check_device(ds, gpu)?;
        if fingerprint(ds)? != self.host {
            return Err(Error::invalid(
                "this dataset is not the one the cache was built for: its ids name other rows",
            ));
        }
        let count = ids.len() as u64;
        if count == 0 {
            return Ok(());
        }
        let need = count
            .checked_mul(self.row_bytes)
            .ok_or_else(|| Error::invalid("output size overflows u64"))?;
        if (out.len() as u64) < need {
            return Err(Error::invalid(format!(
                "output holds {} bytes; {count} rows of {} bytes need {need}",
                out.len(),
                self.row_bytes
            )));
        }
        let p = CacheParams {
            view: ds.view(),
            index: part.index.as_device_ptr().as_raw(),
            slabs: part.slabs,
            ids: ids.as_device_ptr().as_raw(),
            count,
            out: out.as_device_ptr().as_raw(),
            out_stride: self.row_bytes,
            status: status.words.as_device_ptr().as_raw(),
            ids_u32: !I::WIDE as u32,
            book_smem_bytes: part.book_smem,
            ws_bytes: part.ws,
            _pad0: 0,
        };
        let warps = (part.block / 32) as u64;
        let grid = (part.grid as u64).min(count.div_ceil(warps)).max(1) as u32;
        launch::launch(gpu, part.kernel, p, grid, part.block, part.shared, stream)
    }

    /// What gathering `ids` on `gpu` reads: hits in its own slab, in
    /// peers' slabs, and the host bytes of the misses (`ds`: the host
    /// dataset, for the misses' stored lengths). Bad ids are skipped.
    pub fn stats(&self, gpu: &Gpu, ds: &GpuDataset, ids: &[u64]) -> Result<CacheStats> {
        let part = self.part(gpu)?;
        let rows = HostRows::of(ds)?;
        let src = ds.payload.device_addr();
        let me = self.parts.iter().position(|p| p.ordinal == part.ordinal);
        let mut s = CacheStats::default();
        for &t in ids {
            if t >= self.rows {
                continue;
            }
            s.rows += 1;
            match unpack(part.host_index[t as usize]) {
                Some(e) if Some(e.slab as usize) == me => s.local_hits += 1,
                Some(_) => s.peer_hits += 1,
                None => {
                    let (a, b) = rows.span(t);
                    s.host_bytes += line_bytes(src + a, b - a);
                }
            }
        }
        s.delivered_bytes = s.rows * self.row_bytes;
        Ok(s)
    }

    /// Distinct rows cached on GPU `gpu` or reachable from it.
    pub fn cached_rows(&self, gpu: &Gpu) -> Result<u64> {
        let part = self.part(gpu)?;
        Ok(part.host_index.iter().filter(|&&w| w != NOT_CACHED).count() as u64)
    }

    /// Bytes of each GPU's slab that hold rows.
    pub fn slab_bytes_used(&self) -> Vec<u64> {
        self.parts.iter().map(|p| p.used).collect()
    }

    /// The placement of the last fill (with the automatic choice, the
    /// hybrid and its replicated rows).
    pub fn placement(&self) -> Placement {
        self.placement
    }

    fn part(&self, gpu: &Gpu) -> Result<&Part> {
        self.parts
            .iter()
            .find(|p| p.ordinal == gpu.ordinal())
            .ok_or_else(|| {
                Error::invalid(format!("this cache has no slab on GPU {}", gpu.ordinal()))
            })
    }
}

/// The dataset's decode book, on the host.
fn book(ds: &GpuDataset) -> Result<Vec<u8>> {
    driver::copy_prefix(&ds.book.book, ds.book.book_bytes)
}

/// A hash of everything a dataset holds (shape, codebook, flags, layout
/// with its offsets or lengths, stored bytes), computed once per dataset.
///
/// Q: why hash the stored bytes too?
/// A: two uploads of different tables of one shape, both stored raw, have
/// identical metadata; only the bytes tell them apart. xxh3 runs at memory
/// speed, once per dataset, when a cache first sees it.
fn fingerprint(ds: &GpuDataset) -> Result<u64> {
    if let Some(&f) = ds.fingerprint.get() {
        return Ok(f);
    }
    let rows = HostRows::of(ds)?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for v in [ds.rows, ds.row_bytes, ds.book.chunk as u64] {
        h.update(&v.to_le_bytes());
    }
    h.update(&book(ds)?);
    h.update(&driver::copy_to_host_blocking(&ds.flags)?);
    rows.hash_into(&mut h);
    h.update(rows.payload);
    let f = h.digest();
    Ok(*ds.fingerprint.get_or_init(|| f))
}

/// The GPU of `gpus` that holds `ds`'s device memory.
fn owner<'g>(gpus: &[&'g Gpu], ds: &GpuDataset) -> Result<&'g Gpu> {
    let o = device_of(ds)?;
    gpus.iter()
        .copied()
        .find(|g| g.ordinal() as i32 == o)
        .ok_or_else(|| {
            Error::invalid(format!(
                "the slab rows were uploaded on GPU {o}, which the cache does not span"
            ))
        })
}

/// The ordinal of the device that holds `ds`'s device memory.
fn device_of(ds: &GpuDataset) -> Result<i32> {
    driver::device::pointer_device_ordinal(ds.flags.as_device_ptr().as_raw())
}

/// Refuse a dataset whose device memory is not on `gpu` (its reads would
/// fault, or cross the link on every row).
/// The cache decodes with one codebook per dataset: refuse clustered ones.
fn one_codebook(ds: &GpuDataset) -> Result<()> {
    if ds.is_clustered() {
        return Err(Error::unsupported(
            "the feature cache takes datasets of one codebook; this one is clustered (compress it with --clusters off)",
        ));
    }
    Ok(())
}

fn check_device(ds: &GpuDataset, gpu: &Gpu) -> Result<()> {
    one_codebook(ds)?;
    let ordinal = device_of(ds)?;
    if ordinal != gpu.ordinal() as i32 {
        return Err(Error::invalid(format!(
            "the dataset was uploaded on GPU {ordinal}, not GPU {}: upload it on each GPU the cache spans",
            gpu.ordinal()
        )));
    }
    Ok(())
}

/// Enqueue a copy of `src` (pageable host memory) to device address
/// `dst` on `s`.
///
/// # Safety
/// `dst` is a device allocation at least `src.len()` long that nothing
/// else uses until the copy is done, and `src` lives until then.
unsafe fn copy_pageable_async(dst: u64, src: &[u8], s: &Stream) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    // SAFETY: the caller's obligations.
    unsafe { copy::htod_async(dst, src.as_ptr(), src.len(), s, "filling a cache") }
}

/// Enqueue a copy of the first `bytes` bytes of pinned `src` to `dst`.
fn copy_async<T: bytemuck::Pod>(
    dst: u64,
    src: &PinnedBuffer<T>,
    bytes: usize,
    s: &Stream,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: `src` is pinned and holds `bytes` bytes, kept alive (in the
    // part's staging) until the event recorded after the copy; `dst` is a
    // device allocation at least that long (the slab or the index).
    unsafe { copy::htod_async(dst, src.as_ptr() as *const u8, bytes, s, "filling a cache") }
}
