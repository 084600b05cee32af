//! GPU decode of float-coded rows (`ibp::gpu::FloatDecoder`), bit for bit
//! against the CPU decoder (`ibp::float_code`): ranges and gathers of
//! MiniLM's word embeddings in bf16 and f32 (the whole table) and of
//! synthetic FP8 and f16 rows (coded and raw), from device memory and
//! zero-copy from pinned memory, and damaged rows and ids
//! past the end reported and zeroed. Prints `skipped: no CUDA device` without a GPU (a
//! failure with `IBP_REQUIRE_GPU=1`).
//!
//! The MiniLM test also prints kernel times (CUDA events around the
//! launches, warm-up excluded) with `eprintln!`: a rough hook, not a
//! benchmark, and nothing is asserted on them.
#![cfg(feature = "cuda")]

mod common;

use common::{Rng, data_file, float_rows, gpu_or_skip};
use cust::event::{Event, EventFlags};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::float_code::{FitOptions, FloatCoded, FloatType, compress, fit};
use ibp::gpu::{DecodeStatus, FloatDecoder, Gpu, PinnedBuffer, copy_to_host_blocking};
use ibp::{ErrorKind, Rows};

const POISON: u8 = 0xA5;

/// The CPU's rows `ids` of `coded`.
fn cpu_gather(coded: &FloatCoded, ids: &[u64]) -> Vec<u8> {
    let mut out = vec![0u8; ids.len() * coded.row_bytes()];
    coded.gather(ids, &mut out).unwrap();
    out
}

/// Decode rows `first..first + count` on the GPU; the output and the
/// status check's result.
fn gpu_range(gpu: &Gpu, dec: &FloatDecoder, first: u64, count: u64) -> (Vec<u8>, ibp::Result<()>) {
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let mut out =
        DeviceBuffer::from_slice(&vec![POISON; count as usize * dec.row_bytes()]).unwrap();
    dec.range(gpu, first, count, &mut out, &status, &stream)
        .unwrap();
    stream.synchronize().unwrap();
    let st = status.check_blocking();
    (copy_to_host_blocking(&out).unwrap(), st)
}

/// Decode rows `ids` on the GPU; the output and the status check's result.
fn gpu_gather(gpu: &Gpu, dec: &FloatDecoder, ids: &[u64]) -> (Vec<u8>, ibp::Result<()>) {
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let idx = DeviceBuffer::from_slice(ids).unwrap();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; ids.len() * dec.row_bytes()]).unwrap();
    dec.gather(gpu, &idx, &mut out, &status, &stream).unwrap();
    stream.synchronize().unwrap();
    let st = status.check_blocking();
    (copy_to_host_blocking(&out).unwrap(), st)
}

/// Ranges and gathers of `coded` equal the CPU's.
fn check_group(gpu: &Gpu, coded: &FloatCoded, what: &str) -> FloatDecoder {
    let dec = FloatDecoder::new(gpu, coded).unwrap();
    // The decoder that reads rows where they lie, beside the default (rows
    // staged in shared memory where they fit).
    let direct = FloatDecoder::new(gpu, coded)
        .unwrap()
        .with_staging(gpu, false)
        .unwrap();
    assert!(!direct.stages_rows());
    let n = coded.rows() as u64;
    for (first, count) in [(0, n), (n / 3, (n / 2).min(1000)), (n - 1, 1)] {
        let want = cpu_gather(coded, &(first..first + count).collect::<Vec<_>>());
        for (d, how) in [(&dec, "default"), (&direct, "direct")] {
            let (out, st) = gpu_range(gpu, d, first, count);
            st.unwrap();
            assert!(out == want, "{what}: range {first}+{count} differs ({how})");
        }
    }
    let mut rng = Rng(n | 1);
    let mut ids: Vec<u64> = (0..5000).map(|_| rng.next() % n).collect();
    ids.extend([0, n - 1, ids[7], 0]);
    let (out, st) = gpu_gather(gpu, &dec, &ids);
    st.unwrap();
    let want = cpu_gather(coded, &ids);
    assert!(out == want, "{what}: gather differs");
    // The payload read zero-copy from pinned memory: the same rows.
    let pinned = PinnedBuffer::from_slice(&FloatDecoder::staging_image(coded)).unwrap();
    let span = pinned.span(0..pinned.len()).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let idx = DeviceBuffer::from_slice(&ids).unwrap();
    let mut zc = DeviceBuffer::from_slice(&vec![POISON; want.len()]).unwrap();
    dec.gather_staged(gpu, &idx, &span, &mut zc, &status, &stream)
        .unwrap();
    let mut all = DeviceBuffer::from_slice(&vec![POISON; n as usize * dec.row_bytes()]).unwrap();
    dec.range_staged(gpu, 0, n, &span, &mut all, &status, &stream)
        .unwrap();
    stream.synchronize().unwrap();
    status.check_blocking().unwrap();
    assert!(
        copy_to_host_blocking(&zc).unwrap() == want,
        "{what}: zero-copy gather differs"
    );
    let every = cpu_gather(coded, &(0..n).collect::<Vec<_>>());
    assert!(
        copy_to_host_blocking(&all).unwrap() == every,
        "{what}: zero-copy range differs"
    );
    dec
}

/// Kernel time of `f` (enqueues on the stream), best of 5 after a warm-up.
fn time_ms(stream: &Stream, mut f: impl FnMut()) -> f32 {
    f();
    let mut best = f32::MAX;
    for _ in 0..5 {
        let (a, b) = (
            Event::new(EventFlags::DEFAULT).unwrap(),
            Event::new(EventFlags::DEFAULT).unwrap(),
        );
        a.record(stream).unwrap();
        f();
        b.record(stream).unwrap();
        b.synchronize().unwrap();
        best = best.min(b.elapsed_time_f32(&a).unwrap());
    }
    best
}

#[test]
fn minilm_rows_decode_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("minilm_rows_decode_like_the_cpu") else {
        return;
    };
    let Some(path) = data_file("model.safetensors") else {
        eprintln!("minilm_rows_decode_like_the_cpu: skipped: model.safetensors not found");
        return;
    };
    let f = ibp::io::InputFile::open(&path).unwrap();
    let opts = ibp::io::ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
    let doc = ibp::io::parse(f.bytes(), ibp::io::SourceFormat::Safetensors, &opts).unwrap();
    let g = &doc.groups[0];
    let l = g.row_shape(None).unwrap().row_bytes as usize;
    let f32s = g.data.to_vec();
    let bf16: Vec<u8> = f32s
        .as_chunks::<4>()
        .0
        .iter()
        .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
        .collect();
    for (t, data, row) in [(FloatType::Bf16, &bf16, l / 2), (FloatType::F32, &f32s, l)] {
        let rows = Rows::new(data, row).unwrap();
        let coded = compress(&fit(t, rows, &FitOptions::default()).unwrap(), rows).unwrap();
        let what = format!("MiniLM {t}");
        let dec = check_group(&gpu, &coded, &what);
        // Timing hook (not a benchmark): every row, and a gather of 8192
        // random rows, kernel only.
        let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
        let status = DecodeStatus::new().unwrap();
        let n = coded.rows() as u64;
        let mut out = DeviceBuffer::<u8>::zeroed(n as usize * row).unwrap();
        let all = time_ms(&stream, || {
            dec.range(&gpu, 0, n, &mut out, &status, &stream).unwrap()
        });
        let mut rng = Rng(9);
        let ids: Vec<u64> = (0..8192).map(|_| rng.next() % n).collect();
        let idx = DeviceBuffer::from_slice(&ids).unwrap();
        let gat = time_ms(&stream, || {
            dec.gather(&gpu, &idx, &mut out, &status, &stream).unwrap()
        });
        let direct = dec.with_staging(&gpu, false).unwrap();
        let all_direct = time_ms(&stream, || {
            direct
                .range(&gpu, 0, n, &mut out, &status, &stream)
                .unwrap()
        });
        let gb = |rows: u64, ms: f32| rows as f64 * row as f64 / (ms as f64 * 1e6);
        eprintln!(
            "timing (rough, CUDA events, best of 5; not a benchmark): {what}: {} rows of {row} B, ratio {:.3}: range of all rows {all:.3} ms ({:.1} GB/s decoded; rows read where they lie {:.1} GB/s), gather of 8192 {gat:.3} ms ({:.1} GB/s)",
            n,
            coded.stored_bytes() as f64 / (n as f64 * row as f64),
            gb(n, all),
            gb(n, all_direct),
            gb(8192, gat),
        );
    }
}

#[test]
fn synthetic_fp8_and_f16_rows_decode_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("synthetic_fp8_and_f16_rows_decode_like_the_cpu") else {
        return;
    };
    for (t, n, s) in [
        (FloatType::E4M3, 1024, 4),
        (FloatType::E5M2, 333, 2),
        (FloatType::F16, 768, 4),
        (FloatType::F16, 101, 8),
    ] {
        let data = float_rows(t, 3000, n, n as u64, Some(13));
        let rows = Rows::new(&data, n * t.bytes()).unwrap();
        let opts = FitOptions::default().with_sub_streams(s);
        let coded = compress(&fit(t, rows, &opts).unwrap(), rows).unwrap();
        let what = format!("{t} n={n} S={s}");
        // Both forms: coded rows and the random ones, stored raw.
        assert!(
            coded.coded_rows() > 0 && coded.coded_rows() < coded.rows(),
            "{what}"
        );
        check_group(&gpu, &coded, &what);
    }
}

#[test]
fn damaged_rows_and_bad_ids_are_reported_and_zeroed() {
    let Some(gpu) = gpu_or_skip("damaged_rows_and_bad_ids_are_reported_and_zeroed") else {
        return;
    };
    let data = float_rows(FloatType::Bf16, 200, 384, 3, None);
    let rows = Rows::new(&data, 768).unwrap();
    let coded = compress(
        &fit(FloatType::Bf16, rows, &FitOptions::default()).unwrap(),
        rows,
    )
    .unwrap();
    assert_eq!(coded.coded_rows(), coded.rows());
    let l = coded.row_bytes();
    // Damage row 17's code area (its last byte), which the CPU refuses.
    let mut bytes = coded.to_bytes();
    let row = coded.row_range(17).unwrap();
    let at = bytes.len() - coded.payload().len() + row.end - 1;
    let mut damaged = None;
    for bit in 0..8 {
        bytes[at] ^= 1 << bit;
        let bad = FloatCoded::from_bytes(&bytes).unwrap();
        if bad.decompress_rows(17..18, &mut vec![0u8; l]).is_err() {
            damaged = Some(bad);
            break;
        }
        bytes[at] ^= 1 << bit;
    }
    let bad = damaged.expect("a bit of row 17's last byte the CPU refuses");
    let dec = FloatDecoder::new(&gpu, &bad).unwrap();
    let (out, st) = gpu_range(&gpu, &dec, 10, 20);
    assert_eq!(st.unwrap_err().kind(), ErrorKind::Corrupt);
    assert!(
        out[7 * l..8 * l].iter().all(|&b| b == 0),
        "row 17 not zeroed"
    );
    let want = cpu_gather(&coded, &(10..30).collect::<Vec<_>>());
    assert_eq!(out[..7 * l], want[..7 * l]);
    assert_eq!(out[8 * l..], want[8 * l..]);
    // A gather: the damaged row reported as its output row; an id past the
    // end as a bad argument.
    let (out, st) = gpu_gather(&gpu, &dec, &[1, 17, 2]);
    let e = st.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(e.to_string().contains("output row 1"), "{e}");
    assert!(out[l..2 * l].iter().all(|&b| b == 0));
    let (out, st) = gpu_gather(&gpu, &dec, &[1, 200, 2]);
    assert_eq!(st.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert!(out[l..2 * l].iter().all(|&b| b == 0));
    assert_eq!(out[..l], cpu_gather(&coded, &[1])[..]);
    // Rows past the end and a short output are refused on the host.
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let status = DecodeStatus::new().unwrap();
    let mut out = DeviceBuffer::<u8>::zeroed(2 * l).unwrap();
    let e = dec
        .range(&gpu, 199, 2, &mut out, &status, &stream)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = dec
        .range(&gpu, 0, 3, &mut out, &status, &stream)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

/// A decoder without its payload on the device (`FloatDecoder::new_staged`)
/// decodes from a staging area the caller filled, bit for bit as the CPU,
/// and refuses the resident calls and a short or misaligned staging area.
#[test]
fn staged_payload_decodes_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("staged_payload_decodes_like_the_cpu") else {
        return;
    };
    for (t, n, s) in [(FloatType::Bf16, 384, 4), (FloatType::F16, 101, 2)] {
        let data = float_rows(t, 2000, n, n as u64 + 5, Some(11));
        let rows = Rows::new(&data, n * t.bytes()).unwrap();
        let opts = FitOptions::default().with_sub_streams(s);
        let coded = compress(&fit(t, rows, &opts).unwrap(), rows).unwrap();
        let dec = FloatDecoder::new_staged(&gpu, &coded).unwrap();
        let image = FloatDecoder::staging_image(&coded);
        assert_eq!(image.len(), dec.staging_bytes());
        let staging = DeviceBuffer::from_slice(&image).unwrap();
        let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
        let mut status = DecodeStatus::new().unwrap();
        let rows_n = coded.rows() as u64;
        for (first, count) in [(0, rows_n), (rows_n / 3, 500), (rows_n - 1, 1)] {
            let mut out =
                DeviceBuffer::from_slice(&vec![POISON; count as usize * dec.row_bytes()]).unwrap();
            let span = ibp::gpu::Span::of(&staging, 0, image.len()).unwrap();
            dec.range_staged(&gpu, first, count, &span, &mut out, &status, &stream)
                .unwrap();
            stream.synchronize().unwrap();
            status.check_blocking().unwrap();
            let want = cpu_gather(&coded, &(first..first + count).collect::<Vec<_>>());
            assert!(
                copy_to_host_blocking(&out).unwrap() == want,
                "{t} n={n}: staged range {first}+{count} differs"
            );
        }
        // No payload on the device: the resident calls are refused.
        let mut out = DeviceBuffer::<u8>::zeroed(dec.row_bytes()).unwrap();
        let e = dec
            .range(&gpu, 0, 1, &mut out, &status, &stream)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let ids = DeviceBuffer::from_slice(&[0u64]).unwrap();
        let e = dec
            .gather(&gpu, &ids, &mut out, &status, &stream)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        // A short or misaligned staging area, rows past the end (into an
        // output large enough, so that only those are wrong).
        let big = DeviceBuffer::<u8>::zeroed(image.len() + 256).unwrap();
        let mut out = DeviceBuffer::<u8>::zeroed(rows_n as usize * dec.row_bytes()).unwrap();
        for (at, len, first) in [
            (0, image.len() - 1, 0),
            (8, image.len(), 0),
            (0, image.len(), 1),
        ] {
            let span = ibp::gpu::Span::of(&big, at, len).unwrap();
            let e = dec
                .range_staged(&gpu, first, rows_n, &span, &mut out, &status, &stream)
                .unwrap_err();
            assert_eq!(
                e.kind(),
                ErrorKind::InvalidArgument,
                "{t}: at {at} len {len}"
            );
        }
    }
}
