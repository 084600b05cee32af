//! Decoded rows handed to a consumer in registers (`ibp_kernels::step::Sink`)
//! and through the device API (`ibp_kernels::device::decode_row`).

use super::*;

/// A consumer of decoded rows in registers: each lane sums the bytes it is
/// handed (a stand-in for a fused reduction).
struct SumSink(u64);

impl ibp_kernels::step::Sink for SumSink {
    fn put(&mut self, _ob: u32, w: [u32; 4], n: u32) {
        for i in 0..n {
            self.0 += ((w[(i / 4) as usize] >> (8 * (i % 4))) & 0xff) as u64;
        }
    }
}

#[test]
fn a_sink_receives_the_row_in_registers() {
    use ibp_kernels::detail::book::Layout;
    use ibp_kernels::detail::step::{Contig, Geometry, decode_row};
    for (l, chunk) in [
        (100usize, ChunkSize::Four),
        (1531, ChunkSize::Two),
        (5732, ChunkSize::Eight),
    ] {
        let data = float_rows(6, l, 77);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        let book = Aligned::from(&decode_book(&cb));
        let entries = Aligned::from(&decoder_table(&cb));
        let k = cb.chunks() as u32;
        let g = Geometry {
            chunks: k,
            row_bytes: l as u32,
            layout: Layout::new(k, cb.chunk().bytes()),
            entries: entries.addr(),
            flags: 0,
        };
        for i in 0..6 {
            if packed.flags[i / 8] >> (i % 8) & 1 == 0 {
                continue;
            }
            let stored =
                &packed.payload[packed.offsets[i] as usize..packed.offsets[i + 1] as usize];
            let ws = Aligned::from(&[stored, &[0u8; 32][..]].concat());
            let (ws_mem, book_mem) = (HostBytes(ws.addr()), HostBytes(book.addr()));
            let total = AtomicU64::new(0);
            run_warp(|w| {
                let mut sink = SumSink(0);
                // SAFETY: the workspace holds the stored bytes plus 32, the
                // book and entries are this codebook's.
                let ok = unsafe {
                    let mut src = Contig::new(&ws_mem, 0);
                    match chunk {
                        ChunkSize::Two => decode_row::<2, _, _, _, _, _>(
                            w,
                            &mut src,
                            &book_mem,
                            &HostMem,
                            &g,
                            stored.len() as u32,
                            &mut sink,
                        ),
                        ChunkSize::Four => decode_row::<4, _, _, _, _, _>(
                            w,
                            &mut src,
                            &book_mem,
                            &HostMem,
                            &g,
                            stored.len() as u32,
                            &mut sink,
                        ),
                        _ => decode_row::<8, _, _, _, _, _>(
                            w,
                            &mut src,
                            &book_mem,
                            &HostMem,
                            &g,
                            stored.len() as u32,
                            &mut sink,
                        ),
                    }
                };
                assert!(ok);
                total.fetch_add(sink.0, Relaxed);
            });
            let want: u64 = data[i * l..(i + 1) * l].iter().map(|&b| b as u64).sum();
            assert_eq!(total.load(Relaxed), want, "L={l} row {i}");
        }
    }
}

#[test]
fn the_device_api_decodes_rows_into_a_user_sink() {
    use ibp_kernels::device::{DatasetView, RowError, decode_row};
    use ibp_kernels::step::RowStore;
    for (l, chunk) in [
        (100usize, ChunkSize::Four),
        (1531, ChunkSize::Two),
        (5732, ChunkSize::Eight),
        (9000, ChunkSize::One),
    ] {
        let n = 5;
        let data = float_rows(n, l, 5 + l as u64);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
        let lens: Vec<u32> = (0..n)
            .map(|i| {
                let s = &fixed.slots[i * l..(i + 1) * l];
                if fixed.flags[i / 8] >> (i % 8) & 1 == 1 {
                    crate::encode::stream_len(&cb, s).unwrap() as u32
                } else {
                    l as u32
                }
            })
            .collect();
        let book = Aligned::from(&decode_book(&cb));
        let entries = Aligned::from(&decoder_table(&cb));
        let payload = Lined::from(&packed.payload);
        let slots = Lined::from(&fixed.slots);
        let offsets = Aligned::from(bytemuck::cast_slice(&packed.offsets));
        let lengths = Aligned::from(bytemuck::cast_slice(&lens));
        let pflags = Aligned::from(&packed.flags);
        let fflags = Aligned::from(&fixed.flags);
        let base = DatasetView {
            rows: n as u64,
            row_bytes: l as u64,
            book: book.addr(),
            entries: entries.addr(),
            book_bytes: book.1 as u32,
            chunk: cb.chunk().bytes(),
            ..Default::default()
        };
        let views = [
            (
                "packed",
                DatasetView {
                    src: payload.addr(),
                    offsets: offsets.addr(),
                    flags: pflags.addr(),
                    ..base
                },
            ),
            (
                "fixed",
                DatasetView {
                    src: slots.addr(),
                    flags: fflags.addr(),
                    ..base
                },
            ),
            (
                "fixed+lengths",
                DatasetView {
                    src: slots.addr(),
                    lengths: lengths.addr(),
                    flags: fflags.addr(),
                    ..base
                },
            ),
        ];
        for (what, view) in views {
            let smem = Aligned::from(&vec![0x3cu8; view.workspace_bytes() as usize]);
            let smem_addr = smem.addr();
            for t in 0..n as u64 + 1 {
                // The row lands 3 bytes into a poisoned buffer (unaligned).
                let out = Aligned::from(&vec![0xeeu8; l + 8]);
                let dst = out.addr() + 3;
                let verdict = std::sync::Mutex::new(None);
                run_warp_with(smem_addr, |w| {
                    // SAFETY: the row fits in `out` after 3 bytes.
                    let mut sink = unsafe { RowStore::new(&HostMem, dst) };
                    // SAFETY: every buffer is the dataset's, the workspace
                    // holds `workspace_bytes`.
                    let r =
                        unsafe { decode_row(w, &view, &HostBytes(book.addr()), 0, t, &mut sink) };
                    *verdict.lock().unwrap() = Some(r);
                });
                let r = verdict.into_inner().unwrap().unwrap();
                if t == n as u64 {
                    assert_eq!(r, Err(RowError::BadIndex), "L={l} {what}");
                    continue;
                }
                assert_eq!(r, Ok(()), "L={l} {what} row {t}");
                let t = t as usize;
                let got = out.bytes();
                assert!(
                    got[3..3 + l] == data[t * l..(t + 1) * l],
                    "L={l} {what} row {t}"
                );
                assert!(
                    got[..3].iter().chain(&got[3 + l..]).all(|&b| b == 0xee),
                    "L={l} {what} row {t}: stray write"
                );
            }
        }
    }
}
