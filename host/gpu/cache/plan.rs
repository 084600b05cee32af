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
    /// rows through peer access (the default when every GPU reaches every
    /// other).
    Partition,
    /// Every slab holds the same rows, the hottest that fit (the default
    /// when some GPU cannot reach another's memory: a row it cannot reach
    /// would be a miss).
    Replicate,
}

/// One slab's rows, in slab order: `(row, offset)`.
pub(crate) type SlabRows = Vec<(u64, u64)>;

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
    let mut placed = vec![false; rows as usize];
    for &row in hot {
        match placed.get_mut(row as usize) {
            Some(p) if !*p => *p = true,
            _ => continue,
        }
        let Some(n) = stored(row).filter(|&n| n <= MAX_SLOT_BYTES) else {
            continue;
        };
        smallest = smallest.min(n);
        match how {
            Placement::Replicate => {
                // Every slab has the same layout: slab 0 decides.
                if used[0] + n <= budget {
                    for s in out.iter_mut() {
                        s.push((row, used[0]));
                    }
                    for u in used.iter_mut() {
                        *u += n;
                    }
                }
            }
            Placement::Partition => {
                if let Some(s) = (0..slabs)
                    .map(|d| (turn + d) % slabs)
                    .find(|&s| used[s] + n <= budget)
                {
                    out[s].push((row, used[s]));
                    used[s] += n;
                    turn = s + 1;
                }
            }
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
