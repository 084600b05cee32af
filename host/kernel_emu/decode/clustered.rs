//! The clustered decode kernel on emulated warps: each tensor decoded with
//! its own cluster's codebook.

use super::*;

/// Run the clustered decode kernel (`ibp_kernels::detail::decode::run` with `CL`) on
/// a clustered dataset, as the host launcher sizes it; returns the output
/// rows and the status words.
fn emu_clustered(
    codebooks: &[Codebook],
    c: &crate::cluster::ClusteredPacked,
    index: Option<&[u64]>,
    count: u64,
    streaming: bool,
) -> (Vec<u8>, [u64; 2]) {
    use ibp_kernels::params::{DECODE_MODE_DECODE, DecodeParams, FETCH_CP_ASYNC};

    let (l, n) = (c.packed.row_bytes, c.packed.rows);
    let cat = |f: fn(&Codebook) -> Vec<u8>| codebooks.iter().flat_map(f).collect::<Vec<u8>>();
    let (book, table) = (
        Aligned::from(&cat(decode_book)),
        Aligned::from(&cat(decoder_table)),
    );
    let mut ids = c.ids.as_bytes().to_vec();
    ids.extend([0u8; 8]);
    let ids = Aligned::from(&ids);
    let src = Lined::from(&c.packed.payload);
    let offs = Aligned::from(bytemuck::cast_slice(&c.packed.offsets));
    let flags = Aligned::from(&c.packed.flags);
    let idx = index.map(|ix| Aligned::from(bytemuck::cast_slice(ix)));
    let out = Aligned::from(&vec![0xa7u8; count as usize * l]);
    let status = Aligned::from(bytemuck::cast_slice(&[0u64, u64::MAX]));
    let p = DecodeParams {
        src: src.addr(),
        offsets: offs.addr(),
        flags: flags.addr(),
        table: table.addr(),
        index: idx.as_ref().map_or(0, |i| i.addr()),
        count,
        rows: n as u64,
        row_bytes: l as u64,
        out: out.addr(),
        out_stride: l as u64,
        status: status.addr(),
        chunk: codebooks[0].chunk().bytes(),
        mode: DECODE_MODE_DECODE,
        fetch: FETCH_CP_ASYNC,
        cluster_bits: c.ids.bits(),
        clusters: ids.addr(),
        ..Default::default()
    };
    let max_stored = c
        .packed
        .offsets
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0);
    emu_launch(
        &codebooks[0],
        &book,
        p,
        max_stored,
        streaming,
        None,
        true,
        false,
    );
    let st = bytemuck::cast_slice::<u8, u64>(status.bytes());
    (out.bytes().to_vec(), [st[0], st[1]])
}

#[test]
fn emulated_clustered_decode_uses_each_tensors_own_codebook() {
    use crate::cluster::compress_clustered_with_ids;
    let mut cases = 0;
    for (l, n, chunk) in [
        (5usize, 40usize, ChunkSize::One),
        (100, 40, ChunkSize::Two),
        (1536, 24, ChunkSize::Four),
        (5732, 10, ChunkSize::Eight),
    ] {
        // Rows of three kinds, and five codebooks fitted on different
        // ones: a tensor decoded with another cluster's book comes out
        // wrong or is reported corrupt.
        let kinds = [
            sparse_rows(n, l, 3),
            float_rows(n, l, 5),
            float_rows(n, l, 7)
                .chunks(4)
                .flat_map(|w| {
                    let v = f32::from_le_bytes(w.try_into().unwrap_or([0; 4]));
                    (v * 1048576.0).to_le_bytes().into_iter().take(w.len())
                })
                .collect(),
        ];
        let ids: Vec<u32> = (0..n as u32).map(|i| (i * 7 + i / 3) % 5).collect();
        let data: Vec<u8> = (0..n)
            .flat_map(|i| {
                let k = ids[i] as usize % 3;
                kinds[k][i * l..(i + 1) * l].to_vec()
            })
            .collect();
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let books: Vec<Codebook> = (0..5)
            .map(|c| {
                let own: Vec<u8> = (0..n)
                    .filter(|&i| ids[i] == c)
                    .flat_map(|i| data[i * l..(i + 1) * l].to_vec())
                    .collect();
                fit(Rows::new(&own, l).unwrap(), &opts).unwrap().codebook
            })
            .collect();
        let c = compress_clustered_with_ids(&books, &ids, rows).unwrap();
        assert!(
            c.packed.flags.iter().any(|&f| f != 0),
            "L={l}: nothing encoded"
        );
        let gather: Vec<u64> = (0..n as u64).rev().chain([1, 1, 0]).collect();
        for streaming in [false, true] {
            for index in [None, Some(&gather[..])] {
                let count = index.map_or(n, |ix| ix.len()) as u64;
                let (out, st) = emu_clustered(&books, &c, index, count, streaming);
                let what = format!("L={l} streaming {streaming} gather {}", index.is_some());
                assert_eq!(st, [0, u64::MAX], "{what}");
                for i in 0..count as usize {
                    let t = index.map_or(i, |ix| ix[i] as usize);
                    assert!(
                        out[i * l..(i + 1) * l] == data[t * l..(t + 1) * l],
                        "{what}: row {i}"
                    );
                }
                cases += 1;
            }
        }
        // One codebook for all: the same bytes decode wrong (the test can
        // tell books apart).
        let one = vec![books[0].clone(); 5];
        let (out, st) = emu_clustered(&one, &c, None, n as u64, false);
        assert!(st[0] != 0 || out != data, "L={l}: the books are alike");
    }
    assert_eq!(cases, 16);
}
