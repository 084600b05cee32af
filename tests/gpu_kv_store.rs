//! The appendable KV store (`ibp::gpu::KvStore`) on real KV rows of
//! all-MiniLM-L6-v2 (`ibp_testdata::kv`): created from a prefill, appended step by
//! step, every row gathered back after every step and random subsets with
//! repeats, into poisoned output, and compared with the original bytes;
//! the pages against the CPU's fixed-stride compression; unknown rows; a
//! wrong row width, a closed store and a full page budget (typed errors,
//! store still readable); a refit. Prints `skipped: no CUDA device` without
//! a GPU (a failure with `IBP_REQUIRE_GPU=1`).
//!
//! The rows come from `kv-bf16.safetensors` (what `ibp kv-data` writes;
//! `scripts/stage-device.sh` makes it for the GPU machine), or else from a
//! forward pass over the start of the model card here.
#![cfg(feature = "cuda")]

mod common;

use common::{Rng, gpu_or_skip, notice};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::ErrorKind;
use ibp::gpu::{
    DecodeStatus, Gpu, KvStore, KvStoreOptions, PageWrites, Request, copy_to_host_blocking,
};

const POISON: u8 = 0xA5;
/// Layers × key/value: the rows one token adds.
const PER_TOKEN: usize = 12;
const L: usize = 768;

fn stream() -> Stream {
    Stream::new(StreamFlags::NON_BLOCKING, None).expect("stream")
}

/// Real bf16 KV rows, token-major: token `t`'s rows are layer 0 key, layer
/// 0 value, layer 1 key, ... (`PER_TOKEN` rows of `L` bytes). `None` (with a
/// notice) when neither the staged file nor the model is here.
fn kv_rows(test: &str) -> Option<Vec<u8>> {
    let Some(tables) = common::real_kv_tables() else {
        notice(&format!(
            "{test}: skipped: neither kv-bf16.safetensors nor the MiniLM files found"
        ));
        return None;
    };
    assert_eq!(tables.len(), PER_TOKEN);
    let refs: Vec<&[u8]> = tables.iter().map(|t| &t[..]).collect();
    let rows = ibp_testdata::kv::token_major(&refs, L).unwrap();
    Some(rows)
}

fn upload(bytes: &[u8]) -> DeviceBuffer<u8> {
    DeviceBuffer::from_slice(bytes).unwrap()
}

/// Gather `ids` (rows of `segment`) into poisoned output; the output and
/// the status's verdict.
fn gather(
    gpu: &Gpu,
    store: &KvStore,
    segment: usize,
    ids: &[u32],
    s: &Stream,
) -> (Vec<u8>, ibp::Result<()>) {
    let d_ids = DeviceBuffer::from_slice(ids).unwrap();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; ids.len() * L]).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    store
        .gather(gpu, segment, &d_ids, &mut out, &status, s)
        .unwrap();
    s.synchronize().unwrap();
    (
        copy_to_host_blocking(&out).unwrap(),
        status.check_blocking(),
    )
}

/// Every row of segment 0, and a random subset with repeats, equal to
/// `want` (the segment's rows so far).
fn check_all(gpu: &Gpu, store: &KvStore, segment: usize, want: &[u8], rng: &mut Rng, s: &Stream) {
    let n = want.len() / L;
    let all: Vec<u32> = (0..n as u32).collect();
    let (got, st) = gather(gpu, store, segment, &all, s);
    st.unwrap();
    for i in 0..n {
        assert!(
            got[i * L..(i + 1) * L] == want[i * L..(i + 1) * L],
            "segment {segment} row {i} of {n} differs"
        );
    }
    // A range request reads the same rows as the gather of their ids.
    let first = (rng.next() % n as u64) as usize;
    let count = n - first;
    let mut out = DeviceBuffer::from_slice(&vec![POISON; count * L]).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let req = Request::range(first as u64, count as u64);
    store
        .enqueue(gpu, segment, &req, &mut out, &status, s)
        .unwrap();
    s.synchronize().unwrap();
    status.check_blocking().unwrap();
    assert!(
        copy_to_host_blocking(&out).unwrap() == want[first * L..],
        "segment {segment}: the range from row {first} differs"
    );
    let some: Vec<u32> = (0..(n / 3).max(1))
        .map(|_| (rng.next() % n as u64) as u32)
        .collect();
    let (got, st) = gather(gpu, store, segment, &some, s);
    st.unwrap();
    for (i, &r) in some.iter().enumerate() {
        let r = r as usize;
        assert!(
            got[i * L..(i + 1) * L] == want[r * L..(r + 1) * L],
            "subset row {i} (row {r}) differs"
        );
    }
}

#[test]
fn appended_steps_gather_back_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("kv store append/gather") else {
        return;
    };
    let Some(rows) = kv_rows("kv store append/gather") else {
        return;
    };
    let tokens = rows.len() / (PER_TOKEN * L);
    assert!(tokens >= 64, "{tokens} tokens");
    // Pages written by the kernel (the default), and by DMA.
    for writes in [PageWrites::Kernel, PageWrites::Dma] {
        let s = stream();
        let prefill = 32 * PER_TOKEN * L;
        let opts = KvStoreOptions::default()
            .with_page_rows(100)
            .with_page_budget((tokens * PER_TOKEN).div_ceil(100) as u64)
            .with_step_rows(40)
            .with_page_writes(writes);
        let mut store = KvStore::create(&gpu, &upload(&rows[..prefill]), L, &opts).unwrap();
        assert_eq!(store.rows(), (prefill / L) as u64);
        assert!(store.segments()[0].fitted_savings > 0.0);
        let mut rng = Rng(7);
        check_all(&gpu, &store, 0, &rows[..prefill], &mut rng, &s);
        // Steps of 1 to 5 tokens (12 to 60 rows, so split by step_rows = 40
        // and starting anywhere in a flag byte and a page).
        let mut at = prefill;
        let mut step = 0;
        let mut steps = Vec::new();
        while at < rows.len() {
            let n = ((1 + step % 5) * PER_TOKEN * L).min(rows.len() - at);
            steps.push(upload(&rows[at..at + n]));
            let got = store.append(&gpu, steps.last().unwrap(), L, &s).unwrap();
            assert_eq!(got, (at / L) as u64..((at + n) / L) as u64);
            at += n;
            step += 1;
            check_all(&gpu, &store, 0, &rows[..at], &mut rng, &s);
        }
        s.synchronize().unwrap();
        // The pages hold the CPU's fixed-stride compression, byte for byte.
        let cb = store.codebook(0).unwrap().clone();
        let fixed = ibp::layout::compress_fixed(
            &cb,
            ibp::Rows::new(&rows, L).unwrap(),
            &Default::default(),
        )
        .unwrap();
        assert!(
            store.pages_host()[..rows.len()] == fixed.slots[..],
            "slots differ from the CPU's ({writes:?})"
        );
        let lengths = store.lengths_blocking().unwrap();
        assert_eq!(lengths.len(), rows.len() / L);
        assert!(lengths.iter().all(|&n| n > 0 && n as usize <= L));
        let savings = store.savings_blocking().unwrap();
        println!(
            "{writes:?}: {tokens} tokens, {} rows in {} pages: {:.1}% saved (fit predicted {:.1}%)",
            store.rows(),
            store.pages_used(),
            100.0 * savings[0],
            100.0 * store.segments()[0].fitted_savings
        );
        assert!(savings[0] > 0.0);
    }
}

#[test]
fn unknown_rows_are_reported_and_zeroed() {
    let Some(gpu) = gpu_or_skip("kv store unknown rows") else {
        return;
    };
    let Some(rows) = kv_rows("kv store unknown rows") else {
        return;
    };
    let s = stream();
    let n = 20 * PER_TOKEN;
    let opts = KvStoreOptions::default()
        .with_page_rows(64)
        .with_page_budget(8);
    let store = KvStore::create(&gpu, &upload(&rows[..n * L]), L, &opts).unwrap();
    // Appended, not yet appended (inside the pages), past the pages.
    let ids = [3u32, n as u32, 5, n as u32 + 7, 1 << 30, 0];
    let (got, st) = gather(&gpu, &store, 0, &ids, &s);
    assert_eq!(st.unwrap_err().kind(), ErrorKind::InvalidArgument);
    for (i, &r) in ids.iter().enumerate() {
        let row = &got[i * L..(i + 1) * L];
        if (r as usize) < n {
            assert!(row == &rows[r as usize * L..][..L], "row {i}");
        } else {
            assert!(row.iter().all(|&b| b == 0), "unknown row {i} not zeroed");
        }
    }
    // A segment that does not exist is an error before anything runs.
    let d = DeviceBuffer::from_slice(&[0u32]).unwrap();
    let mut out = DeviceBuffer::<u8>::zeroed(L).unwrap();
    let st = DecodeStatus::new().unwrap();
    assert_eq!(
        store
            .gather(&gpu, 1, &d, &mut out, &st, &s)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn bad_appends_fail_typed_and_leave_the_store_readable() {
    let Some(gpu) = gpu_or_skip("kv store bad input") else {
        return;
    };
    let Some(rows) = kv_rows("kv store bad input") else {
        return;
    };
    let s = stream();
    let mut rng = Rng(11);
    // Room for 256 rows: the prefill of 10 tokens, then 12-row steps.
    let opts = KvStoreOptions::default()
        .with_page_rows(64)
        .with_page_budget(4);
    let pre = 10 * PER_TOKEN;
    let mut store = KvStore::create(&gpu, &upload(&rows[..pre * L]), L, &opts).unwrap();
    let step = upload(&rows[pre * L..(pre + PER_TOKEN) * L]);

    // Wrong row width: 384-byte rows (the same bytes, read as f32 halves).
    let e = store.append(&gpu, &step, 384, &s).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Bytes that do not split into rows.
    let ragged = upload(&rows[..L + 4]);
    assert_eq!(
        store.append(&gpu, &ragged, L, &s).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(store.rows(), pre as u64);
    check_all(&gpu, &store, 0, &rows[..pre * L], &mut rng, &s);

    // Fill the budget, then one step too many.
    let mut at = pre;
    while at + PER_TOKEN <= 256 {
        store
            .append(&gpu, &upload(&rows[at * L..(at + PER_TOKEN) * L]), L, &s)
            .unwrap();
        at += PER_TOKEN;
    }
    let over = upload(&rows[at * L..(at + PER_TOKEN) * L]);
    let e = store.append(&gpu, &over, L, &s).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("page budget"), "{e}");
    assert_eq!(store.rows(), at as u64);
    assert_eq!(store.pages_used(), 4);
    check_all(&gpu, &store, 0, &rows[..at * L], &mut rng, &s);
    // A refit with no room left for a segment fails too.
    let full_rows = store.rows();
    if full_rows.next_multiple_of(8) > store.capacity() {
        assert!(store.refit_blocking(&gpu, &over).is_err());
    }

    // Closed: appends and refits fail, gathers go on.
    store.close();
    assert!(store.is_closed());
    let one = upload(&rows[..L]);
    assert_eq!(
        store.append(&gpu, &one, L, &s).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert!(store.refit_blocking(&gpu, &one).is_err());
    check_all(&gpu, &store, 0, &rows[..at * L], &mut rng, &s);

    // Rows of a width the store cannot take, and an empty prefill.
    assert_eq!(
        KvStore::create(&gpu, &upload(&rows[..6 * 10]), 6, &opts)
            .err()
            .unwrap()
            .kind(),
        ErrorKind::Unsupported
    );
    assert!(KvStore::create(&gpu, &DeviceBuffer::<u8>::zeroed(0).unwrap(), L, &opts).is_err());
    // A prefill larger than the budget.
    let small = KvStoreOptions::default()
        .with_page_rows(8)
        .with_page_budget(1);
    assert!(KvStore::create(&gpu, &upload(&rows[..9 * L]), L, &small).is_err());
}

#[test]
fn refit_starts_a_segment_and_old_rows_keep_their_codebook() {
    let Some(gpu) = gpu_or_skip("kv store refit") else {
        return;
    };
    let Some(rows) = kv_rows("kv store refit") else {
        return;
    };
    let tokens = rows.len() / (PER_TOKEN * L);
    let s = stream();
    let mut rng = Rng(5);
    let opts = KvStoreOptions::default()
        .with_page_rows(128)
        .with_page_budget((tokens * PER_TOKEN + 8).div_ceil(128) as u64);
    // Segment 0: the first 20 tokens, plus 1 row so the refit must skip to
    // a flag byte.
    let a = 20 * PER_TOKEN + 1;
    let mut store = KvStore::create(&gpu, &upload(&rows[..a * L]), L, &opts).unwrap();
    // Refit on the next tokens' rows (what a server has on the device).
    let b = tokens * PER_TOKEN;
    let rest = upload(&rows[a * L..b * L]);
    let seg = store.refit_blocking(&gpu, &rest).unwrap();
    assert_eq!(seg, 1);
    let info = store.segments();
    assert_eq!(info[1].first_row, (a as u64).next_multiple_of(8));
    assert_eq!(info[1].rows, 0);
    store.append(&gpu, &rest, L, &s).unwrap();
    s.synchronize().unwrap();
    let info = store.segments();
    assert_eq!(info[0].rows, a as u64);
    assert_eq!(info[1].rows, (b - a) as u64);
    check_all(&gpu, &store, 0, &rows[..a * L], &mut rng, &s);
    check_all(&gpu, &store, 1, &rows[a * L..b * L], &mut rng, &s);
    // The gap slots belong to no segment: segment 0 ends at row a.
    let (_, st) = gather(&gpu, &store, 0, &[a as u32], &s);
    assert!(st.is_err());
    let savings = store.savings_blocking().unwrap();
    println!(
        "segment savings: {:.1}% (fitted on 20 tokens), {:.1}% (refitted)",
        100.0 * savings[0],
        100.0 * savings[1]
    );
    assert!(savings.iter().all(|&x| x > 0.0));
    // Each segment's slots are the CPU's compression under its codebook.
    for (i, (lo, hi)) in [
        (0, a),
        (
            info[1].first_row as usize,
            info[1].first_row as usize + b - a,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let cb = store.codebook(i).unwrap().clone();
        let src = if i == 0 {
            &rows[..a * L]
        } else {
            &rows[a * L..b * L]
        };
        let fixed =
            ibp::layout::compress_fixed(&cb, ibp::Rows::new(src, L).unwrap(), &Default::default())
                .unwrap();
        assert!(
            store.pages_host()[lo * L..hi * L] == fixed.slots[..],
            "segment {i}"
        );
    }
}

/// The rows the GPU tests use, checked without a GPU: a few hundred real
/// tokens, every row of a token different (12 tables), none all zero.
#[test]
fn kv_rows_are_real_token_major_rows() {
    let Some(rows) = kv_rows("kv rows") else {
        return;
    };
    assert_eq!(rows.len() % (PER_TOKEN * L), 0);
    let tokens = rows.len() / (PER_TOKEN * L);
    assert!(tokens >= 64, "{tokens} tokens");
    for t in [0, tokens / 2, tokens - 1] {
        let tok = &rows[t * PER_TOKEN * L..(t + 1) * PER_TOKEN * L];
        let r: Vec<&[u8]> = tok.chunks(L).collect();
        for i in 0..PER_TOKEN {
            assert!(r[i].iter().any(|&b| b != 0), "token {t} row {i} is zero");
            for j in 0..i {
                assert!(r[i] != r[j], "token {t}: rows {i} and {j} are equal");
            }
        }
    }
}
