//! Clustered groups in the container (`docs/FORMAT.md` §6.8): the checks a
//! reader makes of their codebooks and cluster ids at open, and the decoding
//! of one tensor. Whether a group is clustered is the pipeline's choice
//! (`crate::pipeline`).
//!
//! A clustered group is a packed group (§3.2) whose codebook section holds
//! `k` codebooks and which has one more section, the cluster ids: tensor
//! `i` is encoded with codebook `ids[i]`.

use crate::cluster::{ClusterIds, decompress_clustered, id_bits};
use crate::codebook::{ChunkSize, Codebook};
use crate::error::{Error, Result};
use crate::layout::{PackedRef, decompress_packed_row};

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
