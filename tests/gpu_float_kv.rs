//! The KV store on the float coding (`ibp::gpu::FloatKvStore`): created on
//! real bf16 KV rows of all-MiniLM-L6-v2 (`ibp_testdata::kv`; synthetic
//! bf16 rows, a raw one now and then, when neither the staged file nor the
//! model is here), appended step by step in pieces, every row and random
//! ids with repeats gathered back into poisoned output and compared byte
//! for byte; synthetic f16 and f32 rows; the overflow path forced (a slot
//! too small for any row); a full overflow area (a typed error, the
//! earlier rows intact, the refused ones reported damaged); an append past
//! the capacity (a typed error before anything is enqueued). Prints
//! `skipped: no CUDA device` without a GPU (a failure with
//! `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;

use common::{Rng, float_rows, gpu_or_skip, notice};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::ErrorKind;
use ibp::float_code::FloatType;
use ibp::gpu::{DecodeStatus, FloatKvOptions, FloatKvStore, Gpu, copy_to_host_blocking};

const POISON: u8 = 0xA5;
/// Layers × key/value: the rows one token adds.
const PER_TOKEN: usize = 12;
/// Values of a row (6 heads × 64).
const VALUES: usize = 384;

fn stream() -> Stream {
    Stream::new(StreamFlags::NON_BLOCKING, None).expect("stream")
}

fn upload(bytes: &[u8]) -> DeviceBuffer<u8> {
    DeviceBuffer::from_slice(bytes).unwrap()
}

/// Real bf16 KV rows, token-major (`PER_TOKEN` rows of 768 bytes a
/// token), from the staged file or a forward pass over the card's start;
/// else synthetic bf16 rows (a raw one every 37th), with a notice.
fn kv_rows(test: &str) -> Vec<u8> {
    let tables = common::real_kv_tables();
    match tables {
        Some(t) => {
            let refs: Vec<&[u8]> = t.iter().map(|t| &t[..]).collect();
            ibp_testdata::kv::token_major(&refs, 2 * VALUES).unwrap()
        }
        None => {
            notice(&format!(
                "{test}: neither kv-bf16.safetensors nor the MiniLM files found: synthetic bf16 rows"
            ));
            float_rows(FloatType::Bf16, 128 * PER_TOKEN, VALUES, 11, Some(37))
        }
    }
}

/// Gather `ids` into poisoned output: the rows and the status's verdict.
fn gather(gpu: &Gpu, store: &FloatKvStore, ids: &[u64], s: &Stream) -> (Vec<u8>, ibp::Result<()>) {
    let l = store.row_bytes();
    let d_ids = DeviceBuffer::from_slice(ids).unwrap();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; ids.len() * l]).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    store.gather(gpu, &d_ids, &mut out, &status, s).unwrap();
    s.synchronize().unwrap();
    (
        copy_to_host_blocking(&out).unwrap(),
        status.check_blocking(),
    )
}

/// Every row, and random ids with repeats, equal to `want` (the rows so
/// far).
fn check_all(gpu: &Gpu, store: &FloatKvStore, want: &[u8], rng: &mut Rng, s: &Stream) {
    let l = store.row_bytes();
    let n = want.len() / l;
    assert_eq!(store.rows(), n as u64);
    let all: Vec<u64> = (0..n as u64).collect();
    let some: Vec<u64> = (0..(n / 3).max(1)).map(|_| rng.next() % n as u64).collect();
    for ids in [all, some] {
        let (got, st) = gather(gpu, store, &ids, s);
        st.unwrap();
        for (i, &r) in ids.iter().enumerate() {
            let r = r as usize;
            assert!(
                got[i * l..(i + 1) * l] == want[r * l..(r + 1) * l],
                "output row {i} (store row {r} of {n}) differs"
            );
        }
    }
}

/// Create a store on the first `prefill` rows of `rows`, append the rest
/// in steps of 1 to 5 tokens' rows (split into pieces of 40 rows), and
/// check everything after every step. Returns the store.
fn fill(
    gpu: &Gpu,
    t: FloatType,
    rows: &[u8],
    prefill: usize,
    opts: FloatKvOptions,
) -> FloatKvStore {
    let l = VALUES * t.bytes();
    let s = stream();
    let mut store = FloatKvStore::create(gpu, t, &upload(&rows[..prefill * l]), l, &opts).unwrap();
    let mut rng = Rng(7);
    check_all(gpu, &store, &rows[..prefill * l], &mut rng, &s);
    let mut at = prefill * l;
    let mut step = 0;
    let mut steps = Vec::new();
    while at < rows.len() {
        let n = ((1 + step % 5) * PER_TOKEN * l).min(rows.len() - at);
        steps.push(upload(&rows[at..at + n]));
        let got = store.append(gpu, steps.last().unwrap(), l, &s).unwrap();
        assert_eq!(got, (at / l) as u64..((at + n) / l) as u64);
        at += n;
        step += 1;
        if step % 3 == 0 || at == rows.len() {
            check_all(gpu, &store, &rows[..at], &mut rng, &s);
        }
    }
    store.check_blocking().unwrap();
    store
}

#[test]
fn appended_steps_gather_back_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("float kv append/gather") else {
        return;
    };
    let rows = kv_rows("float kv append/gather");
    let l = 2 * VALUES;
    let n = rows.len() / l;
    // Q: why 10% of overflow entries? A: the rows after the prefill may
    // drift past its sizes; the capacity per GiB is the bench's to report.
    let opts = FloatKvOptions::default()
        .with_capacity(n as u64)
        .with_overflow_fraction(0.1)
        .with_step_rows(40);
    let store = fill(&gpu, FloatType::Bf16, &rows, 32 * PER_TOKEN, opts);
    let st = store.stats_blocking().unwrap();
    assert_eq!(st.rows, n as u64);
    assert_eq!(st.refused, 0);
    assert!(st.slot_bytes <= 768 && st.slot_bytes.is_multiple_of(16));
    assert_eq!(
        st.reserved_bytes,
        st.pinned_bytes + st.index_bytes,
        "{st:?}"
    );
    // Every row in its slot or an overflow entry, at most its raw size.
    let (starts, lens) = store.index_blocking().unwrap();
    let mut over = 0;
    for (r, (&at, &len)) in starts.iter().zip(&lens).enumerate() {
        assert!(len as usize <= l);
        if u64::from(len) <= st.slot_bytes {
            assert_eq!(at, r as u64 * st.slot_bytes);
        } else {
            over += 1;
            assert!(at >= st.capacity * st.slot_bytes);
        }
    }
    assert_eq!(over, st.overflow_used);
    notice(&format!(
        "float kv: {} rows, slot {} of {l} B, {} overflowing ({} entries), capacity ÷ raw {:.3}",
        st.rows, st.slot_bytes, st.overflow_used, st.overflow_entries, st.capacity_ratio
    ));
}

#[test]
fn synthetic_f16_and_f32_rows_gather_back() {
    let Some(gpu) = gpu_or_skip("float kv f16/f32") else {
        return;
    };
    for t in [FloatType::F16, FloatType::F32] {
        let rows = float_rows(t, 40 * PER_TOKEN, VALUES, 3, Some(19));
        let n = rows.len() / (VALUES * t.bytes());
        let opts = FloatKvOptions::default()
            .with_capacity(n as u64 + 5)
            .with_step_rows(64)
            .with_slot_rule(0.9, 1.0)
            .with_overflow_fraction(0.25);
        let store = fill(&gpu, t, &rows, 10 * PER_TOKEN, opts);
        let st = store.stats_blocking().unwrap();
        // The raw rows overflow any slot shorter than a raw row.
        assert!(
            st.overflow_used > 0 || st.slot_bytes >= st.row_bytes,
            "{t:?}: {st:?}"
        );
    }
}

#[test]
fn the_overflow_path_holds_rows_longer_than_a_slot() {
    let Some(gpu) = gpu_or_skip("float kv overflow") else {
        return;
    };
    let rows = kv_rows("float kv overflow");
    let l = 2 * VALUES;
    let n = (rows.len() / l).min(60 * PER_TOKEN);
    // A slot of 16 bytes holds no row: every row takes an entry.
    let opts = FloatKvOptions::default()
        .with_capacity(n as u64)
        .with_slot_bytes(16)
        .with_overflow_fraction(1.0)
        .with_step_rows(100);
    let store = fill(&gpu, FloatType::Bf16, &rows[..n * l], 8 * PER_TOKEN, opts);
    let st = store.stats_blocking().unwrap();
    assert_eq!((st.overflow_used, st.refused), (n as u64, 0));
}

#[test]
fn a_full_overflow_area_refuses_rows_and_keeps_the_others() {
    let Some(gpu) = gpu_or_skip("float kv full overflow") else {
        return;
    };
    let rows = kv_rows("float kv full overflow");
    let l = 2 * VALUES;
    let n = (rows.len() / l).min(40 * PER_TOKEN);
    let prefill = 4 * PER_TOKEN;
    // Entries for the prefill and 2 more tokens' rows (every row overflows
    // a 16-byte slot); the capacity is all n rows.
    let fraction = (prefill + 2 * PER_TOKEN) as f64 / n as f64;
    let opts = FloatKvOptions::default()
        .with_capacity(n as u64)
        .with_slot_bytes(16)
        .with_overflow_fraction(fraction);
    let s = stream();
    let mut store = FloatKvStore::create(
        &gpu,
        FloatType::Bf16,
        &upload(&rows[..prefill * l]),
        l,
        &opts,
    )
    .unwrap();
    let entries = store.overflow_entries() as usize;
    assert!(entries >= prefill + 2 * PER_TOKEN && entries < n);
    let rest = upload(&rows[prefill * l..n * l]);
    store.append(&gpu, &rest, l, &s).unwrap();
    s.synchronize().unwrap();
    let e = store.check_blocking().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}");
    let st = store.stats_blocking().unwrap();
    assert_eq!(st.overflow_used, entries as u64);
    assert_eq!(st.refused, (n - entries) as u64);
    // The prefill's rows intact; every row is stored or refused.
    let (_, lens) = store.index_blocking().unwrap();
    let stored: Vec<u64> = (0..n as u64)
        .filter(|&r| lens[r as usize] != u32::MAX)
        .collect();
    assert_eq!(stored.len(), entries);
    assert!((0..prefill as u64).all(|r| stored.contains(&r)));
    let (got, st) = gather(&gpu, &store, &stored, &s);
    st.unwrap();
    for (i, &r) in stored.iter().enumerate() {
        let r = r as usize;
        assert!(
            got[i * l..(i + 1) * l] == rows[r * l..(r + 1) * l],
            "row {r}"
        );
    }
    // A refused row reads as damaged, its output zeroed.
    let refused = (0..n as u64).find(|r| !stored.contains(r)).unwrap();
    let (got, st) = gather(&gpu, &store, &[0, refused], &s);
    assert_eq!(st.unwrap_err().kind(), ErrorKind::Corrupt);
    assert!(got[l..].iter().all(|&b| b == 0));
    // Past the capacity: refused before anything is enqueued.
    let one = upload(&rows[..l]);
    let e = store.append(&gpu, &one, l, &s).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(store.rows(), n as u64);
    let (_, st) = gather(&gpu, &store, &stored[..3], &s);
    st.unwrap();
    // A wrong width and unaligned rows: refused too.
    let two = upload(&rows[..2 * l]);
    assert!(store.append(&gpu, &two, l / 2, &s).is_err());
}
