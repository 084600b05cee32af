//! Clustered codebooks in the pipeline: the [`Clustering`] a writer asks
//! for, and the compressed clustered form of a group (`docs/FORMAT.md`
//! §6.8) with its exact size in the file, for the plan to weigh against one
//! codebook.

use crate::cluster::{ClusterOptions, fit_clusters, sweep_clusters};
use crate::cluster::{ClusteredPacked, Clusters, codebook_bytes, compress_clustered};
use crate::container::{CLUSTERED_FILE_OVERHEAD, sections_file_bytes};
use crate::dataset::Rows;
use crate::error::{Error, Result};

/// How [`super::compress_document`] uses clustered codebooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Clustering {
    /// One codebook per group (version-1 packed groups, readable by every
    /// ibp).
    #[default]
    Off,
    /// Sweep `k` (1, 2, 4, …) per group and keep clusters only when the
    /// group's exact stored size, file overhead included, is smaller than
    /// with one codebook; the file is then never larger than with `Off`.
    Auto,
    /// `k` clusters (at most: fewer when a group has fewer distinct
    /// tensors) for every packed group, when that is smaller than storing
    /// it raw.
    Fixed(usize),
}

impl Clustering {
    /// Parse `auto`, `off` or a number of clusters `k ≥ 1` (`1` is `off`).
    /// Errors with [`crate::ErrorKind::InvalidArgument`] otherwise.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Clustering::Auto),
            "off" => Ok(Clustering::Off),
            _ => match s.parse::<usize>() {
                Ok(1) => Ok(Clustering::Off),
                Ok(k) if (2..=MAX_CLUSTERS).contains(&k) => Ok(Clustering::Fixed(k)),
                _ => Err(Error::invalid(format!(
                    "--clusters {s}: use auto, off, or a number of clusters from 1 to {MAX_CLUSTERS}"
                ))),
            },
        }
    }
}

/// The most clusters a writer asks for: k-means costs `k` distances per
/// tensor and iteration, and past a few thousand codebooks of `2 L` bytes
/// no dataset we measured gained (`docs/results/clusters-cpu.md`).
pub const MAX_CLUSTERS: usize = 4096;

/// Groups larger than this are not clustered.
///
/// Q: why a limit? A: the clustered writer holds the group's compressed
/// form in memory (the packed writer streams it in batches), and the sweep
/// holds its fit and evaluation samples (each at most the group) and two
/// clusterings' codebook tables ([`crate::cluster::CLUSTER_TABLES_BUDGET`]
/// each): about three times the group plus 128 MiB, within the 512 MiB the
/// command line promises for groups of 128 MiB. A larger group is
/// compressed with one codebook, and the report says so. Streaming
/// clustered groups is left for later.
pub const MAX_CLUSTERED_GROUP_BYTES: u64 = 128 << 20;

/// A clustered group as the writer stores it, with its exact stored size.
pub(super) struct ClusteredGroup {
    pub clusters: Clusters,
    pub packed: ClusteredPacked,
}

impl ClusteredGroup {
    /// Bytes of its sections, each padded as in the file, plus the most
    /// the rest of the file grows by ([`CLUSTERED_FILE_OVERHEAD`]).
    pub fn file_bytes(&self) -> u64 {
        let p = &self.packed.packed;
        sections_file_bytes(&[
            codebook_bytes(self.clusters.k(), p.row_bytes),
            self.packed.ids.as_bytes().len() as u64,
            p.flags.len() as u64,
            8 * p.offsets.len() as u64,
            p.payload.len() as u64,
        ]) + CLUSTERED_FILE_OVERHEAD
    }
}

/// Bytes a packed group's sections take in the file, each padded.
pub(super) fn packed_file_bytes(rows: u64, row_bytes: u64, payload: u64) -> u64 {
    sections_file_bytes(&[2 * row_bytes, rows.div_ceil(8), 8 * (rows + 1), payload])
}

/// The clustering `mode` picks for `rows` (fitted with `opts`), compressed,
/// or `None` when it picks one codebook (k = 1, a group too large, or
/// k-means finding a single cluster).
pub(super) fn choose(
    rows: Rows<'_>,
    mode: Clustering,
    opts: &ClusterOptions,
) -> Result<Option<ClusteredGroup>> {
    let bytes = rows.rows() as u64 * rows.row_bytes() as u64;
    if bytes > MAX_CLUSTERED_GROUP_BYTES {
        return Ok(None);
    }
    let clusters = match mode {
        Clustering::Off => return Ok(None),
        Clustering::Auto => {
            let sweep = sweep_clusters(rows, opts)?;
            if sweep.best == 0 {
                return Ok(None);
            }
            sweep.clusters
        }
        Clustering::Fixed(k) => fit_clusters(rows, k, opts)?,
    };
    if clusters.k() < 2 {
        return Ok(None);
    }
    let packed = compress_clustered(&clusters, rows)?;
    Ok(Some(ClusteredGroup { clusters, packed }))
}
