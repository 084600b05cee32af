use proptest::prelude::*;

use super::*;
use crate::ErrorKind;
use crate::cluster::{ClusterOptions, fit_clusters, sweep_clusters};
use crate::codebook::ChunkSize;
use crate::fit::{ChunkChoice, FitOptions};
use crate::layout::{LayoutOptions, compress_packed};

/// `n` rows of `l` bytes in `groups` groups; each group has its own fixed
/// bytes (local invariance) and a few free low bits per byte.
fn grouped(n: usize, l: usize, groups: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let protos: Vec<Vec<u8>> = (0..groups)
        .map(|_| (0..l).map(|_| next() as u8).collect())
        .collect();
    (0..n)
        .flat_map(|i| {
            let p = &protos[(i * 31 + i / 7) % groups];
            p.iter()
                .map(|&b| b ^ (next() as u8 & 0x07))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn opts(chunk: ChunkSize) -> ClusterOptions {
    ClusterOptions::default().with_fit(FitOptions::default().with_chunk(ChunkChoice::Fixed(chunk)))
}

fn round_trip(clusters: &Clusters, rows: Rows<'_>) {
    let c = compress_clustered(clusters, rows).unwrap();
    let mut out = vec![0u8; rows.bytes().len()];
    decompress_clustered(clusters.codebooks(), &c.ids, &c.packed.view(), &mut out).unwrap();
    assert_eq!(out, rows.bytes());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, rng_seed: proptest::test_runner::RngSeed::Fixed(12), ..ProptestConfig::default() })]

    #[test]
    fn round_trip_is_bit_exact(
        l in 1usize..40, n in 1usize..120, groups in 1usize..6, k in 1usize..20,
        chunk in 0usize..4, seed in any::<u64>(),
    ) {
        let chunk = ChunkSize::ALL[chunk];
        let bytes = grouped(n, l, groups, seed);
        let rows = Rows::new(&bytes, l).unwrap();
        let clusters = fit_clusters(rows, k, &opts(chunk)).unwrap();
        prop_assert!(clusters.k() >= 1 && clusters.k() <= k.min(n));
        prop_assert!(clusters.codebooks().iter().all(|b| b.chunk() == chunk));
        round_trip(&clusters, rows);
        // Tensors the clusters were not fitted on round-trip too.
        let other = grouped(n, l, groups, seed ^ 0x5555);
        round_trip(&clusters, Rows::new(&other, l).unwrap());
    }

    #[test]
    fn ids_pack_and_read_back(ids in proptest::collection::vec(any::<u32>(), 0..200), k in 1usize..70000) {
        let ids: Vec<u32> = ids.into_iter().map(|x| x % k as u32).collect();
        let p = ClusterIds::pack(&ids, k).unwrap();
        prop_assert_eq!(p.bits(), id_bits(k));
        prop_assert_eq!(p.as_bytes().len() as u64, id_bytes(k, ids.len() as u64));
        let back: Vec<u32> = (0..ids.len()).map(|i| p.get(i).unwrap()).collect();
        prop_assert_eq!(back, ids.clone());
        prop_assert_eq!(p.get(ids.len()), None);
        let q = ClusterIds::from_bytes(p.bits(), p.len(), p.as_bytes().to_vec()).unwrap();
        prop_assert_eq!(q, p);
    }
}

#[test]
fn id_bits_is_ceil_log2() {
    let want = [
        (1, 0),
        (2, 1),
        (3, 2),
        (4, 2),
        (5, 3),
        (256, 8),
        (257, 9),
        (4096, 12),
    ];
    for (k, b) in want {
        assert_eq!(id_bits(k), b, "k={k}");
    }
    assert_eq!(id_bytes(1, 1000), 0);
    assert_eq!(id_bytes(3, 5), 2);
}

#[test]
fn single_cluster_stores_exactly_what_the_packed_layout_stores() {
    let bytes = grouped(300, 13, 3, 9);
    let rows = Rows::new(&bytes, 13).unwrap();
    let cl = fit_clusters(rows, 1, &opts(ChunkSize::Two)).unwrap();
    let c = compress_clustered(&cl, rows).unwrap();
    assert_eq!(c.ids.as_bytes(), &[] as &[u8]);
    assert_eq!(
        c.packed,
        compress_packed(&cl.codebooks()[0], rows, &LayoutOptions::default()).unwrap()
    );
}

#[test]
fn bad_cluster_ids_are_typed_errors() {
    let bytes = grouped(40, 9, 2, 4);
    let rows = Rows::new(&bytes, 9).unwrap();
    let cl = fit_clusters(rows, 3, &opts(ChunkSize::One)).unwrap();
    assert_eq!(cl.k(), 3);
    let c = compress_clustered(&cl, rows).unwrap();
    let mut out = vec![0u8; bytes.len()];
    // An id of 3 with 3 clusters (2 bits can say 3): corrupt.
    let mut ids: Vec<u32> = (0..40).map(|i| c.ids.get(i).unwrap()).collect();
    ids[17] = 3;
    let bad = ClusterIds::pack(&ids, 4).unwrap();
    let e = decompress_clustered(cl.codebooks(), &bad, &c.packed.view(), &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    // Too few ids, or ids of a wrong byte length or with set padding.
    let short = ClusterIds::pack(&ids[..39], 4).unwrap();
    let e = decompress_clustered(cl.codebooks(), &short, &c.packed.view(), &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let e = ClusterIds::from_bytes(2, 40, vec![0; 9]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let e = ClusterIds::from_bytes(3, 3, vec![0x80, 0x02]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let e = ClusterIds::from_bytes(33, 1, vec![0; 5]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    // Packing an id ≥ k, and no codebooks: invalid arguments.
    let e = ClusterIds::pack(&[0, 5], 5).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = decompress_clustered(&[], &c.ids, &c.packed.view(), &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = compress_clustered_with_ids(cl.codebooks(), &[7; 40], rows).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn every_mutation_of_ids_or_payload_is_an_error_or_decodes_without_panic() {
    let bytes = grouped(30, 11, 3, 8);
    let rows = Rows::new(&bytes, 11).unwrap();
    let cl = fit_clusters(rows, 3, &opts(ChunkSize::Four)).unwrap();
    let c = compress_clustered(&cl, rows).unwrap();
    let mut out = vec![0u8; bytes.len()];
    for i in 0..c.ids.as_bytes().len() * 8 {
        let mut b = c.ids.as_bytes().to_vec();
        b[i / 8] ^= 1 << (i % 8);
        if let Ok(ids) = ClusterIds::from_bytes(c.ids.bits(), c.ids.len(), b) {
            let _ = decompress_clustered(cl.codebooks(), &ids, &c.packed.view(), &mut out);
        }
    }
    for i in 0..c.packed.payload.len() * 8 {
        let mut p = c.packed.clone();
        p.payload[i / 8] ^= 1 << (i % 8);
        let _ = decompress_clustered(cl.codebooks(), &c.ids, &p.view(), &mut out);
    }
}

#[test]
fn clusters_new_checks_its_parts() {
    let bytes = grouped(20, 6, 2, 1);
    let rows = Rows::new(&bytes, 6).unwrap();
    let cl = fit_clusters(rows, 2, &opts(ChunkSize::One)).unwrap();
    let cents = vec![rows.row(0).to_vec(), rows.row(1).to_vec()];
    let ok = Clusters::new(cl.codebooks().to_vec(), &cents).unwrap();
    assert_eq!(ok.assign(rows.row(1)).unwrap(), 1);
    assert_eq!(
        ok.assign(&[0; 5]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let e = Clusters::new(cl.codebooks().to_vec(), &cents[..1]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = Clusters::new(vec![], &[]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let mixed = vec![
        cl.codebooks()[0].clone(),
        cl.codebooks()[1].with_chunk(ChunkSize::Two),
    ];
    assert_eq!(
        Clusters::new(mixed, &cents).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn sweep_finds_local_invariance_and_never_loses() {
    // 8 groups with different fixed bits: one codebook sees little
    // invariance, 8 clusters see 5 of every 8 bits fixed.
    let (n, l) = (4000, 64);
    let bytes = grouped(n, l, 8, 77);
    let rows = Rows::new(&bytes, l).unwrap();
    let o = ClusterOptions::default().with_max_clusters(64);
    let s = sweep_clusters(rows, &o).unwrap();
    assert_eq!(s.points[0].k, 1);
    let ks: Vec<usize> = s.points.iter().map(|p| p.requested).collect();
    assert_eq!(ks, [1, 2, 4, 8, 16, 32, 64]);
    let best = s.chosen();
    assert!(best.k >= 8, "chose k = {}", best.k);
    assert!(best.net_savings() > s.single().net_savings() + 0.3);
    assert!(
        s.points
            .iter()
            .all(|p| p.total_bytes() >= best.total_bytes())
    );
    // The payload is measured with the real encoder: compressing the whole
    // dataset with the chosen clusters stores exactly that (the evaluation
    // sample is every tensor here).
    let c = compress_clustered(&s.clusters, rows).unwrap();
    assert_eq!(c.packed.payload.len() as u64, best.payload_bytes);
    assert_eq!(c.ids.as_bytes().len() as u64, best.id_bytes);
    let mut out = vec![0u8; bytes.len()];
    decompress_clustered(s.clusters.codebooks(), &c.ids, &c.packed.view(), &mut out).unwrap();
    assert_eq!(out, bytes);

    // Uniform random rows: nothing to gain, and the sweep keeps one codebook.
    let noise = grouped(2000, 16, 2000, 5);
    let s = sweep_clusters(Rows::new(&noise, 16).unwrap(), &o).unwrap();
    assert_eq!(s.best, 0);
    assert_eq!(s.clusters.k(), 1);
}
