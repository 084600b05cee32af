//! k-means over tensors with Hamming distance on their bit patterns (the
//! paper's clustered compression, §"Clustered Compression"): rows are bit
//! vectors, the distance of two rows is the number of bits in which they
//! differ, and the centroid of a cluster is the per-bit majority of its rows
//! (the point that minimises the summed Hamming distance to them).
//!
//! Deterministic: seeding is k-means++ (squared Hamming distance) driven by
//! a seeded SplitMix64, ties go to the lower index, and the result depends
//! only on the rows and the options, not on the number of threads.
#![forbid(unsafe_code)]

use rayon::prelude::*;

use crate::dataset::Rows;
use crate::error::{Error, Result};

/// Rows as little-endian u64 words, `words` per row, the last word of each
/// row zero-padded.
#[derive(Clone, Debug)]
pub(crate) struct BitRows {
    words: usize,
    data: Vec<u64>,
}

impl BitRows {
    /// Rows `index(0), …, index(n − 1)` of `rows` as bit vectors.
    pub(crate) fn gather(rows: Rows<'_>, n: usize, index: impl Fn(usize) -> usize) -> Self {
        let l = rows.row_bytes();
        let words = l.div_ceil(8);
        let mut data = vec![0u64; n * words];
        for (i, dst) in data.chunks_mut(words.max(1)).enumerate().take(n) {
            let row = rows.row(index(i));
            for (q, w) in dst.iter_mut().enumerate() {
                *w = super::choose::le_word(row, q);
            }
        }
        Self { words, data }
    }

    /// Number of rows.
    pub(crate) fn len(&self) -> usize {
        self.data.len().checked_div(self.words).unwrap_or(0)
    }

    /// Row `i`'s words.
    pub(crate) fn row(&self, i: usize) -> &[u64] {
        &self.data[i * self.words..(i + 1) * self.words]
    }

    /// Words per row.
    pub(crate) fn words(&self) -> usize {
        self.words
    }
}

/// Hamming distance of two equally long word slices.
#[inline(always)]
pub(crate) fn hamming(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// Hamming distance of `a` and `b`, or some value `≥ bound` once the
/// distance is known to reach `bound`.
///
/// Q: why give up early? A: assignment compares a row with every centroid
/// and keeps the nearest; starting from the row's previous centroid, most
/// other centroids exceed that distance within the first blocks of words,
/// which cuts the cost of large `k` several times on real data.
#[inline(always)]
fn hamming_bounded(a: &[u64], b: &[u64], bound: u32) -> u32 {
    let mut d = 0;
    for (x, y) in a.chunks(8).zip(b.chunks(8)) {
        d += hamming(x, y);
        if d >= bound {
            return d;
        }
    }
    d
}

/// Index and distance of the centroid nearest to `row` among `centroids`
/// (`words` per centroid), trying `first` before the others; ties go to the
/// lowest index.
pub(crate) fn nearest(row: &[u64], centroids: &[u64], words: usize, first: usize) -> (usize, u32) {
    let k = centroids.len().checked_div(words).unwrap_or(0);
    if k == 0 || words == 0 {
        return (0, 0);
    }
    let first = first.min(k - 1);
    let mut best = (first, hamming(row, &centroids[first * words..][..words]));
    for c in 0..k {
        if c == first || best.1 == 0 && c > best.0 {
            continue;
        }
        // Strictly smaller wins; an equal distance wins only at a lower
        // index, so the result does not depend on `first`.
        let bound = best.1 + u32::from(c < best.0);
        let d = hamming_bounded(row, &centroids[c * words..][..words], bound);
        if d < best.1 || (d == best.1 && c < best.0) {
            best = (c, d);
        }
    }
    best
}

/// Options of the k-means that [`crate::cluster::fit_clusters`] runs over bit
/// patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KMeansOptions {
    /// Assignment/update rounds at most (the loop stops early when no
    /// assignment changes).
    pub max_iterations: u32,
    /// Seed of the k-means++ seeding.
    pub seed: u64,
}

impl Default for KMeansOptions {
    fn default() -> Self {
        Self {
            max_iterations: 10,
            seed: 0x0001_b9c1,
        }
    }
}

impl KMeansOptions {
    /// Run at most this many rounds (at least one).
    pub fn with_max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = n;
        self
    }

    /// Seed the seeding with this.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// The result of [`kmeans`]: `k` non-empty clusters.
#[derive(Clone, Debug)]
pub(crate) struct Clustering {
    /// Centroids, `words` u64 each.
    pub centroids: Vec<u64>,
    /// Cluster of each row, `< k`.
    pub assignment: Vec<u32>,
}

impl Clustering {
    /// Number of clusters.
    pub(crate) fn k(&self, words: usize) -> usize {
        self.centroids.len().checked_div(words).unwrap_or(1)
    }
}

/// SplitMix64: a tiny, seeded, portable generator.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`, `n ≥ 1` (128-bit multiply, bias below 2^-64 n).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// Cluster `rows` into at most `k` clusters. Fewer come back when the rows
/// have fewer than `k` distinct bit patterns; every returned cluster is
/// non-empty.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] for `k = 0` or no rows.
pub(crate) fn kmeans(rows: &BitRows, k: usize, opts: &KMeansOptions) -> Result<Clustering> {
    let n = rows.len();
    let w = rows.words();
    if k == 0 {
        return Err(Error::invalid(
            "k-means with 0 clusters; ask for at least 1",
        ));
    }
    if n == 0 {
        return Err(Error::invalid("k-means over 0 rows; give at least one"));
    }
    let mut centroids = seed(rows, k.min(n), opts.seed);
    let mut assignment = vec![0u32; n];
    let mut dist = vec![0u32; n];
    let mut iterations = 0;
    loop {
        let changed = assign(rows, &centroids, &mut assignment, &mut dist);
        iterations += 1;
        if (iterations > 1 && changed == 0) || iterations >= opts.max_iterations.max(1) {
            break;
        }
        centroids = update(rows, &centroids, &mut assignment, &mut dist);
    }
    // Drop clusters that ended up empty (only possible when rows repeat)
    // and renumber the rest densely, in order.
    let kk = centroids.len() / w.max(1);
    let mut size = vec![0usize; kk];
    assignment.iter().for_each(|&a| size[a as usize] += 1);
    let mut new_id = vec![u32::MAX; kk];
    let mut kept = Vec::with_capacity(centroids.len());
    for c in 0..kk {
        if size[c] > 0 {
            new_id[c] = (kept.len() / w.max(1)) as u32;
            kept.extend_from_slice(&centroids[c * w..(c + 1) * w]);
        }
    }
    assignment.iter_mut().for_each(|a| *a = new_id[*a as usize]);
    Ok(Clustering {
        centroids: kept,
        assignment,
    })
}

/// k-means++ seeding on squared Hamming distance: the first centroid is a
/// uniformly random row, each next one a row drawn with probability
/// proportional to its squared distance to the nearest chosen centroid.
/// Stops early when every row coincides with a centroid.
fn seed(rows: &BitRows, k: usize, seed: u64) -> Vec<u64> {
    let n = rows.len();
    let w = rows.words();
    let mut rng = SplitMix64(seed);
    let first = rng.below(n as u64) as usize;
    let mut centroids = Vec::with_capacity(k * w);
    centroids.extend_from_slice(rows.row(first));
    let mut d2: Vec<u64> = (0..n)
        .into_par_iter()
        .map(|i| u64::from(hamming(rows.row(i), rows.row(first))).pow(2))
        .collect();
    while centroids.len() < k * w {
        let total: u64 = d2.iter().sum();
        if total == 0 {
            break;
        }
        let mut r = rng.below(total);
        let pick = d2
            .iter()
            .position(|&d| {
                if r < d {
                    true
                } else {
                    r -= d;
                    false
                }
            })
            .unwrap_or(n - 1);
        let c = rows.row(pick).to_vec();
        d2.par_iter_mut().enumerate().for_each(|(i, d)| {
            *d = (*d).min(u64::from(hamming(rows.row(i), &c)).pow(2));
        });
        centroids.extend_from_slice(&c);
    }
    centroids
}

/// Assign every row to its nearest centroid; returns how many rows changed
/// cluster. `dist` receives each row's distance to its centroid.
fn assign(rows: &BitRows, centroids: &[u64], assignment: &mut [u32], dist: &mut [u32]) -> usize {
    let w = rows.words();
    assignment
        .par_iter_mut()
        .zip(dist.par_iter_mut())
        .enumerate()
        .with_min_len(16)
        .map(|(i, (a, d))| {
            let (c, dc) = nearest(rows.row(i), centroids, w, *a as usize);
            let changed = usize::from(c as u32 != *a);
            *a = c as u32;
            *d = dc;
            changed
        })
        .sum()
}

/// New centroids: the per-bit majority of each cluster's rows (ties to 0).
/// An empty cluster takes the row farthest from its centroid (lowest index
/// on ties), which leaves its old cluster; the row's `dist` becomes 0 so the
/// next empty cluster takes another row.
fn update(rows: &BitRows, centroids: &[u64], assignment: &mut [u32], dist: &mut [u32]) -> Vec<u64> {
    let w = rows.words();
    let k = centroids.len() / w.max(1);
    let mut counts = vec![0u32; k * w * 64];
    let mut size = vec![0u32; k];
    for (i, &a) in assignment.iter().enumerate() {
        let a = a as usize;
        size[a] += 1;
        let cnt = &mut counts[a * w * 64..(a + 1) * w * 64];
        for (q, &x) in rows.row(i).iter().enumerate() {
            let mut x = x;
            while x != 0 {
                cnt[q * 64 + x.trailing_zeros() as usize] += 1;
                x &= x - 1;
            }
        }
    }
    let mut out = vec![0u64; k * w];
    for c in 0..k {
        if size[c] == 0 {
            continue;
        }
        for q in 0..w {
            let cnt = &counts[(c * w + q) * 64..][..64];
            out[c * w + q] =
                (0..64).fold(0u64, |acc, b| acc | (u64::from(2 * cnt[b] > size[c]) << b));
        }
    }
    for c in 0..k {
        if size[c] > 0 {
            continue;
        }
        let (far, &d) = dist
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
            .expect("k-means has rows");
        if d == 0 {
            // Every row sits on its centroid: nothing to split off.
            continue;
        }
        size[assignment[far] as usize] -= 1;
        size[c] = 1;
        assignment[far] = c as u32;
        dist[far] = 0;
        out[c * w..(c + 1) * w].copy_from_slice(rows.row(far));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg_bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = SplitMix64(seed);
        (0..n).map(|_| s.next() as u8).collect()
    }

    #[test]
    fn nearest_matches_exhaustive_search_and_ignores_the_first_guess() {
        let bytes = lcg_bytes(40 * 24, 3);
        let rows = BitRows::gather(Rows::new(&bytes, 24).unwrap(), 40, |i| i);
        let cents: Vec<u64> = (30..40).flat_map(|i| rows.row(i).to_vec()).collect();
        for i in 0..30 {
            let want = (0..10)
                .map(|c| (hamming(rows.row(i), &cents[c * 3..c * 3 + 3]), c))
                .min()
                .unwrap();
            for first in 0..10 {
                let (c, d) = nearest(rows.row(i), &cents, 3, first);
                assert_eq!((d, c), want, "row {i}, first {first}");
            }
        }
    }

    #[test]
    fn separates_planted_clusters_exactly() {
        // Four prototypes far apart, each repeated with 1 flipped bit.
        let l = 16;
        let protos: Vec<Vec<u8>> = (0..4).map(|p| lcg_bytes(l, 100 + p)).collect();
        let mut bytes = Vec::new();
        let mut truth = Vec::new();
        for i in 0..200usize {
            let p = (i * 7) % 4;
            let mut r = protos[p].clone();
            r[i % l] ^= 1 << (i % 8);
            bytes.extend_from_slice(&r);
            truth.push(p);
        }
        let rows = BitRows::gather(Rows::new(&bytes, l).unwrap(), 200, |i| i);
        let c = kmeans(&rows, 4, &KMeansOptions::default()).unwrap();
        assert_eq!(c.k(rows.words()), 4);
        // Same partition as the truth (up to renaming).
        let mut map = [u32::MAX; 4];
        for (i, &a) in c.assignment.iter().enumerate() {
            if map[truth[i]] == u32::MAX {
                map[truth[i]] = a;
            }
            assert_eq!(a, map[truth[i]], "row {i}");
        }
        // Centroids are the prototypes (majority removes the flips).
        for (p, proto) in protos.iter().enumerate() {
            let w = rows.words();
            let want = BitRows::gather(Rows::new(proto, l).unwrap(), 1, |_| 0);
            assert_eq!(
                &c.centroids[map[p] as usize * w..][..w],
                want.row(0),
                "prototype {p}"
            );
        }
    }

    #[test]
    fn deterministic_and_never_more_clusters_than_distinct_rows() {
        let bytes: Vec<u8> = (0..100).flat_map(|i| [(i % 3) as u8; 5]).collect();
        let rows = BitRows::gather(Rows::new(&bytes, 5).unwrap(), 100, |i| i);
        let a = kmeans(&rows, 16, &KMeansOptions::default()).unwrap();
        assert_eq!(a.k(rows.words()), 3);
        assert!(a.assignment.iter().all(|&x| x < 3));
        let b = kmeans(&rows, 16, &KMeansOptions::default()).unwrap();
        assert_eq!(a.assignment, b.assignment);
        assert_eq!(a.centroids, b.centroids);
        let e = kmeans(&rows, 0, &KMeansOptions::default()).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
    }
}
