//! Fitting clustered codebooks (paper §"Clustered Compression", Figure 15):
//! k-means over a sample of tensors with Hamming distance
//! ([`crate::fit::KMeansOptions`]), one codebook per cluster fitted by the ordinary fit
//! on that cluster's rows, and a sweep of `k` on a log scale that charges
//! every clustering for its metadata (`k` codebooks and an id per tensor)
//! and keeps clusters only when they pay for it.
#![forbid(unsafe_code)]

use std::time::Instant;

use super::{Clusters, clustered_payload, codebook_bytes, id_bytes};
use crate::codebook::{ChunkSize, Codebook, Threshold};
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::fit::kmeans::{BitRows, KMeansOptions, kmeans};
use crate::fit::{ChunkChoice, FitOptions, Sample, SamplePlan, count_bits, fit};

/// Options of [`fit_clusters`] and [`sweep_clusters`].
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterOptions {
    /// Thresholds and chunk sizes of each cluster's fit (its `sample` is
    /// ignored: a cluster is fitted on all of its rows).
    pub fit: FitOptions,
    /// k-means iterations and seed.
    pub kmeans: KMeansOptions,
    /// Tensors (evenly spaced) that k-means and the codebooks are fitted on.
    pub fit_rows: u64,
    /// Tensors (evenly spaced) the payload of each clustering is measured
    /// on, with the real encoder; the payload of the dataset is estimated
    /// from them (exact when they are all the tensors).
    pub eval_rows: u64,
    /// Largest `k` of the sweep.
    pub max_clusters: usize,
}

impl Default for ClusterOptions {
    /// Q: why 4096 fit rows and 16384 evaluation rows? A: k-means costs
    /// `fit_rows · k · L / 8` popcounts per iteration, so the fit sample
    /// bounds the sweep's time on any dataset (seconds on two cores for
    /// `L` = 1.5 KB); measuring on separate, more rows keeps a clustering
    /// that only fits its own sample from looking better than it is.
    fn default() -> Self {
        Self {
            fit: FitOptions::default(),
            kmeans: KMeansOptions::default(),
            fit_rows: 4096,
            eval_rows: 16384,
            max_clusters: 4096,
        }
    }
}

impl ClusterOptions {
    /// Fit each cluster's codebook with these options.
    pub fn with_fit(mut self, fit: FitOptions) -> Self {
        self.fit = fit;
        self
    }

    /// Run k-means with these options.
    pub fn with_kmeans(mut self, kmeans: KMeansOptions) -> Self {
        self.kmeans = kmeans;
        self
    }

    /// Fit on this many tensors at most.
    pub fn with_fit_rows(mut self, n: u64) -> Self {
        self.fit_rows = n;
        self
    }

    /// Measure payloads on this many tensors at most.
    pub fn with_eval_rows(mut self, n: u64) -> Self {
        self.eval_rows = n;
        self
    }

    /// Sweep `k` up to this.
    pub fn with_max_clusters(mut self, k: usize) -> Self {
        self.max_clusters = k;
        self
    }
}

/// One point of the curve: a clustering into `k` clusters, its measured
/// payload and its metadata, for the whole dataset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClusterPoint {
    /// The `k` asked for.
    pub requested: usize,
    /// Clusters found (fewer than asked when the sample has fewer distinct
    /// tensors).
    pub k: usize,
    /// Chunk size shared by the clusters' codebooks.
    pub chunk: ChunkSize,
    /// Stored tensors (`Σ min(E, L)`), measured on the evaluation rows and
    /// scaled to the dataset.
    pub payload_bytes: u64,
    /// The `k` codebooks, `2 L` bytes each.
    pub codebook_bytes: u64,
    /// The cluster ids, `⌈log2 k⌉` bits per tensor.
    pub id_bytes: u64,
    /// The dataset's raw size, `N · L`.
    pub raw_bytes: u64,
    /// Seconds to cluster, fit and measure.
    pub seconds: f64,
}

impl ClusterPoint {
    /// Codebooks plus ids.
    pub fn metadata_bytes(&self) -> u64 {
        self.codebook_bytes + self.id_bytes
    }

    /// Payload plus metadata. (The flag bitmap and offsets table do not
    /// depend on `k` and are left out.)
    pub fn total_bytes(&self) -> u64 {
        self.payload_bytes + self.metadata_bytes()
    }

    /// Savings before metadata, `1 − payload / raw`.
    pub fn savings(&self) -> f64 {
        1.0 - self.payload_bytes as f64 / self.raw_bytes.max(1) as f64
    }

    /// Net savings, `1 − (payload + metadata) / raw` (the paper's Figure 15).
    pub fn net_savings(&self) -> f64 {
        1.0 - self.total_bytes() as f64 / self.raw_bytes.max(1) as f64
    }
}

/// The result of [`sweep_clusters`]: the curve and the chosen clustering.
#[derive(Clone, Debug)]
pub struct ClusterSweep {
    /// One point per `k`, ascending; the first is `k = 1`.
    pub points: Vec<ClusterPoint>,
    /// Index in `points` of the chosen clustering: the smallest total, and
    /// `0` (one codebook) unless another is strictly smaller.
    pub best: usize,
    /// The chosen clustering.
    pub clusters: Clusters,
    /// Tensors fitted on.
    pub fit_rows: u64,
    /// Tensors measured on.
    pub eval_rows: u64,
}

impl ClusterSweep {
    /// The chosen point.
    pub fn chosen(&self) -> &ClusterPoint {
        &self.points[self.best]
    }

    /// The one-codebook point.
    pub fn single(&self) -> &ClusterPoint {
        &self.points[0]
    }
}

/// The `k` of the sweep: 1, 2, 4, … up to `min(max_clusters, rows)`.
pub(crate) fn sweep_ks(max_clusters: usize, rows: u64) -> Vec<usize> {
    let top = (max_clusters as u64).min(rows).max(1);
    std::iter::successors(Some(1u64), |&k| k.checked_mul(2))
        .take_while(|&k| k <= top)
        .map(|k| k as usize)
        .collect()
}

/// Sampled rows `plan.index(i)` of `rows`, as contiguous bytes.
fn gather(rows: Rows<'_>, plan: SamplePlan) -> Vec<u8> {
    let mut v = Vec::with_capacity(plan.len() as usize * rows.row_bytes());
    for i in 0..plan.len() {
        v.extend_from_slice(rows.row(plan.index(i) as usize));
    }
    v
}

/// Cluster a sample of `rows` into at most `k` clusters and fit a codebook
/// per cluster. All codebooks share one chunk size: the one with the
/// smallest total over the clusters, each cluster at its best threshold.
///
/// Q: why one chunk size for all clusters? A: a decoder (the GPU's above
/// all) is specialised per chunk size; mixing them in one dataset would
/// split every batch by chunk size, for a gain the sweep never showed.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] for no rows, `k = 0`,
/// no thresholds or a fit sample of 0 rows.
pub fn fit_clusters(rows: Rows<'_>, k: usize, opts: &ClusterOptions) -> Result<Clusters> {
    let plan = SamplePlan::new(rows.rows() as u64, Sample::Count(opts.fit_rows))?;
    let sample = gather(rows, plan);
    let sample = Rows::new(&sample, rows.row_bytes())?;
    let bits = BitRows::gather(sample, sample.rows(), |i| i);
    fit_on_sample(sample, &bits, k, opts)
}

/// Bytes that the codebook tables of one clustering may take.
///
/// Q: why a budget? A: each cluster's codebook gets chunk tables of 80
/// bytes per chunk position ([`crate::codebook::ChunkTables::bytes_for`]),
/// so `k` codebooks of long rows cost `k` times that: a sweep up to 4096
/// clusters of 4 KiB rows held 657 MB, twenty times a 32 MiB tensor
/// (issue 38). A sweep holds its best clustering and the one it measures.
pub const CLUSTER_TABLES_BUDGET: u64 = 64 << 20;

/// The most clusters a clustering of `row_bytes`-byte rows may have, so
/// that its codebook tables stay within [`CLUSTER_TABLES_BUDGET`] at the
/// smallest chunk size `chunk` allows (at least 2).
pub fn max_clusters_for(row_bytes: usize, chunk: ChunkChoice) -> usize {
    let smallest = match chunk {
        ChunkChoice::Auto => ChunkSize::One,
        ChunkChoice::Fixed(c) => c,
    };
    let per = crate::codebook::ChunkTables::bytes_for(row_bytes, smallest).max(1) as u64;
    usize::try_from(CLUSTER_TABLES_BUDGET / per)
        .unwrap_or(usize::MAX)
        .max(2)
}

fn fit_on_sample(
    sample: Rows<'_>,
    bits: &BitRows,
    k: usize,
    opts: &ClusterOptions,
) -> Result<Clusters> {
    let l = sample.row_bytes();
    let k = k.min(max_clusters_for(l, opts.fit.chunk));
    let c = kmeans(bits, k, &opts.kmeans)?;
    let w = bits.words();
    let kk = c.k(w);
    let mut members: Vec<Vec<u8>> = vec![Vec::new(); kk];
    for (i, &a) in c.assignment.iter().enumerate() {
        members[a as usize].extend_from_slice(sample.row(i));
    }
    let fit_opts = opts.fit.clone().with_sample(Sample::All);
    let chunks: Vec<ChunkSize> = match opts.fit.chunk {
        ChunkChoice::Auto => ChunkSize::ALL.to_vec(),
        ChunkChoice::Fixed(c) => vec![c],
    };
    // best[cluster][chunk]: (stored bytes, threshold) of the cluster's best
    // threshold at that chunk size (ties to the larger threshold).
    let best: Vec<Vec<(u64, Threshold)>> = {
        use rayon::prelude::*;
        members
            .par_iter()
            .map(|m| {
                let f = fit(Rows::new(m, l)?, &fit_opts)?;
                Ok(chunks
                    .iter()
                    .map(|&ch| {
                        f.candidates
                            .iter()
                            .filter(|x| x.chunk == ch)
                            .map(|x| (x.stored_bytes, std::cmp::Reverse(x.threshold)))
                            .min()
                            .map(|(s, t)| (s, t.0))
                            .unwrap_or((u64::MAX, f.threshold))
                    })
                    .collect())
            })
            .collect::<Result<_>>()?
    };
    let ci = (0..chunks.len())
        .min_by_key(|&j| {
            (
                best.iter().map(|b| b[j].0).sum::<u64>(),
                std::cmp::Reverse(chunks[j]),
            )
        })
        .ok_or_else(|| Error::invalid("no chunk sizes to choose from"))?;
    let codebooks = members
        .iter()
        .zip(&best)
        .map(|(m, b)| {
            let m = Rows::new(m, l)?;
            Codebook::from_counts(&count_bits(m), m.rows() as u64, b[ci].1, chunks[ci])
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Clusters::from_words(codebooks, c.centroids, w))
}

/// Sweep `k` over 1, 2, 4, … up to `min(max_clusters, rows)`: for each, cluster and fit on the fit
/// sample, measure the payload of the evaluation sample with the real
/// encoder (each tensor with its nearest cluster's codebook), charge the
/// metadata, and keep the clustering with the smallest total, one codebook
/// unless another is strictly smaller (so clustering never loses on the
/// measured rows).
///
/// Errors as [`fit_clusters`].
pub fn sweep_clusters(rows: Rows<'_>, opts: &ClusterOptions) -> Result<ClusterSweep> {
    sweep_clusters_with(rows, opts, |_| {})
}

/// [`sweep_clusters`], calling `progress` with each point as it is done.
pub fn sweep_clusters_with(
    rows: Rows<'_>,
    opts: &ClusterOptions,
    mut progress: impl FnMut(&ClusterPoint),
) -> Result<ClusterSweep> {
    let (n, l) = (rows.rows() as u64, rows.row_bytes());
    let fit_plan = SamplePlan::new(n, Sample::Count(opts.fit_rows))?;
    let eval_plan = SamplePlan::new(n, Sample::Count(opts.eval_rows))?;
    let fit_bytes = gather(rows, fit_plan);
    let fit_sample = Rows::new(&fit_bytes, l)?;
    let fit_bits = BitRows::gather(fit_sample, fit_sample.rows(), |i| i);
    let eval_bytes = gather(rows, eval_plan);
    let eval_sample = Rows::new(&eval_bytes, l)?;
    let eval_bits = BitRows::gather(eval_sample, eval_sample.rows(), |i| i);
    let mut points: Vec<ClusterPoint> = Vec::new();
    let mut best: Option<(usize, Clusters)> = None;
    let top = opts.max_clusters.min(max_clusters_for(l, opts.fit.chunk));
    for k in sweep_ks(top, fit_plan.len()) {
        let t0 = Instant::now();
        let clusters = fit_on_sample(fit_sample, &fit_bits, k, opts)?;
        let measured = clustered_payload(&clusters, &eval_bits, eval_sample);
        // Scale the measured payload to the dataset (exact when the
        // evaluation sample is every tensor).
        let payload =
            (u128::from(measured) * u128::from(n)).div_ceil(u128::from(eval_plan.len())) as u64;
        let kk = clusters.k();
        let p = ClusterPoint {
            requested: k,
            k: kk,
            chunk: clusters.codebooks()[0].chunk(),
            payload_bytes: payload,
            codebook_bytes: codebook_bytes(kk, l),
            id_bytes: id_bytes(kk, n),
            raw_bytes: n * l as u64,
            seconds: t0.elapsed().as_secs_f64(),
        };
        progress(&p);
        let better = match &best {
            None => true,
            Some((b, _)) => p.total_bytes() < points[*b].total_bytes(),
        };
        points.push(p);
        if better {
            best = Some((points.len() - 1, clusters));
        }
        if kk < k {
            // Fewer distinct tensors than asked for: larger k changes nothing.
            break;
        }
    }
    let (best, clusters) = best.ok_or_else(|| Error::invalid("no clusterings were tried"))?;
    Ok(ClusterSweep {
        points,
        best,
        clusters,
        fit_rows: fit_plan.len(),
        eval_rows: eval_plan.len(),
    })
}
