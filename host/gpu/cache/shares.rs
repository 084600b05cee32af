//! One mini-batch spread over every GPU of a [`FeatureCache`]: each GPU
//! gathers one contiguous share of the batch's ids, the shares cut so that
//! each takes about the same predicted time ([`balanced_shares`]).
//!
//! Q: why split a batch, when the GPUs could take whole batches in turns?
//! A: whole batches leave the slowest one in charge: on 4 H200s with one
//! GraphSAGE batch a GPU the Cora cache reached 3.33–3.38× one GPU, and
//! 3.78–3.80× only with four batches a GPU to average the differences out
//! (docs/results/nvidia-h200-collective-2026-11-28.md, fifth session).
//! Shares of one batch cut by predicted time are balanced by construction,
//! whatever the batch count.

use std::ops::Range;

use cust::memory::DeviceSlice;
use cust::stream::Stream;
use ibp_kernels::detail::cache::unpack;

use super::host_rows::{HostRows, line_bytes};
use super::plan::balanced_shares;
use super::{FeatureCache, fingerprint};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::gpu::dataset::GpuDataset;
use crate::gpu::decode::{DecodeStatus, GatherIndex};

/// One GPU's part in [`FeatureCache::gather_shares`].
pub struct ShareLane<'a, I: GatherIndex> {
    /// The GPU (one of the cache's).
    pub gpu: &'a Gpu,
    /// The host dataset uploaded on that GPU (as for
    /// [`FeatureCache::gather`]).
    pub ds: &'a GpuDataset,
    /// The whole mini-batch's ids, in device memory of that GPU; the lane
    /// reads its share's slice.
    pub ids: &'a DeviceSlice<I>,
    /// Receives the share's rows, decoded, from row 0: row `k` of the
    /// output is id `share.start + k` of the batch.
    pub out: &'a mut DeviceSlice<u8>,
    /// Bad ids and corrupt rows, as for [`FeatureCache::gather`].
    pub status: &'a DecodeStatus,
    /// The stream the share's gather is enqueued on.
    pub stream: &'a Stream,
}

impl FeatureCache {
    /// Cut a mini-batch's `ids` (host copy, in batch order) into one
    /// contiguous share per GPU of the cache, in the order the GPUs were
    /// given to [`FeatureCache::new`], so that each share's predicted time
    /// is about the same ([`balanced_shares`]).
    ///
    /// An id's predicted time is its decoded bytes written (`L` at the
    /// local rate) plus its read, averaged over the GPUs: its stored bytes
    /// from the GPU's own slab (local rate) or a peer's (peer rate), or,
    /// for a miss, its whole 128-byte lines of host memory (host rate);
    /// the rates are the cache's ([`super::CacheOptions::rates`]). One
    /// GPU: one share, the whole batch. Ids out of range count as one
    /// written row. Host work only: a few lookups an id.
    ///
    /// Errors ([`crate::ErrorKind::InvalidArgument`]) for another dataset
    /// than the cache's; `Unsupported` for one not in pinned memory.
    pub fn shares<T: Copy + Into<u64>>(
        &self,
        ds: &GpuDataset,
        ids: &[T],
    ) -> Result<Vec<Range<usize>>> {
        let n = self.parts.len();
        if n == 1 {
            return Ok(std::iter::once(0..ids.len()).collect());
        }
        if fingerprint(ds)? != self.host {
            return Err(Error::invalid(
                "this dataset is not the one the cache was built for: its ids name other rows",
            ));
        }
        let rows = HostRows::of(ds)?;
        let src = ds.payload.device_addr();
        let r = &self.rates;
        let write = self.row_bytes as f64 / r.local;
        let costs: Vec<f64> = ids
            .iter()
            .map(|&t| {
                let t: u64 = t.into();
                if t >= self.rows {
                    return write;
                }
                let mut read = 0.0;
                for (i, p) in self.parts.iter().enumerate() {
                    read += match unpack(p.host_index[t as usize]) {
                        Some(e) if e.slab as usize == i => e.len as f64 / r.local,
                        Some(e) => e.len as f64 / r.peer,
                        None => {
                            let (a, b) = rows.span(t);
                            line_bytes(src + a, b - a) as f64 / r.host
                        }
                    };
                }
                write + read / n as f64
            })
            .collect();
        Ok(balanced_shares(&costs, n))
    }

    /// Enqueue one mini-batch over the cache's GPUs: lane `i` gathers the
    /// ids `shares[i]` of its copy of the batch ([`ShareLane::ids`]) into
    /// its output, on its stream, through [`FeatureCache::gather`]. The
    /// shares come from [`FeatureCache::shares`] (or any contiguous cut);
    /// one GPU with one share is a plain gather, the same code. Leaves the
    /// last lane's context current; no host synchronisation, no
    /// allocation.
    ///
    /// Errors ([`crate::ErrorKind::InvalidArgument`], before anything is
    /// enqueued) for a lane count other than the shares', a share past a
    /// lane's ids, or a GPU named twice; then as [`FeatureCache::gather`].
    pub fn gather_shares<I: GatherIndex>(
        &self,
        lanes: &mut [ShareLane<'_, I>],
        shares: &[Range<usize>],
    ) -> Result<()> {
        if lanes.len() != shares.len() || lanes.len() > self.parts.len() {
            return Err(Error::invalid(format!(
                "{} lanes for {} shares over a cache of {} GPUs: give one lane a share",
                lanes.len(),
                shares.len(),
                self.parts.len()
            )));
        }
        for (i, (lane, s)) in lanes.iter().zip(shares).enumerate() {
            if s.start > s.end || s.end > lane.ids.len() {
                return Err(Error::invalid(format!(
                    "share {s:?} of lane {i} is past its {} ids",
                    lane.ids.len()
                )));
            }
            if lanes[..i]
                .iter()
                .any(|l| l.gpu.ordinal() == lane.gpu.ordinal())
            {
                return Err(Error::invalid(format!(
                    "GPU {} has two lanes; give each GPU one share",
                    lane.gpu.ordinal()
                )));
            }
        }
        for (lane, s) in lanes.iter_mut().zip(shares) {
            if s.is_empty() {
                continue;
            }
            lane.gpu.make_current()?;
            let ids = lane.ids.index(s.clone());
            self.gather(lane.gpu, lane.ds, &ids, lane.out, lane.status, lane.stream)?;
        }
        Ok(())
    }
}
