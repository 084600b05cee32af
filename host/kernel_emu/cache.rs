//! The feature cache's gather body (`ibp_kernels::detail::cache::gather`) on the
//! emulated warp: rows from a slab (compressed or raw), from the dataset on
//! a miss (packed, or fixed-stride with a length table: line-aligned host
//! rows), from raw host rows behind compressed slab rows, bad ids and a
//! corrupt index entry, against the original bytes.

use ibp_kernels::detail::cache::{Entry, NOT_CACHED, gather, pack};
use ibp_kernels::device::DatasetView;
use ibp_kernels::params::{CacheParams, STATUS_BAD_INDEX, STATUS_CORRUPT};

use super::decode::{Lined, float_rows, uniform_columns};
use super::*;
use crate::kernel_tables::book_is_uniform;

/// Run the gather as `warps` warps (one after the other, each its own
/// share of the ids, with the uniform step when `uni`) and return the
/// output rows (poisoned first) and the status words.
fn emu_gather(
    p: CacheParams,
    book: u64,
    ids: &[u64],
    l: usize,
    uni: bool,
    warps: u64,
) -> (Vec<u8>, [u64; 2]) {
    let ids = Aligned::from(bytemuck::cast_slice(ids));
    let out = Aligned::from(&vec![0xA5u8; ids.1 / 8 * l]);
    let status = Aligned::from(bytemuck::cast_slice(&[0u64, u64::MAX]));
    let smem = Aligned::from(&vec![0x3cu8; p.view.workspace_bytes() as usize]);
    let p = CacheParams {
        ids: ids.addr(),
        count: (ids.1 / 8) as u64,
        out: out.addr(),
        out_stride: l as u64,
        status: status.addr(),
        ..p
    };
    for warp in 0..warps {
        run_warp_with(smem.addr(), |w| {
            // SAFETY: every buffer above is sized as `CacheParams` states;
            // the workspace holds `workspace_bytes`; `uni` only for a
            // uniform book (the caller's).
            unsafe {
                if uni {
                    gather::<_, _, true>(w, &HostBytes(book), &p, 0, warp, warps)
                } else {
                    gather::<_, _, false>(w, &HostBytes(book), &p, 0, warp, warps)
                }
            }
        });
    }
    let s: &[u64] = bytemuck::cast_slice(status.bytes());
    (out.bytes().to_vec(), [s[0], s[1]])
}

#[test]
fn emulated_cache_gather_returns_every_row_from_slab_or_host() {
    // `alike`: every column's invariant bits the same (a uniform book:
    // the uniform gather runs beside the general one).
    for (l, chunk, alike) in [
        (100usize, ChunkSize::Four, false),
        (1531, ChunkSize::Two, false),
        (768, ChunkSize::Two, false),
        (5732, ChunkSize::Eight, false),
        (768, ChunkSize::Two, true),
        (100, ChunkSize::Four, true),
        (531, ChunkSize::One, true),
    ] {
        // Alike columns need more rows to keep every column's invariant
        // bits (and only those) above the threshold.
        let n = if alike { 64 } else { 24 };
        let mut data = if alike {
            uniform_columns(n, l, chunk.bytes(), 70 + l as u64)
        } else {
            float_rows(n, l, 40 + l as u64)
        };
        // Two rows of noise, stored raw.
        let mut x = 99u64;
        for t in [7, 16] {
            for b in &mut data[t * l..(t + 1) * l] {
                *b = xorshift(&mut x) as u8;
            }
        }
        let rows = Rows::new(&data, l).unwrap();
        let cb = if alike {
            let t = Threshold::from_basis_points(8500).unwrap();
            Codebook::from_counts(&count_bits(rows), n as u64, t, chunk).unwrap()
        } else {
            let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
            fit(rows, &opts).unwrap().codebook
        };
        let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        let enc = |t: usize| packed.flags[t / 8] >> (t % 8) & 1 == 1;
        assert!(
            (0..n).any(enc) && !(0..n).all(enc),
            "L={l}: want both forms"
        );
        // The raw "dataset": every row stored as it is.
        let raw_offsets: Vec<u64> = (0..=n as u64).map(|i| i * l as u64).collect();
        let raw_flags = vec![0u8; n.div_ceil(8)];
        let book_bytes = decode_book(&cb);
        assert_eq!(book_is_uniform(&cb, &book_bytes), alike, "L={l}");
        let book = Aligned::from(&book_bytes);
        let entries = Aligned::from(&decoder_table(&cb));
        let (payload, raw_payload) = (Lined::from(&packed.payload), Lined::from(&data));
        let (offsets, raw_off) = (
            Aligned::from(bytemuck::cast_slice(&packed.offsets)),
            Aligned::from(bytemuck::cast_slice(&raw_offsets)),
        );
        let (flags, rflags) = (Aligned::from(&packed.flags), Aligned::from(&raw_flags));
        let base = DatasetView {
            rows: n as u64,
            row_bytes: l as u64,
            book: book.addr(),
            entries: entries.addr(),
            book_bytes: book.1 as u32,
            chunk: cb.chunk().bytes(),
            ..Default::default()
        };
        let compressed = DatasetView {
            src: payload.addr(),
            offsets: offsets.addr(),
            flags: flags.addr(),
            ..base
        };
        let raw = DatasetView {
            src: raw_payload.addr(),
            offsets: raw_off.addr(),
            flags: rflags.addr(),
            ..base
        };
        // The same rows fixed-stride, with a length table (the stored
        // lengths the packed offsets give).
        let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
        assert_eq!(fixed.flags, packed.flags);
        let lengths: Vec<u32> = packed
            .offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as u32)
            .collect();
        let (slots, lens) = (
            Lined::from(&fixed.slots),
            Aligned::from(bytemuck::cast_slice(&lengths)),
        );
        let aligned = DatasetView {
            src: slots.addr(),
            lengths: lens.addr(),
            flags: flags.addr(),
            ..base
        };
        // The hot rows (every third, from the end) back to back in a slab,
        // in their compressed form.
        let hot: Vec<usize> = (0..n).rev().step_by(3).collect();
        let (image, index) = slab_of(&packed, &hot);
        let slab = Lined::from(&image);
        let index_mem = Aligned::from(bytemuck::cast_slice(&index));
        let mut ids: Vec<u64> = (0..n as u64).chain([3, n as u64, 5, 3]).collect();
        ids.swap(1, 20);
        let views = [
            ("C/M", compressed, true),
            ("C", raw, true),
            ("M", compressed, false),
            ("C/M line-aligned", aligned, true),
            ("M line-aligned", aligned, false),
        ];
        // IBP(C/M); IBP(C) (raw host rows); the slab out of reach (every
        // row a miss, IBP(M)); IBP(C/M) and IBP(M) with line-aligned host
        // rows.
        for (what, view, reach) in views {
            let slabs = [0, if reach { slab.addr() } else { 0 }, 0, 0, 0, 0, 0, 0];
            let p = CacheParams {
                view,
                index: index_mem.addr(),
                slabs,
                ..Default::default()
            };
            // One warp (each row's successors in its pipeline) and three
            // (every warp's share); the uniform gather on uniform books.
            for (uni, warps) in [(false, 1), (false, 3), (alike, 1), (alike, 3)] {
                let (out, st) = emu_gather(p, book.addr(), &ids, l, uni, warps);
                let what = format!("L={l} {what} uniform {uni}, {warps} warps");
                check_gather(&out, st, &ids, &data, &what);
            }
        }
        // A corrupt entry (an encoded row claiming L stored bytes) is
        // reported and its row zeroed; the rest still decode.
        corrupt_entry_is_reported(compressed, &index, hot[0], &slab, book.addr(), &data, alike);
    }
}

/// The rows `hot` of `packed` back to back in a slab image (in their
/// compressed form), and the cache index that finds them in slab 1.
fn slab_of(packed: &crate::layout::Packed, hot: &[usize]) -> (Vec<u8>, Vec<u64>) {
    let n = packed.offsets.len() - 1;
    let mut image = Vec::new();
    let mut index = vec![NOT_CACHED; n];
    for &t in hot {
        let (a, b) = (packed.offsets[t] as usize, packed.offsets[t + 1] as usize);
        let e = Entry {
            slab: 1,
            offset: image.len() as u64,
            len: (b - a) as u32,
            encoded: packed.flags[t / 8] >> (t % 8) & 1 == 1,
        };
        index[t] = pack(e).unwrap();
        image.extend_from_slice(&packed.payload[a..b]);
    }
    (image, index)
}

/// Row `t`'s index entry broken (an encoded row claiming `L` stored
/// bytes): a gather of rows 0, `t`, 1 reports it as output row 1 and zeroes
/// that row; the other two still decode.
fn corrupt_entry_is_reported(
    view: DatasetView,
    index: &[u64],
    t: usize,
    slab: &Lined,
    book: u64,
    data: &[u8],
    uni: bool,
) {
    let l = view.row_bytes as usize;
    let mut broken = index.to_vec();
    broken[t] = pack(Entry {
        slab: 1,
        offset: 0,
        len: l as u32,
        encoded: true,
    })
    .unwrap();
    let broken_mem = Aligned::from(bytemuck::cast_slice(&broken));
    let mut slabs = [0u64; 8];
    slabs[1] = slab.addr();
    let p = CacheParams {
        view,
        index: broken_mem.addr(),
        slabs,
        ..Default::default()
    };
    let ids: Vec<u64> = vec![0, t as u64, 1];
    let (out, st) = emu_gather(p, book, &ids, l, uni, 1);
    assert_eq!(st, [STATUS_CORRUPT, 1], "L={l}");
    assert!(out[l..2 * l].iter().all(|&b| b == 0));
    assert!(out[..l] == data[..l] && out[2 * l..] == data[l..2 * l]);
}

/// A gather's output and status against the rows of `data` that `ids`
/// names: every row in place, the one id out of range zeroed and reported.
fn check_gather(out: &[u8], st: [u64; 2], ids: &[u64], data: &[u8], what: &str) {
    let l = out.len() / ids.len();
    let n = (data.len() / l) as u64;
    let bad = ids.iter().position(|&t| t >= n).unwrap() as u64;
    assert_eq!(st, [STATUS_BAD_INDEX, bad], "{what}");
    for (k, got) in out.chunks(l).enumerate() {
        let t = ids[k] as usize;
        if ids[k] < n {
            assert!(got == &data[t * l..(t + 1) * l], "{what} output row {k}");
        } else {
            assert!(got.iter().all(|&b| b == 0), "{what}: bad id's row");
        }
    }
}
