//! `ibp bench --section kv`, the float-coded KV store's rows
//! (`ibp::gpu::FloatKvStore`) beside the IBP store's: capacity per GiB
//! reserved against raw rows on the real KV rows (bf16, and f16 and f32
//! where `kv-f16.safetensors` and `kv-f32.safetensors` are staged), one
//! decode step's append, bulk appends and the gather of random tokens, the
//! same shapes as the IBP store's. Every measured store is gathered back
//! and compared with the original rows first.

use std::fmt::Write as _;

use cust::memory::DeviceBuffer;
use cust::stream::Stream;
use ibp::float_code::FloatType;
use ibp::gpu::{
    DecodeStatus, FloatKvOptions, FloatKvStats, FloatKvStore, Gpu, Span, copy_to_host_blocking,
};
use ibp::io::DType;
use ibp::{Error, Result};
use ibp_cli::measure::time_median;
use ibp_testdata::kv::{KvCache, KvPart, MiniLmFiles};

/// Values of a row (6 heads × 64).
const VALUES: usize = 384;
/// Rows one token adds: 6 layers × key and value.
const PER_TOKEN: usize = 12;
/// Tokens of the prefill every store is fitted on.
const PREFILL_TOKENS: usize = 64;
/// Rows of one decode step: 32 sequences × one token.
const STEP_ROWS: usize = 32 * PER_TOKEN;
/// Tokens of the gather.
const GATHER_TOKENS: usize = 1024;

fn cuda(what: &'static str) -> impl Fn(cust::error::CudaError) -> Error {
    move |e| Error::cuda(format!("{what}: {e}"))
}

/// Staged real KV rows of `t` (token-major), if `kv-<t>.safetensors` is in
/// the data folder.
fn staged(t: FloatType) -> Result<Option<Vec<u8>>> {
    let (name, dtype) = match t {
        FloatType::F16 => ("kv-f16.safetensors", DType::F16),
        FloatType::F32 => ("kv-f32.safetensors", DType::F32),
        _ => ("kv-bf16.safetensors", DType::BF16),
    };
    let path = MiniLmFiles::default_dir().join(name);
    if !path.is_file() {
        return Ok(None);
    }
    let f = ibp::io::InputFile::open(&path)?;
    let doc = ibp::io::parse(
        f.bytes(),
        ibp::io::SourceFormat::Safetensors,
        &Default::default(),
    )?;
    let mut tables = Vec::new();
    for layer in 0..6 {
        for part in [KvPart::Key, KvPart::Value] {
            let want = KvCache::table_name(layer, part);
            let g = doc
                .groups
                .iter()
                .find(|g| g.name == want && g.dtype == dtype)
                .ok_or_else(|| Error::invalid(format!("{}: no table {want}", path.display())))?;
            tables.push(g.data.to_vec());
        }
    }
    let refs: Vec<&[u8]> = tables.iter().map(|t| &t[..]).collect();
    Ok(Some(ibp_testdata::kv::token_major(
        &refs,
        VALUES * t.bytes(),
    )?))
}

/// Gather `ids` of `store` and compare row `r` with `want(r)`.
fn verify<'a>(
    gpu: &Gpu,
    store: &FloatKvStore,
    ids: &[u64],
    want: impl Fn(u64) -> &'a [u8],
    stream: &Stream,
) -> Result<()> {
    let l = store.row_bytes();
    let d_ids = DeviceBuffer::from_slice(ids).map_err(cuda("upload"))?;
    let mut out = DeviceBuffer::<u8>::zeroed(ids.len() * l).map_err(cuda("alloc"))?;
    let mut status = DecodeStatus::new()?;
    store.gather(gpu, &d_ids, &mut out, &status, stream)?;
    stream.synchronize().map_err(cuda("gather"))?;
    status.check_blocking()?;
    let got = copy_to_host_blocking(&out)?;
    for (i, &r) in ids.iter().enumerate() {
        if got[i * l..(i + 1) * l] != *want(r) {
            return Err(Error::corrupt(format!(
                "benchmark self-check failed: float KV row {r} (output row {i}) differs"
            )));
        }
    }
    Ok(())
}

/// A store on the first `PREFILL_TOKENS` tokens of `rows` holding all of
/// them, the rest appended a decode step at a time on `stream`: the store
/// (checked: every row stored and gathered back) and the median GPU time
/// of a step's append (21 after 2; `None` with fewer steps).
fn fill(
    gpu: &Gpu,
    stream: &Stream,
    t: FloatType,
    rows: &[u8],
) -> Result<(FloatKvStore, Option<f64>)> {
    let l = VALUES * t.bytes();
    let n = rows.len() / l;
    let prefill = (PREFILL_TOKENS * PER_TOKEN).min(n);
    let src = DeviceBuffer::from_slice(rows).map_err(cuda("upload"))?;
    let opts = FloatKvOptions::default().with_capacity(n as u64);
    let head = Span::of(&src, 0, prefill * l).ok_or_else(|| Error::invalid("no prefill"))?;
    let mut store = FloatKvStore::create(gpu, t, &head, l, &opts)?;
    let mut at = prefill;
    let step = |store: &mut FloatKvStore, at: &mut usize| -> Result<()> {
        let k = STEP_ROWS.min(n - *at);
        let s = Span::of(&src, *at * l, k * l).ok_or_else(|| Error::invalid("step past"))?;
        store.append(gpu, &s, l, stream)?;
        *at += k;
        Ok(())
    };
    let timed = if n - prefill >= 23 * STEP_ROWS {
        Some(time_median(stream, 2, 21, || step(&mut store, &mut at))?)
    } else {
        None
    };
    while at < n {
        step(&mut store, &mut at)?;
    }
    stream.synchronize().map_err(cuda("append"))?;
    store.check_blocking()?;
    let all: Vec<u64> = (0..n as u64).collect();
    verify(gpu, &store, &all, |r| &rows[r as usize * l..][..l], stream)?;
    Ok((store, timed))
}

/// The float-coded store's section: `real` is the bf16 rows the IBP
/// store's rows were measured on, `bulk_src` its bulk append's rows, `zc`
/// the zero-copy read rate of the run.
pub fn section(
    gpu: &Gpu,
    stream: &Stream,
    real: &[u8],
    bulk_src: &[u8],
    zc: f64,
) -> Result<String> {
    let l = 2 * VALUES;
    let mut md = format!(
        "\n## KV store on the float coding (`FloatKvStore`, slots from the prefill, an overflow area)\n\nThe same real rows. Each store is fitted on a {PREFILL_TOKENS}-token prefill ({} rows) with the default options (a slot holding 95% of the prefill's rows, rounded up to 16 bytes; overflow entries of a raw row for 5% of the capacity), then holds every row of the data; every row was gathered back and compared first. *capacity ÷ raw*: rows per GiB reserved (the pinned slots and overflow area, and the 12-byte device index a row) over raw rows per GiB.\n\n| type | rows | slot / raw B | overflowing rows | refused | capacity ÷ raw | target |\n| --- | --- | --- | --- | --- | --- | --- |\n",
        PREFILL_TOKENS * PER_TOKEN
    );
    let mut step_secs = None;
    for t in [FloatType::Bf16, FloatType::F16, FloatType::F32] {
        let rows = if t == FloatType::Bf16 {
            Some(real.to_vec())
        } else {
            staged(t)?
        };
        let Some(rows) = rows else {
            let _ = writeln!(md, "| {t} | (kv-{t}.safetensors not staged) | | | | | |");
            continue;
        };
        let (store, timed) = fill(gpu, stream, t, &rows)?;
        if t == FloatType::Bf16 {
            step_secs = timed;
        }
        let FloatKvStats {
            rows,
            slot_bytes,
            row_bytes,
            overflow_used,
            overflow_entries,
            refused,
            capacity_ratio,
            ..
        } = store.stats_blocking()?;
        let _ = writeln!(
            md,
            "| {t} | {rows} | {slot_bytes} / {row_bytes} | {overflow_used} of {overflow_entries} entries ({:.1}%) | {refused} | {capacity_ratio:.3} | ≥ 1.3 (bf16) |",
            100.0 * overflow_used as f64 / rows as f64
        );
    }

    // Bulk appends of the IBP store's bulk rows, into fresh slots.
    let n = bulk_src.len() / l;
    let bulk = DeviceBuffer::from_slice(bulk_src).map_err(cuda("upload"))?;
    let reps = 1 + 5;
    let opts = FloatKvOptions::default().with_capacity(((reps + 1) * n) as u64);
    let mut big = FloatKvStore::create(gpu, FloatType::Bf16, &bulk, l, &opts)?;
    let bulk_secs = time_median(stream, 1, reps - 1, || {
        big.append(gpu, &bulk, l, stream).map(|_| ())
    })?;
    stream.synchronize().map_err(cuda("append"))?;
    big.check_blocking()?;
    // Every call appended the same rows: store row r is bulk row r mod n.
    let want_rows = |r: u64| &bulk_src[(r as usize % n) * l..][..l];
    let last: Vec<u64> = (big.rows() - n as u64..big.rows()).collect();
    verify(gpu, &big, &last, want_rows, stream)?;

    // Gather random tokens' rows from the big store (every row a real row).
    let tokens = big.rows() as usize / PER_TOKEN;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let ids: Vec<u64> = (0..GATHER_TOKENS)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t = (x % tokens as u64) as usize;
            (0..PER_TOKEN).map(move |j| (t * PER_TOKEN + j) as u64)
        })
        .collect();
    verify(gpu, &big, &ids, want_rows, stream)?;
    let d_ids = DeviceBuffer::from_slice(&ids).map_err(cuda("upload"))?;
    let mut out = DeviceBuffer::<u8>::zeroed(ids.len() * l).map_err(cuda("alloc"))?;
    let mut status = DecodeStatus::new()?;
    let gather_secs = time_median(stream, 2, 9, || {
        big.gather(gpu, &d_ids, &mut out, &status, stream)
    })?;
    status.check_blocking()?;
    let (_, lens) = big.index_blocking()?;
    let stored: u64 = ids.iter().map(|&r| u64::from(lens[r as usize])).sum();
    let st = big.stats_blocking()?;
    let _ = writeln!(
        md,
        "\nRates (bf16, GPU time with CUDA events, median), the IBP store's shapes: *step*: {STEP_ROWS} rows appended to the capacity store above (21 steps after 2); *bulk*: `append` of {} MiB ({n} rows) a call into a store fitted on those rows (slot {} B, {} of {} overflow entries used), median of {}; *gather*: {GATHER_TOKENS} random tokens × {PER_TOKEN} rows = {} rows of it into device memory, median of 9; ideal: their stored bytes ({:.2} MiB) at the zero-copy read rate ({:.1} GB/s).\n\n| measure | result |\n| --- | --- |\n| append, one decode step | {} |\n| append, bulk into host pages | {:.1} GB/s |\n| gather of {GATHER_TOKENS} tokens' K/V from host | {:.3} ms, {:.2} of ideal ({:.1} GB/s decoded) |",
        (n * l) >> 20,
        st.slot_bytes,
        st.overflow_used,
        st.overflow_entries,
        reps - 1,
        ids.len(),
        stored as f64 / (1 << 20) as f64,
        zc / 1e9,
        step_secs.map_or("(too few rows for 23 steps)".to_string(), |s| format!(
            "{:.1} µs GPU time",
            s * 1e6
        )),
        (n * l) as f64 / bulk_secs / 1e9,
        gather_secs * 1e3,
        stored as f64 / zc / gather_secs,
        (ids.len() * l) as f64 / gather_secs / 1e9,
    );
    Ok(md)
}
