//! The access patterns of `ibp bench --section cache`: an R-MAT graph with
//! Graph500's parameters, GraphSAGE neighbour sampling on it, and a Zipf
//! stream of row ids (a DLRM embedding lookup). Seeded, deterministic, and
//! parallel where it is large (the edge list).

use rayon::prelude::*;

/// SplitMix64: a small, fast, seedable generator (good enough for
/// sampling; not for cryptography).
#[derive(Clone, Debug)]
pub(super) struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) (n > 0), by multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// An undirected graph in CSR form: the neighbours of `v` are
/// `adj[offsets[v]..offsets[v + 1]]`.
pub(super) struct Graph {
    pub offsets: Vec<u64>,
    pub adj: Vec<u32>,
}

impl Graph {
    pub fn vertices(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn degree(&self, v: usize) -> u64 {
        self.offsets[v + 1] - self.offsets[v]
    }

    pub fn neighbours(&self, v: usize) -> &[u32] {
        &self.adj[self.offsets[v] as usize..self.offsets[v + 1] as usize]
    }
}

/// Graph500's R-MAT probabilities (a, b, c; d = 1 − a − b − c = 0.05).
const RMAT: [f64; 3] = [0.57, 0.19, 0.19];

/// An R-MAT graph of `vertices` vertices and `edges` undirected edges
/// (self loops redrawn; repeated edges kept, as Graph500's generator does),
/// with the vertex labels shuffled so that degree does not follow the
/// label. Stored in both directions.
pub(super) fn rmat(vertices: usize, edges: usize, seed: u64) -> Graph {
    assert!(vertices >= 2 && vertices <= u32::MAX as usize);
    let scale = vertices.next_power_of_two().trailing_zeros();
    let mut perm: Vec<u32> = (0..vertices as u32).collect();
    let mut r = SplitMix(seed);
    for i in (1..vertices).rev() {
        perm.swap(i, r.below(i as u64 + 1) as usize);
    }
    // Q: why chunks with their own seeds?
    // A: the edges are drawn in parallel, and each chunk's stream depends
    // only on the seed and the chunk number: the graph is the same on any
    // number of threads.
    const CHUNK: usize = 1 << 20;
    let pairs: Vec<(u32, u32)> = (0..edges.div_ceil(CHUNK))
        .into_par_iter()
        .flat_map_iter(|c| {
            let mut r = SplitMix(seed ^ (c as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03));
            let n = CHUNK.min(edges - c * CHUNK);
            let perm = &perm;
            (0..n).map(move |_| {
                loop {
                    let (mut s, mut d) = (0usize, 0usize);
                    for _ in 0..scale {
                        let x = r.unit();
                        let (bs, bd) = if x < RMAT[0] {
                            (0, 0)
                        } else if x < RMAT[0] + RMAT[1] {
                            (0, 1)
                        } else if x < RMAT[0] + RMAT[1] + RMAT[2] {
                            (1, 0)
                        } else {
                            (1, 1)
                        };
                        s = 2 * s + bs;
                        d = 2 * d + bd;
                    }
                    if s < vertices && d < vertices && s != d {
                        break (perm[s], perm[d]);
                    }
                }
            })
        })
        .collect();
    let mut offsets = vec![0u64; vertices + 1];
    for &(s, d) in &pairs {
        offsets[s as usize + 1] += 1;
        offsets[d as usize + 1] += 1;
    }
    for v in 0..vertices {
        offsets[v + 1] += offsets[v];
    }
    let mut fill = offsets.clone();
    let mut adj = vec![0u32; 2 * pairs.len()];
    for &(s, d) in &pairs {
        adj[fill[s as usize] as usize] = d;
        fill[s as usize] += 1;
        adj[fill[d as usize] as usize] = s;
        fill[d as usize] += 1;
    }
    Graph { offsets, adj }
}

/// The vertices a GraphSAGE mini-batch touches, each once: the `seeds`,
/// then for each fanout `f`, up to `f` distinct neighbours (all of them
/// when there are fewer) of every vertex the previous layer reached first.
/// `seen` is a scratch bitmap of the graph's vertices (all clear; left
/// clear).
pub(super) fn sage_batch(
    g: &Graph,
    seeds: &[u32],
    fanouts: &[usize],
    r: &mut SplitMix,
    seen: &mut [u64],
) -> Vec<u32> {
    let mut all = Vec::new();
    let mut mark = |v: u32, all: &mut Vec<u32>| {
        let (w, b) = (v as usize / 64, v % 64);
        let new = seen[w] >> b & 1 == 0;
        seen[w] |= 1 << b;
        if new {
            all.push(v);
        }
        new
    };
    let mut frontier = Vec::new();
    for &s in seeds {
        if mark(s, &mut all) {
            frontier.push(s);
        }
    }
    let mut picked = Vec::with_capacity(32);
    for &f in fanouts {
        let mut next = Vec::new();
        for &v in &frontier {
            let nb = g.neighbours(v as usize);
            picked.clear();
            if nb.len() <= f {
                picked.extend_from_slice(nb);
            } else {
                // f distinct positions (f is small: a linear check is
                // cheaper than a set).
                let mut pos: Vec<usize> = Vec::with_capacity(f);
                while pos.len() < f {
                    let p = r.below(nb.len() as u64) as usize;
                    if !pos.contains(&p) {
                        pos.push(p);
                    }
                }
                picked.extend(pos.iter().map(|&p| nb[p]));
            }
            for &u in &picked {
                if mark(u, &mut all) {
                    next.push(u);
                }
            }
        }
        frontier = next;
    }
    for &v in &all {
        seen[v as usize / 64] &= !(1 << (v % 64));
    }
    all
}

/// A Zipf(`s`) sampler over ranks `0..n` (rank 0 the most frequent), by
/// inverse CDF.
pub(super) struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    pub fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for k in 1..=n {
            acc += (k as f64).powf(-s);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        Zipf { cdf }
    }

    pub fn sample(&self, r: &mut SplitMix) -> usize {
        let u = r.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmat_is_deterministic_undirected_and_skewed() {
        let g = rmat(5000, 40_000, 7);
        let h = rmat(5000, 40_000, 7);
        assert_eq!((&g.offsets, &g.adj), (&h.offsets, &h.adj));
        assert_eq!(g.vertices(), 5000);
        assert_eq!(g.adj.len(), 80_000);
        // Undirected: u in N(v) as often as v in N(u); no self loops.
        for v in (0..5000).step_by(97) {
            for &u in g.neighbours(v) {
                assert_ne!(u as usize, v);
                let back = g
                    .neighbours(u as usize)
                    .iter()
                    .filter(|&&x| x as usize == v);
                let fwd = g.neighbours(v).iter().filter(|&&x| x == u);
                assert_eq!(back.count(), fwd.count());
            }
        }
        // Power law: the top 1% of vertices hold far more than 1% of the
        // edge ends.
        let mut d: Vec<u64> = (0..5000).map(|v| g.degree(v)).collect();
        d.sort_unstable_by(|a, b| b.cmp(a));
        let top: u64 = d[..50].iter().sum();
        assert!(top * 10 > g.adj.len() as u64, "top 1% hold {top} ends");
        // Shuffled labels: the highest degree is not at vertex 0 by design.
        assert_ne!(rmat(5000, 40_000, 8).adj, g.adj);
    }

    #[test]
    fn sage_batches_hold_each_vertex_once_and_respect_the_fanouts() {
        let g = rmat(3000, 30_000, 3);
        let mut seen = vec![0u64; 3000usize.div_ceil(64)];
        let mut r = SplitMix(1);
        let seeds: Vec<u32> = (0..64).map(|i| i * 40).collect();
        let b = sage_batch(&g, &seeds, &[15, 10, 5], &mut r, &mut seen);
        assert!(seen.iter().all(|&w| w == 0), "scratch left clear");
        let mut s = b.clone();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), b.len(), "unique");
        assert_eq!(&b[..64], &seeds[..]);
        // At most 1 + 15 + 150 + 750 per seed.
        assert!(b.len() <= 64 * 916);
        // One layer of fanout 1: each seed adds at most one vertex.
        let one = sage_batch(&g, &seeds, &[1], &mut r, &mut seen);
        assert!(one.len() <= 128);
    }

    #[test]
    fn zipf_ranks_follow_the_law() {
        let z = Zipf::new(1000, 1.05);
        let mut r = SplitMix(9);
        let mut c = [0u32; 1000];
        for _ in 0..200_000 {
            c[z.sample(&mut r)] += 1;
        }
        // P(rank 0) / P(rank 1) = 2^1.05 ≈ 2.07.
        let ratio = c[0] as f64 / c[1] as f64;
        assert!((1.9..2.25).contains(&ratio), "{ratio}");
        assert!(c[0] > c[10] && c[10] > c[500]);
    }
}
