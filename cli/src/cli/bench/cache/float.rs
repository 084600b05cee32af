//! The float coding's feature cache (`ibp::gpu::FloatFeatureCache`) beside
//! the IBP and uncompressed caches, on the bf16 table: the scaled-up table
//! float-coded whole (a table fitted on the original rows), the same ids,
//! hot sets and budgets, one GPU. Its budget pays for its index (12 bytes a
//! row) as well as its slab: where the index alone exceeds the budget the
//! row says so instead of a rate. Every configuration is checked byte for
//! byte on the workload's first batch before it is timed, as the other
//! variants are.

use std::fmt::Write as _;

use cust::event::{Event, EventFlags};
use cust::memory::DeviceBuffer;
use ibp::float_code::{FitOptions, FloatCoded, FloatType, compress, fit};
use ibp::gpu::{FloatCacheStats, FloatFeatureCache};
use ibp::{Error, Result, Rows};

use super::{Lane, Workload, cuda};

/// The variant's name in the table.
pub(super) const NAME: &str = "float-coded cache + host (FloatFeatureCache)";

/// The scaled-up table `raw` (rows of `l` bytes) float-coded, when the
/// table is bf16 (by its name); the code is fitted on the original rows
/// `small`, as the IBP variants' codebook is.
pub(super) fn coded(name: &str, small: &[u8], raw: &[u8], l: usize) -> Result<Option<FloatCoded>> {
    if !name.contains("bf16") {
        return Ok(None);
    }
    let table = fit(
        FloatType::Bf16,
        Rows::new(small, l)?,
        &FitOptions::default(),
    )?;
    Ok(Some(compress(&table, Rows::new(raw, l)?)?))
}

/// A measured float row: decoded GB/s and what the batches read.
pub(super) struct FloatPoint {
    pub rate: f64,
    pub stats: FloatCacheStats,
}

/// The cache of `w`'s hot rows in `budget` bytes on `lane`'s GPU, checked
/// on the first batch against `expect`, then timed as the other variants
/// are (median of 3 passes over every batch, CUDA events); `None` when the
/// budget does not hold the index.
pub(super) fn measure(
    lane: &mut Lane<'_>,
    coded: &FloatCoded,
    w: &Workload,
    ids: &[DeviceBuffer<u64>],
    budget: u64,
    expect: &dyn Fn(&[u32]) -> Vec<u8>,
) -> Result<Option<FloatPoint>> {
    lane.gpu.make_current()?;
    if budget < 12 * coded.rows() as u64 {
        return Ok(None);
    }
    let cache = FloatFeatureCache::new(lane.gpu, coded, &w.hot, budget)?;
    let pass = |lane: &mut Lane<'_>| -> Result<()> {
        for b in ids {
            cache.gather(lane.gpu, b, &mut lane.out, &lane.status, &lane.stream)?;
        }
        Ok(())
    };
    // Warm-up and check: the first batch (its first 2048 rows).
    cache.gather(lane.gpu, &ids[0], &mut lane.out, &lane.status, &lane.stream)?;
    lane.stream.synchronize().map_err(cuda("warm-up"))?;
    lane.status.check_blocking()?;
    let head = &w.batches[0][..w.batches[0].len().min(2048)];
    let want = expect(head);
    let got = ibp::gpu::copy_to_host_blocking(&lane.out.index(..want.len()))?;
    if got != want {
        return Err(Error::corrupt(
            "the float-coded cache's gathered rows differ from the table",
        ));
    }
    let mut stats = FloatCacheStats::default();
    for batch in &w.batches {
        let ids64: Vec<u64> = batch.iter().map(|&t| u64::from(t)).collect();
        let s = cache.stats(&ids64);
        stats.rows += s.rows;
        stats.hits += s.hits;
        stats.host_bytes += s.host_bytes;
        stats.delivered_bytes += s.delivered_bytes;
    }
    let mut times = Vec::new();
    for _ in 0..3 {
        let a = Event::new(EventFlags::DEFAULT).map_err(cuda("event"))?;
        a.record(&lane.stream).map_err(cuda("event"))?;
        pass(lane)?;
        let e = Event::new(EventFlags::DEFAULT).map_err(cuda("event"))?;
        e.record(&lane.stream).map_err(cuda("event"))?;
        e.synchronize().map_err(cuda("timing"))?;
        times.push(e.elapsed_time_f32(&a).map_err(cuda("timing"))? as f64 / 1e3);
        lane.status.check_blocking()?;
    }
    times.sort_by(f64::total_cmp);
    Ok(Some(FloatPoint {
        rate: stats.delivered_bytes as f64 / times[1],
        stats,
    }))
}

/// The float row of one (workload, budget) on one GPU, against the
/// baseline's rate `base` (GB/s as the table prints it: bytes per second).
pub(super) fn write_row(
    md: &mut String,
    table: &str,
    workload: &str,
    pct: u64,
    p: Option<&FloatPoint>,
    base: f64,
) {
    match p {
        Some(p) => {
            let ratio = p.rate / base;
            let _ = writeln!(
                md,
                "| {table} | {workload} | {pct}% | {NAME} | 1 | {:.1} | {ratio:.2} | — | {:.3} | {:.2} (stored bytes) | one slab |",
                p.rate / 1e9,
                p.stats.hit_rate(),
                p.stats.host_bytes as f64 / 1e9,
            );
            eprintln!(
                "  {workload} {pct}% {NAME} x1: {:.1} GB/s (x{ratio:.2}), hit rate {:.3}",
                p.rate / 1e9,
                p.stats.hit_rate()
            );
        }
        None => {
            let _ = writeln!(
                md,
                "| {table} | {workload} | {pct}% | {NAME} | 1 | — (its index, 12 B a row, exceeds the budget) | — | — | — | — | — |"
            );
            eprintln!("  {workload} {pct}% {NAME}: the index exceeds the budget");
        }
    }
}

/// A workload's batches as u64 ids on `lane`'s GPU (the float cache
/// gathers u64 ids).
pub(super) fn ids(lane: &Lane<'_>, w: &Workload) -> Result<Vec<DeviceBuffer<u64>>> {
    lane.gpu.make_current()?;
    w.batches
        .iter()
        .map(|b| {
            let v: Vec<u64> = b.iter().map(|&t| u64::from(t)).collect();
            DeviceBuffer::from_slice(&v).map_err(cuda("ids"))
        })
        .collect()
}
