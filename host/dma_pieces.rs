//! The rows a gather asks for, restaged as small packed datasets ("pieces")
//! that fit a buffer of fixed size: the host half of the GPU's DMA gather,
//! kept here (plain bytes, no CUDA) so the CPU tests and the kernel emulator
//! check it without a GPU.
//!
//! A piece of `n` rows is laid out in its buffer as
//!
//! ```text
//! 0            offsets: n + 1 u64, rebased (row j's stored form at payload + offsets[j])
//! index_at     index:   n u32, j for row j, u32::MAX for a bad index
//! flags_at     flags:   ⌈n/8⌉ bytes, row j's bit copied from the requested tensor
//! ids_at       ids:     clustered datasets only: n u32 cluster ids, then 8 zero bytes
//! payload_at   payload: the requested tensors' stored forms back to back (128-aligned)
//! ```
//!
//! so the unchanged decode kernel reads it as a dataset of `n` tensors,
//! gathered by the index. An out-of-range request keeps its place (an empty
//! slot, index `u32::MAX`), so the kernel reports it and zero-fills its row as
//! the zero-copy gather does.
//!
//! Q: why one buffer per piece, metadata and payload together?
//! A: one DMA per piece. Each copy has a start-up cost of microseconds; three
//! copies per piece would triple it.

use crate::cluster::ClusterIds;
use crate::error::{Error, Result};
use crate::layout::PackedRef;

/// Q: why is the payload 128-byte aligned?
/// A: the decoder fetches whole aligned 128-byte lines; an aligned payload
/// keeps its reads inside the buffer and off the metadata.
const PAYLOAD_ALIGN: usize = 128;

/// Where one staged piece keeps its parts, in bytes from the buffer's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GatherPiece {
    /// Rows (index entries) in the piece.
    pub rows: usize,
    /// Start of the `u32` local index.
    pub index_at: usize,
    /// Start of the flag bitmap.
    pub flags_at: usize,
    /// Start of the cluster ids (one u32 a row), when the dataset is
    /// clustered.
    pub ids_at: Option<usize>,
    /// Start of the payload (the offsets are relative to it).
    pub payload_at: usize,
    /// Bytes of the buffer in use (what is copied to the device).
    pub len: usize,
}

impl GatherPiece {
    /// The parts' positions for `rows` rows storing `payload` bytes, with
    /// cluster ids when `clustered`.
    fn layout(rows: usize, payload: usize, clustered: bool) -> Self {
        let index_at = ((rows + 1) * 8).next_multiple_of(16);
        let flags_at = index_at + (rows * 4).next_multiple_of(16);
        let flags_end = (flags_at + rows.div_ceil(8)).next_multiple_of(16);
        // The kernel reads an id's word and the next: 8 bytes of slack.
        let (ids_at, ids_end) = if clustered {
            (Some(flags_end), flags_end + 4 * rows + 8)
        } else {
            (None, flags_end)
        };
        let payload_at = ids_end.next_multiple_of(PAYLOAD_ALIGN);
        GatherPiece {
            rows,
            index_at,
            flags_at,
            ids_at,
            payload_at,
            len: payload_at + payload,
        }
    }

    /// Bytes a piece needs for `rows` rows storing `payload` bytes, with
    /// cluster ids when `clustered`.
    pub fn bytes_for(rows: usize, payload: usize, clustered: bool) -> usize {
        Self::layout(rows, payload, clustered).len
    }
}

/// The stored bytes of tensor `t`, or 0 when `t` is out of range.
fn stored_len(offsets: &[u64], t: u64) -> u64 {
    let rows = offsets.len() as u64 - 1;
    if t < rows {
        offsets[t as usize + 1] - offsets[t as usize]
    } else {
        0
    }
}

/// How many of `index[start..]` the next piece of `capacity` bytes holds (at
/// least one), with their stored bytes; with room for cluster ids when
/// `clustered`. `offsets` must be validated (the [`PackedRef::validate`] of
/// the dataset).
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when the first row's
/// stored form alone does not fit.
pub(crate) fn plan_piece<I: Copy + Into<u64>>(
    offsets: &[u64],
    index: &[I],
    start: usize,
    capacity: usize,
    clustered: bool,
) -> Result<(usize, usize)> {
    let mut n = 0usize;
    let mut payload = 0usize;
    // Q: why at most u32::MAX - 1 rows?
    // A: the local index is u32, and u32::MAX marks a bad index.
    let max_rows = (u32::MAX - 1) as usize;
    for &t in &index[start..] {
        let len = stored_len(offsets, t.into()) as usize;
        if n == max_rows || GatherPiece::bytes_for(n + 1, payload + len, clustered) > capacity {
            break;
        }
        n += 1;
        payload += len;
    }
    if n == 0 && start < index.len() {
        let len = stored_len(offsets, index[start].into());
        return Err(Error::invalid(format!(
            "tensor {} stores {len} bytes, which with its piece's tables exceeds the DMA piece of {capacity} bytes; make the pieces larger",
            index[start].into()
        )));
    }
    Ok((n, payload))
}

/// Write the piece of `index[start..start + rows]` into `dst` (at least
/// [`GatherPiece::bytes_for`] bytes, from [`plan_piece`]), reading the
/// stored forms from `packed` (validated) and, for a clustered dataset,
/// each row's cluster id from `ids` (one per tensor of `packed`).
pub(crate) fn stage_piece<I: Copy + Into<u64>>(
    packed: &PackedRef<'_>,
    ids: Option<&ClusterIds>,
    index: &[I],
    start: usize,
    rows: usize,
    payload: usize,
    dst: &mut [u8],
) -> Result<GatherPiece> {
    let piece = GatherPiece::layout(rows, payload, ids.is_some());
    if dst.len() < piece.len {
        return Err(Error::invalid(format!(
            "a DMA piece of {rows} rows needs {} bytes; the buffer holds {}",
            piece.len,
            dst.len()
        )));
    }
    let offsets = packed.offsets();
    let src = packed.payload();
    let flags = packed.flags();
    let n_rows = packed.rows() as u64;
    let (meta, body) = dst.split_at_mut(piece.payload_at);
    meta[piece.flags_at..].fill(0);
    let mut at = 0usize;
    // (position in the piece, position in the payload, length) of each
    // stored row, copied after the tables.
    let mut copies: Vec<(usize, usize, usize)> = Vec::with_capacity(rows);
    for (j, &t) in index[start..start + rows].iter().enumerate() {
        let t: u64 = t.into();
        meta[8 * j..8 * j + 8].copy_from_slice(&(at as u64).to_le_bytes());
        let local = if t < n_rows {
            let (a, b) = (
                offsets[t as usize] as usize,
                offsets[t as usize + 1] as usize,
            );
            let len = b - a;
            if at + len > payload {
                return Err(Error::invalid(
                    "the planned piece holds fewer stored bytes than its rows",
                ));
            }
            copies.push((at, a, len));
            at += len;
            if crate::layout::flag(flags, t as usize) {
                meta[piece.flags_at + j / 8] |= 1 << (j % 8);
            }
            j as u32
        } else {
            u32::MAX
        };
        let ix = piece.index_at + 4 * j;
        meta[ix..ix + 4].copy_from_slice(&local.to_le_bytes());
        if let (Some(ids), Some(at)) = (ids, piece.ids_at) {
            // A bad index keeps id 0: the kernel reports the row before it
            // looks at its cluster.
            let id = if t < n_rows {
                ids.get(t as usize)
                    .ok_or_else(|| Error::invalid("fewer cluster ids than tensors"))?
            } else {
                0
            };
            meta[at + 4 * j..at + 4 * j + 4].copy_from_slice(&id.to_le_bytes());
        }
    }
    if let Some(at) = piece.ids_at {
        meta[at + 4 * rows..at + 4 * rows + 8].fill(0);
    }
    meta[8 * rows..8 * rows + 8].copy_from_slice(&(at as u64).to_le_bytes());
    copy_rows(&mut body[..at], src, &copies);
    Ok(piece)
}

/// Copy each `(to, from, len)` of `copies` (ascending, back to back in
/// `dst`) from `src` into `dst`, groups of rows on the thread pool.
///
/// Q: why threads for a copy?
/// A: the rows are random ones of a large table: each is a cache and TLB
/// miss, and one thread copying them one after the other measured about 3
/// GB/s on the H200's host (MiniLM f32, 65,536 rows), a fifteenth of the
/// link; the misses of several threads overlap.
fn copy_rows(dst: &mut [u8], src: &[u8], copies: &[(usize, usize, usize)]) {
    use rayon::prelude::*;
    const GROUP: usize = 256;
    let mut parts = Vec::with_capacity(copies.len().div_ceil(GROUP));
    let mut rest = dst;
    let mut base = 0usize;
    for g in copies.chunks(GROUP) {
        let end = g.last().map_or(base, |&(to, _, len)| to + len);
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(end - base);
        parts.push((base, head, g));
        rest = tail;
        base = end;
    }
    parts.into_par_iter().for_each(|(base, out, g)| {
        for &(to, from, len) in g {
            out[to - base..to - base + len].copy_from_slice(&src[from..from + len]);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codebook::{ChunkSize, Codebook};
    use crate::dataset::Rows;
    use crate::layout::{LayoutOptions, compress_packed, decompress_packed_row};

    /// Rows that compress unevenly: some tensors encode, some are stored raw.
    fn dataset(n: usize, l: usize) -> (Vec<u8>, Codebook) {
        let mut data = vec![0u8; n * l];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for (i, row) in data.chunks_mut(l).enumerate() {
            for b in row.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Every third row is noise; the rest mostly small values.
                *b = if i % 3 == 0 {
                    x as u8
                } else {
                    (x as u8) & 0x03
                };
            }
        }
        let rows = Rows::new(&data, l).unwrap();
        let cb = crate::fit::fit(
            rows,
            &crate::fit::FitOptions::default()
                .with_chunk(crate::fit::ChunkChoice::Fixed(ChunkSize::Two)),
        )
        .unwrap()
        .codebook;
        (data, cb)
    }

    /// Read a staged piece back as the packed dataset it claims to be, and
    /// decode every row with the CPU decoder.
    fn decode_piece(
        cb: &Codebook,
        buf: &[u8],
        piece: &GatherPiece,
        l: usize,
    ) -> Vec<Option<Vec<u8>>> {
        let n = piece.rows;
        let offsets: Vec<u64> = buf[..8 * (n + 1)]
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let index: Vec<u32> = buf[piece.index_at..piece.index_at + 4 * n]
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let flags = &buf[piece.flags_at..piece.flags_at + n.div_ceil(8)];
        let payload = &buf[piece.payload_at..piece.len];
        let packed =
            PackedRef::new(l, n, flags, std::borrow::Cow::Owned(offsets), payload).unwrap();
        // (Not `validate`: a bad request's slot is empty and flagged raw,
        // which no valid dataset has; nothing reads it.)
        index
            .iter()
            .map(|&t| {
                (t != u32::MAX).then(|| {
                    let mut out = vec![0u8; l];
                    decompress_packed_row(cb, &packed, t as usize, &mut out).unwrap();
                    out
                })
            })
            .collect()
    }

    #[test]
    fn staged_pieces_decode_to_the_requested_rows_and_mark_bad_indices() {
        let (l, n) = (96, 200);
        let (data, cb) = dataset(n, l);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        let view = packed.view();
        // Repeats, reverse order, out-of-range entries, a ragged count.
        let mut index: Vec<u64> = (0..n as u64).rev().step_by(3).collect();
        index.extend([5, 5, n as u64, u64::MAX, 0, 199, (n + 7) as u64]);
        index.extend((0..50).map(|i| (i * 37 % n) as u64));
        for capacity in [GatherPiece::bytes_for(1, l, false), 700, 1500, 1 << 20] {
            let mut got = Vec::new();
            let mut start = 0;
            let mut pieces = 0;
            while start < index.len() {
                let (rows, payload) =
                    plan_piece(view.offsets(), &index, start, capacity, false).unwrap();
                assert!(rows >= 1);
                let mut buf = vec![0xa5u8; capacity];
                let piece =
                    stage_piece(&view, None, &index, start, rows, payload, &mut buf).unwrap();
                assert!(piece.len <= capacity, "{piece:?} over {capacity}");
                assert_eq!(piece.payload_at % PAYLOAD_ALIGN, 0);
                got.extend(decode_piece(&cb, &buf, &piece, l));
                start += rows;
                pieces += 1;
            }
            assert_eq!(got.len(), index.len());
            if capacity == 1 << 20 {
                assert_eq!(pieces, 1);
            } else {
                assert!(pieces > 1, "capacity {capacity}: one piece");
            }
            for (i, (&t, row)) in index.iter().zip(&got).enumerate() {
                match row {
                    Some(row) => {
                        assert!(t < n as u64, "row {i}: bad index {t} was staged");
                        assert_eq!(row[..], data[t as usize * l..][..l], "row {i} (tensor {t})");
                    }
                    None => assert!(t >= n as u64, "row {i}: tensor {t} marked bad"),
                }
            }
        }
    }

    #[test]
    fn u32_indices_stage_the_same_bytes_as_u64() {
        let (l, n) = (64, 40);
        let (data, cb) = dataset(n, l);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        let wide: Vec<u64> = vec![3, 39, 40, 0, 17, 17];
        let narrow: Vec<u32> = wide.iter().map(|&t| t as u32).collect();
        let (rows, payload) = plan_piece(packed.view().offsets(), &wide, 0, 4096, false).unwrap();
        assert_eq!(
            plan_piece(packed.view().offsets(), &narrow, 0, 4096, false).unwrap(),
            (rows, payload)
        );
        let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
        let pa = stage_piece(&packed.view(), None, &wide, 0, rows, payload, &mut a).unwrap();
        let pb = stage_piece(&packed.view(), None, &narrow, 0, rows, payload, &mut b).unwrap();
        assert_eq!(pa, pb);
        assert_eq!(a[..pa.len], b[..pb.len]);
    }

    #[test]
    fn a_tensor_larger_than_the_piece_is_an_invalid_argument() {
        let (l, n) = (256, 9);
        let (data, cb) = dataset(n, l);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        // Tensor 0 is noise: stored raw, 256 bytes.
        let err = plan_piece(packed.view().offsets(), &[0u64], 0, 300, false).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        // A bad index stores nothing and always fits.
        assert_eq!(
            plan_piece(packed.view().offsets(), &[u64::MAX], 0, 300, false).unwrap(),
            (1, 0)
        );
        // An empty request plans an empty piece.
        assert_eq!(
            plan_piece::<u64>(packed.view().offsets(), &[], 0, 300, false).unwrap(),
            (0, 0)
        );
    }
}
