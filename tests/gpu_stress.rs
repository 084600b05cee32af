//! Concurrency stress (issue 38): several host threads per GPU, each with
//! streams of its own, decoding (zero-copy gather from pinned memory, range
//! from device memory, the DMA gather), gathering through a feature cache
//! shared by all threads (and, with two or more GPUs, through one cache
//! spanning them all), appending to and gathering from a KV store, and
//! compressing (device and pinned sources, both layouts), all at once, for
//! a fixed number of rounds, on one GPU and on every GPU present.
//!
//! Every output is compared bit for bit with the original rows or with the
//! CPU codec's compression; nothing may be lost (every row asked for comes
//! back, every appended row is in the store and in its pages); a watchdog
//! ends the process with a failure (exit status 101) when a thread makes
//! no progress for `IBP_STRESS_WATCHDOG_SECS` (default 120), rather than
//! let a deadlock hang the run.
//!
//! Settings (environment): `IBP_STRESS_ROUNDS` (default 4),
//! `IBP_STRESS_THREADS` per GPU (default 3), `IBP_STRESS_SEED`. The last
//! line on stderr is the summary (counts of everything checked). Prints
//! `skipped: no CUDA device` without a GPU (a failure with
//! `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Rng, gpu_or_skip, notice};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::Rows;
use ibp::codebook::{ChunkSize, Codebook};
use ibp::gpu::{
    CacheOptions, Compressor, DecodeOptions, DecodeStatus, Decoder, DmaScratch, FeatureCache, Gpu,
    GpuDataset, KvStore, KvStoreOptions, PinnedBuffer, Residency, Span, copy_to_host_blocking,
};
use ibp::layout::{Layout, LayoutOptions, Packed, compress_fixed, compress_packed};

const POISON: u8 = 0xA5;
/// Rows of each GPU's table, and their length (bf16 rows of 384).
const N: usize = 3000;
const L: usize = 768;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

/// A table of `N` rows that mostly match one codebook (every 9th row
/// random, stored raw), and that codebook.
fn table(rng: &mut Rng) -> (Vec<u8>, Codebook) {
    let mask: Vec<u8> = (0..L)
        .map(|_| (rng.next() as u8) | (rng.next() as u8))
        .collect();
    let bitval: Vec<u8> = mask.iter().map(|m| m & rng.next() as u8).collect();
    let mut data = vec![0u8; N * L];
    for (i, row) in data.chunks_mut(L).enumerate() {
        for (j, b) in row.iter_mut().enumerate() {
            let r = rng.next() as u8;
            *b = if i % 9 == 8 {
                r
            } else {
                (r & !mask[j]) | bitval[j]
            };
        }
    }
    let cb = Codebook::new(ChunkSize::Four, mask, bitval).expect("a codebook");
    (data, cb)
}

/// What one GPU's threads share: the table (original rows, CPU packed
/// form), its uploads, a codebook on the device, the rows on the device
/// and pinned (compression sources), and a single-GPU feature cache.
struct PerGpu<'g> {
    gpu: &'g Gpu,
    pinned: GpuDataset,
    device: GpuDataset,
    comp: Compressor<'g>,
    d_rows: DeviceBuffer<u8>,
    p_rows: PinnedBuffer<u8>,
    cache: Mutex<FeatureCache>,
}

/// Counts of what was checked, over all threads.
#[derive(Default)]
struct Tally {
    zero_copy: AtomicU64,
    device: AtomicU64,
    dma: AtomicU64,
    cache: AtomicU64,
    multi_cache: AtomicU64,
    kv_appended: AtomicU64,
    kv_gathered: AtomicU64,
    compressed: AtomicU64,
    rounds: AtomicU64,
}

impl Tally {
    fn add(&self, c: &AtomicU64, n: usize) {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Each worker's last sign of life, for the watchdog: when it last
/// finished a round (or started), which round, and whether it is done.
struct Beat {
    name: String,
    at: Mutex<Instant>,
    round: AtomicU64,
    done: AtomicBool,
}

fn stream() -> Result<Stream, String> {
    Stream::new(StreamFlags::NON_BLOCKING, None).map_err(|e| format!("a stream: {e}"))
}

fn ok<T>(r: ibp::Result<T>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

fn cu<T>(r: Result<T, cust::error::CudaError>, what: &str) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// `data` in new device memory, copied on `stream`: ordered before the
/// work enqueued there after it.
///
/// Q: why not `DeviceBuffer::from_slice`?
/// A: its copy from pageable memory is synchronous only up to the staging
/// buffer: the DMA may land later, on the legacy stream, which these
/// non-blocking streams do not wait for (and a context synchronisation
/// would wait for the other threads' work too).
fn upload_on<T: cust::memory::DeviceCopy>(
    data: &[T],
    stream: &Stream,
) -> Result<DeviceBuffer<T>, String> {
    use cust::memory::AsyncCopyDestination;
    // SAFETY: every element is written by the copy below, which is enqueued
    // on `stream` before anything that reads the buffer there.
    let mut d = cu(
        unsafe { DeviceBuffer::uninitialized(data.len()) },
        "an allocation",
    )?;
    // SAFETY: `d` holds `data.len()` elements; pageable `data` is staged
    // before the call returns; the caller keeps `d` until `stream` is
    // synchronised.
    cu(unsafe { d.async_copy_from(data, stream) }, "an upload")?;
    Ok(d)
}

/// A poisoned output of `len` bytes, poisoned on `stream`.
fn poisoned(len: usize, stream: &Stream) -> Result<DeviceBuffer<u8>, String> {
    upload_on(&vec![POISON; len], stream)
}

/// `got` holds exactly the rows `index` of `data`.
fn same_rows(got: &[u8], data: &[u8], index: &[u64], what: &str) -> Result<(), String> {
    if got.len() != index.len() * L {
        return Err(format!("{what}: {} bytes back", got.len()));
    }
    for (i, &t) in index.iter().enumerate() {
        if got[i * L..(i + 1) * L] != data[t as usize * L..(t as usize + 1) * L] {
            return Err(format!("{what}: output row {i} (row {t}) differs"));
        }
    }
    Ok(())
}

/// A worker's own streams, decoders, statuses, DMA scratch and KV store,
/// on its GPU's shared data.
struct Worker<'a, 'g> {
    me: &'a PerGpu<'g>,
    data: &'a [u8],
    sa: Stream,
    sb: Stream,
    sc: Stream,
    sd: Stream,
    zc: Decoder<'a>,
    dev: Decoder<'a>,
    scratch: DmaScratch,
    st: Vec<DecodeStatus>,
    kv: KvStore,
    /// Every row appended to `kv`, in order.
    kv_rows: Vec<u8>,
    rng: Rng,
}

/// What one round enqueued: the requests, the device buffers they read
/// (kept until the streams are done) and the outputs to check.
struct Round {
    ix: Vec<u32>,
    first: u64,
    count: u64,
    step: usize,
    kv_ix: Vec<u64>,
    _ids: [DeviceBuffer<u32>; 2],
    _step: DeviceBuffer<u8>,
    _kv_ids: DeviceBuffer<u64>,
    out_zc: DeviceBuffer<u8>,
    out_dev: DeviceBuffer<u8>,
    out_cache: DeviceBuffer<u8>,
    out_multi: DeviceBuffer<u8>,
    out_kv: DeviceBuffer<u8>,
    out_dma: DeviceBuffer<u8>,
}

impl<'a, 'g> Worker<'a, 'g> {
    /// Streams, decoders and statuses of its own on `me`'s GPU, and a KV
    /// store with room for `rounds` steps.
    fn start(me: &'a PerGpu<'g>, data: &'a [u8], seed: u64, rounds: u64) -> Result<Self, String> {
        let gpu = me.gpu;
        ok(gpu.make_current(), "make_current")?;
        let mut rng = Rng(seed | 1);
        let (sa, sb, sc, sd) = (stream()?, stream()?, stream()?, stream()?);
        let zc = ok(
            Decoder::new(gpu, &me.pinned, &DecodeOptions::default()),
            "a decoder (pinned)",
        )?;
        let dev = ok(
            Decoder::new(gpu, &me.device, &DecodeOptions::default()),
            "a decoder (device)",
        )?;
        let scratch = ok(DmaScratch::new(64 * 1024), "DMA scratch")?;
        let st: Vec<DecodeStatus> = (0..6)
            .map(|_| ok(DecodeStatus::new(), "a status"))
            .collect::<Result<_, _>>()?;
        // The statuses' first words were written by synchronous copies from
        // pageable memory, whose DMA may land late: wait for them once, before
        // the rounds. (`check_blocking`'s clears between rounds could at worst
        // hide a report, never invent one: valid rows make none.)
        cu(
            cust::context::CurrentContext::synchronize(),
            "waiting for the statuses",
        )?;
        // The KV store: prefilled with 40 rows of the table from a random
        // place, then a step of 1 to 24 rows from another place a round;
        // `kv_rows` holds every row appended, in order.
        let at = (rng.next() % (N as u64 - 40)) as usize;
        let kv_rows = data[at * L..(at + 40) * L].to_vec();
        // The store appends its prefill on a stream of its own: the upload is
        // done first.
        let prefill = upload_on(&kv_rows, &sd)?;
        cu(sd.synchronize(), "uploading the prefill")?;
        let opts = KvStoreOptions::default()
            .with_page_rows(64)
            .with_page_budget((40 + 24 * rounds).div_ceil(64) + 1)
            .with_step_rows(16);
        let kv = ok(KvStore::create(gpu, &prefill, L, &opts), "KvStore::create")?;
        Ok(Worker {
            me,
            data,
            sa,
            sb,
            sc,
            sd,
            zc,
            dev,
            scratch,
            st,
            kv,
            kv_rows,
            rng,
        })
    }

    /// Enqueues a round's decodes, gathers and KV append on four streams.
    fn enqueue(
        &mut self,
        multi: Option<(&Mutex<FeatureCache>, &GpuDataset)>,
    ) -> Result<Round, String> {
        let (gpu, data, me) = (self.me.gpu, self.data, self.me);
        let (sa, sb, sc, sd, st) = (&self.sa, &self.sb, &self.sc, &self.sd, &self.st);
        let rng = &mut self.rng;
        let ix: Vec<u32> = (0..1 + rng.next() % 1500)
            .map(|_| (rng.next() % N as u64) as u32)
            .collect();
        let d_ix = upload_on(&ix, sa)?;
        let mut out_zc = poisoned(ix.len() * L, sa)?;
        ok(
            self.zc.gather(gpu, &d_ix, &mut out_zc, &st[0], sa),
            "zero-copy gather",
        )?;
        let first = rng.next() % N as u64;
        let count = 1 + rng.next() % (N as u64 - first).min(1200);
        let mut out_dev = poisoned(count as usize * L, sb)?;
        ok(
            self.dev.range(gpu, first, count, &mut out_dev, &st[1], sb),
            "device range",
        )?;
        let d_ix_c = upload_on(&ix, sc)?;
        let mut out_cache = poisoned(ix.len() * L, sc)?;
        {
            let cache = me.cache.lock().unwrap();
            ok(
                cache.gather(gpu, &me.pinned, &d_ix_c, &mut out_cache, &st[2], sc),
                "cache gather",
            )?;
        }
        let mut out_multi = poisoned(ix.len() * L, sc)?;
        if let Some((cache, ds)) = multi {
            let cache = cache.lock().unwrap();
            ok(
                cache.gather(gpu, ds, &d_ix_c, &mut out_multi, &st[3], sc),
                "multi-GPU cache gather",
            )?;
        }
        let step = 1 + (rng.next() % 24) as usize;
        let from = (rng.next() % (N - step) as u64) as usize;
        let d_step = upload_on(&data[from * L..(from + step) * L], sd)?;
        let got = ok(self.kv.append(gpu, &d_step, L, sd), "KV append")?;
        let before = (self.kv_rows.len() / L) as u64;
        if got != (before..before + step as u64) {
            return Err(format!("KV append took {got:?}; rows {before}.. expected"));
        }
        self.kv_rows
            .extend_from_slice(&data[from * L..(from + step) * L]);
        let kv_ix: Vec<u64> = (0..before + step as u64).collect();
        let d_kv_ix = upload_on(&kv_ix, sd)?;
        let mut out_kv = poisoned(kv_ix.len() * L, sd)?;
        ok(
            self.kv.gather(gpu, 0, &d_kv_ix, &mut out_kv, &st[4], sd),
            "KV gather",
        )?;
        // The DMA gather blocks this thread while it stages; the other
        // streams run meanwhile.
        let mut out_dma = poisoned(ix.len() * L, sa)?;
        ok(
            self.zc
                .gather_dma_blocking(gpu, &ix, &mut out_dma, &st[5], &mut self.scratch, sa),
            "DMA gather",
        )?;
        Ok(Round {
            ix,
            first,
            count,
            step,
            kv_ix,
            _ids: [d_ix, d_ix_c],
            _step: d_step,
            _kv_ids: d_kv_ix,
            out_zc,
            out_dev,
            out_cache,
            out_multi,
            out_kv,
            out_dma,
        })
    }

    /// Waits for the four streams, checks the statuses, then compares
    /// every output of round `r` with the rows asked for.
    fn check(&mut self, r: &Round, multi: bool, tally: &Tally) -> Result<(), String> {
        for (s, name) in [
            (&self.sa, "a"),
            (&self.sb, "b"),
            (&self.sc, "c"),
            (&self.sd, "d"),
        ] {
            cu(s.synchronize(), &format!("stream {name}"))?;
        }
        for (i, s) in self.st.iter_mut().enumerate() {
            ok(s.check_blocking(), &format!("status {i}"))?;
        }
        let data = self.data;
        let ix64: Vec<u64> = r.ix.iter().map(|&t| t as u64).collect();
        let back = |b: &DeviceBuffer<u8>, what: &str| ok(copy_to_host_blocking(b), what);
        same_rows(&back(&r.out_zc, "zc")?, data, &ix64, "zero-copy gather")?;
        tally.add(&tally.zero_copy, r.ix.len());
        let range: Vec<u64> = (r.first..r.first + r.count).collect();
        same_rows(&back(&r.out_dev, "dev")?, data, &range, "device range")?;
        tally.add(&tally.device, range.len());
        same_rows(&back(&r.out_cache, "cache")?, data, &ix64, "cache gather")?;
        tally.add(&tally.cache, r.ix.len());
        if multi {
            same_rows(
                &back(&r.out_multi, "multi")?,
                data,
                &ix64,
                "multi-GPU cache",
            )?;
            tally.add(&tally.multi_cache, r.ix.len());
        }
        same_rows(
            &back(&r.out_kv, "kv")?,
            &self.kv_rows,
            &r.kv_ix,
            "KV gather",
        )?;
        tally.add(&tally.kv_gathered, r.kv_ix.len());
        tally.add(&tally.kv_appended, r.step);
        same_rows(&back(&r.out_dma, "dma")?, data, &ix64, "DMA gather")?;
        tally.add(&tally.dma, r.ix.len());
        Ok(())
    }

    /// Compression of a slice of the table, from device memory (packed on
    /// even rounds, fixed on odd ones) and from pinned memory in batches,
    /// against the CPU.
    fn compress(&mut self, round: u64, tally: &Tally) -> Result<(), String> {
        let (me, data) = (self.me, self.data);
        let a = (self.rng.next() % (N as u64 - 1)) as usize;
        let rows = 1 + (self.rng.next() % (N - a).min(800) as u64) as usize;
        let slice = &data[a * L..(a + rows) * L];
        let cpu = Rows::new(slice, L).unwrap();
        let src = Span::of(&me.d_rows, a * L, rows * L).ok_or("a device span")?;
        if round.is_multiple_of(2) {
            let c = ok(
                me.comp.compress_blocking(&src, Layout::Packed),
                "compress (packed)",
            )?;
            let want = compress_packed(me.comp.codebook(), cpu, &LayoutOptions::default()).unwrap();
            if ok(c.to_packed_blocking(), "to_packed")? != want {
                return Err(format!(
                    "compressed rows {a}+{rows} (packed) differ from the CPU's"
                ));
            }
        } else {
            let c = ok(
                me.comp.compress_blocking(&src, Layout::FixedStride),
                "compress (fixed)",
            )?;
            let want = compress_fixed(me.comp.codebook(), cpu, &LayoutOptions::default()).unwrap();
            if ok(c.to_fixed_blocking(), "to_fixed")? != want {
                return Err(format!(
                    "compressed rows {a}+{rows} (fixed) differ from the CPU's"
                ));
            }
        }
        let host = me
            .p_rows
            .span(a * L..(a + rows) * L)
            .ok_or("a pinned span")?;
        let got = ok(
            me.comp
                .compress_host_packed_blocking(&host, (rows * L / 3).max(L)),
            "compress (host batches)",
        )?;
        let want = compress_packed(me.comp.codebook(), cpu, &LayoutOptions::default()).unwrap();
        if got != want {
            return Err(format!(
                "host-batch compression of rows {a}+{rows} differs from the CPU's"
            ));
        }
        tally.add(&tally.compressed, 2 * rows);
        Ok(())
    }

    /// Nothing lost: every appended row is in the store, and its pages are
    /// the CPU's compression of them under the store's codebook.
    fn check_kv(&self) -> Result<(), String> {
        let (kv, kv_rows) = (&self.kv, &self.kv_rows);
        let want_rows = (kv_rows.len() / L) as u64;
        if kv.rows() != want_rows || kv.segments()[0].rows != want_rows {
            return Err(format!(
                "the KV store holds {} rows; {want_rows} were appended",
                kv.rows()
            ));
        }
        cu(self.sd.synchronize(), "stream d")?;
        let cb = kv.codebook(0).unwrap().clone();
        let rows = Rows::new(kv_rows, L).unwrap();
        let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
        if kv.pages_host()[..fixed.slots.len()] != fixed.slots[..] {
            return Err("the KV pages differ from the CPU's compression".into());
        }
        Ok(())
    }
}

/// One worker: `rounds` rounds of every operation, on its GPU's shared
/// data, with its own streams, statuses, DMA scratch and KV store.
fn worker(
    me: &PerGpu<'_>,
    data: &[u8],
    multi: Option<(&Mutex<FeatureCache>, &GpuDataset)>,
    seed: u64,
    rounds: u64,
    tally: &Tally,
    beat: &Beat,
) -> Result<(), String> {
    let mut w = Worker::start(me, data, seed, rounds)?;
    for round in 0..rounds {
        // Enqueue everything on four streams, then wait for all of it.
        let r = w.enqueue(multi)?;
        w.check(&r, multi.is_some(), tally)?;
        w.compress(round, tally)?;
        tally.rounds.fetch_add(1, Ordering::Relaxed);
        *beat.at.lock().unwrap() = Instant::now();
        beat.round.store(round + 1, Ordering::Relaxed);
    }
    w.check_kv()
}

/// Each GPU's shared data (uploads, codebook, rows, a feature cache over
/// `hot` within `budget`) and, with two or more GPUs, one cache over all.
fn per_gpu<'g>(
    gpus: &'g [Gpu],
    data: &[u8],
    (cb, packed): (&Codebook, &Packed),
    hot: &[u64],
    budget: u64,
) -> (Vec<PerGpu<'g>>, Option<Mutex<FeatureCache>>) {
    let per: Vec<PerGpu<'_>> = gpus
        .iter()
        .map(|g| {
            g.make_current().unwrap();
            let pinned =
                GpuDataset::upload_packed(g, cb, &packed.view(), Residency::Pinned).unwrap();
            let device =
                GpuDataset::upload_packed(g, cb, &packed.view(), Residency::Device).unwrap();
            let cache = FeatureCache::new(&[g], &[&pinned], hot, &CacheOptions::new(budget))
                .expect("a feature cache");
            PerGpu {
                gpu: g,
                comp: Compressor::new(g, cb).unwrap(),
                d_rows: DeviceBuffer::from_slice(data).unwrap(),
                p_rows: PinnedBuffer::from_slice(data).unwrap(),
                cache: Mutex::new(cache),
                pinned,
                device,
            }
        })
        .collect();
    // With two or more GPUs, one cache over all of them.
    let multi = (gpus.len() >= 2).then(|| {
        let refs: Vec<&Gpu> = gpus.iter().collect();
        let hosts: Vec<&GpuDataset> = per.iter().map(|p| &p.pinned).collect();
        Mutex::new(
            FeatureCache::new(&refs, &hosts, hot, &CacheOptions::new(budget))
                .expect("a multi-GPU feature cache"),
        )
    });
    (per, multi)
}

/// The watchdog: a worker without a finished round for `limit` means a
/// deadlock or a hung kernel; end the process with a failure instead of
/// hanging (the scope could never join it). Returns once `all_done`.
fn watchdog(beats: &[Beat], all_done: &AtomicBool, limit: Duration, rounds: u64) {
    while !all_done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        for b in beats {
            let idle = b.at.lock().unwrap().elapsed();
            if !b.done.load(Ordering::Relaxed) && idle > limit {
                notice(&format!(
                    "gpu_stress FAIL: watchdog: {} made no progress for {:.0} s after round {} of {rounds}; ending the process",
                    b.name,
                    idle.as_secs_f64(),
                    b.round.load(Ordering::Relaxed)
                ));
                std::process::exit(101);
            }
        }
    }
}

#[test]
fn threads_and_streams_on_every_gpu_decode_gather_append_and_compress_bit_exactly() {
    let name = "threads_and_streams_on_every_gpu_decode_gather_append_and_compress_bit_exactly";
    let Some(first) = gpu_or_skip(name) else {
        return;
    };
    let rounds = env_u64("IBP_STRESS_ROUNDS", 4);
    let threads = env_u64("IBP_STRESS_THREADS", 3).max(1);
    let seed = env_u64("IBP_STRESS_SEED", 0x57e55);
    let limit = Duration::from_secs(env_u64("IBP_STRESS_WATCHDOG_SECS", 120));
    // Every GPU present (the first one already open and current).
    let mut gpus = vec![first];
    for i in 1..Gpu::count().min(8) {
        gpus.push(Gpu::new(i).unwrap_or_else(|e| panic!("GPU {i}: {e}")));
    }
    let mut rng = Rng(seed | 1);
    let (data, cb) = table(&mut rng);
    // The hot set: the first quarter of the rows (a fifth of the table fits
    // the budget, so gathers both hit and miss).
    let hot: Vec<u64> = (0..N as u64 / 4).collect();
    let packed =
        compress_packed(&cb, Rows::new(&data, L).unwrap(), &LayoutOptions::default()).unwrap();
    let budget = packed.payload.len() as u64 / 5;
    let (per, multi) = per_gpu(&gpus, &data, (&cb, &packed), &hot, budget);
    if gpus.len() < 2 {
        notice(&format!(
            "{name}: one GPU: the multi-GPU cache is not exercised"
        ));
    }
    // The uploads above copied from pageable memory (their DMA may land
    // after the call returns): wait for every GPU before the threads start.
    for g in &gpus {
        g.make_current().unwrap();
        cust::context::CurrentContext::synchronize().unwrap();
    }
    gpus[0].make_current().unwrap();
    let tally = Tally::default();
    let beats: Vec<Beat> = (0..gpus.len() as u64 * threads)
        .map(|w| Beat {
            name: format!("GPU {} thread {}", w / threads, w % threads),
            at: Mutex::new(Instant::now()),
            round: AtomicU64::new(0),
            done: AtomicBool::new(false),
        })
        .collect();
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let start = Instant::now();
    let all_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| watchdog(&beats, &all_done, limit, rounds));
        let workers: Vec<_> = (0..gpus.len())
            .flat_map(|g| (0..threads).map(move |t| (g, t)))
            .map(|(g, t)| {
                let (me, data, tally, failures) = (&per[g], &data, &tally, &failures);
                let beat = &beats[g * threads as usize + t as usize];
                let multi = multi.as_ref().map(|m| (m, &per[g].pinned));
                s.spawn(move || {
                    let seed = seed ^ (g as u64) << 32 ^ t;
                    if let Err(e) = worker(me, data, multi, seed, rounds, tally, beat) {
                        failures.lock().unwrap().push(format!("{}: {e}", beat.name));
                    }
                    beat.done.store(true, Ordering::Relaxed);
                })
            })
            .collect();
        for w in workers {
            if w.join().is_err() {
                failures
                    .lock()
                    .unwrap()
                    .push("a worker panicked (above)".into());
            }
        }
        all_done.store(true, Ordering::Relaxed);
    });
    let secs = start.elapsed().as_secs_f64();
    let failures = failures.into_inner().unwrap();
    for f in &failures {
        notice(&format!("gpu_stress FAIL {f}"));
    }
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    notice(&format!(
        "gpu_stress summary: {} GPU(s) ({}) x {threads} threads x {rounds} rounds in {secs:.1} s: {} rounds done; rows checked: zero-copy gather {}, device range {}, DMA gather {}, cache {}, multi-GPU cache {}, KV appended {} and gathered {}, compressed {}; failures {}",
        gpus.len(),
        gpus[0].info().name,
        n(&tally.rounds),
        n(&tally.zero_copy),
        n(&tally.device),
        n(&tally.dma),
        n(&tally.cache),
        n(&tally.multi_cache),
        n(&tally.kv_appended),
        n(&tally.kv_gathered),
        n(&tally.compressed),
        failures.len()
    ));
    assert!(failures.is_empty(), "{} failures (above)", failures.len());
    assert_eq!(
        n(&tally.rounds),
        gpus.len() as u64 * threads * rounds,
        "rounds lost"
    );
}
