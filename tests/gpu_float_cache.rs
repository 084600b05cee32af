//! The float coding's feature cache (`ibp::gpu::FloatFeatureCache`) and DMA
//! range path (`FloatDecoder::range_dma`), byte for byte against the CPU
//! (`FloatCoded::gather`): hits, misses, mixed batches, repeats and ids
//! past the end (reported by the status, their rows zeroed), at budgets
//! too small for the index, holding the index alone, part of the hot rows
//! and all of them; ranges decoded by DMA through scratches of several
//! piece sizes. Prints `skipped: no CUDA device` without a GPU (a failure
//! with `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;

use common::{Rng, float_rows, gpu_or_skip};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::float_code::{FitOptions, FloatCoded, FloatType, compress, fit};
use ibp::gpu::{
    DecodeStatus, DmaScratch, FloatDecoder, FloatFeatureCache, Gpu, PinnedFloatRows,
    copy_to_host_blocking,
};
use ibp::{ErrorKind, Rows};

const POISON: u8 = 0xA5;

/// A group of `rows` rows of `n` elements of `t`, every fifth row random
/// bits (stored raw), the rest coded.
fn group(t: FloatType, rows: usize, n: usize, seed: u64) -> FloatCoded {
    let data = float_rows(t, rows, n, seed, Some(5));
    let r = Rows::new(&data, n * t.bytes()).unwrap();
    let coded = compress(&fit(t, r, &FitOptions::default()).unwrap(), r).unwrap();
    assert!(coded.coded_rows() > 0 && coded.coded_rows() < coded.rows());
    coded
}

/// The CPU's rows `ids` of `coded` (ids past the end: zero rows).
fn cpu_gather(coded: &FloatCoded, ids: &[u64]) -> Vec<u8> {
    let l = coded.row_bytes();
    let mut out = vec![0u8; ids.len() * l];
    for (o, &t) in out.chunks_mut(l).zip(ids) {
        if t < coded.rows() as u64 {
            coded.gather(&[t], o).unwrap();
        }
    }
    out
}

/// Gather `ids` through the cache; the output and the status check.
fn gather(gpu: &Gpu, cache: &FloatFeatureCache, ids: &[u64]) -> (Vec<u8>, ibp::Result<()>) {
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let idx = DeviceBuffer::from_slice(ids).unwrap();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; ids.len() * cache.row_bytes()]).unwrap();
    cache.gather(gpu, &idx, &mut out, &status, &stream).unwrap();
    stream.synchronize().unwrap();
    let st = status.check_blocking();
    (copy_to_host_blocking(&out).unwrap(), st)
}

/// Hits only, misses only, a mix with repeats: each equal to the CPU's,
/// and the stats' hits what the cache says it holds.
fn check_batches(gpu: &Gpu, coded: &FloatCoded, cache: &FloatFeatureCache, what: &str) {
    let n = coded.rows() as u64;
    let hits: Vec<u64> = (0..n).filter(|&t| cache.is_cached(t)).collect();
    let misses: Vec<u64> = (0..n).filter(|&t| !cache.is_cached(t)).collect();
    assert_eq!(hits.len() as u64, cache.cached_rows(), "{what}");
    let mut rng = Rng(n + 17);
    let mut mixed: Vec<u64> = (0..3000).map(|_| rng.next() % n).collect();
    mixed.extend([0, n - 1, 0, mixed[3], mixed[3]]);
    for (name, ids) in [("hits", &hits), ("misses", &misses), ("mixed", &mixed)] {
        if ids.is_empty() {
            continue;
        }
        let (out, st) = gather(gpu, cache, ids);
        st.unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        assert!(out == cpu_gather(coded, ids), "{what}: {name} differ");
        let s = cache.stats(ids);
        assert_eq!(s.rows, ids.len() as u64, "{what}: {name}");
        let want_hits = ids.iter().filter(|&&t| cache.is_cached(t)).count() as u64;
        assert_eq!(s.hits, want_hits, "{what}: {name}");
        assert_eq!(s.delivered_bytes, s.rows * coded.row_bytes() as u64);
    }
}

#[test]
fn every_budget_gathers_the_cpus_rows() {
    let Some(gpu) = gpu_or_skip("every_budget_gathers_the_cpus_rows") else {
        return;
    };
    for (t, n) in [
        (FloatType::Bf16, 384),
        (FloatType::F16, 101),
        (FloatType::E4M3, 1024),
    ] {
        let coded = group(t, 2000, n, n as u64);
        let rows = coded.rows() as u64;
        let index = 12 * rows;
        // Hot rows: every third row, then the rest (priority order), a
        // repeat among them.
        let mut hot: Vec<u64> = (0..rows).step_by(3).collect();
        hot.push(0);
        hot.extend((0..rows).filter(|r| r % 3 != 0));
        let payload = coded.payload().len() as u64;
        for (name, budget) in [
            ("index only", index),
            ("a tenth", index + payload / 10),
            ("a half", index + payload / 2),
            ("all", index + payload + 64),
        ] {
            let cache = FloatFeatureCache::new(&gpu, &coded, &hot, budget).unwrap();
            let what = format!("{t} n={n} {name}");
            assert!(cache.device_bytes() <= budget, "{what}");
            assert_eq!(cache.index_bytes(), index);
            match name {
                "index only" => assert_eq!(cache.cached_rows(), 0, "{what}"),
                "all" => assert_eq!(cache.cached_rows(), rows, "{what}"),
                _ => assert!(
                    cache.cached_rows() > 0 && cache.cached_rows() < rows,
                    "{what}"
                ),
            }
            // The first hot row is the first one cached.
            if cache.cached_rows() > 0 {
                assert!(cache.is_cached(hot[0]), "{what}");
            }
            check_batches(&gpu, &coded, &cache, &what);
        }
        // A budget below the index: a typed error.
        for budget in [0, index - 1] {
            let e = FloatFeatureCache::new(&gpu, &coded, &hot, budget).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{t} budget {budget}");
        }
        // A hot id past the end: refused.
        let e = FloatFeatureCache::new(&gpu, &coded, &[1, rows], index + payload).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}

#[test]
fn bad_ids_are_reported_and_their_rows_zeroed() {
    let Some(gpu) = gpu_or_skip("bad_ids_are_reported_and_their_rows_zeroed") else {
        return;
    };
    let coded = group(FloatType::Bf16, 500, 256, 7);
    let rows = coded.rows() as u64;
    let hot: Vec<u64> = (0..rows).step_by(2).collect();
    let cache = FloatFeatureCache::new(
        &gpu,
        &coded,
        &hot,
        12 * rows + coded.payload().len() as u64 / 3,
    )
    .unwrap();
    assert!(cache.is_cached(0) && !cache.is_cached(1));
    let l = coded.row_bytes();
    let ids = [0, 1, rows, 2, u64::MAX, 3];
    let (out, st) = gather(&gpu, &cache, &ids);
    assert_eq!(st.unwrap_err().kind(), ErrorKind::InvalidArgument);
    for (i, &t) in ids.iter().enumerate() {
        let row = &out[i * l..(i + 1) * l];
        if t >= rows {
            assert!(row.iter().all(|&b| b == 0), "output row {i} not zeroed");
        } else {
            assert_eq!(row, &cpu_gather(&coded, &[t])[..], "output row {i}");
        }
    }
    // Bad ids are not counted.
    assert_eq!(cache.stats(&ids).rows, 4);
    // An empty batch enqueues nothing; a short output is refused.
    let (out, st) = gather(&gpu, &cache, &[]);
    st.unwrap();
    assert!(out.is_empty());
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let status = DecodeStatus::new().unwrap();
    let idx = DeviceBuffer::from_slice(&[0u64, 1]).unwrap();
    let mut short = DeviceBuffer::<u8>::zeroed(l).unwrap();
    let e = cache
        .gather(&gpu, &idx, &mut short, &status, &stream)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn range_dma_decodes_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("range_dma_decodes_like_the_cpu") else {
        return;
    };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    for (t, n) in [
        (FloatType::Bf16, 384),
        (FloatType::F32, 200),
        (FloatType::E5M2, 333),
    ] {
        let coded = group(t, 3000, n, 3 + n as u64);
        let rows = coded.rows() as u64;
        let host = PinnedFloatRows::new(&coded).unwrap();
        let staged = FloatDecoder::new_staged(&gpu, &coded).unwrap();
        let resident = FloatDecoder::new(&gpu, &coded).unwrap();
        let l = coded.row_bytes();
        // Pieces of about one row, a few rows, many, and all of them.
        for piece in [l + 160, 5 * l, 64 << 10, 8 << 20] {
            let mut scratch = DmaScratch::new(piece).unwrap();
            for (dec, how) in [(&staged, "staged"), (&resident, "resident")] {
                for (first, count) in [(0, rows), (rows / 3, 777), (rows - 1, 1), (5, 0)] {
                    let mut status = DecodeStatus::new().unwrap();
                    let mut out =
                        DeviceBuffer::from_slice(&vec![POISON; count as usize * l]).unwrap();
                    dec.range_dma(
                        &gpu,
                        first,
                        count,
                        &host,
                        &mut out,
                        &status,
                        &mut scratch,
                        &stream,
                    )
                    .unwrap();
                    stream.synchronize().unwrap();
                    status.check_blocking().unwrap();
                    let want = cpu_gather(&coded, &(first..first + count).collect::<Vec<_>>());
                    assert!(
                        copy_to_host_blocking(&out).unwrap() == want,
                        "{t} n={n} piece {piece} {how}: range {first}+{count} differs"
                    );
                }
            }
        }
        // Refused before anything is enqueued: rows past the end, a short
        // output, a scratch piece smaller than a row, another group's rows.
        let status = DecodeStatus::new().unwrap();
        let mut scratch = DmaScratch::new(8 << 20).unwrap();
        let mut out = DeviceBuffer::<u8>::zeroed(2 * l).unwrap();
        let mut call = |first, count, host: &PinnedFloatRows, s: &mut DmaScratch| {
            staged
                .range_dma(&gpu, first, count, host, &mut out, &status, s, &stream)
                .unwrap_err()
                .kind()
        };
        assert_eq!(
            call(rows - 1, 2, &host, &mut scratch),
            ErrorKind::InvalidArgument
        );
        assert_eq!(call(0, 3, &host, &mut scratch), ErrorKind::InvalidArgument);
        let mut tiny = DmaScratch::new(64).unwrap();
        assert_eq!(call(0, 2, &host, &mut tiny), ErrorKind::InvalidArgument);
        let other = PinnedFloatRows::new(&group(t, 3000, n, 99)).unwrap();
        assert_eq!(call(0, 2, &other, &mut scratch), ErrorKind::InvalidArgument);
    }
}

/// The cache's pinned rows serve the zero-copy paths of a staged decoder
/// too: the same bytes as the CPU.
#[test]
fn the_caches_pinned_rows_decode_zero_copy() {
    let Some(gpu) = gpu_or_skip("the_caches_pinned_rows_decode_zero_copy") else {
        return;
    };
    let coded = group(FloatType::Bf16, 800, 384, 21);
    let rows = coded.rows() as u64;
    let cache = FloatFeatureCache::new(&gpu, &coded, &[5, 6, 7], 12 * rows + 4096).unwrap();
    let dec = FloatDecoder::new_staged(&gpu, &coded).unwrap();
    let host = cache.host_rows();
    assert_eq!((host.rows(), host.row_bytes()), (rows, coded.row_bytes()));
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; 800 * coded.row_bytes()]).unwrap();
    dec.range_staged(&gpu, 0, rows, &host.span(), &mut out, &status, &stream)
        .unwrap();
    stream.synchronize().unwrap();
    status.check_blocking().unwrap();
    assert!(
        copy_to_host_blocking(&out).unwrap() == cpu_gather(&coded, &(0..rows).collect::<Vec<_>>())
    );
}

/// MiniLM's word embeddings in bf16 (when the model file is present): a
/// cache of a quarter of the payload and a DMA range of every row, both
/// equal to the CPU's.
#[test]
fn minilm_bf16_cache_and_dma_range_equal_the_cpu() {
    let Some(gpu) = gpu_or_skip("minilm_bf16_cache_and_dma_range_equal_the_cpu") else {
        return;
    };
    let Some(path) = common::data_file("model.safetensors") else {
        common::notice(
            "minilm_bf16_cache_and_dma_range_equal_the_cpu: skipped: model.safetensors not found",
        );
        return;
    };
    let f = ibp::io::InputFile::open(&path).unwrap();
    let opts = ibp::io::ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
    let doc = ibp::io::parse(f.bytes(), ibp::io::SourceFormat::Safetensors, &opts).unwrap();
    let g = &doc.groups[0];
    let l = g.row_shape(None).unwrap().row_bytes as usize / 2;
    let bf16: Vec<u8> = g
        .data
        .to_vec()
        .as_chunks::<4>()
        .0
        .iter()
        .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
        .collect();
    let rows = Rows::new(&bf16, l).unwrap();
    let coded = compress(
        &fit(FloatType::Bf16, rows, &FitOptions::default()).unwrap(),
        rows,
    )
    .unwrap();
    let n = coded.rows() as u64;
    let mut rng = Rng(77);
    let hot: Vec<u64> = (0..n / 3).map(|_| rng.next() % n).collect();
    let budget = 12 * n + coded.payload().len() as u64 / 4;
    let cache = FloatFeatureCache::new(&gpu, &coded, &hot, budget).unwrap();
    assert!(cache.cached_rows() > 0 && cache.cached_rows() < n);
    check_batches(&gpu, &coded, &cache, "MiniLM bf16");
    let dec = FloatDecoder::new_staged(&gpu, &coded).unwrap();
    let mut scratch = DmaScratch::new(1 << 20).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; bf16.len()]).unwrap();
    dec.range_dma(
        &gpu,
        0,
        n,
        cache.host_rows(),
        &mut out,
        &status,
        &mut scratch,
        &stream,
    )
    .unwrap();
    stream.synchronize().unwrap();
    status.check_blocking().unwrap();
    assert!(
        copy_to_host_blocking(&out).unwrap() == bf16,
        "MiniLM bf16: DMA range differs"
    );
}
