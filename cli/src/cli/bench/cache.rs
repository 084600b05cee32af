//! `ibp bench --section cache`: the GPU feature cache (paper §5, Figure 6)
//! on the paper's GNN setting scaled up the paper's way, and on a DLRM-style
//! Zipf stream.
//!
//! - Graph: R-MAT with Graph500's parameters, fixed seed (`--vertices`,
//!   `--edges`; ogbn-products' scale by default).
//! - Features: real rows (Cora, MiniLM's word embeddings in f32 and bf16)
//!   assigned at random to the vertices, as the paper's CoraSU.
//! - Access: GraphSAGE sampling (fanouts 15-10-5, 1024 seeds a mini-batch,
//!   seeds in random order), each mini-batch gathering its unique vertices;
//!   Zipf(1.05) ids in batches of 8192.
//! - Budgets: 1%, 5%, 25% of the uncompressed feature bytes, per GPU; hot
//!   set by degree (GNN) or by frequency in a separate trace (DLRM).
//! - Variants, all through `FeatureCache::gather`: no cache, uncompressed
//!   cache + uncompressed host rows (the baseline), IBP(M), IBP(C), IBP(C/M);
//!   IBP(M) and IBP(C/M) with both host layouts (packed, and line-aligned:
//!   fixed-stride with a length table; see `ibp::gpu::FeatureCache`).
//! - On the bf16 table, one GPU: the float coding's cache
//!   (`ibp::gpu::FloatFeatureCache`, `cache/float.rs`) at the same budgets
//!   and ids, printed beside them and not judged.
//! - Judgement: each variant against its uncompressed counterpart (IBP(M)
//!   against no cache, the cached ones against the baseline), and, labelled
//!   as such, against the baseline as the issue states it.
//!
//! With several GPUs the batches alternate between them (`--spread
//! alternate`, the default), or each batch is split into one share a GPU,
//! cut by predicted time (`--spread split`, `FeatureCache::shares`); one
//! GPU gathers every batch whole. Batches are sampled and cut on the host
//! up front; only the GPU
//! gathers are timed, with CUDA events (median of 3 passes over all batches after a
//! warm-up that checks rows against the table).

use std::fmt::Write as _;

use super::Spread;
use cust::event::{Event, EventFlags};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::codebook::Codebook;
use ibp::gpu::{
    CacheOptions, CacheStats, DecodeStatus, FeatureCache, Gpu, GpuDataset, Placement, Residency,
    ShareLane, top_k_by_score,
};
use ibp::layout::{FixedStride, LayoutOptions, Packed, compress_packed};
use ibp::{Error, Result, Rows};
use ibp_testdata::raw_packed;

use super::graph::{SplitMix, Zipf, rmat, sage_batch};

mod float;
#[cfg(test)]
mod predict;
mod verdict;

use verdict::{judge, layouts};

/// Everything the section is told.
pub(super) struct CacheArgs {
    pub vertices: usize,
    pub edges: usize,
    pub batches: usize,
    pub max_gpus: usize,
    pub only: Option<String>,
    /// Budgets in percent of the table (`--budgets`; default 1, 5, 25).
    pub budgets: Vec<u64>,
    /// How several GPUs share the batches (`--spread`).
    pub spread: Spread,
    /// The uniform gather where the book allows it (`--uniform`; `None`:
    /// the cache's default).
    pub uniform: Option<bool>,
}

const SEED: u64 = 0x1b9_5eed;
const FANOUTS: [usize; 3] = [15, 10, 5];
const SEEDS_PER_BATCH: usize = 1024;
const DLRM_BATCH: usize = 8192;
const DLRM_BATCHES: usize = 32;
const ZIPF_S: f64 = 1.05;
/// The budgets measured by default, in percent (`--budgets`' default).
#[cfg(test)]
const BUDGETS: [u64; 3] = [1, 5, 25];

/// Where a variant's misses read their rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    /// Every row raw (the uncompressed baselines).
    Raw,
    /// Compressed, packed back to back.
    Packed,
    /// Compressed, fixed-stride with a length table: each row at the start
    /// of its `L`-byte slot (on a 128-byte line when `L` is a multiple).
    Aligned,
}

/// One variant of the table.
struct Variant {
    name: &'static str,
    host: Host,
    /// Slab rows compressed (else raw).
    slab_c: bool,
    /// A cache at all (else no slab rows: every row read from the host).
    on: bool,
}

const fn v(name: &'static str, host: Host, slab_c: bool, on: bool) -> Variant {
    Variant {
        name,
        host,
        slab_c,
        on,
    }
}

const VARIANTS: [Variant; 7] = [
    v("no cache", Host::Raw, false, false),
    v(
        "baseline: uncompressed cache + host",
        Host::Raw,
        false,
        true,
    ),
    v("IBP(M), packed host rows", Host::Packed, true, false),
    v("IBP(M), line-aligned host rows", Host::Aligned, true, false),
    v("IBP(C)", Host::Raw, true, true),
    v("IBP(C/M), packed host rows", Host::Packed, true, true),
    v(
        "IBP(C/M), line-aligned host rows",
        Host::Aligned,
        true,
        true,
    ),
];
const NO_CACHE: usize = 0;
const BASELINE: usize = 1;

/// The host layout of IBP(M) and IBP(C/M) that the targets are judged on.
///
/// Q: why packed, when line-aligned rows read fewer lines?
/// A: measured. A line-aligned row of `s` stored bytes costs `⌈s/128⌉`
/// lines, a packed one usually one more (it starts mid-line), so aligned
/// rows should win when misses dominate; but on the H200 (2026-11-23, full
/// scale, commit 0625c58) packed host rows were faster overall (1.23×, the
/// geometric mean over every IBP(M) and IBP(C/M) point), and met the bf16
/// target where aligned rows did not (1.27× against 1.03× the baseline).
/// Fixed-stride slots spread the rows over N·L bytes of host memory, so
/// the same misses touch more pages and DRAM rows than in a packed
/// payload. The table keeps both layouts, and the section reports which
/// one each run favours.
const DEFAULT_HOST: Host = Host::Packed;

/// The variant's uncompressed counterpart: the same reads, raw. IBP(M)
/// reads every row from the host, as no cache does; the cached variants
/// hold a slab of the same budget, as the baseline does.
fn counterpart(i: usize) -> usize {
    if VARIANTS[i].on { BASELINE } else { NO_CACHE }
}

/// The variant with this cache and host layout.
fn variant(on: bool, slab_c: bool, host: Host) -> usize {
    VARIANTS
        .iter()
        .position(|x| x.on == on && x.slab_c == slab_c && x.host == host)
        .unwrap_or(BASELINE)
}

fn cuda(what: &'static str) -> impl FnOnce(cust::error::CudaError) -> Error {
    move |e| Error::cuda(format!("{what}: {e}"))
}

/// One GPU with its stream and buffers for one table.
struct Lane<'g> {
    gpu: &'g Gpu,
    stream: Stream,
    out: DeviceBuffer<u8>,
    status: DecodeStatus,
}

/// One table uploaded on one GPU: compressed (packed and line-aligned),
/// and every row raw.
struct Uploads {
    comp: GpuDataset,
    aligned: GpuDataset,
    raw: GpuDataset,
}

impl Uploads {
    fn host(&self, h: Host) -> &GpuDataset {
        match h {
            Host::Raw => &self.raw,
            Host::Packed => &self.comp,
            Host::Aligned => &self.aligned,
        }
    }
}

/// A workload: batches of ids (host and, per GPU, device) and its hot set.
struct Workload {
    name: &'static str,
    batches: Vec<Vec<u32>>,
    hot: Vec<u64>,
    /// The hot rows' scores (degrees, access counts): the cache's
    /// automatic placement weighs them.
    scores: Vec<f64>,
}

/// One measured point.
#[derive(Clone, Copy)]
struct Point {
    rate: f64,
    stats: CacheStats,
    /// The cache's placement (`None`: no hot rows).
    placement: Option<Placement>,
}

/// Every variant's point for one (table, workload, budget, GPU count).
struct Group {
    table: String,
    workload: &'static str,
    pct: u64,
    gpus: usize,
    points: Vec<Point>,
}

impl Group {
    fn rate(&self, i: usize) -> f64 {
        self.points[i].rate
    }

    /// What this group is, for a verdict.
    fn what(&self) -> String {
        format!(
            "{}, {}, {}%, {} GPU(s)",
            self.table, self.workload, self.pct, self.gpus
        )
    }
}

pub(super) fn section(gpus: &[&Gpu], a: &CacheArgs, md: &mut String) -> Result<()> {
    let gpus: Vec<&Gpu> = gpus.iter().copied().take(a.max_gpus.max(1)).collect();
    let t0 = std::time::Instant::now();
    eprintln!("R-MAT graph: {} vertices, {} edges...", a.vertices, a.edges);
    let g = rmat(a.vertices, a.edges, SEED);
    let v = g.vertices();
    eprintln!("  built in {:.1} s", t0.elapsed().as_secs_f64());
    // GNN: seeds in random order, `batches` mini-batches.
    let mut r = SplitMix(SEED ^ 1);
    let mut order: Vec<u32> = (0..v as u32).collect();
    for i in (1..v).rev() {
        order.swap(i, r.below(i as u64 + 1) as usize);
    }
    let mut seen = vec![0u64; v.div_ceil(64)];
    let gnn: Vec<Vec<u32>> = order
        .chunks(SEEDS_PER_BATCH)
        .take(a.batches)
        .map(|s| sage_batch(&g, s, &FANOUTS, &mut r, &mut seen))
        .collect();
    let degrees: Vec<u64> = (0..v).map(|x| g.degree(x)).collect();
    // DLRM: Zipf ranks mapped to rows by a random permutation; the hot set
    // from the frequencies of a separate trace of the same stream.
    let zipf = Zipf::new(v, ZIPF_S);
    let mut rank_row: Vec<u32> = (0..v as u32).collect();
    for i in (1..v).rev() {
        rank_row.swap(i, r.below(i as u64 + 1) as usize);
    }
    let draw = |r: &mut SplitMix, n: usize| -> Vec<u32> {
        (0..n).map(|_| rank_row[zipf.sample(r)]).collect()
    };
    let dlrm: Vec<Vec<u32>> = (0..DLRM_BATCHES)
        .map(|_| draw(&mut r, DLRM_BATCH))
        .collect();
    let mut tr = SplitMix(SEED ^ 2);
    let trace: Vec<u64> = draw(&mut tr, 16 * v.min(1 << 20))
        .into_iter()
        .map(u64::from)
        .collect();
    let freq = ibp::gpu::access_counts(&trace, v);
    drop(g);
    let mean_gnn = gnn.iter().map(Vec::len).sum::<usize>() / gnn.len().max(1);
    eprintln!(
        "  sampled in {:.1} s: {} GNN mini-batches of {mean_gnn} unique vertices on average, {DLRM_BATCHES} DLRM batches of {DLRM_BATCH}",
        t0.elapsed().as_secs_f64(),
        gnn.len()
    );
    let workloads = [
        workload("GNN (GraphSAGE 15-10-5)", gnn, &degrees, v),
        workload("DLRM (Zipf 1.05)", dlrm, &freq, v),
    ];

    let _ = writeln!(
        md,
        "## Feature cache (IBP(C/M)): R-MAT graph, real feature rows\n\n\
         R-MAT (Graph500: a=0.57, b=0.19, c=0.19, d=0.05, seed {SEED:#x}) with {v} vertices and {} undirected edges; each vertex gets a random row of the table (the paper's *SU* tables). \
         GNN: GraphSAGE sampling, fanouts 15-10-5, {SEEDS_PER_BATCH} seeds a mini-batch in random order, {} mini-batches of {mean_gnn} unique vertices on average, each gathered in one launch. \
         DLRM: Zipf({ZIPF_S}) ids, {DLRM_BATCHES} batches of {DLRM_BATCH}. \
         Budget: bytes of device memory per GPU, as a share of the table's uncompressed bytes; hot set by degree (GNN) or by frequency in a separate trace (DLRM). \
         *GB/s*: decoded feature bytes landed in the output per second (CUDA events, median of 3 passes over all batches). *PCIe GB*: host bytes the misses read per pass (whole 128-byte lines). *× base*: against the uncompressed cache with uncompressed host rows at the same budget and GPU count. \
         *ideal ×*: the link-bound ideal, the baseline's PCIe bytes over the variant's (what the variant would gain if both were bound by the lines their misses read; — where it reads none). \
         Host rows of IBP(M) and IBP(C/M): *packed* (stored forms back to back: a row starts mid-line and shares its first and last lines with its neighbours) or *line-aligned* (fixed-stride with a length table: each row at the start of its L-byte slot, on a 128-byte line when L is a multiple of 128, so a row of s stored bytes costs ⌈s/128⌉ lines, never more than raw; host memory N·L bytes, as raw). \
         The slabs are packed in every variant. \
         Default: packed, the layout measured faster overall on the H200 (line-aligned rows read fewer lines but were slower); the targets are judged on it, and *Host layouts* below gives this run's measured ratio. \
         Decoder: `ibp_kernels::device::decode_slot`, one warp per row (each row's 16-byte pieces fetched, then decoded by the batch decoder's step). \
         With several GPUs {}, and *GB/s* is the aggregate; one GPU gathers every batch whole, the same total work. \
         *placement*: where the hot rows went across the GPUs' slabs (the cache's automatic choice: the hottest rows replicated in every slab, as many as `ibp::gpu::replicated_rows` predicts to read fastest from the hot rows' stored bytes, their scores (degrees, access counts) and the default read rates, the rest partitioned). \
         *float-coded cache* (bf16 table, one GPU): `ibp::gpu::FloatFeatureCache`, the scaled-up table float-coded whole, misses read zero-copy from its pinned payload; its budget pays for its index (12 bytes a row) as well as its slab, and its *PCIe GB* counts the misses' stored bytes, not lines; not judged.\n",
        a.edges,
        workloads[0].batches.len(),
        match a.spread {
            Spread::Alternate =>
                "the batches alternate between them (`--spread alternate`), each GPU gathering whole batches (hits from its own slab or the others' through peer access, misses from host rows)",
            Spread::Split =>
                "each mini-batch is spread over all of them (`--spread split`): its ids cut into one contiguous share a GPU of equal predicted time (`ibp::gpu::FeatureCache::shares`, from the cache's index and read rates), each GPU gathering its share (hits from its own slab or the others' through peer access, misses from host rows)",
        },
    );
    let _ = writeln!(
        md,
        "| table | workload | budget | variant | GPUs | GB/s | × base | ideal × | hit rate | PCIe GB | placement |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let mut groups = Vec::new();
    for (name, data, l) in super::real_tables()? {
        if a.only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        table(&gpus, &name, &data, l, v, &workloads, a, md, &mut groups)?;
    }
    let _ = writeln!(md, "\n### Host layouts\n");
    for line in layouts(&groups) {
        let _ = writeln!(md, "- {line}");
    }
    let _ = writeln!(md, "\n### Targets\n");
    for line in judge(&groups) {
        let _ = writeln!(md, "- {line}");
    }
    let _ = writeln!(md);
    eprintln!("cache section done in {:.0} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// A workload whose hot set is the `k` rows of highest `score`, with
/// their scores.
fn workload(name: &'static str, batches: Vec<Vec<u32>>, score: &[u64], k: usize) -> Workload {
    let hot = top_k_by_score(score, k);
    let scores = hot.iter().map(|&r| score[r as usize] as f64).collect();
    Workload {
        name,
        batches,
        hot,
        scores,
    }
}

/// A cell's placement, for the table: `—` without a cache.
fn placement_name(p: Option<Placement>, gpus: usize) -> String {
    match p {
        None => "—".into(),
        Some(_) if gpus == 1 => "one slab".into(),
        Some(Placement::Partition) => "partition".into(),
        Some(Placement::Replicate) => "replicate".into(),
        Some(Placement::Hybrid { replicated }) => format!("hybrid, {replicated} rows replicated"),
    }
}

/// The table's rows assigned to `v` vertices: compressed packed (stored
/// forms of the table's rows repeated), compressed fixed-stride (the same
/// stored forms, each at the start of its slot) and raw.
fn scaled_up(data: &[u8], l: usize, v: usize) -> Result<(Codebook, Packed, FixedStride, Packed)> {
    let rows = Rows::new(data, l)?;
    let cb = ibp::fit::fit(rows, &Default::default())?.codebook;
    let small = compress_packed(&cb, rows, &LayoutOptions::default())?;
    let mut r = SplitMix(SEED ^ 3);
    let pick: Vec<usize> = (0..v)
        .map(|_| r.below(rows.rows() as u64) as usize)
        .collect();
    let mut comp = Packed {
        row_bytes: l,
        rows: v,
        flags: vec![0; v.div_ceil(8)],
        offsets: Vec::with_capacity(v + 1),
        payload: Vec::new(),
    };
    comp.offsets.push(0);
    let mut slots = vec![0u8; v * l];
    for (i, &t) in pick.iter().enumerate() {
        let (a, b) = (small.offsets[t] as usize, small.offsets[t + 1] as usize);
        comp.payload.extend_from_slice(&small.payload[a..b]);
        comp.offsets.push(comp.payload.len() as u64);
        comp.flags[i / 8] |= (small.flags[t / 8] >> (t % 8) & 1) << (i % 8);
        slots[i * l..][..b - a].copy_from_slice(&small.payload[a..b]);
    }
    let fixed = FixedStride {
        row_bytes: l,
        rows: v,
        flags: comp.flags.clone(),
        slots,
    };
    let mut raw = Vec::with_capacity(v * l);
    for &t in &pick {
        raw.extend_from_slice(rows.row(t));
    }
    Ok((cb, comp, fixed, raw_packed(raw, l)?))
}

#[allow(clippy::too_many_arguments)]
fn table(
    gpus: &[&Gpu],
    name: &str,
    data: &[u8],
    l: usize,
    v: usize,
    workloads: &[Workload],
    a: &CacheArgs,
    md: &mut String,
    groups: &mut Vec<Group>,
) -> Result<()> {
    let t0 = std::time::Instant::now();
    eprintln!("{name}: scaling up to {v} rows...");
    let (cb, comp, fixed, raw) = scaled_up(data, l, v)?;
    let rows_of = |ids: &[u32]| -> Vec<u8> {
        // The expected rows, from the raw scaled-up table.
        ids.iter()
            .flat_map(|&t| raw.payload[t as usize * l..][..l].iter().copied())
            .collect()
    };
    let max_ids = workloads
        .iter()
        .flat_map(|w| w.batches.iter().map(Vec::len))
        .max()
        .unwrap_or(1);
    let mut lanes = Vec::new();
    let mut sets = Vec::new();
    for gpu in gpus {
        gpu.make_current()?;
        lanes.push(Lane {
            gpu,
            stream: Stream::new(StreamFlags::NON_BLOCKING, None).map_err(cuda("stream"))?,
            out: DeviceBuffer::zeroed(max_ids * l).map_err(cuda("output buffer"))?,
            status: DecodeStatus::new()?,
        });
        sets.push(Uploads {
            comp: GpuDataset::upload_packed(gpu, &cb, &comp.view(), Residency::Pinned)?,
            aligned: GpuDataset::upload_fixed(gpu, &cb, &fixed.view(), Residency::Pinned)?
                .with_length_table(&cb, &fixed.view())?,
            raw: GpuDataset::upload_packed(gpu, &cb, &raw.view(), Residency::Pinned)?,
        });
    }
    // The pinned copies hold the slots now.
    drop(fixed);
    eprintln!("  uploaded in {:.1} s", t0.elapsed().as_secs_f64());
    let total = (v * l) as u64;
    let saved = 1.0 - comp.payload.len() as f64 / total as f64;
    let table = format!("{name} ({:.1}% saved)", 100.0 * saved);
    // The float coding's cache beside them, on the bf16 table, one GPU.
    let fcoded = float::coded(name, data, &raw.payload, l)?;
    for w in workloads {
        let fids = match fcoded {
            Some(_) => float::ids(&lanes[0], w)?,
            None => Vec::new(),
        };
        let run = WorkloadRun {
            name,
            sets: &sets,
            w,
            ids: &ids_on_every_gpu(&lanes, w)?,
            expect: &rows_of,
            spread: a.spread,
            uniform: a.uniform,
        };
        let mut uncached = std::collections::HashMap::new();
        for &pct in &a.budgets {
            for n in 1..=lanes.len() {
                if n > 1 && n != lanes.len() {
                    continue;
                }
                let points = run.points(&mut lanes[..n], pct, total, &mut uncached)?;
                write_points(md, &table, w.name, pct, n, &points);
                if let (Some(fc), 1) = (&fcoded, n) {
                    let budget = total * pct / 100;
                    let p = float::measure(&mut lanes[0], fc, w, &fids, budget, &rows_of).map_err(
                        |e| {
                            Error::invalid(format!("{name} {} {pct}% {}: {e}", w.name, float::NAME))
                        },
                    )?;
                    float::write_row(md, &table, w.name, pct, p.as_ref(), points[BASELINE].rate);
                }
                groups.push(Group {
                    table: table.clone(),
                    workload: w.name,
                    pct,
                    gpus: n,
                    points,
                });
            }
        }
    }
    gpus[0].make_current()?;
    Ok(())
}

/// A workload's batches of ids on every GPU.
fn ids_on_every_gpu(lanes: &[Lane<'_>], w: &Workload) -> Result<Vec<Vec<DeviceBuffer<u32>>>> {
    let mut ids = Vec::new();
    for lane in lanes {
        lane.gpu.make_current()?;
        ids.push(
            w.batches
                .iter()
                .map(|b| DeviceBuffer::from_slice(b).map_err(cuda("ids")))
                .collect::<Result<_>>()?,
        );
    }
    Ok(ids)
}

/// One workload on one table, uploaded to every GPU, ready to measure.
struct WorkloadRun<'a> {
    /// The table's name (for errors).
    name: &'a str,
    sets: &'a [Uploads],
    w: &'a Workload,
    ids: &'a [Vec<DeviceBuffer<u32>>],
    /// The expected rows of some ids (from the raw table), to check each
    /// cache.
    expect: &'a dyn Fn(&[u32]) -> Vec<u8>,
    spread: Spread,
    /// [`CacheArgs::uniform`].
    uniform: Option<bool>,
}

impl WorkloadRun<'_> {
    /// Every variant's point on `lanes` with a cache of `pct`% of the
    /// table's `total` bytes. Without a cache the budget does not matter:
    /// those points are measured once per workload and GPU count, kept in
    /// `uncached`.
    fn points(
        &self,
        lanes: &mut [Lane<'_>],
        pct: u64,
        total: u64,
        uncached: &mut std::collections::HashMap<(usize, usize), Point>,
    ) -> Result<Vec<Point>> {
        let (w, n) = (self.w, lanes.len());
        let budget = total * pct / 100;
        let mut points: Vec<Point> = Vec::new();
        for (vi, var) in VARIANTS.iter().enumerate() {
            if !var.on
                && let Some(p) = uncached.get(&(vi, n))
            {
                points.push(*p);
                continue;
            }
            let (hot, budget) = if var.on {
                (&w.hot[..], budget)
            } else {
                (&[][..], 0)
            };
            let p = measure(
                lanes,
                self.sets,
                var,
                hot,
                budget,
                w,
                self.ids,
                self.expect,
                (self.spread, self.uniform),
            )
            .map_err(|e| {
                Error::invalid(format!("{} {} {pct}% {}: {e}", self.name, w.name, var.name))
            })?;
            if !var.on {
                uncached.insert((vi, n), p);
            }
            points.push(p);
        }
        Ok(points)
    }
}

/// The table's rows (and a line on stderr) for every variant's point of
/// one (workload, budget, GPU count), each against the baseline's.
fn write_points(
    md: &mut String,
    table: &str,
    workload: &str,
    pct: u64,
    n: usize,
    points: &[Point],
) {
    let base = points[BASELINE];
    for (p, var) in points.iter().zip(&VARIANTS) {
        let ratio = p.rate / base.rate;
        let ideal = if p.stats.host_bytes == 0 || base.stats.host_bytes == 0 {
            "—".to_string()
        } else {
            format!(
                "{:.2}",
                base.stats.host_bytes as f64 / p.stats.host_bytes as f64
            )
        };
        let _ = writeln!(
            md,
            "| {table} | {workload} | {pct}% | {} | {n} | {:.1} | {ratio:.2} | {ideal} | {:.3} | {:.2} | {} |",
            var.name,
            p.rate / 1e9,
            p.stats.hit_rate(),
            p.stats.host_bytes as f64 / 1e9,
            placement_name(p.placement, n)
        );
        eprintln!(
            "  {workload} {pct}% {} x{n}: {:.1} GB/s (x{ratio:.2}, ideal {ideal}), hit rate {:.3} (local {}, peer {}), {}",
            var.name,
            p.rate / 1e9,
            p.stats.hit_rate(),
            p.stats.local_hits,
            p.stats.peer_hits,
            placement_name(p.placement, n)
        );
    }
}

/// Build one variant's cache over `lanes`, check a batch, and time passes
/// over all batches, each spread over the GPUs in shares of equal
/// predicted time (`FeatureCache::shares`, `gather_shares`; one GPU
/// gathers every batch whole, the same total work).
#[allow(clippy::too_many_arguments)]
fn measure(
    lanes: &mut [Lane<'_>],
    sets: &[Uploads],
    var: &Variant,
    hot: &[u64],
    budget: u64,
    w: &Workload,
    ids: &[Vec<DeviceBuffer<u32>>],
    expect: &dyn Fn(&[u32]) -> Vec<u8>,
    (spread, uniform): (Spread, Option<bool>),
) -> Result<Point> {
    let gpus: Vec<&Gpu> = lanes.iter().map(|x| x.gpu).collect();
    let hosts: Vec<&GpuDataset> = sets[..lanes.len()]
        .iter()
        .map(|x| x.host(var.host))
        .collect();
    // Compressed slab rows from the variant's own host rows when they are
    // compressed (the slab is packed either way), else from the packed ones.
    let slab = match (var.slab_c, var.host) {
        (false, _) => &sets[0].raw,
        (true, Host::Raw) => &sets[0].comp,
        (true, h) => sets[0].host(h),
    };
    // The hot rows' scores: the automatic placement's rule weighs them.
    let mut opts = CacheOptions::new(budget).with_hot_scores(if hot.is_empty() {
        Vec::new()
    } else {
        w.scores.clone()
    });
    opts.uniform = uniform;
    let cache = FeatureCache::with_slab_rows(&gpus, &hosts, slab, hot, &opts)?;
    // Each batch's shares, cut on the host before the clock starts (a
    // sampler hands its ids over from the host too).
    let shares: Vec<Vec<std::ops::Range<usize>>> = w
        .batches
        .iter()
        .enumerate()
        .map(|(b, batch)| match spread {
            Spread::Split => cache.shares(hosts[0], batch),
            // The whole batch on GPU b mod n, nothing on the others.
            Spread::Alternate => Ok((0..lanes.len())
                .map(|i| {
                    if i == b % lanes.len() {
                        0..batch.len()
                    } else {
                        0..0
                    }
                })
                .collect()),
        })
        .collect::<Result<_>>()?;
    // Warm-up and check: batch 0, each GPU's share against the table.
    gather_batch(&cache, lanes, &hosts, ids, 0, &shares[0])?;
    for (i, lane) in lanes.iter_mut().enumerate() {
        lane.gpu.make_current()?;
        lane.stream.synchronize().map_err(cuda("warm-up"))?;
        lane.status.check_blocking()?;
        let s = &shares[0][i];
        let head = &w.batches[0][s.start..s.end.min(s.start + 2048)];
        if head.is_empty() {
            continue;
        }
        let want = expect(head);
        let got = ibp::gpu::copy_to_host_blocking(&lane.out.index(..want.len()))?;
        if got != want {
            return Err(Error::corrupt(format!(
                "GPU {}: gathered rows differ from the table",
                lane.gpu.ordinal()
            )));
        }
    }
    let mut stats = CacheStats::default();
    for (batch, cut) in w.batches.iter().zip(&shares) {
        for (i, share) in cut.iter().enumerate() {
            let ids64: Vec<u64> = batch[share.clone()].iter().map(|&t| t as u64).collect();
            let s = cache.stats(lanes[i].gpu, hosts[i], &ids64)?;
            stats.rows += s.rows;
            stats.local_hits += s.local_hits;
            stats.peer_hits += s.peer_hits;
            stats.host_bytes += s.host_bytes;
            stats.delivered_bytes += s.delivered_bytes;
        }
    }
    let mut times = Vec::new();
    for _ in 0..3 {
        let mut ev = Vec::new();
        for lane in lanes.iter() {
            lane.gpu.make_current()?;
            let a = Event::new(EventFlags::DEFAULT).map_err(cuda("event"))?;
            a.record(&lane.stream).map_err(cuda("event"))?;
            ev.push(a);
        }
        for (b, cut) in shares.iter().enumerate() {
            gather_batch(&cache, lanes, &hosts, ids, b, cut)?;
        }
        let mut worst = 0f64;
        for (i, lane) in lanes.iter_mut().enumerate() {
            lane.gpu.make_current()?;
            let e = Event::new(EventFlags::DEFAULT).map_err(cuda("event"))?;
            e.record(&lane.stream).map_err(cuda("event"))?;
            e.synchronize().map_err(cuda("timing"))?;
            worst = worst.max(e.elapsed_time_f32(&ev[i]).map_err(cuda("timing"))? as f64 / 1e3);
            lane.status.check_blocking()?;
        }
        times.push(worst);
    }
    times.sort_by(f64::total_cmp);
    Ok(Point {
        rate: stats.delivered_bytes as f64 / times[1],
        stats,
        placement: (!hot.is_empty()).then(|| cache.placement()),
    })
}

/// Enqueue batch `b` over `lanes`, lane `i` gathering `cut[i]`.
fn gather_batch(
    cache: &FeatureCache,
    lanes: &mut [Lane<'_>],
    hosts: &[&GpuDataset],
    ids: &[Vec<DeviceBuffer<u32>>],
    b: usize,
    cut: &[std::ops::Range<usize>],
) -> Result<()> {
    let mut shares: Vec<ShareLane<'_, u32>> = lanes
        .iter_mut()
        .enumerate()
        .map(|(i, lane)| ShareLane {
            gpu: lane.gpu,
            ds: hosts[i],
            ids: &ids[i][b],
            out: &mut lane.out,
            status: &lane.status,
            stream: &lane.stream,
        })
        .collect();
    cache.gather_shares(&mut shares, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scaled_up_table_decodes_to_its_raw_twin() {
        let l = 64;
        let mut r = SplitMix(4);
        let data: Vec<u8> = (0..50 * l)
            .map(|i| {
                let x = r.next() as u8;
                if i / l % 5 == 0 { x } else { x & 0x0f }
            })
            .collect();
        let (cb, comp, fixed, raw) = scaled_up(&data, l, 333).unwrap();
        assert_eq!(
            (comp.rows, raw.rows, raw.payload.len()),
            (333, 333, 333 * l)
        );
        let mut back = vec![0u8; 333 * l];
        ibp::layout::decompress_packed(&cb, &comp.view(), &mut back).unwrap();
        assert!(back == raw.payload);
        assert!(comp.payload.len() < raw.payload.len());
        // The fixed-stride twin holds the same stored forms, each at the
        // start of its slot.
        fixed.view().validate(&cb).unwrap();
        assert_eq!(fixed.flags, comp.flags);
        let mut back = vec![0u8; 333 * l];
        ibp::layout::decompress_fixed(&cb, &fixed.view(), &mut back).unwrap();
        assert!(back == raw.payload);
        // Every vertex holds one of the table's rows.
        for row in raw.payload.chunks(l) {
            assert!(data.chunks(l).any(|t| t == row));
        }
        // The raw twin is all raw: its flags are clear.
        assert!(raw.flags.iter().all(|&f| f == 0));
        let mut back = vec![0u8; 333 * l];
        ibp::layout::decompress_packed(&cb, &raw.view(), &mut back).unwrap();
        assert!(back == raw.payload);
    }

    /// A group whose variants run at `rates` (GB/s), in `VARIANTS` order.
    fn group(table: &str, pct: u64, gpus: usize, rates: [f64; 7]) -> Group {
        Group {
            table: table.into(),
            workload: "GNN (GraphSAGE 15-10-5)",
            pct,
            gpus,
            points: rates
                .iter()
                .map(|&r| Point {
                    rate: r,
                    stats: CacheStats {
                        host_bytes: (1000.0 / r) as u64,
                        ..Default::default()
                    },
                    placement: None,
                })
                .collect(),
        }
    }

    #[test]
    fn each_variant_is_judged_against_its_uncompressed_counterpart() {
        // IBP(M) below the baseline but above no cache; the packed IBP(C/M)
        // below the baseline.
        let g = group(
            "MiniLM bf16",
            1,
            1,
            [50.0, 54.0, 51.0, 56.0, 55.0, 53.0, 70.0],
        );
        let v = judge(std::slice::from_ref(&g));
        let has = |s: &str| v.iter().any(|x| x.contains(s));
        // The default host layout (packed) misses; the other is in brackets.
        assert!(
            v[0].starts_with("missed:") && v[0].contains("0.98×") && v[0].contains("1.30×"),
            "{v:?}"
        );
        assert!(has(
            "met: never slower than its uncompressed counterpart — IBP(M), packed host rows against no cache"
        ));
        assert!(has(
            "met: never slower than its uncompressed counterpart — IBP(M), line-aligned"
        ));
        assert!(has(
            "missed: never slower than its uncompressed counterpart — MiniLM bf16, GNN (GraphSAGE 15-10-5), 1%, 1 GPU(s): IBP(C/M), packed host rows 0.98× baseline"
        ));
        // The literal reading counts IBP(M) as slower than the baseline.
        assert!(has(
            "literal reading (every variant against the baseline, whatever it caches): IBP(M), packed host rows slower than the baseline in 1 of 1 groups (lowest 0.94×"
        ));
        assert!(!v.iter().any(|x| x.contains("GPUs ≥ 1.8×")));
        // Two GPUs against one, on the default layout.
        let two = group(
            "MiniLM bf16",
            1,
            2,
            [90.0, 100.0, 95.0, 100.0, 110.0, 100.0, 133.0],
        );
        let v = judge(&[g, two]);
        assert!(
            v.iter()
                .any(|x| x.starts_with("met: 2 GPUs ≥ 1.8× one") && x.contains("1.89×")),
            "{v:?}"
        );
        // Layouts: line-aligned faster here.
        let l = layouts(&[group("t", 5, 1, [1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 2.0])]);
        assert!(
            l[0].contains("IBP(M): 2.00×") && l[0].contains("packed reads 2.00× the PCIe bytes"),
            "{l:?}"
        );
        assert!(
            l[1].starts_with("measured: line-aligned host rows are faster overall (2.00×"),
            "{l:?}"
        );
    }
}
