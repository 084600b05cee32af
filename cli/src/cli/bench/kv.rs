//! `ibp bench --section kv`: the appendable KV store (`ibp::gpu::KvStore`)
//! against issue 12's targets, on real KV rows of all-MiniLM-L6-v2 (bf16,
//! 384 elements a row): one decode step's append in GPU time, bulk append
//! into host pages, and a gather of random tokens against the zero-copy
//! ideal. Every measured store is gathered back and compared with the
//! original rows first. The float-coded store's rows follow
//! (`super::float_kv`).

use std::fmt::Write as _;

use cust::memory::DeviceBuffer;
use cust::stream::Stream;
use ibp::Rows;
use ibp::gpu::{
    DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, KvStore, KvStoreOptions, Mode,
    PageWrites, Request, Residency, Span, copy_to_host_blocking,
};
use ibp::io::DType;
use ibp::layout::{LayoutOptions, compress_packed};
use ibp::{Error, Result};
use ibp_cli::measure::{measure_zero_copy_read, time_dtoh_copy, time_median};
use ibp_testdata::kv::{KvOptions, KvPart, MiniLm, MiniLmFiles};

/// Bytes of a row: 384 bf16 values (6 heads × 64).
const L: usize = 768;
/// Rows one token adds: 6 layers × key and value.
const PER_TOKEN: usize = 12;
/// Sequences of the decode step the issue names.
const SEQUENCES: usize = 32;
/// Tokens of the gather.
const GATHER_TOKENS: usize = 1024;
/// Rows of one bulk append.
const BULK_ROWS: usize = (128 << 20) / L;

/// The real KV rows as one table for the peers' comparison ("KV cache
/// bf16", rows of one token's keys or values of one layer, 768 bytes), or
/// `None` without MiniLM's files.
///
/// Q: why one table, not one a layer and part? A: every codec then sees
/// the same bytes; one group a layer and part would fit the float coding's
/// table closer (its ratio on the CPU with twelve groups: 1.494), so one
/// table is the conservative side for ibp.
pub(super) fn real_table() -> Result<Option<(String, Vec<u8>, usize)>> {
    let dir = MiniLmFiles::default_dir();
    if !dir.join("kv-bf16.safetensors").is_file() && !MiniLmFiles::in_dir(&dir).exist() {
        return Ok(None);
    }
    let (rows, _) = real_rows()?;
    Ok(Some(("KV cache (MiniLM, real) bf16".to_string(), rows, L)))
}

/// Real KV rows, token-major (`ibp_testdata::kv::token_major`): from
/// `kv-bf16.safetensors` in the data folder (what `ibp kv-data` writes and
/// `scripts/stage-device.sh` stages), else from a forward pass over the
/// model card. Returns the rows and where they came from.
fn real_rows() -> Result<(Vec<u8>, String)> {
    let dir = MiniLmFiles::default_dir();
    let staged = dir.join("kv-bf16.safetensors");
    let tables: Vec<Vec<u8>> = if staged.is_file() {
        let f = ibp::io::InputFile::open(&staged)?;
        let doc = ibp::io::parse(
            f.bytes(),
            ibp::io::SourceFormat::Safetensors,
            &Default::default(),
        )?;
        let mut out = Vec::new();
        for layer in 0..6 {
            for part in [KvPart::Key, KvPart::Value] {
                let name = ibp_testdata::kv::KvCache::table_name(layer, part);
                let g = doc
                    .groups
                    .iter()
                    .find(|g| g.name == name && g.dtype == DType::BF16)
                    .ok_or_else(|| {
                        Error::invalid(format!("{}: no bf16 table {name}", staged.display()))
                    })?;
                out.push(g.data.to_vec());
            }
        }
        out
    } else {
        let files = MiniLmFiles::in_dir(&dir);
        let m = MiniLm::load(&files)?;
        let c = m.kv_cache(&files.card_text()?, &KvOptions::default())?;
        let mut out = Vec::new();
        for layer in 0..c.layers() {
            for part in [KvPart::Key, KvPart::Value] {
                out.push(c.table_bytes(layer, part, &DType::BF16)?);
            }
        }
        out
    };
    let refs: Vec<&[u8]> = tables.iter().map(|t| &t[..]).collect();
    let rows = ibp_testdata::kv::token_major(&refs, L)?;
    let source = if staged.is_file() {
        staged.display().to_string()
    } else {
        "a forward pass over the model card".to_string()
    };
    Ok((rows, source))
}

/// `rows` repeated to `n` rows.
fn tiled(rows: &[u8], n: usize) -> Vec<u8> {
    rows.iter().copied().cycle().take(n * L).collect()
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// Append the KV store section to `md`. `zc` is the zero-copy read rate
/// measured in the same run (bytes per second).
pub fn section(gpu: &Gpu, stream: &Stream, zc: f64, md: &mut String) -> Result<()> {
    let (real, source) = real_rows()?;
    let tokens = real.len() / (PER_TOKEN * L);
    let cuda =
        |what: &'static str| move |e: cust::error::CudaError| Error::cuda(format!("{what}: {e}"));

    // --- One decode step: 32 sequences × 12 rows, the kernel writing the
    // pages (the default), then through the staging half and a DMA copy.
    let step_rows = SEQUENCES * PER_TOKEN;
    let reps = 2 + 21;
    let (step_secs, step_savings) = time_steps(gpu, stream, &real, PageWrites::Kernel)?;
    let (step_dma_secs, _) = time_steps(gpu, stream, &real, PageWrites::Dma)?;
    let copy_secs = time_dtoh_copy(stream, step_rows * L)?;

    // --- Bulk append: 128 MiB a call into fresh pages, the kernel writing
    // the pages (the default), then a DMA copy per piece.
    let bulk_reps = 1 + 5;
    let bulk_src = tiled(&real, BULK_ROWS);
    let bulk = DeviceBuffer::from_slice(&bulk_src).map_err(cuda("upload"))?;
    let (bulk_secs, big) = time_bulk(gpu, stream, &bulk, bulk_reps, PageWrites::Kernel)?;
    let (bulk_dma_secs, _) = time_bulk(gpu, stream, &bulk, bulk_reps, PageWrites::Dma)?;
    let lengths = big.lengths_blocking()?;
    let bulk_stored: u64 = lengths[..BULK_ROWS].iter().map(|&n| n as u64).sum();
    let bulk_rate = (BULK_ROWS * L) as f64 / bulk_secs;
    let bulk_dma_rate = (BULK_ROWS * L) as f64 / bulk_dma_secs;

    // --- Gather 1024 random tokens' rows (all layers, K and V) from the
    // big store (every row of it is a real row; tokens repeat every
    // `tokens`).
    let stored_tokens = big.rows() as usize / PER_TOKEN;
    let ids = token_rows(GATHER_TOKENS, stored_tokens, 0);
    let d_ids = DeviceBuffer::from_slice(&ids).map_err(cuda("upload"))?;
    let mut out = DeviceBuffer::<u8>::zeroed(ids.len() * L).map_err(cuda("alloc"))?;
    let mut status = DecodeStatus::new()?;
    big.gather(gpu, 0, &d_ids, &mut out, &status, stream)?;
    stream.synchronize().map_err(cuda("gather"))?;
    status.check_blocking()?;
    let got = copy_to_host_blocking(&out)?;
    for (i, &r) in ids.iter().enumerate() {
        let r = r as usize % BULK_ROWS;
        if got[i * L..(i + 1) * L] != bulk_src[r * L..(r + 1) * L] {
            return Err(Error::corrupt(format!(
                "benchmark self-check failed: gathered row {i} (store row {}) differs",
                ids[i]
            )));
        }
    }
    let gather_secs = time_median(stream, 2, 9, || {
        big.gather(gpu, 0, &d_ids, &mut out, &status, stream)
    })?;
    status.check_blocking()?;
    let gathered_stored: u64 = ids.iter().map(|&r| lengths[r as usize] as u64).sum();
    let ideal_secs = gathered_stored as f64 / zc;
    let gather_ratio = ideal_secs / gather_secs;
    // The same number of rows, 1024 consecutive tokens from the middle of
    // the store: what the random order costs (host-page translations, the
    // link's request pattern) beside the decoder itself.
    let mid = (stored_tokens / 2 - GATHER_TOKENS / 2) * PER_TOKEN;
    let seq_ids: Vec<u32> = (mid..mid + ids.len()).map(|r| r as u32).collect();
    let d_seq = DeviceBuffer::from_slice(&seq_ids).map_err(cuda("upload"))?;
    let seq_secs = time_median(stream, 2, 9, || {
        big.gather(gpu, 0, &d_seq, &mut out, &status, stream)
    })?;
    status.check_blocking()?;
    let seq_stored: u64 = seq_ids.iter().map(|&r| lengths[r as usize] as u64).sum();
    let seq_ratio = seq_stored as f64 / zc / seq_secs;

    let sizes = gather_sizes(gpu, stream, zc, &big, &lengths, &bulk_src)?;
    let step_us = step_secs * 1e6;
    let _ = writeln!(
        md,
        "## KV store (`KvStore`, fixed-stride slots in pinned host pages)\n\nRows: real bf16 KV rows of all-MiniLM-L6-v2 (6 layers × key and value, 384 values = {L} B a row), {tokens} tokens from {source}, repeated to each measurement's size. Store: fitted on the GPU on its prefill (sampled fit), every row in a slot of {L} B, its stored form encoded into a device staging half (in L2), from which the kernel's blocks copy their finished slots into the pinned pages (`PageWrites::Kernel`); beside each, the copy engine's way (`PageWrites::Dma`: a DMA copy of each piece's half, the next piece encoded meanwhile). GPU time with CUDA events, median; every store was gathered back and compared with the original rows first.\n\n- *step*: one decode step, {SEQUENCES} sequences × 6 layers × K and V = {step_rows} rows ({} KB), `append` on a store already holding the prefill; median of {} steps. Savings on these rows: {:.1}%.\n- *bulk*: `append` of {} MiB ({BULK_ROWS} rows) a call, median of {}; the encoder wrote {:.1} MiB of stored forms per call ({:.1}% saved); the rate is input bytes per second.\n- *gather*: {GATHER_TOKENS} random tokens × {PER_TOKEN} rows = {} rows from a store of {} rows ({:.0} MiB of pages), decoded into device memory; median of 9. Ideal: the gathered rows' stored bytes ({:.2} MiB) at the zero-copy read rate measured in this run ({:.1} GB/s).\n\n| measure | result | target | |\n| --- | --- | --- | --- |\n| append, one decode step | {:.1} µs GPU time (through a half and a DMA copy: {:.1} µs; the DMA of its {} KB of slots alone: {:.1} µs) | ≤ 20 µs | {} |\n| append, bulk into host pages | {:.1} GB/s (through halves and DMA copies: {:.1} GB/s) | ≥ 40 GB/s | {} |\n| gather of {GATHER_TOKENS} tokens' K/V from host | {:.3} ms, {:.2} of ideal ({:.1} GB/s decoded; {GATHER_TOKENS} consecutive tokens instead: {:.3} ms, {:.2} of their ideal) | ≥ 0.9 of ideal | {} |\n",
        step_rows * L / 1024,
        reps - 2,
        100.0 * step_savings,
        (BULK_ROWS * L) >> 20,
        bulk_reps - 1,
        bulk_stored as f64 / (1 << 20) as f64,
        100.0 * (1.0 - bulk_stored as f64 / (BULK_ROWS * L) as f64),
        ids.len(),
        big.rows(),
        big.reserved_bytes() as f64 / (1 << 20) as f64,
        gathered_stored as f64 / (1 << 20) as f64,
        zc / 1e9,
        step_us,
        step_dma_secs * 1e6,
        step_rows * L / 1024,
        copy_secs * 1e6,
        verdict(step_us <= 20.0),
        bulk_rate / 1e9,
        bulk_dma_rate / 1e9,
        verdict(bulk_rate >= 40e9),
        gather_secs * 1e3,
        gather_ratio,
        (ids.len() * L) as f64 / gather_secs / 1e9,
        seq_secs * 1e3,
        seq_ratio,
        verdict(gather_ratio >= 0.9),
    );
    md.push_str(&sizes);
    md.push_str(&super::float_kv::section(
        gpu, stream, &real, &bulk_src, zc,
    )?);
    Ok(())
}

/// Random token ids (`tokens` of `of`), `PER_TOKEN` rows each, u32.
fn token_rows(tokens: usize, of: usize, seed: u64) -> Vec<u32> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    (0..tokens)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t = (x % of as u64) as usize;
            (0..PER_TOKEN).map(move |j| (t * PER_TOKEN + j) as u32)
        })
        .collect()
}

/// The gather's time against its size, beside what bounds it: the same
/// rows read and not decoded (the decoder's ideal mode), a zero-copy read
/// of as many bytes by the bit-counting kernel, and the same rows from a
/// packed copy of the bulk rows (a token's rows back to back, no slots).
/// Every ratio is against the stored bytes at the 1 GiB zero-copy rate
/// `zc`. The packed copy is checked against the originals first.
fn gather_sizes(
    gpu: &Gpu,
    stream: &Stream,
    zc: f64,
    big: &KvStore,
    lengths: &[u32],
    bulk_src: &[u8],
) -> Result<String> {
    let cuda =
        |what: &'static str| move |e: cust::error::CudaError| Error::cuda(format!("{what}: {e}"));
    let stored_tokens = big.rows() as usize / PER_TOKEN;
    let bulk_tokens = BULK_ROWS / PER_TOKEN;
    let cb = big
        .codebook(0)
        .ok_or_else(|| Error::invalid("a store without a segment"))?;
    let rows = Rows::new(&bulk_src[..bulk_tokens * PER_TOKEN * L], L)?;
    let packed = compress_packed(cb, rows, &LayoutOptions::default())?;
    let ds = GpuDataset::upload_packed(gpu, cb, &packed.view(), Residency::Pinned)?;
    let dec = Decoder::new(gpu, &ds, &DecodeOptions::default())?;
    let mut md = format!(
        "\n### The gather against its size\n\nRandom tokens ({PER_TOKEN} rows each), median of 9 after 2. *slots*: `KvStore::gather` as above; *read only*: the same launch reading exactly the rows' stored bytes and decoding nothing (the decoder's ideal mode); *zero-copy read*: the bit-counting kernel reading as many contiguous pinned bytes; *packed*: the same tokens' rows from a packed copy of {bulk_tokens} tokens in pinned memory (rows back to back, each token's rows adjacent), through `Decoder::gather`. Each ratio: the rows' stored bytes at {:.1} GB/s (the 1 GiB zero-copy read) over the time.\n\n| tokens | stored MiB | slots ms | ÷ ideal | read only ms | ÷ ideal | zero-copy read ms | ÷ ideal | packed ms | ÷ ideal (its bytes) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        zc / 1e9
    );
    for tokens in [256usize, 1024, 4096, 16384] {
        let ids = token_rows(tokens, stored_tokens, tokens as u64);
        let d_ids = DeviceBuffer::from_slice(&ids).map_err(cuda("upload"))?;
        let mut out = DeviceBuffer::<u8>::zeroed(ids.len() * L).map_err(cuda("alloc"))?;
        let mut status = DecodeStatus::new()?;
        let stored: u64 = ids.iter().map(|&r| lengths[r as usize] as u64).sum();
        let slots = time_median(stream, 2, 9, || {
            big.gather(gpu, 0, &d_ids, &mut out, &status, stream)
        })?;
        status.check_blocking()?;
        let read = time_median(stream, 2, 9, || {
            let req = Request::gather(&d_ids).with_mode(Mode::Ideal);
            big.enqueue(gpu, 0, &req, &mut out, &status, stream)
        })?;
        status.check_blocking()?;
        let zc_read = measure_zero_copy_read(gpu, stream, (stored as usize).max(1536))?;
        // The packed copy holds the bulk rows once: the same token
        // sequence, taken modulo its tokens.
        let pids: Vec<u32> = token_rows(tokens, bulk_tokens, tokens as u64);
        let d_pids = DeviceBuffer::from_slice(&pids).map_err(cuda("upload"))?;
        dec.gather(gpu, &d_pids, &mut out, &status, stream)?;
        stream.synchronize().map_err(cuda("gather"))?;
        status.check_blocking()?;
        let got = copy_to_host_blocking(&out)?;
        for (i, &r) in pids.iter().enumerate() {
            let r = r as usize;
            if got[i * L..(i + 1) * L] != bulk_src[r * L..(r + 1) * L] {
                return Err(Error::corrupt(format!(
                    "benchmark self-check failed: packed gather row {i} (row {r}) differs"
                )));
            }
        }
        let pk = time_median(stream, 2, 9, || {
            dec.gather(gpu, &d_pids, &mut out, &status, stream)
        })?;
        status.check_blocking()?;
        let pstored: u64 = pids
            .iter()
            .map(|&r| packed.offsets[r as usize + 1] - packed.offsets[r as usize])
            .sum();
        let ideal = stored as f64 / zc;
        let _ = writeln!(
            md,
            "| {tokens} | {:.2} | {:.3} | {:.2} | {:.3} | {:.2} | {:.3} | {:.2} | {:.3} | {:.2} |",
            stored as f64 / (1 << 20) as f64,
            slots * 1e3,
            ideal / slots,
            read * 1e3,
            ideal / read,
            zc_read * 1e3,
            ideal / zc_read,
            pk * 1e3,
            pstored as f64 / zc / pk,
        );
    }
    Ok(md)
}

/// One decode step's append (`SEQUENCES × PER_TOKEN` rows) on a store
/// holding a prefill, pages written as `writes` says: the median GPU time of
/// 21 steps after 2, checked by gathering everything back; and the savings
/// on those rows.
fn time_steps(gpu: &Gpu, stream: &Stream, real: &[u8], writes: PageWrites) -> Result<(f64, f64)> {
    let cuda =
        |what: &'static str| move |e: cust::error::CudaError| Error::cuda(format!("{what}: {e}"));
    let step_rows = SEQUENCES * PER_TOKEN;
    let reps = 2 + 21;
    let prefill_rows = 64 * PER_TOKEN;
    let step_total = prefill_rows + reps * step_rows;
    let step_src = tiled(real, step_total);
    let prefill =
        DeviceBuffer::from_slice(&step_src[..prefill_rows * L]).map_err(cuda("upload"))?;
    let steps = DeviceBuffer::from_slice(&step_src[prefill_rows * L..]).map_err(cuda("upload"))?;
    let opts = KvStoreOptions::default()
        .with_page_rows(4096)
        .with_page_budget(step_total.div_ceil(4096) as u64)
        .with_page_writes(writes);
    let mut store = KvStore::create(gpu, &prefill, L, &opts)?;
    let mut k = 0usize;
    let secs = time_median(stream, 2, reps - 2, || {
        let at = k * step_rows * L;
        k += 1;
        let src = Span::of(&steps, at, step_rows * L)
            .ok_or_else(|| Error::invalid("step past its source"))?;
        store.append(gpu, &src, L, stream).map(|_| ())
    })?;
    stream.synchronize().map_err(cuda("append"))?;
    verify(gpu, &store, 0, &step_src, stream)?;
    Ok((secs, store.savings_blocking()?[0]))
}

/// Bulk appends of all of `bulk` a call into fresh pages, pages written as
/// `writes` says: the median GPU time of `reps − 1` calls after one, and
/// the store (checked by the caller).
fn time_bulk(
    gpu: &Gpu,
    stream: &Stream,
    bulk: &DeviceBuffer<u8>,
    reps: usize,
    writes: PageWrites,
) -> Result<(f64, KvStore)> {
    let opts = KvStoreOptions::default()
        .with_page_rows(1 << 16)
        .with_page_budget(((reps + 1) * BULK_ROWS).div_ceil(1 << 16) as u64)
        .with_page_writes(writes);
    let mut big = KvStore::create(gpu, bulk, L, &opts)?;
    let secs = time_median(stream, 1, reps - 1, || {
        big.append(gpu, bulk, L, stream).map(|_| ())
    })?;
    stream
        .synchronize()
        .map_err(|e| Error::cuda(format!("append: {e}")))?;
    let want = copy_to_host_blocking(bulk)?;
    verify(gpu, &big, big.rows() as usize - BULK_ROWS, &want, stream)?;
    Ok((secs, big))
}

/// Gather rows `first ..` of `store` (segment 0), as many as `want` holds,
/// and compare with `want`.
fn verify(gpu: &Gpu, store: &KvStore, first: usize, want: &[u8], stream: &Stream) -> Result<()> {
    let n = want.len() / L;
    let ids: Vec<u32> = (first as u32..(first + n) as u32).collect();
    let d_ids = DeviceBuffer::from_slice(&ids).map_err(|e| Error::cuda(format!("upload: {e}")))?;
    let mut out =
        DeviceBuffer::<u8>::zeroed(n * L).map_err(|e| Error::cuda(format!("alloc: {e}")))?;
    let mut status = DecodeStatus::new()?;
    store.gather(gpu, 0, &d_ids, &mut out, &status, stream)?;
    stream
        .synchronize()
        .map_err(|e| Error::cuda(format!("gather: {e}")))?;
    status.check_blocking()?;
    if copy_to_host_blocking(&out)? != want[..n * L] {
        return Err(Error::corrupt(
            "benchmark self-check failed: a store's rows differ from the originals",
        ));
    }
    Ok(())
}
