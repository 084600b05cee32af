//! Clustered groups in the container (`docs/FORMAT.md` §6.8): the checks a
//! reader makes of their codebooks and cluster ids at open, the decoding of
//! one tensor, and the writer's choice between one codebook and several.
//!
//! A clustered group is a packed group (§3.2) whose codebook section holds
//! `k` codebooks and which has one more section, the cluster ids: tensor
//! `i` is encoded with codebook `ids[i]`.

use crate::cluster::{ClusterIds, Clusters, compress_clustered, decompress_clustered, id_bits};
use crate::cluster::{ClusterOptions, fit_clusters, sweep_clusters};
use crate::codebook::{ChunkSize, Codebook};
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::layout::{PackedRef, decompress_packed_row};

use super::format::align_up;

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

/// Bytes a clustered group adds to the file besides its sections, at most:
/// its cluster-ids directory entry (48 bytes) and the manifest's
/// `"clusters":k` and longer layout name (at most 25 bytes), each of which
/// can cost up to 64 bytes once padded.
pub(super) const CLUSTERED_FILE_OVERHEAD: u64 = 2 * 64;

/// The codebooks and cluster ids of a clustered group, checked.
#[derive(Clone, Debug)]
pub(super) struct ClusterTable {
    pub codebooks: Vec<Codebook>,
    pub ids: ClusterIds,
}

/// Build `k` codebooks from a codebook section of `2 L k` bytes (the caller
/// checked the length): `Mask` then `Bitval` of each, in cluster order.
pub(super) fn codebooks(bytes: &[u8], l: usize, chunk: ChunkSize) -> Result<Vec<Codebook>> {
    bytes
        .chunks_exact(2 * l)
        .enumerate()
        .map(|(c, b)| {
            let (mask, bitval) = b.split_at(l);
            Codebook::new(chunk, mask.to_vec(), bitval.to_vec())
                .map_err(|e| Error::corrupt(format!("codebook of cluster {c}: {}", e.message())))
        })
        .collect()
}

/// Check the cluster-ids section of a group of `rows` tensors in `k`
/// clusters: its length is `⌈rows · ⌈log2 k⌉ / 8⌉`, padding bits are zero
/// and every id is below `k`. Errors with [`crate::ErrorKind::Corrupt`].
pub(super) fn cluster_ids(bytes: &[u8], k: u32, rows: usize) -> Result<ClusterIds> {
    let ids = ClusterIds::from_bytes(id_bits(k as usize), rows, bytes.to_vec())?;
    if let Some(i) = (0..rows).find(|&i| ids.get(i).is_none_or(|c| c >= k)) {
        return Err(Error::corrupt(format!(
            "tensor {i} has cluster id {} but there are only {k} clusters",
            ids.get(i).unwrap_or(u32::MAX)
        )));
    }
    Ok(ids)
}

impl ClusterTable {
    /// Decode tensor `i` of `packed` into `out` with its cluster's codebook.
    pub fn decode_row(&self, packed: &PackedRef<'_>, i: usize, out: &mut [u8]) -> Result<()> {
        let cb = self
            .ids
            .get(i)
            .and_then(|c| self.codebooks.get(c as usize))
            .ok_or_else(|| Error::corrupt(format!("tensor {i} has no cluster")))?;
        decompress_packed_row(cb, packed, i, out)
    }

    /// Decode every tensor of `packed` into `out`.
    pub fn decode(&self, packed: &PackedRef<'_>, out: &mut [u8]) -> Result<()> {
        decompress_clustered(&self.codebooks, &self.ids, packed, out)
    }
}

/// A clustered group as the writer stores it, with its exact stored size.
pub(super) struct ClusteredGroup {
    pub clusters: Clusters,
    pub packed: crate::cluster::ClusteredPacked,
}

impl ClusteredGroup {
    /// Bytes of its sections, each padded to 64 as in the file, plus the
    /// most the rest of the file grows by ([`CLUSTERED_FILE_OVERHEAD`]).
    pub fn file_bytes(&self) -> u64 {
        let p = &self.packed.packed;
        [
            crate::cluster::codebook_bytes(self.clusters.k(), p.row_bytes),
            self.packed.ids.as_bytes().len() as u64,
            p.flags.len() as u64,
            8 * p.offsets.len() as u64,
            p.payload.len() as u64,
        ]
        .iter()
        .map(|&b| align_up(b))
        .sum::<u64>()
            + CLUSTERED_FILE_OVERHEAD
    }
}

/// Bytes a packed group's sections take in the file, each padded to 64.
pub(super) fn packed_file_bytes(rows: u64, row_bytes: u64, payload: u64) -> u64 {
    [2 * row_bytes, rows.div_ceil(8), 8 * (rows + 1), payload]
        .iter()
        .map(|&b| align_up(b))
        .sum()
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
