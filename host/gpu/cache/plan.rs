//! Choosing what a [`super::FeatureCache`] holds, on the host: the hot set
//! (top-k by a score), where each hot row goes (which slab, which offset)
//! and the index words each GPU reads. Plain code, tested without a GPU.

use ibp_kernels::detail::cache::{Entry, MAX_SLABS, MAX_SLOT_BYTES, NOT_CACHED, pack};

use crate::error::{Error, Result};

/// The `k` rows with the highest `scores` (row `i` scores `scores[i]`),
/// highest first; ties go to the lower row number, so the order is
/// deterministic; scores that do not compare with themselves (NaN) rank
/// last. Use it with a graph's degrees (GNN features) or with
/// [`access_counts`] of a trace (embedding tables).
pub fn top_k_by_score<S: PartialOrd + Copy>(scores: &[S], k: usize) -> Vec<u64> {
    let mut rows: Vec<u64> = (0..scores.len() as u64).collect();
    use std::cmp::Ordering::{Equal, Greater, Less};
    let by = |a: &u64, b: &u64| {
        let (x, y) = (scores[*a as usize], scores[*b as usize]);
        let order = match (x.partial_cmp(&x).is_some(), y.partial_cmp(&y).is_some()) {
            (true, true) => y.partial_cmp(&x).unwrap_or(Equal),
            (true, false) => Less,
            (false, true) => Greater,
            (false, false) => Equal,
        };
        order.then(a.cmp(b))
    };
    let k = k.min(rows.len());
    if k == 0 {
        return Vec::new();
    }
    if k < rows.len() {
        rows.select_nth_unstable_by(k - 1, by);
        rows.truncate(k);
    }
    rows.sort_unstable_by(by);
    rows
}

/// How often each of `rows` rows occurs in `trace` (ids at or past `rows`
/// are ignored): the score for [`top_k_by_score`] of an access trace.
pub fn access_counts(trace: &[u64], rows: usize) -> Vec<u64> {
    let mut c = vec![0u64; rows];
    for &t in trace {
        if let Some(x) = c.get_mut(t as usize) {
            *x += 1;
        }
    }
    c
}

/// Where the hot rows go across the slabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Each row in one slab, the slabs taking turns down the hot list: the
    /// GPUs together hold N times the rows, and a GPU reads the others'
    /// rows through peer access.
    Partition,
    /// Every slab holds the same rows, the hottest that fit (the default
    /// when some GPU cannot reach another's memory: a row it cannot reach
    /// would be a miss).
    Replicate,
    /// Every slab holds the same `replicated` hottest rows (those of the
    /// first `replicated` cacheable rows of the hot list that fit, as
    /// [`Placement::Replicate`] places them), and the rest of each slab
    /// takes the following rows in turns, as [`Placement::Partition`]
    /// does. `replicated: 0` is `Partition`; `u64::MAX` is `Replicate`.
    /// With no placement given and every GPU reaching every other, the
    /// cache takes this with `replicated` from [`replicated_rows`].
    Hybrid {
        /// Hot rows held by every slab.
        replicated: u64,
    },
}

/// How fast a GPU reads a cached row's stored bytes from each place:
/// what [`replicated_rows`] weighs the placements by. Bytes a second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadRates {
    /// From its own slab (device memory).
    pub local: f64,
    /// From a peer GPU's slab (NVLink or PCIe peer access).
    pub peer: f64,
    /// From host memory, a miss (the dataset in pinned memory, over PCIe).
    pub host: f64,
}

/// [`ReadRates::local`] by default: the H200's device-to-device copy,
/// 4.2 TB/s counting bytes read plus written
/// (docs/results/nvidia-h200-baseline-6810b64.md), rounded down.
pub const LOCAL_READ_RATE: f64 = 4.0e12;

/// [`ReadRates::peer`] by default: stored bytes of a row over the extra
/// time a remote hit took against a local one, in the cache bench on
/// H200s over NVLink: 0.42 TB/s a GPU for Cora's 224-byte rows on 2 GPUs
/// (docs/results/nvidia-h200-cache.md, 5%), 0.14 TB/s for them and about
/// 0.33 TB/s for MiniLM f32's 1.3 KB rows on 4 GPUs, each GPU then read
/// by three (docs/results/nvidia-h200-x4-cache-2026-11-28.md, 5% and
/// 25%). Single rows read by one warp are latency-bound, far below the
/// link's bulk rate.
pub const PEER_READ_RATE: f64 = 0.25e12;

/// [`ReadRates::host`] by default: PCIe Gen5 x16 from pinned memory, a
/// 55.5 GB/s copy and 51.3 GB/s zero-copy kernel read on the H200 machine
/// (docs/results/nvidia-h200-x4-cache-2026-11-28.md, its header).
pub const HOST_READ_RATE: f64 = 50.0e9;

impl Default for ReadRates {
    fn default() -> Self {
        Self {
            local: LOCAL_READ_RATE,
            peer: PEER_READ_RATE,
            host: HOST_READ_RATE,
        }
    }
}

/// How many of the hottest rows every slab should hold, the rest of the
/// budgets partitioned ([`Placement::Hybrid`]): the `R` that minimises the
/// predicted read time per access,
/// `Σ score(row) × bytes(row) / rate(row)`, over `rows` (the cacheable
/// hot rows, hottest first, as `(stored bytes, score)`; a score is an
/// access frequency proxy, e.g. a degree or an access count), `gpus`
/// slabs of `budget` bytes each and `rates`:
/// - the first `R` rows, replicated, are read locally (`rates.local`);
/// - the following rows, as many as the `gpus · (budget − their bytes)`
///   left over hold (the last one in part), are partitioned: a GPU finds `1/gpus` of them in its
///   own slab and the rest in its peers', so each byte costs
///   `1/(gpus·local) + (gpus − 1)/(gpus·peer)` seconds (times add, not
///   rates);
/// - the rest are misses, read from host memory (`rates.host`).
///
/// Never more rows than one budget holds. Among equal predictions the
/// smallest `R` (more distinct rows cached). 0 for one GPU or no rows.
///
/// Q: why a rule and not a share of the budget?
/// A: the trade depends on the skew and on the rates. A row replicated
/// saves its peer reads, `(gpus − 1)/gpus` of its accesses, and costs
/// `gpus − 1` copies' room, which partitioned colder rows would have used
/// to avoid host reads: worth it when the row is hot enough against the
/// coldest rows it displaces. With peer reads as slow as host reads every
/// row that fits is replicated; with peer reads as fast as local ones
/// none is.
pub fn replicated_rows(rows: &[(u64, f64)], budget: u64, gpus: usize, rates: &ReadRates) -> u64 {
    if gpus <= 1 || rows.is_empty() {
        return 0;
    }
    let g = gpus as f64;
    let (t_local, t_peer, t_host) = (1.0 / rates.local, 1.0 / rates.peer, 1.0 / rates.host);
    let t_part = t_local / g + t_peer * (g - 1.0) / g;
    // Prefix sums of bytes and of score × bytes.
    let mut bytes = Vec::with_capacity(rows.len() + 1);
    let mut weight = Vec::with_capacity(rows.len() + 1);
    let (mut b, mut w) = (0u64, 0f64);
    bytes.push(0);
    weight.push(0.0);
    for &(n, score) in rows {
        b = b.saturating_add(n);
        // A score that is not a number, or below 0, weighs nothing.
        w += if score > 0.0 { score * n as f64 } else { 0.0 };
        bytes.push(b);
        weight.push(w);
    }
    let total = w;
    let (mut best, mut best_r) = (f64::INFINITY, 0usize);
    for r in 0..=rows.len() {
        if bytes[r] > budget {
            break;
        }
        // The partitioned rows: as many as the room left in all slabs
        // holds, the first that does not fit counted for the share that
        // does (the fluid estimate of `place`'s turns, which fill the
        // gaps with later rows).
        let room = (gpus as u64).saturating_mul(budget - bytes[r]);
        let limit = bytes[r].saturating_add(room);
        let p = (bytes.partition_point(|&x| x <= limit) - 1).max(r);
        let mut part = weight[p];
        if p < rows.len() {
            let share = (limit - bytes[p]) as f64 / rows[p].0.max(1) as f64;
            part += share.min(1.0) * (weight[p + 1] - weight[p]);
        }
        let cost = weight[r] * t_local + (part - weight[r]) * t_part + (total - part) * t_host;
        // Q: why a tolerance? A: sums over millions of rows round; a
        // difference below it is a tie, which goes to the smaller R.
        if cost < best * (1.0 - 1e-9) {
            best = cost;
            best_r = r;
        }
    }
    best_r as u64
}

/// One contiguous share of `costs` (the predicted time of each id of a
/// mini-batch, in batch order) per GPU, `gpus` shares (at least one) that
/// cover the batch in order, each ending where the running total of costs
/// first reaches its part, `k/gpus` of the whole: the shares of
/// [`super::FeatureCache::gather_shares`]. Equal costs give counts within
/// one of each other; a cost that is not a number or below 0 counts 0.
///
/// Q: why cut by predicted time and not by count?
/// A: a mini-batch is not shuffled: a GraphSAGE batch lists its seeds,
/// then each hop's new vertices, and the early hops reach the
/// high-degree (cached) vertices first. A miss costs its host lines over
/// PCIe (about 50 GB/s) where a hit costs its stored bytes from device
/// memory (about 4 TB/s), so equal counts would give the share with the
/// most misses many times the work of the others, and the batch would
/// wait for it. Contiguous shares keep each GPU's ids one slice of the
/// batch, so no copy of ids is needed.
pub fn balanced_shares(costs: &[f64], gpus: usize) -> Vec<std::ops::Range<usize>> {
    let gpus = gpus.max(1);
    let c = |x: f64| if x > 0.0 { x } else { 0.0 };
    let total: f64 = costs.iter().map(|&x| c(x)).sum();
    let mut shares = Vec::with_capacity(gpus);
    let (mut start, mut i, mut run) = (0usize, 0usize, 0f64);
    for k in 1..gpus {
        let target = total * k as f64 / gpus as f64;
        if total > 0.0 {
            // Take ids while the share stays at or below its target, then
            // the next one too when that brings the total nearer to it.
            while i < costs.len() && run + c(costs[i]) <= target {
                run += c(costs[i]);
                i += 1;
            }
            if i < costs.len() && (run + c(costs[i]) - target) < (target - run) {
                run += c(costs[i]);
                i += 1;
            }
        } else {
            // Nothing predicted: equal counts.
            i = costs.len() * k / gpus;
        }
        shares.push(start..i);
        start = i;
    }
    shares.push(start..costs.len());
    shares
}

/// One slab's rows, in slab order: `(row, offset)`.
pub(crate) type SlabRows = Vec<(u64, u64)>;

/// The rows of `hot` a cache can hold, in hot order: each row once, below
/// `rows`, with a stored length (`stored(row)`, `None`: not cacheable) of
/// at most [`MAX_SLOT_BYTES`]; as `(row, stored bytes, place in hot)`.
pub(crate) fn cacheable(
    hot: &[u64],
    rows: u64,
    stored: impl Fn(u64) -> Option<u64>,
) -> Vec<(u64, u64, usize)> {
    let mut placed = vec![false; rows as usize];
    let mut out = Vec::with_capacity(hot.len());
    for (i, &row) in hot.iter().enumerate() {
        match placed.get_mut(row as usize) {
            Some(p) if !*p => *p = true,
            _ => continue,
        }
        if let Some(n) = stored(row).filter(|&n| n <= MAX_SLOT_BYTES) {
            out.push((row, n, i));
        }
    }
    out
}

/// Lay out `hot` (hottest first; rows below `rows`) in `slabs` slabs of
/// `budget` bytes each. `stored(row)` is the row's stored length (`None`:
/// the row cannot be cached). A row that does not fit where its turn puts
/// it goes to the next slab with room, or is left out; later, shorter rows
/// may still fit. A row named twice is placed once.
///
/// Errors when the hot set is not empty and not even one of its rows fits
/// (a budget smaller than any row), or on more than [`MAX_SLABS`] slabs.
pub(crate) fn place(
    hot: &[u64],
    rows: u64,
    stored: impl Fn(u64) -> Option<u64>,
    slabs: usize,
    budget: u64,
    how: Placement,
) -> Result<Vec<SlabRows>> {
    if slabs == 0 || slabs > MAX_SLABS {
        return Err(Error::invalid(format!(
            "a cache has 1 to {MAX_SLABS} slabs (one per GPU), not {slabs}"
        )));
    }
    let mut out = vec![Vec::new(); slabs];
    let mut used = vec![0u64; slabs];
    let mut smallest = u64::MAX;
    let mut turn = 0usize;
    let replicated = match how {
        Placement::Partition => 0,
        Placement::Replicate => u64::MAX,
        Placement::Hybrid { replicated } => replicated,
    };
    for (k, (row, n, _)) in cacheable(hot, rows, stored).into_iter().enumerate() {
        smallest = smallest.min(n);
        if (k as u64) < replicated {
            // Every slab has the same layout so far: slab 0 decides.
            if used[0] + n <= budget {
                for s in out.iter_mut() {
                    s.push((row, used[0]));
                }
                for u in used.iter_mut() {
                    *u += n;
                }
            }
        } else if let Some(s) = (0..slabs)
            .map(|d| (turn + d) % slabs)
            .find(|&s| used[s] + n <= budget)
        {
            out[s].push((row, used[s]));
            used[s] += n;
            turn = s + 1;
        }
    }
    if out.iter().all(|s| s.is_empty()) && smallest != u64::MAX {
        return Err(Error::invalid(format!(
            "a cache budget of {budget} bytes per GPU holds none of the hot rows (the smallest is stored in {smallest} bytes); give it at least that"
        )));
    }
    Ok(out)
}

/// The index one GPU reads: for each of `rows` rows, the word of its copy
/// in the first slab of `order` that holds it (the GPU's own slab first,
/// then the peers it reaches), or [`NOT_CACHED`].
pub(crate) fn index_words(
    rows: u64,
    slabs: &[SlabRows],
    order: &[usize],
    encoded: impl Fn(u64) -> bool,
    stored: impl Fn(u64) -> Option<u64>,
) -> Result<Vec<u64>> {
    let mut w = vec![NOT_CACHED; rows as usize];
    for &s in order.iter().rev() {
        for &(row, offset) in &slabs[s] {
            let len = stored(row).unwrap_or(0);
            if len == 0 {
                // Q: why leave it uncached? A: no row is stored in 0 bytes
                // (a raw row is its L ≥ 1 bytes, an encoded one holds its
                // participation bits), so the dataset is damaged there, and
                // the index cannot name an empty copy. Uncached, the row is
                // decoded from host memory when gathered, which reports it
                // corrupt like every other path (found by tests/gpu_fuzz.rs:
                // the cache used to refuse the whole dataset).
                continue;
            }
            let e = Entry {
                slab: s as u32,
                offset,
                len: len as u32,
                encoded: encoded(row),
            };
            w[row as usize] = pack(e).ok_or_else(|| {
                Error::invalid(format!(
                    "row {row} ({len} stored bytes at offset {offset}) does not fit an index word"
                ))
            })?;
        }
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ibp_kernels::detail::cache::unpack;

    #[test]
    fn top_k_takes_the_highest_scores_ties_to_the_lower_row() {
        let s = [3u64, 9, 1, 9, 0, 5, 3];
        assert_eq!(top_k_by_score(&s, 3), vec![1, 3, 5]);
        assert_eq!(top_k_by_score(&s, 5), vec![1, 3, 5, 0, 6]);
        assert_eq!(top_k_by_score(&s, 100).len(), 7);
        assert!(top_k_by_score(&s, 0).is_empty());
        let f = [0.5f64, 2.0, f64::NAN, 1.0];
        assert_eq!(top_k_by_score(&f, 2), vec![1, 3]);
        let c = access_counts(&[4, 1, 4, 4, 9, 1], 5);
        assert_eq!(c, vec![0, 2, 0, 0, 3]);
        assert_eq!(top_k_by_score(&c, 2), vec![4, 1]);
    }

    #[test]
    fn rows_are_placed_back_to_back_within_the_budget() {
        let len = |r: u64| Some(10 + r);
        let hot = [5u64, 0, 7, 2, 30, 1];
        // One slab of 40 bytes: 15 + 10 fit, 17 does not, 12 does, then
        // 40 cannot and 11 does not fit the 3 left.
        let p = place(&hot, 40, len, 1, 40, Placement::Partition).unwrap();
        assert_eq!(p, vec![vec![(5, 0), (0, 15), (2, 25)]]);
        // Two slabs take turns.
        let p = place(&hot, 40, len, 2, 40, Placement::Partition).unwrap();
        assert_eq!(p[0], vec![(5, 0), (7, 15)]);
        assert_eq!(p[1], vec![(0, 0), (2, 10), (1, 22)]);
        for s in &p {
            let end = s.last().map_or(0, |&(r, o)| o + len(r).unwrap());
            assert!(end <= 40);
        }
        // Replicated: the same rows everywhere.
        let p = place(&hot, 40, len, 3, 40, Placement::Replicate).unwrap();
        assert!(p.iter().all(|s| *s == p[0]));
        assert_eq!(p[0], vec![(5, 0), (0, 15), (2, 25)]);
        // Rows that cannot be cached are skipped.
        let p = place(
            &hot,
            40,
            |r| (r != 5).then_some(10),
            1,
            25,
            Placement::Partition,
        )
        .unwrap();
        assert_eq!(p, vec![vec![(0, 0), (7, 10)]]);
        // A row named twice is placed once.
        let p = place(&[3, 3, 4], 5, |_| Some(10), 1, 100, Placement::Partition).unwrap();
        assert_eq!(p, vec![vec![(3, 0), (4, 10)]]);
    }

    #[test]
    fn shares_cover_the_batch_in_order_and_balance_predicted_time() {
        let cover = |s: &[std::ops::Range<usize>], n: usize| {
            assert_eq!(s.first().map(|r| r.start), Some(0));
            assert_eq!(s.last().map(|r| r.end), Some(n));
            assert!(s.windows(2).all(|w| w[0].end == w[1].start));
        };
        // Equal costs: counts within one.
        for (n, g) in [(10, 4), (7, 3), (1000, 4), (3, 4), (0, 2), (5, 1)] {
            let s = balanced_shares(&vec![1.0; n], g);
            assert_eq!(s.len(), g.max(1));
            cover(&s, n);
            let (lo, hi) = (
                s.iter().map(|r| r.len()).min().unwrap(),
                s.iter().map(|r| r.len()).max().unwrap(),
            );
            assert!(hi - lo <= 1, "{n} over {g}: {s:?}");
        }
        // A batch whose first half is cheap hits and second half costly
        // misses (80 times a hit): each share gets about a quarter of the
        // time, so the first share holds many more ids.
        let costs: Vec<f64> = (0..1000)
            .map(|i| if i < 500 { 1.0 } else { 80.0 })
            .collect();
        let s = balanced_shares(&costs, 4);
        cover(&s, 1000);
        let total: f64 = costs.iter().sum();
        for r in &s {
            let t: f64 = costs[r.clone()].iter().sum();
            assert!((t - total / 4.0).abs() <= 80.0, "{s:?}");
        }
        assert!(s[0].len() > 500, "{s:?}");
        // No costs at all (or nonsense): equal counts.
        let s = balanced_shares(&[0.0, f64::NAN, -1.0, 0.0], 2);
        assert_eq!(s, vec![0..2, 2..4]);
        // Zero GPUs is one share.
        assert_eq!(balanced_shares(&[1.0, 2.0], 0), vec![0..2]);
    }

    /// 300 rows of 10..=49 bytes, scores falling as 1/(i + 1)^0.8.
    fn skewed() -> Vec<(u64, f64)> {
        (0..300u64)
            .map(|i| (10 + (i * 7) % 40, 1e4 / ((i + 1) as f64).powf(0.8)))
            .collect()
    }

    /// The most leading rows of `rows` one budget holds.
    fn fit_in_one(rows: &[(u64, f64)], budget: u64) -> u64 {
        let mut b = 0;
        rows.iter()
            .take_while(|&&(n, _)| {
                b += n;
                b <= budget
            })
            .count() as u64
    }

    #[test]
    fn the_rule_replicates_all_that_fits_when_peers_are_as_slow_as_the_host() {
        let rows = skewed();
        for gpus in [2, 4, 8] {
            for budget in [30, 500, 2000, 9000] {
                let host = 50e9;
                let r = ReadRates {
                    local: 4e12,
                    peer: host,
                    host,
                };
                let want = fit_in_one(&rows, budget);
                assert_eq!(
                    replicated_rows(&rows, budget, gpus, &r),
                    want,
                    "{gpus} GPUs, budget {budget}"
                );
                // Peers as fast as the GPU's own memory: nothing replicated.
                let r = ReadRates { peer: 4e12, ..r };
                assert_eq!(replicated_rows(&rows, budget, gpus, &r), 0);
            }
        }
        // One GPU, or no rows: nothing to replicate.
        assert_eq!(replicated_rows(&rows, 500, 1, &ReadRates::default()), 0);
        assert_eq!(replicated_rows(&[], 500, 4, &ReadRates::default()), 0);
        // Everything fits in one budget: replicated whole, whatever the
        // peers' speed below the GPU's own.
        let all: u64 = rows.iter().map(|r| r.0).sum();
        let r = ReadRates::default();
        assert_eq!(replicated_rows(&rows, all, 4, &r), rows.len() as u64);
    }

    #[test]
    fn the_rule_replicates_more_as_peer_reads_slow_and_never_past_the_budget() {
        let rows = skewed();
        for gpus in [2, 4] {
            for budget in [200, 1000, 3000] {
                let mut last = 0;
                // Peer rates from local (4 TB/s) down to host (50 GB/s).
                for k in 0..=40 {
                    let peer = 4e12 * (50e9f64 / 4e12).powf(k as f64 / 40.0);
                    let r = ReadRates {
                        local: 4e12,
                        peer,
                        host: 50e9,
                    };
                    let got = replicated_rows(&rows, budget, gpus, &r);
                    assert!(got >= last, "{gpus} GPUs, budget {budget}, peer {peer:e}");
                    let bytes: u64 = rows[..got as usize].iter().map(|r| r.0).sum();
                    assert!(bytes <= budget);
                    last = got;
                }
                assert_eq!(last, fit_in_one(&rows, budget));
            }
        }
        // The defaults fall in between on a skewed list.
        let r = replicated_rows(&rows, 1000, 4, &ReadRates::default());
        assert!(r > 0 && r < fit_in_one(&rows, 1000), "{r}");
    }

    #[test]
    fn a_hybrid_places_its_replicas_in_every_slab_and_the_rest_once() {
        let len = |r: u64| Some(10 + r % 7);
        let hot: Vec<u64> = (0..60).rev().collect();
        let budget = 120;
        for (slabs, replicated) in [(2, 3), (3, 5), (4, 0), (4, 8), (2, 100)] {
            let how = Placement::Hybrid { replicated };
            let p = place(&hot, 60, len, slabs, budget, how).unwrap();
            let cand = cacheable(&hot, 60, len);
            // The first `replicated` rows that fit, at the same offsets in
            // every slab, first.
            let mut used = 0;
            let mut reps = Vec::new();
            for &(row, n, _) in cand.iter().take(replicated as usize) {
                if used + n <= budget {
                    reps.push((row, used));
                    used += n;
                }
            }
            for s in &p {
                assert_eq!(s[..reps.len()], reps[..], "{slabs} slabs, {replicated}");
                // Each row at most once a slab, within the budget.
                let mut seen = std::collections::HashSet::new();
                assert!(s.iter().all(|&(r, _)| seen.insert(r)));
                let end = s
                    .iter()
                    .map(|&(r, o)| o + len(r).unwrap())
                    .max()
                    .unwrap_or(0);
                assert!(end <= budget);
            }
            // Every other row in one slab at most.
            let mut count = std::collections::HashMap::new();
            for s in &p {
                for &(r, _) in &s[reps.len()..] {
                    *count.entry(r).or_insert(0) += 1;
                    assert!(!reps.iter().any(|&(x, _)| x == r));
                }
            }
            assert!(count.values().all(|&c| c == 1));
            // Replicated rows are local for every GPU; partitioned ones in
            // exactly one slab.
            for g in 0..slabs {
                let order: Vec<usize> = std::iter::once(g)
                    .chain((0..slabs).filter(|&j| j != g))
                    .collect();
                let w = index_words(60, &p, &order, |_| true, len).unwrap();
                for &(r, _) in &reps {
                    assert_eq!(unpack(w[r as usize]).unwrap().slab as usize, g);
                }
                for &r in count.keys() {
                    let e = unpack(w[r as usize]).unwrap();
                    assert!(p[e.slab as usize].iter().any(|&(x, _)| x == r));
                }
            }
        }
        // The ends: no replicas is the partition, all is the replication.
        let a = place(
            &hot,
            60,
            len,
            3,
            budget,
            Placement::Hybrid { replicated: 0 },
        );
        let b = place(&hot, 60, len, 3, budget, Placement::Partition);
        assert_eq!(a.unwrap(), b.unwrap());
        let a = place(
            &hot,
            60,
            len,
            3,
            budget,
            Placement::Hybrid {
                replicated: u64::MAX,
            },
        );
        let b = place(&hot, 60, len, 3, budget, Placement::Replicate);
        assert_eq!(a.unwrap(), b.unwrap());
    }

    #[test]
    fn a_budget_below_every_hot_row_is_an_error_and_no_hot_set_is_not() {
        let e = place(&[1, 2], 3, |_| Some(100), 1, 99, Placement::Partition).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(e.message().contains("100 bytes"), "{}", e.message());
        assert_eq!(
            place(&[], 3, |_| Some(100), 2, 0, Placement::Partition).unwrap(),
            vec![vec![], vec![]]
        );
        assert!(place(&[1], 3, |_| Some(1), 9, 10, Placement::Partition).is_err());
        assert!(place(&[1], 3, |_| Some(1), 0, 10, Placement::Partition).is_err());
    }

    #[test]
    fn each_gpu_indexes_its_own_copy_first_then_the_peers_it_reaches() {
        let len = |r: u64| Some(10 + r);
        let enc = |r: u64| r.is_multiple_of(2);
        let slabs = vec![vec![(0u64, 0u64), (3, 10)], vec![(3, 0), (4, 13)]];
        let w = index_words(6, &slabs, &[1, 0], enc, len).unwrap();
        let e = |r: usize| unpack(w[r]);
        assert_eq!(
            e(3),
            Some(Entry {
                slab: 1,
                offset: 0,
                len: 13,
                encoded: false
            })
        );
        assert_eq!(e(0).unwrap().slab, 0);
        assert_eq!(
            e(4),
            Some(Entry {
                slab: 1,
                offset: 13,
                len: 14,
                encoded: true
            })
        );
        assert_eq!(w[1], NOT_CACHED);
        assert_eq!(w[5], NOT_CACHED);
        // A GPU that reaches only its own slab.
        let w = index_words(6, &slabs, &[0], enc, len).unwrap();
        assert_eq!(w[4], NOT_CACHED);
        assert_eq!(unpack(w[3]).unwrap().slab, 0);
    }

    #[test]
    fn a_row_stored_in_no_bytes_is_left_uncached_not_refused() {
        // A damaged dataset's row of 0 stored bytes: the index cannot name
        // it, and the other rows are still cached.
        let slabs = vec![vec![(0u64, 0u64), (1, 10), (2, 10)]];
        let len = |r: u64| Some([10u64, 0, 7][r as usize]);
        let w = index_words(3, &slabs, &[0], |_| true, len).unwrap();
        assert_eq!(w[1], NOT_CACHED);
        assert_eq!(unpack(w[0]).unwrap().len, 10);
        assert_eq!(unpack(w[2]).unwrap().offset, 10);
    }
}
