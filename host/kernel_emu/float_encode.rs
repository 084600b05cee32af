//! The float coding's GPU encoder (`ibp_kernels::detail::float_encode`) on
//! the emulated grid, against the CPU codec (`crate::float_code`) byte for
//! byte: the fit's histogram (and so the table), every row's stored length,
//! and the payload and index (and the rows at a fixed stride, the
//! float-coded KV store's stage), for every element type, sub-stream
//! counts 1 to 32, ragged rows, raw rows and MiniLM's word embeddings (when
//! the model file is present). Every load and store of the size and encode
//! bodies must fall inside the buffers their contract names
//! ([`Checked`]).

use ibp_kernel_emu::{Buffer, Grid, HostBytes, launch};
use ibp_kernels::detail::float_encode::{encode, histogram, measure};
use ibp_kernels::params::FloatEncodeParams;

use super::float::{Checked, minilm, synthetic};
use crate::Rows;
use crate::float_code::{FitOptions, FitPlan, FloatCoded, FloatType, Split, compress, fit};

/// The rows in a buffer readable in whole 4-byte words (and 4 more).
fn rows_buffer(rows: Rows<'_>) -> Buffer {
    let mut b = rows.bytes().to_vec();
    b.resize(b.len().next_multiple_of(4) + 4, 0);
    Buffer::from_bytes(&b)
}

/// The wide field's histogram on the emulated grid (`blocks` × `warps`).
fn emulated_histogram(t: FloatType, wide: Split, rows: Rows<'_>, grid: (u32, u32)) -> Vec<u64> {
    let src = rows_buffer(rows);
    let hist = Buffer::from_slice(&vec![0u64; 1 << wide.width()]);
    let p = FloatEncodeParams {
        src: src.addr(),
        rows: rows.rows() as u64,
        hist: hist.addr(),
        row_bytes: rows.row_bytes() as u32,
        elem_bytes: t.bytes() as u32,
        low: u32::from(wide.low()),
        width: u32::from(wide.width()),
        ..Default::default()
    };
    let smem = 4usize << wide.width();
    launch(Grid::new(grid.0, grid.1).with_shared_bytes(smem), |lane| {
        // SAFETY: the rows are readable in whole words, the histogram
        // holds 2^width u64, the block has 4·2^width bytes of shared
        // memory, and every thread calls the body.
        unsafe {
            histogram(
                lane,
                &p,
                0,
                lane.thread_idx(),
                lane.block_dim(),
                lane.global_thread(),
                lane.grid_threads(),
            )
        }
    });
    hist.as_slice::<u64>().to_vec()
}

/// `coded`'s rows encoded on the emulated grid: the sizes, then (after a
/// host scan) the payload and index, read back as a group.
fn emulated_compress(
    coded: &FloatCoded,
    rows: Rows<'_>,
    grid: (u32, u32),
    keep_bits: bool,
) -> FloatCoded {
    let table = coded.table();
    let n = rows.rows();
    let base = table.encode_params(rows.row_bytes()).unwrap();
    let enc = Buffer::from_slice(&table.encode_image().unwrap());
    let src = rows_buffer(rows);
    let sizes = Buffer::from_slice(&vec![0u64; n]);
    let s = table.sub_streams();
    let lane = Buffer::from_slice(&vec![0u32; n * s]);
    let lane_span = (lane.addr(), lane.addr() + 4 * (n * s) as u64);
    let mut p = FloatEncodeParams {
        src: src.addr(),
        rows: n as u64,
        table: enc.addr(),
        sizes: sizes.addr(),
        lane_bits: if keep_bits { lane.addr() } else { 0 },
        ..base
    };
    let book = HostBytes(enc.addr());
    let src_span = (src.addr(), src.addr() + src.len() as u64);
    let run = |p: &FloatEncodeParams, spans: &[(u64, u64)], writable: usize, write: bool| {
        launch(Grid::new(grid.0, grid.1), |lane| {
            let (w, ws) = lane.global_warp();
            let h = Checked {
                lane,
                spans,
                writable,
            };
            // SAFETY: every buffer is sized as FloatEncodeParams states and
            // outlives the launch.
            unsafe {
                if write {
                    encode::<_, _, false>(&h, &book, p, w, ws)
                } else {
                    measure(&h, &book, p, w, ws)
                }
            }
        });
    };
    run(
        &p,
        &[
            (sizes.addr(), sizes.addr() + 8 * n as u64),
            lane_span,
            src_span,
        ],
        2,
        false,
    );
    let sz = sizes.as_slice::<u64>().to_vec();
    for (i, &s) in sz.iter().enumerate() {
        assert_eq!(
            s as usize,
            coded.row_range(i).unwrap().len(),
            "row {i}'s size"
        );
    }
    let mut offs = vec![0u64; n + 1];
    for i in 0..n {
        offs[i + 1] = offs[i] + sz[i];
    }
    let total = offs[n] as usize;
    let offsets = Buffer::from_slice(&offs);
    let payload = Buffer::from_bytes(&vec![0u8; total.next_multiple_of(4).max(4)]);
    let blog = p.block_log2;
    let nb = n.div_ceil(1 << blog) + 1;
    let bases = Buffer::from_slice(&vec![u64::MAX; nb]);
    let relw = p.rel_width as usize;
    let rel = Buffer::from_bytes(&vec![0xa5u8; (relw * n).next_multiple_of(4).max(4)]);
    p.offsets = offsets.addr();
    p.payload = payload.addr();
    p.bases = bases.addr();
    p.rel = rel.addr();
    let spans = [
        (
            payload.addr(),
            payload.addr() + total.next_multiple_of(4) as u64,
        ),
        (bases.addr(), bases.addr() + 8 * nb as u64),
        (rel.addr(), rel.addr() + (relw * n) as u64),
        src_span,
        (offsets.addr(), offsets.addr() + 8 * (n + 1) as u64),
        lane_span,
    ];
    run(&p, &spans, 3, true);
    FloatCoded::from_parts(
        table,
        n,
        rows.row_bytes(),
        bases.as_slice::<u64>().to_vec(),
        rel.bytes(),
        payload.bytes()[..total].to_vec(),
    )
    .unwrap()
}

/// The write pass at a stride (`STRIDED`, the float-coded KV store's
/// stage) on the emulated grid, after the size pass: row `i`'s stored
/// bytes at `i · stride` equal the CPU's, the rest of its stride stays zero, and no
/// index or offset is touched (the buffers the contract names, and those
/// alone, checked).
fn emulated_strided(coded: &FloatCoded, rows: Rows<'_>, grid: (u32, u32)) {
    let table = coded.table();
    let n = rows.rows();
    let stride = rows.row_bytes().next_multiple_of(16);
    let enc = Buffer::from_slice(&table.encode_image().unwrap());
    let src = rows_buffer(rows);
    let sizes = Buffer::from_slice(&vec![0u64; n]);
    let s = table.sub_streams();
    let lane = Buffer::from_slice(&vec![0u32; n * s]);
    let payload = Buffer::zeroed(n * stride);
    let p = FloatEncodeParams {
        src: src.addr(),
        rows: n as u64,
        table: enc.addr(),
        sizes: sizes.addr(),
        lane_bits: lane.addr(),
        payload: payload.addr(),
        stride: stride as u64,
        ..table.encode_params(rows.row_bytes()).unwrap()
    };
    let book = HostBytes(enc.addr());
    let spans = [
        (payload.addr(), payload.addr() + (n * stride) as u64),
        (sizes.addr(), sizes.addr() + 8 * n as u64),
        (lane.addr(), lane.addr() + 4 * (n * s) as u64),
        (src.addr(), src.addr() + src.len() as u64),
    ];
    for write in [false, true] {
        // The size pass writes the sizes and sums; the write pass only the
        // payload.
        let (spans, writable) = if write {
            (&spans[..], 1)
        } else {
            (&spans[1..], 2)
        };
        launch(Grid::new(grid.0, grid.1), |l| {
            let (w, ws) = l.global_warp();
            let h = Checked {
                lane: l,
                spans,
                writable,
            };
            // SAFETY: every buffer is sized as FloatEncodeParams states
            // (the payload n · stride, zeroed) and outlives the launch.
            unsafe {
                if write {
                    encode::<_, _, true>(&h, &book, &p, w, ws)
                } else {
                    measure(&h, &book, &p, w, ws)
                }
            }
        });
    }
    let out = payload.bytes();
    for i in 0..n {
        let want = &coded.payload()[coded.row_range(i).unwrap()];
        let at = &out[i * stride..(i + 1) * stride];
        assert_eq!(&at[..want.len()], want, "strided row {i}");
        assert!(
            at[want.len()..].iter().all(|&b| b == 0),
            "strided row {i}'s tail"
        );
    }
}

/// The emulated fit and compression of `rows` equal the CPU's.
fn check(t: FloatType, rows: Rows<'_>, opts: &FitOptions, what: &str) -> FloatCoded {
    let table = fit(t, rows, opts).unwrap();
    let plan = FitPlan::new(t, rows.row_bytes(), opts).unwrap();
    let counts = emulated_histogram(t, plan.wide, rows, (3, 2));
    assert_eq!(
        counts,
        crate::float_code::histogram(t, plan.wide, rows),
        "{what}: histogram"
    );
    assert_eq!(
        plan.choose(&counts, rows.rows()).unwrap(),
        table,
        "{what}: table"
    );
    let coded = compress(&table, rows).unwrap();
    for (grid, keep) in [((1, 1), false), ((3, 2), true)] {
        let got = emulated_compress(&coded, rows, grid, keep);
        assert!(
            got == coded,
            "{what}: the group differs (grid {grid:?}, kept sums {keep})"
        );
    }
    emulated_strided(&coded, rows, (2, 3));
    coded
}

#[test]
fn emulated_float_encode_equals_the_cpu_on_synthetic_rows() {
    let cases: &[(FloatType, usize, u8, Option<Split>)] = &[
        (FloatType::E4M3, 37, 4, None),
        (FloatType::E5M2, 64, 2, None),
        (FloatType::E5M2, 33, 1, None),
        (FloatType::F16, 101, 4, None),
        (FloatType::F16, 96, 1, None),
        (FloatType::Bf16, 77, 6, None),
        (FloatType::Bf16, 384, 4, None),
        (FloatType::Bf16, 3, 2, None),
        (
            FloatType::Bf16,
            64,
            8,
            Some(Split::exponent(FloatType::Bf16, true, 3)),
        ),
        (FloatType::F32, 50, 4, Some(Split::new(20, 12))),
        (FloatType::F32, 129, 2, None),
        (FloatType::E4M3, 200, 32, None),
        (FloatType::E4M3, 41, 10, None),
    ];
    for (c, &(t, n, s, split)) in cases.iter().enumerate() {
        // An odd row count on odd cases: groups that end inside a word.
        let data = synthetic(t, 70 + c % 2, n, 3 + c as u64);
        let rows = Rows::new(&data, n * t.bytes()).unwrap();
        let mut opts = FitOptions::default().with_sub_streams(s);
        if let Some(sp) = split {
            opts = opts.with_split(sp);
        }
        let what = format!("{t} n={n} S={s}");
        let coded = check(t, rows, &opts, &what);
        assert!(coded.coded_rows() > 0, "{what}: nothing coded");
        if n > 8 {
            assert!(coded.coded_rows() < coded.rows(), "{what}: no raw rows");
        }
    }
}

#[test]
fn emulated_float_encode_takes_a_lone_symbol_and_missing_codes() {
    // One exponent: a lone symbol of 0 bits, rows of residuals only.
    let mut x = 11u64;
    let data: Vec<u8> = (0..40 * 24)
        .map(|_| (7 << 3) | (super::xorshift(&mut x) as u8 & 0x87))
        .collect();
    let rows = Rows::new(&data, 24).unwrap();
    let split = Split::exponent(FloatType::E4M3, false, 0);
    let opts = FitOptions::default().with_split(split);
    check(FloatType::E4M3, rows, &opts, "one symbol");
    // A table fitted to some rows, used on others with symbols it lacks:
    // those rows are raw.
    let a = synthetic(FloatType::Bf16, 30, 48, 5);
    let b = synthetic(FloatType::Bf16, 30, 48, 6);
    let (ra, rb) = (Rows::new(&a, 96).unwrap(), Rows::new(&b, 96).unwrap());
    let table = fit(FloatType::Bf16, ra, &FitOptions::default()).unwrap();
    let coded = compress(&table, rb).unwrap();
    assert!(
        coded.coded_rows() < coded.rows(),
        "missing codes: no raw rows"
    );
    for keep in [false, true] {
        let got = emulated_compress(&coded, rb, (2, 1), keep);
        assert!(got == coded, "missing codes: the group differs");
    }
}

#[test]
fn emulated_float_encode_equals_the_cpu_on_minilm_rows() {
    let Some((f32s, l)) = minilm(300) else {
        return;
    };
    let cast = |f: &dyn Fn(f32) -> Vec<u8>| -> Vec<u8> {
        f32s.as_chunks::<4>()
            .0
            .iter()
            .flat_map(|b| f(f32::from_le_bytes(*b)))
            .collect()
    };
    let bf16 = cast(&|x| half::bf16::from_f32(x).to_le_bytes().to_vec());
    let f16 = cast(&|x| half::f16::from_f32(x).to_le_bytes().to_vec());
    let e4m3 = cast(&|x| vec![ibp_testdata::fp8::E4M3.from_f32(x * 16.0)]);
    let e5m2 = cast(&|x| vec![ibp_testdata::fp8::E5M2.from_f32(x * 16.0)]);
    let n = l / 4;
    for (t, data) in [
        (FloatType::F32, &f32s),
        (FloatType::Bf16, &bf16),
        (FloatType::F16, &f16),
        (FloatType::E4M3, &e4m3),
        (FloatType::E5M2, &e5m2),
    ] {
        for s in [1u8, 2, 4] {
            let rows = Rows::new(data, n * t.bytes()).unwrap();
            let opts = FitOptions::default().with_sub_streams(s);
            check(t, rows, &opts, &format!("MiniLM {t} S={s}"));
        }
    }
}
