//! Clustered datasets (paper §"Clustered Compression", issue 12): one
//! codebook per cluster and a cluster id per tensor. Each tensor is encoded
//! exactly as in `docs/FORMAT.md` §2 with its cluster's codebook and stored
//! in the packed layout of §3.2; the ids sit beside it, bit-packed.
//!
//! This module is the in-memory codec: [`Clusters`] (codebooks plus the
//! centroids that assign tensors to them), [`ClusterIds`],
//! [`compress_clustered`] and [`decompress_clustered`]. Fitting clusters is
//! [`fit_clusters`] and [`sweep_clusters`]. The
//! container stores clustered groups as `docs/FORMAT.md` §6.8 describes ([`crate::pipeline::Clustering`]).
#![forbid(unsafe_code)]

mod fit;

pub use fit::{
    CLUSTER_TABLES_BUDGET, ClusterOptions, ClusterPoint, ClusterSweep, fit_clusters,
    max_clusters_for, sweep_clusters, sweep_clusters_with,
};

use crate::codebook::Codebook;
use crate::dataset::Rows;
use crate::encode::{decode_row, encode_row, stored_len};
use crate::error::{Error, Result};
use crate::fit::kmeans::{BitRows, nearest};
use crate::layout::{Packed, PackedRef, Stored, flag_bytes, set_flag};

/// Bits per cluster id for `k` clusters: `⌈log2 k⌉` (0 for one cluster).
pub(crate) fn id_bits(k: usize) -> u32 {
    if k <= 1 {
        0
    } else {
        usize::BITS - (k - 1).leading_zeros()
    }
}

/// Bytes of `n` bit-packed ids for `k` clusters, `⌈n · ⌈log2 k⌉ / 8⌉`.
pub(crate) fn id_bytes(k: usize, n: u64) -> u64 {
    (n * u64::from(id_bits(k))).div_ceil(8)
}

/// Bytes of the codebooks of `k` clusters of `row_bytes`-byte tensors as a
/// container stores them (`Mask` then `Bitval`, `docs/FORMAT.md` §6.3).
pub(crate) fn codebook_bytes(k: usize, row_bytes: usize) -> u64 {
    2 * k as u64 * row_bytes as u64
}

/// Cluster ids of `len` tensors, `bits` each, as one bit stream (the
/// format's conventions: id `i` is stream bits `[i·bits, (i+1)·bits)`,
/// lowest bit first; bits past the last id are zero).
///
/// Q: why bit-packed and not a byte or u16 per tensor?
/// A: the ids are pure overhead, and `⌈log2 k⌉` bits is what the net savings
/// of a clustering are charged for; reading one is a shift and a mask of an
/// unaligned u64, which costs a decoder (CPU or GPU) nothing measurable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterIds {
    bits: u32,
    len: usize,
    bytes: Vec<u8>,
}

impl ClusterIds {
    /// Pack `ids` for `k` clusters. Errors with
    /// [`crate::ErrorKind::InvalidArgument`] when an id is `≥ k` or `k` is 0.
    pub fn pack(ids: &[u32], k: usize) -> Result<Self> {
        if k == 0 {
            return Err(Error::invalid("0 clusters; a clustering has at least one"));
        }
        if let Some(i) = ids.iter().position(|&c| c as usize >= k) {
            return Err(Error::invalid(format!(
                "tensor {i} has cluster id {} but there are only {k} clusters",
                ids[i]
            )));
        }
        let bits = id_bits(k);
        let mut bytes = vec![0u8; id_bytes(k, ids.len() as u64) as usize];
        for (i, &c) in ids.iter().enumerate() {
            for b in 0..bits {
                if c >> b & 1 == 1 {
                    let p = i * bits as usize + b as usize;
                    bytes[p / 8] |= 1 << (p % 8);
                }
            }
        }
        Ok(Self {
            bits,
            len: ids.len(),
            bytes,
        })
    }

    /// The ids of `len` tensors, `bits` each, from their stream. Errors with
    /// [`crate::ErrorKind::Corrupt`] when `bytes` is not the stream's length,
    /// `bits > 32`, or a bit past the last id is set.
    pub fn from_bytes(bits: u32, len: usize, bytes: Vec<u8>) -> Result<Self> {
        if bits > 32 {
            return Err(Error::corrupt(format!(
                "cluster ids of {bits} bits; at most 32"
            )));
        }
        let total = len as u64 * u64::from(bits);
        if bytes.len() as u64 != total.div_ceil(8) {
            return Err(Error::corrupt(format!(
                "{} bytes of cluster ids; {len} ids of {bits} bits need {}",
                bytes.len(),
                total.div_ceil(8)
            )));
        }
        if !total.is_multiple_of(8) && bytes.last().is_some_and(|&b| b >> (total % 8) != 0) {
            return Err(Error::corrupt(
                "padding bits after the last cluster id are set",
            ));
        }
        Ok(Self { bits, len, bytes })
    }

    /// Bits per id.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No ids?
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The packed stream.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Id of tensor `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<u32> {
        if i >= self.len {
            return None;
        }
        let p = i * self.bits as usize;
        let mut v = 0u64;
        // An id spans at most 5 bytes (32 bits at any bit offset).
        for (j, &b) in self.bytes[p / 8..].iter().take(5).enumerate() {
            v |= u64::from(b) << (8 * j);
        }
        Some(((v >> (p % 8)) & ((1u64 << self.bits) - 1)) as u32)
    }
}

/// `k` codebooks for tensors of one length and chunk size, and the
/// centroid of each cluster (its rows' per-bit majority), which assigns a
/// new tensor to a cluster.
#[derive(Clone, Debug)]
pub struct Clusters {
    codebooks: Vec<Codebook>,
    /// `words` u64 per cluster.
    centroids: Vec<u64>,
    words: usize,
}

impl Clusters {
    /// Clusters from their codebooks and centroids (`L` bytes each, one per
    /// codebook). Errors with [`crate::ErrorKind::InvalidArgument`] when
    /// there are no codebooks, the counts differ, or the tensor lengths or
    /// chunk sizes differ.
    pub fn new(codebooks: Vec<Codebook>, centroids: &[Vec<u8>]) -> Result<Self> {
        let first = codebooks
            .first()
            .ok_or_else(|| Error::invalid("no codebooks; a clustering has at least one"))?;
        let (l, c) = (first.row_bytes(), first.chunk());
        if centroids.len() != codebooks.len() {
            return Err(Error::invalid(format!(
                "{} codebooks but {} centroids; give one centroid per codebook",
                codebooks.len(),
                centroids.len()
            )));
        }
        if let Some(i) = codebooks
            .iter()
            .position(|b| b.row_bytes() != l || b.chunk() != c)
        {
            return Err(Error::invalid(format!(
                "codebook {i} is for {}-byte tensors in {} chunks, codebook 0 for {l}-byte \
                 tensors in {c} chunks; all clusters share the tensor length and chunk size",
                codebooks[i].row_bytes(),
                codebooks[i].chunk()
            )));
        }
        if let Some(i) = centroids.iter().position(|x| x.len() != l) {
            return Err(Error::invalid(format!(
                "centroid {i} has {} bytes; tensors have {l}",
                centroids[i].len()
            )));
        }
        let flat: Vec<u8> = centroids.concat();
        let bits = BitRows::gather(Rows::new(&flat, l)?, centroids.len(), |i| i);
        Ok(Self {
            words: bits.words(),
            centroids: (0..centroids.len())
                .flat_map(|i| bits.row(i).to_vec())
                .collect(),
            codebooks,
        })
    }

    /// From centroids already in words (the fit's form).
    pub(crate) fn from_words(codebooks: Vec<Codebook>, centroids: Vec<u64>, words: usize) -> Self {
        Self {
            codebooks,
            centroids,
            words,
        }
    }

    /// Number of clusters `k`.
    pub fn k(&self) -> usize {
        self.codebooks.len()
    }

    /// Tensor length `L`.
    pub fn row_bytes(&self) -> usize {
        self.codebooks[0].row_bytes()
    }

    /// The codebooks, by cluster id.
    pub fn codebooks(&self) -> &[Codebook] {
        &self.codebooks
    }

    /// Cluster of `row`: the centroid nearest in Hamming distance, lowest id
    /// on ties.
    ///
    /// Q: why the nearest centroid and not the codebook that encodes the row
    /// smallest? A: it is the rule the clusters were built with (k-means),
    /// so the codebooks were fitted on exactly the rows it sends them, and it
    /// costs `k · L / 8` popcounts per row, several times less than `k`
    /// encoded sizes; on the data we measured (see `ibp analyze --clusters`)
    /// the sizes it gives are what the sweep charges. Decoding does not care:
    /// [`compress_clustered_with_ids`] accepts any assignment.
    pub fn assign(&self, row: &[u8]) -> Result<u32> {
        if row.len() != self.row_bytes() {
            return Err(Error::invalid(format!(
                "tensor has {} bytes; the clusters are for {}-byte tensors",
                row.len(),
                self.row_bytes()
            )));
        }
        let r = BitRows::gather(Rows::new(row, row.len())?, 1, |_| 0);
        Ok(nearest(r.row(0), &self.centroids, self.words, 0).0 as u32)
    }
}

/// A clustered dataset in memory: the cluster id of each tensor and the
/// packed layout of the tensors, each encoded with its cluster's codebook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusteredPacked {
    /// Cluster id of each tensor.
    pub ids: ClusterIds,
    /// The tensors (`docs/FORMAT.md` §3.2).
    pub packed: Packed,
}

impl ClusteredPacked {
    /// Stored bytes: payload, codebooks, ids, flags and offsets.
    pub fn total_bytes(&self, k: usize) -> u64 {
        self.packed.payload.len() as u64
            + codebook_bytes(k, self.packed.row_bytes)
            + self.ids.as_bytes().len() as u64
            + self.packed.flags.len() as u64
            + 8 * self.packed.offsets.len() as u64
    }
}

/// Compress `rows`, each tensor with the codebook of its nearest cluster
/// ([`Clusters::assign`]).
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when the rows are not
/// the clusters' length.
pub fn compress_clustered(clusters: &Clusters, rows: Rows<'_>) -> Result<ClusteredPacked> {
    if rows.row_bytes() != clusters.row_bytes() {
        return Err(Error::invalid(format!(
            "tensors have {} bytes but the clusters are for {}-byte tensors",
            rows.row_bytes(),
            clusters.row_bytes()
        )));
    }
    let bits = BitRows::gather(rows, rows.rows(), |i| i);
    let ids: Vec<u32> = (0..rows.rows())
        .map(|i| nearest(bits.row(i), &clusters.centroids, clusters.words, 0).0 as u32)
        .collect();
    compress_clustered_with_ids(clusters.codebooks(), &ids, rows)
}

/// Compress `rows`, tensor `i` with `codebooks[ids[i]]`.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when there are no
/// codebooks, an id is out of range, `ids` is not one per tensor, or a
/// codebook is for another tensor length.
pub fn compress_clustered_with_ids(
    codebooks: &[Codebook],
    ids: &[u32],
    rows: Rows<'_>,
) -> Result<ClusteredPacked> {
    let (l, n) = (rows.row_bytes(), rows.rows());
    if ids.len() != n {
        return Err(Error::invalid(format!(
            "{} cluster ids for {n} tensors; give one per tensor",
            ids.len()
        )));
    }
    if let Some(i) = codebooks.iter().position(|b| b.row_bytes() != l) {
        return Err(Error::invalid(format!(
            "codebook {i} is for {}-byte tensors; these have {l}",
            codebooks[i].row_bytes()
        )));
    }
    let packed_ids = ClusterIds::pack(ids, codebooks.len())?;
    let mut offsets = Vec::with_capacity(n + 1);
    let mut flags = vec![0u8; flag_bytes(n)];
    let mut payload = Vec::new();
    offsets.push(0u64);
    let mut buf = vec![0u8; l];
    for (i, (row, &c)) in rows.iter().zip(ids).enumerate() {
        let cb = &codebooks[c as usize];
        match encode_row(cb, row, &mut buf)? {
            Some(e) => {
                payload.extend_from_slice(&buf[..e]);
                set_flag(&mut flags, i, true);
            }
            None => payload.extend_from_slice(row),
        }
        offsets.push(payload.len() as u64);
    }
    Ok(ClusteredPacked {
        ids: packed_ids,
        packed: Packed {
            row_bytes: l,
            rows: n,
            flags,
            offsets,
            payload,
        },
    })
}

/// Decompress a clustered dataset into `out` (`N · L` bytes), tensor `i`
/// with `codebooks[ids[i]]`.
///
/// Errors, never panicking, with [`crate::ErrorKind::InvalidArgument`] for
/// no codebooks, codebooks of another length or a wrong `out` length, and
/// with [`crate::ErrorKind::Corrupt`] or [`crate::ErrorKind::Truncated`]
/// for a cluster id `≥ k`, an id count other than `N`, or any inconsistency
/// of the packed layout.
pub fn decompress_clustered(
    codebooks: &[Codebook],
    ids: &ClusterIds,
    packed: &PackedRef<'_>,
    out: &mut [u8],
) -> Result<()> {
    let (l, n) = (packed.row_bytes(), packed.rows());
    if codebooks.is_empty() {
        return Err(Error::invalid(
            "no codebooks; a clustering has at least one",
        ));
    }
    if let Some(i) = codebooks.iter().position(|b| b.row_bytes() != l) {
        return Err(Error::invalid(format!(
            "codebook {i} is for {}-byte tensors; the dataset's have {l}",
            codebooks[i].row_bytes()
        )));
    }
    if n.checked_mul(l) != Some(out.len()) {
        return Err(Error::invalid(format!(
            "output buffer has {} bytes; {n} tensors of {l} bytes need rows × length",
            out.len()
        )));
    }
    if ids.len() != n {
        return Err(Error::corrupt(format!(
            "{} cluster ids for {n} tensors",
            ids.len()
        )));
    }
    packed.validate()?;
    for (i, dst) in out.chunks_exact_mut(l).enumerate() {
        let c = ids.get(i).unwrap_or(u32::MAX) as usize;
        let cb = codebooks.get(c).ok_or_else(|| {
            Error::corrupt(format!(
                "tensor {i} has cluster id {c} but there are only {} clusters",
                codebooks.len()
            ))
        })?;
        match packed.stored(i)? {
            Stored::Raw(bytes) => dst.copy_from_slice(bytes),
            Stored::Encoded(bytes) => {
                let e = decode_row(cb, bytes, dst)
                    .map_err(|e| Error::new(e.kind(), format!("tensor {i}: {}", e.message())))?;
                if e != bytes.len() {
                    return Err(Error::corrupt(format!(
                        "tensor {i} stores {} bytes but its participation bits say {e}",
                        bytes.len()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Total stored size of `rows` (`Σ min(E, L)`) when each is encoded with
/// its nearest cluster's codebook.
pub(crate) fn clustered_payload(clusters: &Clusters, bits: &BitRows, rows: Rows<'_>) -> u64 {
    use rayon::prelude::*;
    (0..rows.rows())
        .into_par_iter()
        .with_min_len(16)
        .map(|i| {
            let c = nearest(bits.row(i), &clusters.centroids, clusters.words, 0).0;
            stored_len(&clusters.codebooks[c], rows.row(i)).unwrap_or(rows.row_bytes()) as u64
        })
        .sum()
}

#[cfg(test)]
mod tests;
