//! The GPU feature cache (IBP(C/M)), against the original rows: every
//! variant (no cache, uncompressed cache and host rows, IBP(M), IBP(C),
//! IBP(C/M)), with compressed host rows packed and line-aligned
//! (fixed-stride with a length table), at several budgets, gathered into
//! poisoned output with guard bytes, on one GPU and on two (skipped visibly
//! with one); a batch split in shares over every GPU there is; refills; a dataset the cache was not built for; a budget
//! below one row; bad ids; the PCIe lines line-aligned misses cost.
//! Prints `skipped: no CUDA device` without a GPU (a failure with
//! `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;

use common::{Rng, gpu_or_skip, notice};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::Rows;
use ibp::codebook::Codebook;
use ibp::gpu::{
    CacheOptions, DecodeStatus, FeatureCache, Gpu, GpuDataset, Placement, Residency, ShareLane,
    copy_to_host_blocking, top_k_by_score,
};
use ibp::layout::{FixedStride, LayoutOptions, Packed, compress_fixed, compress_packed};
use ibp_testdata::raw_packed;

const POISON: u8 = 0xA5;
const GUARD: usize = 256;

fn stream() -> Stream {
    Stream::new(StreamFlags::NON_BLOCKING, None).expect("stream")
}

/// How an upload stores the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// Every row raw, packed.
    Raw,
    /// Compressed, packed.
    Packed,
    /// Compressed, fixed-stride with a length table (line-aligned rows).
    Fixed,
}
use Form::{Fixed, Packed as Pk, Raw};

/// A table: the rows, their codebook, the compressed (packed and
/// fixed-stride) and the raw uploads' host forms.
struct Table {
    name: String,
    data: Vec<u8>,
    l: usize,
    cb: Codebook,
    packed: Packed,
    fixed: FixedStride,
    raw: Packed,
}

impl Table {
    fn new(name: &str, data: Vec<u8>, l: usize) -> Self {
        let rows = Rows::new(&data, l).unwrap();
        let cb = ibp::fit::fit(rows, &Default::default()).unwrap().codebook;
        let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
        let raw = raw_packed(data.clone(), l).unwrap();
        Table {
            name: name.into(),
            data,
            l,
            cb,
            packed,
            fixed,
            raw,
        }
    }

    fn rows(&self) -> usize {
        self.data.len() / self.l
    }

    fn upload(&self, gpu: &Gpu, form: Form) -> GpuDataset {
        let p = match form {
            Raw => &self.raw,
            Pk => &self.packed,
            Fixed => {
                let v = self.fixed.view();
                return GpuDataset::upload_fixed(gpu, &self.cb, &v, Residency::Pinned)
                    .and_then(|d| d.with_length_table(&self.cb, &v))
                    .unwrap();
            }
        };
        GpuDataset::upload_packed(gpu, &self.cb, &p.view(), Residency::Pinned).unwrap()
    }

    /// Every form's upload on `gpu`, in `Form` order.
    fn uploads(&self, gpu: &Gpu) -> [GpuDataset; 3] {
        [Raw, Pk, Fixed].map(|f| self.upload(gpu, f))
    }

    /// Row `t`'s stored length.
    fn stored(&self, t: usize) -> u64 {
        self.packed.offsets[t + 1] - self.packed.offsets[t]
    }
}

/// Small tables: Cora's real rows (a few hundred), synthetic f32 rows of a
/// ragged length, some of which do not compress, and synthetic rows of 768
/// bytes (MiniLM's bf16 length: line-aligned slots).
fn tables(rng: &mut Rng) -> Vec<Table> {
    let mut out = Vec::new();
    let (name, data, l) = common::real_tables("gpu_cache").swap_remove(0);
    out.push(Table::new(&name, data[..600 * l].to_vec(), l));
    let l = 1002;
    let mut data = Vec::with_capacity(500 * l);
    for i in 0..500 {
        for j in 0..l {
            let r = rng.next() as u8;
            data.push(if i % 7 == 3 {
                r
            } else {
                (r & 0x0f) | 0x40 ^ (j as u8 & 0x30)
            });
        }
    }
    out.push(Table::new("synthetic 1002 B", data, l));
    let l = 768;
    let data: Vec<u8> = (0..400 * l)
        .map(|i| {
            let r = rng.next() as u8;
            if i / l % 9 == 4 { r } else { r & 0x0f }
        })
        .collect();
    out.push(Table::new("synthetic 768 B", data, l));
    out
}

/// Gather `ids` through `cache` on `gpu` into a poisoned buffer with guard
/// bytes; check the guard; return the rows and the status verdict.
fn gather(
    cache: &FeatureCache,
    gpu: &Gpu,
    ds: &GpuDataset,
    ids: &[u64],
    l: usize,
    wide: bool,
) -> (Vec<u8>, ibp::Result<()>) {
    let s = stream();
    let mut status = DecodeStatus::new().unwrap();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; ids.len() * l + GUARD]).unwrap();
    if wide {
        let d = DeviceBuffer::from_slice(ids).unwrap();
        cache.gather(gpu, ds, &d, &mut out, &status, &s).unwrap();
    } else {
        let narrow: Vec<u32> = ids.iter().map(|&t| t as u32).collect();
        let d = DeviceBuffer::from_slice(&narrow).unwrap();
        cache.gather(gpu, ds, &d, &mut out, &status, &s).unwrap();
    }
    s.synchronize().unwrap();
    let host = copy_to_host_blocking(&out).unwrap();
    assert!(
        host[ids.len() * l..].iter().all(|&b| b == POISON),
        "the gather wrote past its output rows"
    );
    (host[..ids.len() * l].to_vec(), status.check_blocking())
}

fn expected(data: &[u8], l: usize, ids: &[u64]) -> Vec<u8> {
    ids.iter()
        .flat_map(|&t| data[t as usize * l..(t as usize + 1) * l].iter().copied())
        .collect()
}

/// Random ids with repeats, and a hot set that prefers low ids (as a
/// power-law degree would).
fn access(rng: &mut Rng, n: usize, count: usize) -> (Vec<u64>, Vec<u64>) {
    let ids: Vec<u64> = (0..count)
        .map(|_| {
            let a = rng.next() % n as u64;
            if rng.next().is_multiple_of(2) {
                a / 4
            } else {
                a
            }
        })
        .collect();
    let scores: Vec<u64> = (0..n as u64)
        .map(|i| (n as u64 - i) * (1 + i % 3))
        .collect();
    (ids, top_k_by_score(&scores, n))
}

/// The variants as (name, host rows, slab rows, cache on): the five of the
/// paper, with compressed host rows packed and line-aligned, and slabs
/// filled from either compressed form.
const VARIANTS: [(&str, Form, Form, bool); 9] = [
    ("no cache", Raw, Raw, false),
    ("uncompressed cache + host", Raw, Raw, true),
    ("IBP(M) packed", Pk, Pk, false),
    ("IBP(M) line-aligned", Fixed, Fixed, false),
    ("IBP(C)", Raw, Pk, true),
    ("IBP(C) slab from line-aligned", Raw, Fixed, true),
    ("IBP(C/M) packed", Pk, Pk, true),
    ("IBP(C/M) line-aligned", Fixed, Fixed, true),
    (
        "IBP(C/M) line-aligned host, slab from packed",
        Fixed,
        Pk,
        true,
    ),
];

#[test]
fn every_variant_and_budget_gathers_the_original_rows() {
    let Some(gpu) = gpu_or_skip("every_variant_and_budget_gathers_the_original_rows") else {
        return;
    };
    let mut rng = Rng(0x5eed_cac4e);
    for t in tables(&mut rng) {
        let n = t.rows();
        let (ids, hot) = access(&mut rng, n, 3000);
        let up = t.uploads(&gpu);
        let want = expected(&t.data, t.l, &ids);
        for (name, host_f, slab_f, on) in VARIANTS {
            let (host, slab) = (&up[host_f as usize], &up[slab_f as usize]);
            for pct in [1u64, 5, 25, 100] {
                let budget = (n * t.l) as u64 * pct / 100;
                let hot = if on { &hot[..] } else { &[][..] };
                let opts = CacheOptions::new(budget);
                let cache = FeatureCache::with_slab_rows(&[&gpu], &[host], slab, hot, &opts)
                    .unwrap_or_else(|e| panic!("{} {name} {pct}%: {e}", t.name));
                for wide in [true, false] {
                    let (got, st) = gather(&cache, &gpu, host, &ids, t.l, wide);
                    st.unwrap();
                    assert!(got == want, "{} {name} {pct}% wide={wide}", t.name);
                }
                let s = cache.stats(&gpu, host, &ids).unwrap();
                assert_eq!(s.rows, ids.len() as u64);
                assert_eq!(s.peer_hits, 0);
                if on && pct == 100 {
                    // Everything fits: no row is read from the host.
                    assert_eq!((s.local_hits, s.host_bytes), (s.rows, 0), "{name}");
                }
                if !on {
                    assert_eq!(s.local_hits, 0);
                    assert_eq!(cache.cached_rows(&gpu).unwrap(), 0);
                }
            }
        }
    }
}

#[test]
fn a_refill_replaces_the_rows_and_the_gathers_stay_exact() {
    let Some(gpu) = gpu_or_skip("a_refill_replaces_the_rows_and_the_gathers_stay_exact") else {
        return;
    };
    let mut rng = Rng(77);
    let t = tables(&mut rng).swap_remove(0);
    let n = t.rows();
    let (ids, hot) = access(&mut rng, n, 2000);
    for form in [Pk, Fixed] {
        let ds = t.upload(&gpu, form);
        let budget = t.packed.payload.len() as u64 / 3;
        let mut cache =
            FeatureCache::new(&[&gpu], &[&ds], &hot, &CacheOptions::new(budget)).unwrap();
        let before = cache.stats(&gpu, &ds, &ids).unwrap();
        // The coldest rows instead.
        let cold: Vec<u64> = hot.iter().rev().copied().collect();
        let s = stream();
        cache.refill_blocking(&[&gpu], &ds, &cold, &[&s]).unwrap();
        let after = cache.stats(&gpu, &ds, &ids).unwrap();
        assert!(after.local_hits < before.local_hits, "{before:?} {after:?}");
        // The refill is ordered on `s`; the gather below runs on its own
        // stream, so wait for it (the documented rule).
        s.synchronize().unwrap();
        let (got, st) = gather(&cache, &gpu, &ds, &ids, t.l, true);
        st.unwrap();
        assert!(got == expected(&t.data, t.l, &ids), "{form:?}");
        // Refilling from another dataset (or another layout of the same
        // rows) is refused.
        for o in [Raw, Pk, Fixed].into_iter().filter(|&o| o != form) {
            let other = t.upload(&gpu, o);
            let e = cache
                .refill_blocking(&[&gpu], &other, &cold, &[&s])
                .unwrap_err();
            assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument, "{form:?} {o:?}");
        }
    }
}

#[test]
fn a_cache_refuses_another_datasets_ids_and_a_budget_below_one_row() {
    let Some(gpu) = gpu_or_skip("a_cache_refuses_another_datasets_ids_and_a_budget_below_one_row")
    else {
        return;
    };
    let mut rng = Rng(99);
    let ts = tables(&mut rng);
    let t = &ts[0];
    let ds = t.upload(&gpu, Pk);
    let hot: Vec<u64> = (0..10).collect();
    let cache = FeatureCache::new(&[&gpu], &[&ds], &hot, &CacheOptions::new(1 << 20)).unwrap();
    // Same shape, other rows: the first rows of the table again, reversed.
    let mut data = t.data.clone();
    data.reverse();
    let other = Table::new("reversed", data, t.l);
    let ods = other.upload(&gpu, Pk);
    let s = stream();
    let status = DecodeStatus::new().unwrap();
    let ids = DeviceBuffer::from_slice(&[0u64, 1]).unwrap();
    let mut out = DeviceBuffer::from_slice(&vec![0u8; 2 * t.l]).unwrap();
    let e = cache
        .gather(&gpu, &ods, &ids, &mut out, &status, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument, "{e}");
    // Another upload of the same rows is accepted.
    let again = t.upload(&gpu, Pk);
    cache
        .gather(&gpu, &again, &ids, &mut out, &status, &s)
        .unwrap();
    // Too small an output is refused before any launch.
    let mut small = DeviceBuffer::from_slice(&vec![0u8; t.l]).unwrap();
    let e = cache
        .gather(&gpu, &ds, &ids, &mut small, &status, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
    // A budget below the smallest stored row of the hot set.
    let smallest = (0..t.rows())
        .map(|i| t.packed.offsets[i + 1] - t.packed.offsets[i])
        .min()
        .unwrap();
    let e = FeatureCache::new(&[&gpu], &[&ds], &hot, &CacheOptions::new(smallest - 1))
        .err()
        .expect("a budget below every row is an error");
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument, "{e}");
    // Hot ids out of range.
    let e = FeatureCache::new(
        &[&gpu],
        &[&ds],
        &[t.rows() as u64],
        &CacheOptions::new(1 << 20),
    )
    .err()
    .expect("a hot id out of range is an error");
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument, "{e}");
    // Fixed-stride host rows without their length table: the cache could
    // not pack them, nor the kernel fetch a miss without reading its slot.
    let bare = GpuDataset::upload_fixed(&gpu, &t.cb, &t.fixed.view(), Residency::Pinned).unwrap();
    let e = FeatureCache::new(&[&gpu], &[&bare], &hot, &CacheOptions::new(1 << 20))
        .err()
        .expect("fixed-stride rows without lengths are refused");
    assert_eq!(e.kind(), ibp::ErrorKind::Unsupported, "{e}");
    assert!(e.message().contains("with_length_table"), "{e}");
    s.synchronize().unwrap();
}

#[test]
fn line_aligned_misses_cost_whole_lines_of_their_stored_bytes_only() {
    let Some(gpu) = gpu_or_skip("line_aligned_misses_cost_whole_lines_of_their_stored_bytes_only")
    else {
        return;
    };
    let mut rng = Rng(128);
    let t = tables(&mut rng).swap_remove(2);
    assert_eq!(t.l % 128, 0, "{}: a line-aligned table", t.name);
    let n = t.rows();
    let ids: Vec<u64> = (0..3 * n as u64).map(|i| i * 7 % n as u64).collect();
    let up = t.uploads(&gpu);
    let none = |ds: &GpuDataset| {
        let c = FeatureCache::new(&[&gpu], &[ds], &[], &CacheOptions::new(0)).unwrap();
        let (got, st) = gather(&c, &gpu, ds, &ids, t.l, false);
        st.unwrap();
        assert!(got == expected(&t.data, t.l, &ids));
        c.stats(&gpu, ds, &ids).unwrap().host_bytes
    };
    let [raw, packed, fixed] = [none(&up[0]), none(&up[1]), none(&up[2])];
    let lines: u64 = ids
        .iter()
        .map(|&i| t.stored(i as usize).div_ceil(128) * 128)
        .sum();
    assert_eq!(fixed, lines, "each row ⌈s/128⌉ lines");
    assert_eq!(raw, ids.len() as u64 * t.l as u64);
    assert!(fixed < packed && packed < raw, "{fixed} {packed} {raw}");
}

#[test]
fn bad_ids_are_reported_and_their_rows_zeroed() {
    let Some(gpu) = gpu_or_skip("bad_ids_are_reported_and_their_rows_zeroed") else {
        return;
    };
    let mut rng = Rng(5);
    let t = tables(&mut rng).swap_remove(0);
    let n = t.rows() as u64;
    for (form, wide) in [Pk, Fixed]
        .into_iter()
        .flat_map(|f| [(f, true), (f, false)])
    {
        let ds = t.upload(&gpu, form);
        let hot: Vec<u64> = (0..n / 2).collect();
        let cache = FeatureCache::new(&[&gpu], &[&ds], &hot, &CacheOptions::new(1 << 20)).unwrap();
        let ids = [1, n, 2, n + 5, u64::MAX, n - 1];
        let ids: Vec<u64> = if wide {
            ids.to_vec()
        } else {
            // u32 ids: u64::MAX would wrap; keep the others.
            ids.iter()
                .copied()
                .filter(|&t| t < u32::MAX as u64)
                .collect()
        };
        let (got, st) = gather(&cache, &gpu, &ds, &ids, t.l, wide);
        let e = st.unwrap_err();
        assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
        assert!(e.message().contains("output row 1"), "{e}");
        for (k, (row, &id)) in got.chunks(t.l).zip(&ids).enumerate() {
            if id < n {
                assert!(
                    row == &t.data[id as usize * t.l..][..t.l],
                    "{form:?} row {k}"
                );
            } else {
                assert!(row.iter().all(|&b| b == 0), "row {k} of bad id {id}");
            }
        }
    }
}

/// Both GPUs' contexts, or `None` (visibly) with fewer than two.
fn two_gpus(test: &str) -> Option<(Gpu, Gpu)> {
    let first = gpu_or_skip(test)?;
    if Gpu::count() < 2 {
        notice(&format!("{test}: skipped: needs two GPUs, found one"));
        return None;
    }
    let second = Gpu::new(1).expect("GPU 1");
    first.make_current().unwrap();
    Some((first, second))
}

#[test]
fn two_gpus_read_each_others_slabs_and_gather_the_original_rows() {
    let test = "two_gpus_read_each_others_slabs_and_gather_the_original_rows";
    let Some((g0, g1)) = two_gpus(test) else {
        return;
    };
    let mut rng = Rng(2);
    for t in tables(&mut rng) {
        let n = t.rows();
        let (ids, hot) = access(&mut rng, n, 3000);
        let want = expected(&t.data, t.l, &ids);
        g0.make_current().unwrap();
        let u0 = t.uploads(&g0);
        g1.make_current().unwrap();
        let u1 = t.uploads(&g1);
        for (name, host_f, slab_f, on) in VARIANTS {
            let hosts = [&u0[host_f as usize], &u1[host_f as usize]];
            let slab = &u0[slab_f as usize];
            // The two ends, a hybrid of four replicated rows, and the
            // automatic choice (a hybrid whose rule saw no scores).
            for asked in [
                Some(Placement::Partition),
                Some(Placement::Replicate),
                Some(Placement::Hybrid { replicated: 4 }),
                None,
            ] {
                let budget = (n * t.l) as u64 / 20;
                let hot = if on { &hot[..] } else { &[][..] };
                let mut opts = CacheOptions::new(budget);
                opts.placement = asked;
                let cache = FeatureCache::with_slab_rows(&[&g0, &g1], &hosts, slab, hot, &opts)
                    .unwrap_or_else(|e| panic!("{} {name}: {e}", t.name));
                let placement = cache.placement();
                match asked {
                    Some(p) => assert_eq!(placement, p),
                    None => assert!(matches!(placement, Placement::Hybrid { .. })),
                }
                let mut hits = 0;
                for (g, ds) in [(&g0, hosts[0]), (&g1, hosts[1])] {
                    g.make_current().unwrap();
                    let (got, st) = gather(&cache, g, ds, &ids, t.l, true);
                    st.unwrap();
                    assert!(
                        got == want,
                        "{} {name} {placement:?} on GPU {}",
                        t.name,
                        g.ordinal()
                    );
                    let s = cache.stats(g, ds, &ids).unwrap();
                    hits += s.local_hits + s.peer_hits;
                    if placement == Placement::Replicate {
                        assert_eq!(s.peer_hits, 0);
                    }
                    // Replicated rows are local hits on every GPU.
                    if let Placement::Hybrid { replicated } = placement {
                        let k = (replicated as usize).min(hot.len()).min(4);
                        let s = cache.stats(g, ds, &hot[..k]).unwrap();
                        assert_eq!(s.peer_hits, 0, "{} {name} {placement:?}", t.name);
                    }
                }
                assert_eq!(hits > 0, on, "{} {name} {placement:?}", t.name);
                // A dataset on the other GPU is refused.
                g0.make_current().unwrap();
                let status = DecodeStatus::new().unwrap();
                let d = DeviceBuffer::from_slice(&[0u64]).unwrap();
                let mut out = DeviceBuffer::from_slice(&vec![0u8; t.l]).unwrap();
                let e = cache
                    .gather(&g0, hosts[1], &d, &mut out, &status, &stream())
                    .unwrap_err();
                assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
            }
        }
    }
}

#[test]
fn a_batch_split_over_every_gpu_gathers_the_original_rows() {
    let test = "a_batch_split_over_every_gpu_gathers_the_original_rows";
    let Some(first) = gpu_or_skip(test) else {
        return;
    };
    // Every GPU there is (one included: one share, the same code).
    let mut gpus = vec![first];
    for o in 1..Gpu::count().min(8) {
        gpus.push(Gpu::new(o).expect("GPU"));
    }
    let g: Vec<&Gpu> = gpus.iter().collect();
    let mut rng = Rng(3);
    for t in tables(&mut rng) {
        let n = t.rows();
        let (ids, hot) = access(&mut rng, n, 3001);
        let narrow: Vec<u32> = ids.iter().map(|&x| x as u32).collect();
        let want = expected(&t.data, t.l, &ids);
        let uploads: Vec<[GpuDataset; 3]> = g
            .iter()
            .map(|x| {
                x.make_current().unwrap();
                t.uploads(x)
            })
            .collect();
        for (name, host_f, slab_f, on) in VARIANTS {
            let hosts: Vec<&GpuDataset> = uploads.iter().map(|u| &u[host_f as usize]).collect();
            let slab = &uploads[0][slab_f as usize];
            let hot = if on { &hot[..] } else { &[][..] };
            let opts = CacheOptions::new((n * t.l) as u64 / 20);
            let cache = FeatureCache::with_slab_rows(&g, &hosts, slab, hot, &opts)
                .unwrap_or_else(|e| panic!("{} {name}: {e}", t.name));
            let cut = cache.shares(hosts[0], &narrow).unwrap();
            assert_eq!(cut.len(), g.len());
            assert_eq!((cut[0].start, cut[cut.len() - 1].end), (0, ids.len()));
            let mut parts = Vec::new();
            for (i, x) in g.iter().enumerate() {
                x.make_current().unwrap();
                parts.push((
                    DeviceBuffer::from_slice(&narrow).unwrap(),
                    DeviceBuffer::from_slice(&vec![POISON; cut[i].len() * t.l + GUARD]).unwrap(),
                    DecodeStatus::new().unwrap(),
                    stream(),
                ));
            }
            let mut lanes: Vec<ShareLane<'_, u32>> = parts
                .iter_mut()
                .enumerate()
                .map(|(i, (d, out, status, s))| ShareLane {
                    gpu: g[i],
                    ds: hosts[i],
                    ids: d,
                    out,
                    status,
                    stream: s,
                })
                .collect();
            // A share past the ids is refused before anything runs.
            let mut bad = cut.clone();
            bad[0] = 0..ids.len() + 1;
            let e = cache.gather_shares(&mut lanes, &bad).unwrap_err();
            assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
            cache.gather_shares(&mut lanes, &cut).unwrap();
            drop(lanes);
            let mut got = Vec::new();
            for (i, (_, out, status, s)) in parts.iter_mut().enumerate() {
                g[i].make_current().unwrap();
                s.synchronize().unwrap();
                status.check_blocking().unwrap();
                let host = copy_to_host_blocking(out).unwrap();
                let rows = cut[i].len() * t.l;
                assert!(
                    host[rows..].iter().all(|&b| b == POISON),
                    "GPU {i} wrote past its share"
                );
                got.extend_from_slice(&host[..rows]);
            }
            assert!(got == want, "{} {name} over {} GPUs", t.name, g.len());
        }
    }
    gpus[0].make_current().unwrap();
}
