//! Timing nvCOMP's decoders on a table, the way `ibp bench` times ibp's:
//! CUDA events, median of 9 calls after 2 warm-ups (gathers: 24 after 8),
//! and every path decoded once into a poisoned buffer and compared with the
//! original bytes before it is timed.
//!
//! The paths, each with the codec's decoded GB/s:
//! - *copy then decode*: the compressed 64 KiB chunks copied from pinned
//!   memory to the device by one DMA, then one batched decode;
//! - *overlapped*: the same in pieces of [`PIECE_CHUNKS`] chunks, the copy of
//!   piece k+1 (on a second stream) running while piece k decodes;
//! - *zero-copy*: the decoder reading the chunks from mapped pinned memory;
//! - *device*: chunks already in device memory;
//! - random gathers, one chunk per row, of the same row ids as ibp's gather
//!   benchmark: *zero-copy* (the batch's pointers name pinned memory),
//!   *copy* (the host gathers the chunks into a pinned staging buffer, one
//!   DMA, one decode; the host's part is inside the timing), *device*.

use ibp::gpu::bench::{Event, copy_to_device_async};
use ibp::gpu::cust;
use ibp::gpu::{Gpu, PinnedBuffer};
use ibp::{Error, Result};
use ibp_cli::measure::time_median;

use cust::memory::{CopyDestination, DeviceBuffer};
use cust::stream::{Stream, StreamFlags};

use super::nvcomp::{Chunks, Codec, DecodeJob, Nvcomp, to_host, upload, zeroed};

/// Chunk size of the bulk paths.
pub const BULK_CHUNK: usize = 64 << 10;

/// Chunks per piece of the overlapped path: 8 MiB decoded, the piece size of
/// ibp's own DMA path.
pub const PIECE_CHUNKS: usize = 128;

/// The gather batch sizes (those of `ibp bench`).
pub const GATHER_BATCHES: [usize; 2] = [4096, 65536];

/// The bytes a buffer is poisoned with before a checked decode.
const POISON: u8 = 0xA5;

/// Decoded GB/s of one gather batch size.
#[derive(Clone, Debug, Default)]
pub struct GatherRates {
    /// Rows per batch.
    pub batch: usize,
    /// Chunks read from pinned memory by the decoder.
    pub zero_copy: Option<f64>,
    /// Chunks gathered on the host, copied, then decoded.
    pub copy: Option<f64>,
    /// Chunks in device memory.
    pub device: Option<f64>,
}

/// One row of the comparison: a codec (or ibp) on one table. Rates are
/// decoded GB/s; `None` where the codec has no such path.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// "ibp", or the nvCOMP configuration.
    pub codec: String,
    /// Original bytes ÷ stored bytes, 64 KiB chunks (ibp: its packed layout).
    pub ratio: f64,
    /// The same with one chunk per row.
    pub row_ratio: f64,
    /// Copy the compressed bytes, then decode.
    pub copy_decode: Option<f64>,
    /// Copy and decode overlapped in pieces.
    pub overlapped: Option<f64>,
    /// Decode reading pinned memory.
    pub zero_copy: Option<f64>,
    /// Decode from device memory.
    pub device: Option<f64>,
    /// Random gathers.
    pub gathers: Vec<GatherRates>,
    /// Paths that failed (their cells are empty), with nvCOMP's error.
    pub failures: Vec<String>,
}

/// Enqueue a host-to-device copy of `src` (pinned) to device address `dst`.
///
/// # Safety
/// `dst .. dst + src.len()` is device memory, and both ranges stay
/// allocated (and `src` unwritten) until `s` is synchronised.
unsafe fn copy_h2d(dst: u64, src: &[u8], s: &Stream) -> Result<()> {
    // SAFETY: the caller's obligations are the helper's.
    unsafe { copy_to_device_async(dst, src, s) }
}

fn sync(s: &Stream) -> Result<()> {
    s.synchronize()
        .map_err(|e| Error::cuda(format!("nvCOMP benchmark: {e}")))
}

fn poison(b: &mut DeviceBuffer<u8>) -> Result<()> {
    b.set_8(POISON)
        .map_err(|e| Error::cuda(format!("poisoning a buffer: {e}")))
}

fn mismatch(codec: Codec, path: &str) -> Error {
    Error::corrupt(format!(
        "nvCOMP {} ({path}) decoded bytes that differ from the original",
        codec.name()
    ))
}

/// Measure `codec` on `data` (rows of `row_bytes`): every bulk path and the
/// gathers. `data` is the table as `ibp bench` measures it.
pub fn measure_codec(
    gpu: &Gpu,
    nv: &Nvcomp,
    stream: &Stream,
    codec: Codec,
    data: &[u8],
    row_bytes: usize,
) -> Result<Row> {
    gpu.make_current()?;
    let mut row = Row {
        codec: codec.name(),
        ..Default::default()
    };
    // Q: why are failures noted rather than returned?
    // A: one configuration nvCOMP refuses (or decodes wrongly) should not
    // cost the rest of the comparison; the table says which and why.
    match nv.compress(codec, data, BULK_CHUNK, stream) {
        Ok(bulk) => {
            row.ratio = bulk.raw_bytes() as f64 / bulk.stored_bytes() as f64;
            bulk_paths(nv, stream, &bulk, data, &mut row)?;
        }
        Err(e) => row
            .failures
            .push(format!("compression, 64 KiB chunks: {e}")),
    }
    match nv.compress(codec, data, row_bytes, stream) {
        Ok(rows) => {
            row.row_ratio = rows.raw_bytes() as f64 / rows.stored_bytes() as f64;
            for batch in GATHER_BATCHES {
                let g = gather_paths(nv, stream, &rows, data, row_bytes, batch, &mut row.failures)?;
                row.gathers.push(g);
            }
        }
        Err(e) => row
            .failures
            .push(format!("compression, one chunk per row: {e}")),
    }
    Ok(row)
}

/// A bulk path: its name, its enqueue function, the batch it decodes, and
/// whether it copies into the device buffer first.
type BulkPath<'a> = (&'a str, &'a dyn Fn() -> Result<()>, &'a DecodeJob, bool);

/// The four bulk paths of `c` (64 KiB chunks of `data`).
fn bulk_paths(nv: &Nvcomp, stream: &Stream, c: &Chunks, data: &[u8], row: &mut Row) -> Result<()> {
    let codec = c.codec;
    let n = c.count();
    let pinned = PinnedBuffer::from_slice(&c.data)?;
    let dev_in = upload(&c.data, "compressed chunks")?;
    let mut out = zeroed::<u8>(data.len(), "decode output")?;
    let out_addr = out.as_device_ptr().as_raw();
    let outs: Vec<u64> = (0..n).map(|i| out_addr + (i * BULK_CHUNK) as u64).collect();
    let at = |base: u64| -> Vec<u64> { c.offsets.iter().map(|&o| base + o).collect() };
    let dev_job = nv.decode_job(
        codec,
        &at(dev_in.as_device_ptr().as_raw()),
        &c.sizes,
        &outs,
        &c.raw,
        c.max_raw,
        stream,
    )?;
    let zc_job = nv.decode_job(
        codec,
        &at(pinned.device_ptr()),
        &c.sizes,
        &outs,
        &c.raw,
        c.max_raw,
        stream,
    )?;
    let decoded = data.len() as f64;
    let copy_stream = Stream::new(StreamFlags::NON_BLOCKING, None)
        .map_err(|e| Error::cuda(format!("creating a stream: {e}")))?;
    let pieces: Vec<(usize, usize)> = (0..n)
        .step_by(PIECE_CHUNKS)
        .map(|a| (a, (a + PIECE_CHUNKS).min(n)))
        .collect();
    let events = pieces
        .iter()
        .map(|_| Event::new())
        .collect::<Result<Vec<_>>>()?;
    let start = Event::new()?;
    let dev_addr = dev_in.as_device_ptr().as_raw();
    let end_of = |k: usize| {
        if k == n {
            c.data.len() as u64
        } else {
            c.offsets[k]
        }
    };
    // Each path as an enqueue-only closure; `wipe` says whether it reads
    // `dev_in` after copying it (so the check poisons that too).
    let copy_decode = || -> Result<()> {
        // SAFETY: `dev_in` holds the chunks and `pinned` is their pinned
        // copy; both outlive every timed call (synchronised inside).
        unsafe { copy_h2d(dev_addr, &pinned[..c.data.len()], stream)? };
        nv.decode(&dev_job, 0..n, stream)
    };
    let overlapped = || -> Result<()> {
        start.record(stream)?;
        start.wait_on(&copy_stream)?;
        for (&(a, b), ev) in pieces.iter().zip(&events) {
            let (from, to) = (c.offsets[a], end_of(b));
            let src = &pinned[from as usize..to as usize];
            // SAFETY: as for the copy-then-decode path; `from..to` lies
            // inside both buffers.
            unsafe { copy_h2d(dev_addr + from, src, &copy_stream)? };
            ev.record(&copy_stream)?;
            ev.wait_on(stream)?;
            nv.decode(&dev_job, a..b, stream)?;
        }
        Ok(())
    };
    let zero_copy = || nv.decode(&zc_job, 0..n, stream);
    let device = || nv.decode(&dev_job, 0..n, stream);
    let paths: [BulkPath; 4] = [
        ("copy then decode", &copy_decode, &dev_job, true),
        ("overlapped", &overlapped, &dev_job, true),
        ("zero-copy", &zero_copy, &zc_job, false),
        ("device", &device, &dev_job, false),
    ];
    let mut dev_in = dev_in;
    let mut rates = Vec::new();
    for (name, f, job, wipe) in paths {
        // The check: poisoned output (and landing buffer, for the copying
        // paths, then restored by the path itself); then the timing.
        let mut one = || -> Result<f64> {
            poison(&mut out)?;
            if wipe {
                poison(&mut dev_in)?;
            } else {
                // The device path reads what the copying paths left there;
                // after a failure of theirs that may be poison.
                dev_in
                    .copy_from(&c.data[..])
                    .map_err(|e| Error::cuda(format!("uploading chunks: {e}")))?;
            }
            f()?;
            sync(stream)?;
            nv.check_job(job)?;
            if to_host(&out)? != data {
                return Err(mismatch(codec, name));
            }
            let s = time_median(stream, 2, 9, f)?;
            sync(&copy_stream)?;
            nv.check_job(job)?;
            Ok(decoded / s / 1e9)
        };
        rates.push(
            one()
                .map_err(|e| row.failures.push(format!("{name}: {e}")))
                .ok(),
        );
    }
    row.copy_decode = rates[0];
    row.overlapped = rates[1];
    row.zero_copy = rates[2];
    row.device = rates[3];
    Ok(())
}

/// The row ids of `ibp bench`'s gathers (`ibp_cli::measure::measure_gather`
/// draws the same ones): 8 sets of `batch` uniform ids below `rows`.
fn index_sets(rows: usize, batch: usize) -> Vec<Vec<usize>> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ batch as u64;
    (0..8)
        .map(|_| {
            (0..batch)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s % rows as u64) as usize
                })
                .collect()
        })
        .collect()
}

/// The staging layout of each index set for the copy path: each chunk's
/// offset in the staging buffer (aligned as nvCOMP wants its input), and
/// the bytes in all.
fn staging_layouts(c: &Chunks, sets: &[Vec<usize>]) -> Vec<(Vec<u64>, u64)> {
    let align = c.input_alignment as u64;
    sets.iter()
        .map(|ids| {
            let mut at = 0u64;
            let offs = ids
                .iter()
                .map(|&t| {
                    let o = at;
                    at = (at + c.sizes[t]).next_multiple_of(align);
                    o
                })
                .collect();
            (offs, at)
        })
        .collect()
}

/// One gather batch size: zero-copy, copy and device paths.
fn gather_paths(
    nv: &Nvcomp,
    stream: &Stream,
    c: &Chunks,
    data: &[u8],
    row_bytes: usize,
    batch: usize,
    failures: &mut Vec<String>,
) -> Result<GatherRates> {
    let codec = c.codec;
    let sets = index_sets(c.count(), batch);
    let pinned = PinnedBuffer::from_slice(&c.data)?;
    let dev_rows = upload(&c.data, "compressed rows")?;
    // Q: why a padded output stride?
    // A: nvCOMP wants each output chunk aligned (ANS: 16 bytes); rows whose
    // length is not a multiple land in padded slots. That favours nvCOMP
    // slightly (ibp writes rows back to back).
    let stride = row_bytes.next_multiple_of(c.output_alignment);
    let mut out = zeroed::<u8>(batch * stride, "gather output")?;
    let out_addr = out.as_device_ptr().as_raw();
    let outs: Vec<u64> = (0..batch).map(|i| out_addr + (i * stride) as u64).collect();
    let raw = vec![row_bytes as u64; batch];
    let layouts = staging_layouts(c, &sets);
    let staging_len = layouts.iter().map(|l| l.1).max().unwrap_or(1) as usize;
    let mut staging = PinnedBuffer::<u8>::zeroed(staging_len)?;
    let staging_dev = zeroed::<u8>(staging_len, "staging")?;
    let sd = staging_dev.as_device_ptr().as_raw();
    let mut jobs = Vec::new();
    for (ids, (offs, _)) in sets.iter().zip(&layouts) {
        let sizes: Vec<u64> = ids.iter().map(|&t| c.sizes[t]).collect();
        let from = |base: u64| -> Vec<u64> { ids.iter().map(|&t| base + c.offsets[t]).collect() };
        let zc = nv.decode_job(
            codec,
            &from(pinned.device_ptr()),
            &sizes,
            &outs,
            &raw,
            row_bytes,
            stream,
        )?;
        let dev = nv.decode_job(
            codec,
            &from(dev_rows.as_device_ptr().as_raw()),
            &sizes,
            &outs,
            &raw,
            row_bytes,
            stream,
        )?;
        let staged: Vec<u64> = offs.iter().map(|&o| sd + o).collect();
        let copy = nv.decode_job(codec, &staged, &sizes, &outs, &raw, row_bytes, stream)?;
        jobs.push([zc, copy, dev]);
    }
    let mut rates = [None; 3];
    for (p, name) in ["gather zero-copy", "gather copy", "gather device"]
        .iter()
        .enumerate()
    {
        // Enqueue set k on path p. The copy path gathers on the host first:
        // its time is inside the events' interval, as the stream waits.
        let mut run = |k: usize| -> Result<()> {
            if p == 1 {
                sync(stream)?; // the staging buffer is free again
                let (offs, len) = &layouts[k];
                for (&t, &o) in sets[k].iter().zip(offs) {
                    let (a, n) = (c.offsets[t] as usize, c.sizes[t] as usize);
                    staging[o as usize..o as usize + n].copy_from_slice(&c.data[a..a + n]);
                }
                // SAFETY: the device staging buffer holds the batch's
                // chunks, the pinned one too, and both outlive the
                // measurement (the stream is synchronised before reuse).
                unsafe { copy_h2d(sd, &staging[..*len as usize], stream)? };
            }
            nv.decode(&jobs[k][p], 0..batch, stream)
        };
        let mut one = || -> Result<f64> {
            for k in 0..sets.len() {
                poison(&mut out)?;
                run(k)?;
                sync(stream)?;
                nv.check_job(&jobs[k][p])?;
                let got = to_host(&out)?;
                for (i, &t) in sets[k].iter().enumerate() {
                    if got[i * stride..i * stride + row_bytes]
                        != data[t * row_bytes..(t + 1) * row_bytes]
                    {
                        return Err(mismatch(codec, name));
                    }
                }
            }
            let mut k = 0;
            let s = time_median(stream, 8, 24, || {
                k = (k + 1) % sets.len();
                run(k)
            })?;
            Ok((batch * row_bytes) as f64 / s / 1e9)
        };
        rates[p] = one()
            .map_err(|e| failures.push(format!("{name} {batch}: {e}")))
            .ok();
    }
    Ok(GatherRates {
        batch,
        zero_copy: rates[0],
        copy: rates[1],
        device: rates[2],
    })
}
