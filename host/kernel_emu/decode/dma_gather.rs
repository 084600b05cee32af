//! The DMA gather's host-staged pieces, decoded by the emulated kernel.

use super::*;

/// The DMA gather's pieces (`crate::layout::gather`), each launched as the
/// host launcher does (its own offsets, flags, u32 index and row count,
/// output rows from the piece's first, failures reported as rows of the
/// whole call), decode to the requested rows and report the first bad index.
#[test]
fn emulated_dma_gather_pieces_decode_the_requested_rows() {
    use crate::layout::gather::{plan_piece, stage_piece};
    use ibp_kernels::params::{DECODE_MODE_DECODE, DecodeParams, FETCH_CP_ASYNC, STATUS_BAD_INDEX};
    for (l, n, chunk, capacity) in [
        (100usize, 60usize, ChunkSize::Four, 900usize),
        (1024, 20, ChunkSize::Two, 3000),
        (5732, 6, ChunkSize::Eight, 16 << 10),
    ] {
        let data = dataset(n, l, 11 + l as u64);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
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
        let table = Aligned::from(&decoder_table(&cb));
        let book = Aligned::from(&decode_book(&cb));
        let out = Aligned::from(&vec![0xa7u8; index.len() * l]);
        let status = Aligned::from(bytemuck::cast_slice(&[0u64, u64::MAX]));
        let (mut start, mut pieces) = (0, 0);
        while start < index.len() {
            let (count, payload) = plan_piece(view.offsets(), &index, start, capacity).unwrap();
            let mut buf = vec![0u8; capacity];
            let piece = stage_piece(&view, &index, start, count, payload, &mut buf).unwrap();
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
                ..Default::default()
            };
            emu_launch(&cb, &book, p, max_stored, false, None, false);
            start += count;
            pieces += 1;
        }
        let what = format!("L={l} {chunk:?} capacity {capacity}");
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
