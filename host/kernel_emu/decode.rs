//! The decode kernel's bodies (`ibp_kernels::step`, `ibp_kernels::decode`,
//! `ibp_kernels::device`) run on the emulated warp and compared with the CPU
//! decoder: the step alone, the whole kernel in both modes, gathers, sinks
//! and the device API.

use super::*;
use crate::layout::Layout;

/// Decode one stored (encoded) tensor with the emulated batch-decoder step
/// (`ibp_kernels::step::decode_row`): the tensor sits at byte `shift` of a
/// workspace of garbage, the output row at byte `out_shift` of a poisoned
/// buffer. Returns the row, or `None` when the step reports corruption.
fn emu_decode_row(
    cb: &Codebook,
    stored: &[u8],
    e_bytes: u32,
    shift: usize,
    out_shift: usize,
    flags: u32,
) -> Option<Vec<u8>> {
    use ibp_kernels::book::Layout;
    use ibp_kernels::step::{Contig, Geometry, RowStore, decode_row};

    let l = cb.row_bytes();
    let mut ws = Aligned::from(&vec![0xa5u8; shift + stored.len() + 32]);
    ws.bytes_mut()[shift..shift + stored.len()].copy_from_slice(stored);
    let book = Aligned::from(&decode_book(cb));
    let entries = Aligned::from(&decoder_table(cb));
    let out = Aligned::from(&vec![0xeeu8; out_shift + l + 16]);
    let k = cb.chunks() as u32;
    let g = Geometry {
        chunks: k,
        row_bytes: l as u32,
        layout: Layout::new(k, cb.chunk().bytes()),
        entries: entries.addr(),
        flags,
    };
    let dst = out.addr() + out_shift as u64;
    let ok = AtomicU32::new(0);
    let ws_mem = HostBytes(ws.addr());
    let book_mem = HostBytes(book.addr());
    // SAFETY: the workspace holds the stored bytes plus 32 bytes, the book
    // and entries are this codebook's, the row is inside `out`.
    run_warp(|w| {
        // SAFETY: the row is inside `out`.
        let mut sink = unsafe { RowStore::new(&EmuMem, dst) };
        // SAFETY: as stated above the call: buffers sized for the kernel.
        let r = unsafe {
            with_chunk_const!(cb.chunk(), C => decode_row::<C, _, _, _, _, _>(
                w,
                &mut Contig::new(&ws_mem, shift as u32),
                &book_mem,
                &EmuMem,
                &g,
                e_bytes,
                &mut sink,
            ))
        };
        ok.fetch_add(r as u32, Relaxed);
    });
    let ok = ok.load(Relaxed);
    assert!(ok == 0 || ok == 32, "lanes disagree on the verdict");
    let row = out.bytes()[out_shift..out_shift + l].to_vec();
    assert!(
        out.bytes()[..out_shift].iter().all(|&b| b == 0xee),
        "wrote before the row"
    );
    assert!(
        out.bytes()[out_shift + l..].iter().all(|&b| b == 0xee),
        "wrote past the row"
    );
    (ok == 32).then_some(row)
}

/// f32 rows whose exponents vary little (free bits in two runs: the low
/// mantissa and the sign), with some outliers that do not match.
pub(super) fn float_rows(rows: usize, l: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..rows * l.div_ceil(4))
        .flat_map(|_| {
            let x = xorshift(&mut s);
            let v = if x.is_multiple_of(13) {
                f32::from_bits(x as u32)
            } else {
                (1.0 + (x >> 40) as f32 / (1u64 << 24) as f32) * if x & 1 == 0 { 1.0 } else { -1.0 }
            };
            v.to_le_bytes()
        })
        .take(rows * l)
        .collect()
}

/// Sparse rows: mostly zero bytes (no free bits), a few random ones.
fn sparse_rows(rows: usize, l: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..rows * l)
        .map(|_| {
            let x = xorshift(&mut s);
            if x.is_multiple_of(97) {
                (x >> 8) as u8
            } else {
                0
            }
        })
        .collect()
}

#[test]
fn emulated_decode_step_equals_the_cpu_decoder_with_fast_paths_on_and_off() {
    use ibp_kernels::params::{DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX};
    let mut checked = [0usize; 4];
    for (kind, l, n) in [
        (0, 1usize, 12usize),
        (0, 13, 10),
        (1, 16, 8),
        (2, 100, 8),
        (0, 517, 6),
        (1, 1024, 5),
        (2, 1531, 5),
        (1, 2052, 4),
    ] {
        let seed = 11 + l as u64;
        let data = match kind {
            0 => dataset(n, l, seed),
            1 => float_rows(n, l, seed),
            _ => sparse_rows(n, l, seed),
        };
        let rows = Rows::new(&data, l).unwrap();
        let counts = count_bits(rows);
        for chunk in ChunkSize::ALL {
            for bp in [6000, 9000] {
                let t = Threshold::from_basis_points(bp).unwrap();
                let cb = Codebook::from_counts(&counts, n as u64, t, chunk).unwrap();
                let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
                for (i, row) in rows.iter().enumerate() {
                    let (a, b) = (packed.offsets[i] as usize, packed.offsets[i + 1] as usize);
                    if packed.flags[i / 8] >> (i % 8) & 1 == 0 {
                        continue;
                    }
                    let stored = &packed.payload[a..b];
                    let flags = [0, DECODE_FLAG_NO_CLASSES, DECODE_FLAG_NO_PREFIX, 3][i % 4];
                    let what = format!("kind {kind} L={l} C={chunk} T={bp} row {i} flags {flags}");
                    let got = emu_decode_row(
                        &cb,
                        stored,
                        stored.len() as u32,
                        i % 5,
                        (i * 3) % 17,
                        flags,
                    );
                    assert_eq!(got.as_deref(), Some(row), "{what}");
                    checked[chunk.bytes().trailing_zeros() as usize] += 1;
                    // A stored length that disagrees with the bits is corrupt.
                    if stored.len() > (cb.chunks().div_ceil(8)) + 1 {
                        let short =
                            emu_decode_row(&cb, stored, stored.len() as u32 - 1, 1, 0, flags);
                        assert_eq!(short, None, "short length accepted: {what}");
                    }
                }
            }
        }
    }
    assert!(
        checked.iter().all(|&c| c >= 8),
        "too few encoded rows checked: {checked:?}"
    );
}

/// A buffer whose first byte is 128-aligned, with a line of slack after its
/// end: the decoder fetches whole 128-byte lines around a tensor's bytes,
/// as a GPU allocation (256-byte aligned, whole pages) allows.
pub(super) struct Lined(Vec<u64>, usize);

impl Lined {
    pub(super) fn from(bytes: &[u8]) -> Self {
        let mut v = vec![0u64; bytes.len().div_ceil(8) + 48];
        let skip = (128 - (v.as_ptr() as usize % 128)) % 128;
        bytemuck::cast_slice_mut::<u64, u8>(&mut v)[skip..skip + bytes.len()]
            .copy_from_slice(bytes);
        Lined(v, skip)
    }
    pub(super) fn addr(&self) -> u64 {
        self.0.as_ptr() as u64 + self.1 as u64
    }
}

/// How an emulated launch's dataset is stored: its layout and, for the
/// fixed-stride layout, whether a length table comes with it (as
/// `ibp::gpu::bench::BenchStorage`, which the CPU-only tests cannot use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EmuStorage {
    layout: Layout,
    lengths: bool,
}

impl EmuStorage {
    const PACKED: Self = EmuStorage {
        layout: Layout::Packed,
        lengths: false,
    };
    const FIXED: Self = EmuStorage {
        layout: Layout::FixedStride,
        lengths: false,
    };
    const FIXED_LENGTHS: Self = EmuStorage {
        layout: Layout::FixedStride,
        lengths: true,
    };
}

/// Run the whole decode kernel (`ibp_kernels::decode::run`) on the CPU, one
/// emulated warp after another, as the host launcher would size it (batch
/// mode unless `streaming`, or when tensors are too long for it). Returns
/// the output rows (poisoned first) and the two status words.
#[allow(clippy::too_many_arguments)]
fn emu_kernel(
    cb: &Codebook,
    rows: Rows<'_>,
    layout: EmuStorage,
    index: Option<&[u64]>,
    count: u64,
    streaming: bool,
    fetch: u32,
    corrupt: Option<usize>,
) -> (Vec<u8>, [u64; 2]) {
    let wide: Option<Vec<u64>> = index.map(|ix| ix.to_vec());
    emu_kernel_with(
        cb,
        rows,
        layout,
        wide.as_deref().map(EmuIndex::U64),
        count,
        streaming,
        fetch,
        corrupt,
        rows.row_bytes(),
        None,
    )
}

/// Row numbers of an emulated gather, in either width.
#[derive(Clone, Copy)]
enum EmuIndex<'a> {
    U32(&'a [u32]),
    U64(&'a [u64]),
}

/// [`emu_kernel`] with u32 or u64 indices and output rows `stride` bytes
/// apart (the bytes between rows must stay poisoned).
#[allow(clippy::too_many_arguments)]
fn emu_kernel_with(
    cb: &Codebook,
    rows: Rows<'_>,
    layout: EmuStorage,
    index: Option<EmuIndex<'_>>,
    count: u64,
    streaming: bool,
    fetch: u32,
    corrupt: Option<usize>,
    stride: usize,
    half_lines: Option<u32>,
) -> (Vec<u8>, [u64; 2]) {
    use ibp_kernels::params::{DECODE_MODE_DECODE, DecodeParams};

    let l = rows.row_bytes();
    let n = rows.rows();
    let c = cb.chunk().bytes();
    let (flags, offsets, mut payload, lengths) = match layout {
        EmuStorage {
            layout: Layout::Packed,
            ..
        } => {
            let p = compress_packed(cb, rows, &LayoutOptions::default()).unwrap();
            (p.flags, Some(p.offsets), p.payload, None)
        }
        _ => {
            let f = compress_fixed(cb, rows, &LayoutOptions::default()).unwrap();
            let lens: Vec<u32> = (0..n)
                .map(|i| {
                    let s = &f.slots[i * l..(i + 1) * l];
                    if f.flags[i / 8] >> (i % 8) & 1 == 1 {
                        crate::encode::stream_len(cb, s).unwrap() as u32
                    } else {
                        l as u32
                    }
                })
                .collect();
            let lengths = (layout == EmuStorage::FIXED_LENGTHS).then_some(lens);
            (f.flags, None, f.slots, lengths)
        }
    };
    // Corrupt one encoded tensor: set its last stored bit (padding or
    // payload), which the decoder must report, not decode.
    if let Some(t) = corrupt {
        let end = match &offsets {
            Some(o) => o[t + 1] as usize,
            None => t * l + lengths.as_ref().map_or(l, |x| x[t] as usize),
        };
        payload[end - 1] ^= 0x80;
    }
    let src = Lined::from(&payload);
    let offs = offsets
        .as_ref()
        .map(|o| Aligned::from(bytemuck::cast_slice(o)));
    let lens = lengths
        .as_ref()
        .map(|o| Aligned::from(bytemuck::cast_slice(o)));
    let flag_buf = Aligned::from(&flags);
    let table = Aligned::from(&decoder_table(cb));
    let book = Aligned::from(&decode_book(cb));
    let idx = index.map(|ix| match ix {
        EmuIndex::U32(v) => Aligned::from(bytemuck::cast_slice(v)),
        EmuIndex::U64(v) => Aligned::from(bytemuck::cast_slice(v)),
    });
    let out = Aligned::from(&vec![0xa7u8; (count as usize - 1) * stride + l]);
    let status = Aligned::from(bytemuck::cast_slice(&[0u64, u64::MAX]));
    // Geometry as the host launcher computes it (host/gpu/decode.rs):
    // halves sized by the largest stored tensor whose length a table gives,
    // or `half_lines` (a test's smaller half).
    let max_stored = match (&offsets, &lengths) {
        (Some(o), _) => o.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0),
        (None, Some(x)) => x.iter().map(|&v| v as u64).max().unwrap_or(0),
        _ => l as u64,
    };
    let p = DecodeParams {
        src: src.addr(),
        offsets: offs.as_ref().map_or(0, |o| o.addr()),
        flags: flag_buf.addr(),
        table: table.addr(),
        index: idx.as_ref().map_or(0, |i| i.addr()),
        first: 0,
        count,
        rows: n as u64,
        row_bytes: l as u64,
        out: out.addr(),
        out_stride: stride as u64,
        index_u32: matches!(index, Some(EmuIndex::U32(_))) as u32,
        status: status.addr(),
        chunk: c,
        mode: DECODE_MODE_DECODE,
        lengths: lens.as_ref().map_or(0, |x| x.addr()),
        fetch,
        offset_base: 0,
        ..Default::default()
    };
    emu_launch(cb, &book, p, max_stored, streaming, half_lines, false);
    let st = bytemuck::cast_slice::<u8, u64>(status.bytes());
    (out.bytes().to_vec(), [st[0], st[1]])
}

/// Launch the emulated kernel on parameters whose buffers are in place:
/// the geometry (ring, batch or streaming mode, the book in shared memory)
/// as the host launcher computes it (host/gpu/decode.rs), halves sized by
/// `max_stored` (the largest stored tensor whose length a table gives) or
/// `half_lines` (a test's smaller half). Two warps. `clustered`: `book`
/// holds every cluster's book (copied into shared memory in batch mode, as
/// `ibp_decode_clustered` does) and `p` their ids.
fn emu_launch(
    cb: &Codebook,
    book: &Aligned,
    mut p: ibp_kernels::params::DecodeParams,
    max_stored: u64,
    streaming: bool,
    half_lines: Option<u32>,
    clustered: bool,
) {
    use ibp_kernels::decode::{Launch, run};
    use ibp_kernels::params::workspace_bytes;

    let l = cb.row_bytes();
    let k = cb.chunks();
    let span_max = (max_stored.min(l as u64).max(1) + 127).div_ceil(128);
    let batch = !streaming && (l as u64 + 127).div_ceil(128) <= 48;
    let (ring_lines, pbuf_words) = if batch {
        let half = half_lines.map_or(
            crate::kernel_tables::batch_half_lines(span_max, u64::MAX),
            u64::from,
        );
        (2 * half as u32, 0)
    } else {
        let pbytes = k.div_ceil(8) as u64;
        let min_lines = (pbytes.div_ceil(128) + 2).next_power_of_two();
        (
            min_lines.max(8) as u32,
            (k.div_ceil(32)).next_multiple_of(4) as u32,
        )
    };
    let book_smem = if batch { book.1 as u32 } else { 0 };
    let ws = workspace_bytes(pbuf_words, ring_lines);
    p.ring_lines = ring_lines;
    p.pbuf_words = pbuf_words;
    p.batch = batch as u32;
    p.book = book.addr();
    p.book_smem_bytes = book_smem;
    let warps = 2u64;
    for warp in 0..warps {
        // The block's shared memory: the book (batch mode), then this
        // warp's workspace, filled with garbage.
        let smem = Aligned::from(&vec![0x5au8; (book_smem + ws) as usize]);
        let smem_addr = smem.addr();
        if book_smem > 0 {
            // SAFETY: both buffers hold book_smem bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    book.addr() as *const u8,
                    smem_addr as *mut u8,
                    book_smem as usize,
                )
            };
        }
        let at = Launch {
            warp,
            warps,
            workspace: book_smem,
        };
        // SAFETY: every buffer is sized as DecodeParams requires, the book
        // is at shared offset 0 (batch) or in host memory (streaming), and
        // the workspace holds `ws` bytes.
        run_warp_with(smem_addr, |w| unsafe {
            if clustered && batch {
                run::<_, _, true>(w, &HostBytes(smem_addr), p, true, at)
            } else if clustered {
                run::<_, _, true>(w, &HostBytes(book.addr()), p, false, at)
            } else if batch {
                run::<_, _, false>(w, &HostBytes(smem_addr), p, true, at)
            } else {
                run::<_, _, false>(w, &HostBytes(book.addr()), p, false, at)
            }
        });
    }
}

#[test]
fn emulated_decode_kernel_equals_the_original_rows_in_every_mode() {
    use ibp_kernels::params::{FETCH_CP_ASYNC, FETCH_LOAD_STORE, STATUS_BAD_INDEX, STATUS_CORRUPT};
    let mut cases = 0;
    for (kind, l, n) in [
        (0usize, 5usize, 24usize),
        (1, 100, 12),
        (2, 1024, 6),
        (1, 1531, 5),
        (2, 5732, 4),
        (1, 6400, 4),
    ] {
        let seed = 3 + l as u64;
        let data = match kind {
            0 => dataset(n, l, seed),
            1 => float_rows(n, l, seed),
            _ => sparse_rows(n, l, seed),
        };
        let rows = Rows::new(&data, l).unwrap();
        for chunk in ChunkSize::ALL {
            let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
            let cb = fit(rows, &opts).unwrap().codebook;
            // Streaming mode reads no length table: its fixed-stride case is
            // `Fixed` alone.
            for (layout, streaming) in [
                (EmuStorage::PACKED, false),
                (EmuStorage::FIXED, false),
                (EmuStorage::FIXED_LENGTHS, false),
                (EmuStorage::PACKED, true),
                (EmuStorage::FIXED, true),
            ] {
                {
                    let fetch = if cases % 2 == 0 {
                        FETCH_CP_ASYNC
                    } else {
                        FETCH_LOAD_STORE
                    };
                    cases += 1;
                    let what =
                        format!("kind {kind} L={l} C={chunk} {layout:?} streaming {streaming}");
                    // A range of every row.
                    let (out, st) =
                        emu_kernel(&cb, rows, layout, None, n as u64, streaming, fetch, None);
                    assert_eq!(st, [0, u64::MAX], "status: {what}");
                    assert!(out == data, "range differs: {what}");
                    if layout == EmuStorage::FIXED_LENGTHS {
                        continue;
                    }
                    // A gather with repeats and one bad index.
                    let ix: Vec<u64> = (0..n as u64 + 3)
                        .map(|i| {
                            if i == 2 {
                                n as u64 + 7
                            } else {
                                (i * 7 + 3) % n as u64
                            }
                        })
                        .collect();
                    let (out, st) = emu_kernel(
                        &cb,
                        rows,
                        layout,
                        Some(&ix),
                        ix.len() as u64,
                        streaming,
                        fetch,
                        None,
                    );
                    assert_eq!(st, [STATUS_BAD_INDEX, 2], "gather status: {what}");
                    for (i, &t) in ix.iter().enumerate() {
                        let got = &out[i * l..(i + 1) * l];
                        if i == 2 {
                            assert!(
                                got.iter().all(|&b| b == 0),
                                "bad index row not zeroed: {what}"
                            );
                        } else {
                            let t = t as usize;
                            assert!(got == &data[t * l..(t + 1) * l], "gather row {i}: {what}");
                        }
                    }
                }
            }
            // A corrupt encoded tensor (packed) is reported and zeroed, and
            // the others still decode: one whose stream ends inside its last
            // byte, with its top padding bit set.
            let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
            let bits = |i: usize| {
                let s = &packed.payload[packed.offsets[i] as usize..];
                let ents = cb.tables().entries();
                ents.len()
                    + ents
                        .iter()
                        .enumerate()
                        .map(|(j, e)| {
                            if s[j / 8] >> (j % 8) & 1 == 1 {
                                e.free_bits as usize
                            } else {
                                e.width as usize
                            }
                        })
                        .sum::<usize>()
            };
            let padded =
                (0..n).find(|&i| packed.flags[i / 8] >> (i % 8) & 1 == 1 && bits(i) % 8 != 0);
            if let Some(t) = padded {
                for streaming in [false, true] {
                    let (out, st) = emu_kernel(
                        &cb,
                        rows,
                        EmuStorage::PACKED,
                        None,
                        n as u64,
                        streaming,
                        FETCH_CP_ASYNC,
                        Some(t),
                    );
                    let what = format!(
                        "corrupt row {t}: kind {kind} L={l} C={chunk} streaming {streaming}"
                    );
                    assert_eq!(st, [STATUS_CORRUPT, t as u64], "{what}");
                    for i in 0..n {
                        let got = &out[i * l..(i + 1) * l];
                        if i == t {
                            assert!(got.iter().all(|&b| b == 0), "{what}: not zeroed");
                        } else {
                            assert!(got == &data[i * l..(i + 1) * l], "{what}: row {i}");
                        }
                    }
                }
            }
        }
    }
    assert!(cases >= 100);
}

#[test]
fn emulated_gathers_take_u32_indices_and_strided_output() {
    use ibp_kernels::params::FETCH_CP_ASYNC;
    for (l, n, chunk) in [
        (100usize, 9usize, ChunkSize::Four),
        (5732, 4, ChunkSize::Eight),
    ] {
        let data = float_rows(n, l, 41);
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(chunk));
        let cb = fit(rows, &opts).unwrap().codebook;
        let ix: Vec<u32> = (0..2 * n as u32).map(|i| (i * 5 + 1) % n as u32).collect();
        for streaming in [false, true] {
            // An odd stride: rows 3 bytes apart from a multiple of L, so
            // neither the row starts nor the stores are aligned.
            let stride = l + 3;
            let (out, st) = emu_kernel_with(
                &cb,
                rows,
                EmuStorage::PACKED,
                Some(EmuIndex::U32(&ix)),
                ix.len() as u64,
                streaming,
                FETCH_CP_ASYNC,
                None,
                stride,
                None,
            );
            let what = format!("L={l} streaming {streaming}");
            assert_eq!(st, [0, u64::MAX], "{what}");
            for (i, &t) in ix.iter().enumerate() {
                let t = t as usize;
                let got = &out[i * stride..i * stride + l];
                assert!(got == &data[t * l..(t + 1) * l], "{what}: row {i}");
                if i + 1 < ix.len() {
                    let gap = &out[i * stride + l..(i + 1) * stride];
                    assert!(gap.iter().all(|&b| b == 0xa7), "{what}: gap after row {i}");
                }
            }
        }
    }
}

#[test]
fn a_tensor_larger_than_the_half_is_reported_and_the_rest_decode() {
    use ibp_kernels::params::{FETCH_CP_ASYNC, STATUS_CORRUPT};
    // Batch mode sizes its halves by the largest stored tensor; one larger
    // than the half (a table changed under the launch) must be reported,
    // not fetched past the half, and must not stall the batch loop.
    let (l, n, big) = (5732usize, 6usize, 3usize);
    let mut data = sparse_rows(n, l, 77);
    data[big * l..(big + 1) * l].copy_from_slice(&float_rows(1, l, 78));
    let rows = Rows::new(&data, l).unwrap();
    let opts = FitOptions::default().with_chunk(crate::fit::ChunkChoice::Fixed(ChunkSize::Eight));
    let cb = fit(rows, &opts).unwrap().codebook;
    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    let span = |i: usize| {
        let (a, b) = (packed.offsets[i], packed.offsets[i + 1]);
        (b.div_ceil(128) - a / 128) as u32
    };
    // One line of slack: the fixed-stride slots sit at other alignments.
    let half = (0..n).filter(|&i| i != big).map(span).max().unwrap() + 1;
    assert!(span(big) > half + 1, "the dense row must be the largest");
    for layout in [EmuStorage::PACKED, EmuStorage::FIXED_LENGTHS] {
        let (out, st) = emu_kernel_with(
            &cb,
            rows,
            layout,
            None,
            n as u64,
            false,
            FETCH_CP_ASYNC,
            None,
            l,
            Some(half),
        );
        assert_eq!(st, [STATUS_CORRUPT, big as u64], "{layout:?}");
        for i in 0..n {
            let got = &out[i * l..(i + 1) * l];
            if i == big {
                assert!(got.iter().all(|&b| b == 0), "{layout:?}: not zeroed");
            } else {
                assert!(got == &data[i * l..(i + 1) * l], "{layout:?}: row {i}");
            }
        }
    }
}

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
    use ibp_kernels::book::Layout;
    use ibp_kernels::step::{Contig, Geometry, decode_row};
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
                            &EmuMem,
                            &g,
                            stored.len() as u32,
                            &mut sink,
                        ),
                        ChunkSize::Four => decode_row::<4, _, _, _, _, _>(
                            w,
                            &mut src,
                            &book_mem,
                            &EmuMem,
                            &g,
                            stored.len() as u32,
                            &mut sink,
                        ),
                        _ => decode_row::<8, _, _, _, _, _>(
                            w,
                            &mut src,
                            &book_mem,
                            &EmuMem,
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
                    let mut sink = unsafe { RowStore::new(&EmuMem, dst) };
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

mod dma_gather;

/// Run the clustered decode kernel (`ibp_kernels::decode::run` with `CL`) on
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
    emu_launch(&codebooks[0], &book, p, max_stored, streaming, None, true);
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
