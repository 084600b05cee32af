//! The DMA gather's host-staged pieces, decoded by the emulated kernel.

use super::*;

/// The DMA gather's pieces (`crate::dma_pieces`), each launched as the
/// host launcher does (its own offsets, flags, u32 index and row count,
/// output rows from the piece's first, failures reported as rows of the
/// whole call), decode to the requested rows and report the first bad index.
#[test]
fn emulated_dma_gather_pieces_decode_the_requested_rows() {
    use crate::cluster::compress_clustered_with_ids;
    use crate::dma_pieces::{plan_piece, stage_piece};
    use ibp_kernels::params::{DECODE_MODE_DECODE, DecodeParams, FETCH_CP_ASYNC, STATUS_BAD_INDEX};
    for clustered in [false, true] {
        for (l, n, chunk, capacity) in [
            (100usize, 60usize, ChunkSize::Four, 900usize),
            (1024, 20, ChunkSize::Two, 3000),
            (5732, 6, ChunkSize::Eight, 16 << 10),
        ] {
            let mut data = dataset(n, l, 11 + l as u64);
            if clustered {
                // Each cluster's rows flipped by its own pattern: their
                // invariant bits differ, so a row decoded with another
                // cluster's book comes out wrong.
                for (i, r) in data.chunks_mut(l).enumerate() {
                    r.iter_mut().for_each(|b| *b ^= [0, 0x5a, 0xa5][i % 3]);
                }
            }
            let rows = Rows::new(&data, l).unwrap();
            let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
            let books = books_for(&data, l, &opts, clustered);
            let cb = &books[0];
            let ids: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
            let (packed, cids) = if clustered {
                let c = compress_clustered_with_ids(&books, &ids, rows).unwrap();
                (c.packed, Some(c.ids))
            } else {
                (
                    compress_packed(cb, rows, &LayoutOptions::default()).unwrap(),
                    None,
                )
            };
            let view = packed.view();
            let max_stored = packed
                .offsets
                .windows(2)
                .map(|w| w[1] - w[0])
                .max()
                .unwrap();
            let mut index: Vec<u64> = (0..3 * n as u64).map(|i| i * 7 % n as u64).collect();
            let first_bad = index.len() - 5;
            index[first_bad] = n as u64;
            index[first_bad + 2] = u64::MAX;
            let cat = |f: fn(&Codebook) -> Vec<u8>| books.iter().flat_map(f).collect::<Vec<u8>>();
            let table = Aligned::from(&cat(decoder_table));
            let book = Aligned::from(&cat(decode_book));
            let out = Aligned::from(&vec![0xa7u8; index.len() * l]);
            let status = Aligned::from(bytemuck::cast_slice(&[0u64, u64::MAX]));
            let (mut start, mut pieces) = (0, 0);
            while start < index.len() {
                let (count, payload) =
                    plan_piece(view.offsets(), &index, start, capacity, clustered).unwrap();
                let mut buf = vec![0u8; capacity];
                let piece = stage_piece(
                    &view,
                    cids.as_ref(),
                    &index,
                    start,
                    count,
                    payload,
                    &mut buf,
                )
                .unwrap();
                let staged = Lined::from(&buf);
                let base = staged.addr();
                let p = DecodeParams {
                    src: base + piece.payload_at as u64,
                    offsets: base,
                    flags: base + piece.flags_at as u64,
                    index: base + piece.index_at as u64,
                    index_u32: 1,
                    table: table.addr(),
                    count: count as u64,
                    rows: count as u64,
                    row_bytes: l as u64,
                    out: out.addr() + (start * l) as u64,
                    out_stride: l as u64,
                    row_base: start as u64,
                    status: status.addr(),
                    chunk: cb.chunk().bytes(),
                    mode: DECODE_MODE_DECODE,
                    fetch: FETCH_CP_ASYNC,
                    clusters: piece.ids_at.map_or(0, |at| base + at as u64),
                    cluster_bits: if clustered { 32 } else { 0 },
                    ..Default::default()
                };
                emu_launch(cb, &book, p, max_stored, false, None, clustered, false);
                start += count;
                pieces += 1;
            }
            let what = format!("L={l} {chunk:?} capacity {capacity} clustered {clustered}");
            assert!(pieces > 1, "{what}: one piece");
            let st = bytemuck::cast_slice::<u8, u64>(status.bytes());
            assert_eq!(st, [STATUS_BAD_INDEX, first_bad as u64], "{what}");
            for (i, (&t, row)) in index.iter().zip(out.bytes().chunks(l)).enumerate() {
                if t < n as u64 {
                    assert_eq!(row, &data[t as usize * l..][..l], "{what}: row {i}");
                } else {
                    assert!(row.iter().all(|&b| b == 0), "{what}: bad row {i}");
                }
            }
        }
    }
}

/// Clustered: three codebooks, each fitted on the rows of its cluster (rows
/// `i` with `i % 3 == c`); else one fitted on every row.
fn books_for(data: &[u8], l: usize, opts: &FitOptions, clustered: bool) -> Vec<Codebook> {
    if !clustered {
        return vec![fit(Rows::new(data, l).unwrap(), opts).unwrap().codebook];
    }
    (0..3)
        .map(|c| {
            let own: Vec<u8> = data
                .chunks(l)
                .enumerate()
                .filter(|(i, _)| i % 3 == c)
                .flat_map(|(_, r)| r.to_vec())
                .collect();
            fit(Rows::new(&own, l).unwrap(), opts).unwrap().codebook
        })
        .collect()
}
