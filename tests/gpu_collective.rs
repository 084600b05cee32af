//! The compressed collectives through NCCL (`ibp::gpu::collective`):
//! all-gather, broadcast and all-to-all of compressed rows, and the raw
//! all-gather and all-to-all, on one GPU and on every GPU present, each rank's output
//! compared bit for bit with the CPU decode; the all-gather's compressed,
//! raw and automatic ways alike. Prints `skipped: no CUDA
//! device`, `skipped: NCCL not found` or `skipped: needs 2 GPUs` when the
//! machine lacks them (a failure with `IBP_REQUIRE_GPU=1`, and fewer than
//! `IBP_REQUIRE_GPUS` GPUs a failure too).
#![cfg(feature = "nccl")]

mod common;

use common::{Rng, gpu_or_skip, gpu_required, notice};
use ibp::codebook::{ChunkSize, Codebook, Threshold};
use ibp::gpu::collective::{
    CollectiveOptions, Communicator, Exchange, GatherPath, Partition, RawRows, ShardedRows,
};
use ibp::gpu::{Gpu, copy_to_host_blocking};
use ibp::layout::{LayoutOptions, Packed, compress_packed, decompress_packed};
use ibp::{ErrorKind, Rows};

/// The GPU counts to test: 1 and every GPU present (once when that is 1),
/// or `None` after a visible skip. NCCL's NVLink multicast must be off
/// (`NCCL_NVLS_ENABLE=0`: the shared machines forbid it).
fn gpu_counts(test: &str) -> Option<Vec<u32>> {
    gpu_or_skip(test)?;
    if let Err(e) = Communicator::nccl_version() {
        if gpu_required() {
            panic!("{test}: NCCL required but unusable: {e}");
        }
        notice(&format!("{test}: skipped: NCCL not found ({e})"));
        return None;
    }
    assert_eq!(
        std::env::var("NCCL_NVLS_ENABLE").as_deref(),
        Ok("0"),
        "{test}: set NCCL_NVLS_ENABLE=0 (NVLink multicast stays off; scripts/device-collective.sh sets it)"
    );
    let n = Gpu::count();
    // IBP_REQUIRE_GPUS=k: fewer than k GPUs is a failure, not a skip (the
    // multi-GPU machine's script sets it).
    if let Some(k) = std::env::var("IBP_REQUIRE_GPUS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        assert!(
            n >= k,
            "{test}: {k} GPUs required (IBP_REQUIRE_GPUS), {n} found"
        );
    }
    Some(if n > 1 { vec![1, n] } else { vec![1] })
}

fn communicator(gpus: u32) -> Communicator {
    Communicator::new(&(0..gpus).collect::<Vec<_>>()).expect("communicator")
}

/// `n` rows of `l` bytes, most close to one base row, every fifth random
/// (stored raw); a codebook fitted to them; the packed layout.
fn synthetic(rng: &mut Rng, l: usize, n: usize) -> (Vec<u8>, Codebook, Packed) {
    let base: Vec<u8> = (0..l).map(|_| rng.next() as u8).collect();
    let mut data = Vec::with_capacity(l * n);
    for i in 0..n {
        for &b in &base {
            let r = rng.next();
            data.push(match (i % 5 == 4, r % 16) {
                (true, _) | (false, 0) => (r >> 8) as u8,
                (false, 1) => b ^ (1 << ((r >> 16) % 8)),
                _ => b,
            });
        }
    }
    let rows = Rows::new(&data, l).unwrap();
    let counts = ibp::fit::count_bits(rows);
    let t = Threshold::from_basis_points(8000).unwrap();
    let cb = Codebook::from_counts(&counts, n as u64, t, ChunkSize::ALL[1]).unwrap();
    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    (data, cb, packed)
}

/// Cora's features (the repository's `data/cora-features.npz`), fitted
/// and packed.
fn cora() -> (Vec<u8>, Codebook, Packed) {
    let npz = ibp::io::InputFile::open(
        &common::data_file("cora-features.npz")
            .expect("cora-features.npz (data/ in the repository)"),
    )
    .unwrap();
    let (_, data, l) = ibp_testdata::real_tables(npz.bytes(), None)
        .unwrap()
        .swap_remove(0);
    let rows = Rows::new(&data, l).unwrap();
    let fitted = ibp::fit::fit(rows, &Default::default()).unwrap();
    let packed = compress_packed(&fitted.codebook, rows, &LayoutOptions::default()).unwrap();
    (data, fitted.codebook, packed)
}

/// The CPU decode of `packed`, checked equal to the original rows.
fn cpu_decode(cb: &Codebook, packed: &Packed, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    decompress_packed(cb, &packed.view(), &mut out).unwrap();
    assert!(out == data, "the CPU decode differs from the rows");
    out
}

fn datasets() -> Vec<(String, Vec<u8>, Codebook, Packed)> {
    let mut rng = Rng(39);
    let mut out = Vec::new();
    for (l, n) in [(64usize, 1000usize), (1001, 97), (4096, 33)] {
        let (d, cb, p) = synthetic(&mut rng, l, n);
        out.push((format!("synthetic L={l} N={n}"), d, cb, p));
    }
    let (d, cb, p) = cora();
    out.push(("Cora".into(), d, cb, p));
    out
}

#[test]
fn all_gather_delivers_every_row_to_every_rank() {
    let Some(counts) = gpu_counts("all_gather_delivers_every_row_to_every_rank") else {
        return;
    };
    let sets = datasets();
    for &g in &counts {
        let mut comm = communicator(g);
        for (name, data, cb, packed) in &sets {
            let want = cpu_decode(cb, packed, data);
            let part = Partition::even(packed.rows as u64, comm.ranks()).unwrap();
            let rows = ShardedRows::upload(&comm, cb, &packed.view(), part).unwrap();
            // One step for all, and pieces of a few rows (many steps).
            for chunk in [u64::MAX, 700] {
                let opts = CollectiveOptions::default().with_chunk_bytes(chunk);
                let mut out = comm.alloc_outputs(data.len() as u64).unwrap();
                comm.all_gather(&rows, &mut out, &opts).unwrap();
                comm.finish_blocking().unwrap();
                for (r, o) in out.iter().enumerate() {
                    comm.gpu(r).make_current().unwrap();
                    let got = copy_to_host_blocking(o).unwrap();
                    assert!(
                        got == want,
                        "{name}: {g} GPUs, chunk {chunk}: rank {r} differs"
                    );
                }
            }
        }
    }
}

#[test]
fn the_raw_all_gather_delivers_the_same_rows() {
    let Some(counts) = gpu_counts("the_raw_all_gather_delivers_the_same_rows") else {
        return;
    };
    let (data, _, packed) = cora();
    let n = packed.rows as u64;
    for &g in &counts {
        let mut comm = communicator(g);
        // Even (Cora's 2708 rows: NCCL's all-gather on 2 or 4 GPUs), and
        // uneven (the broadcasts).
        let mut uneven = vec![0u64, 1000];
        uneven.resize(g as usize, 1000);
        uneven.push(n);
        for part in [
            Partition::even(n, comm.ranks()).unwrap(),
            Partition::from_bounds(uneven).unwrap(),
        ] {
            let raw = RawRows::upload(&comm, &data, packed.row_bytes, part.clone()).unwrap();
            let opts = CollectiveOptions::default().with_chunk_bytes(1 << 16);
            comm.all_gather_raw(&raw, &opts).unwrap();
            comm.finish_blocking().unwrap();
            for r in 0..comm.ranks() {
                comm.gpu(r).make_current().unwrap();
                let got = copy_to_host_blocking(raw.buffer(r)).unwrap();
                assert!(got == data, "{g} GPUs, {part:?}: rank {r} differs");
            }
        }
    }
}

#[test]
fn broadcast_from_any_root_delivers_the_weights() {
    let Some(counts) = gpu_counts("broadcast_from_any_root_delivers_the_weights") else {
        return;
    };
    let mut rng = Rng(7);
    let (data, cb, packed) = synthetic(&mut rng, 768, 500);
    let want = cpu_decode(&cb, &packed, &data);
    for &g in &counts {
        let mut comm = communicator(g);
        for root in [0, comm.ranks() - 1] {
            let part = Partition::on_one(packed.rows as u64, comm.ranks(), root).unwrap();
            let rows = ShardedRows::upload(&comm, &cb, &packed.view(), part).unwrap();
            let mut out = comm.alloc_outputs(data.len() as u64).unwrap();
            let opts = CollectiveOptions::default().with_chunk_bytes(10_000);
            comm.broadcast(&rows, &mut out, &opts).unwrap();
            comm.finish_blocking().unwrap();
            for (r, o) in out.iter().enumerate() {
                comm.gpu(r).make_current().unwrap();
                let got = copy_to_host_blocking(o).unwrap();
                assert!(got == want, "{g} GPUs, root {root}: rank {r} differs");
            }
        }
        // Rows spread over ranks are not a broadcast.
        if comm.ranks() > 1 {
            let part = Partition::even(packed.rows as u64, comm.ranks()).unwrap();
            let rows = ShardedRows::upload(&comm, &cb, &packed.view(), part).unwrap();
            let mut out = comm.alloc_outputs(data.len() as u64).unwrap();
            let e = comm
                .broadcast(&rows, &mut out, &CollectiveOptions::default())
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        }
    }
}

#[test]
fn all_to_all_delivers_each_ranks_mini_batch() {
    let Some(counts) = gpu_counts("all_to_all_delivers_each_ranks_mini_batch") else {
        return;
    };
    let mut rng = Rng(11);
    let sets = datasets();
    for &g in &counts {
        let mut comm = communicator(g);
        for (name, data, cb, packed) in &sets {
            let want = cpu_decode(cb, packed, data);
            let l = packed.row_bytes;
            let n = packed.rows as u64;
            let part = Partition::even(n, comm.ranks()).unwrap();
            let rows = ShardedRows::upload(&comm, cb, &packed.view(), part).unwrap();
            // Random ids with repeats, a run of consecutive ones, and an
            // empty list on the last rank when there are several.
            let requests: Vec<Vec<u64>> = (0..comm.ranks())
                .map(|r| {
                    if r > 0 && r == comm.ranks() - 1 {
                        return Vec::new();
                    }
                    let mut v: Vec<u64> = (0..300).map(|_| rng.next() % n).collect();
                    v.extend(0..n.min(20));
                    v
                })
                .collect();
            let req: Vec<&[u64]> = requests.iter().map(|v| v.as_slice()).collect();
            // Runs of asked-for rows only, and runs merged over gaps.
            let gap = if name.starts_with("Cora") { 3 } else { 0 };
            let ex = Exchange::new_blocking(&comm, &rows, &req, gap).unwrap();
            // One send a pair of ranks at most, whatever the runs.
            let ranks = comm.ranks();
            assert!(ex.sends() <= ranks * (ranks - 1), "{} sends", ex.sends());
            let outs = |comm: &Communicator| -> Vec<_> {
                requests
                    .iter()
                    .enumerate()
                    .map(|(r, q)| {
                        comm.gpu(r).make_current().unwrap();
                        cust_zeroed((q.len() * l).max(1))
                    })
                    .collect()
            };
            let (mut out, mut again) = (outs(&comm), outs(&comm));
            // The same exchange twice back to back, the second time into a
            // fresh upload (whose remote rows are not in place yet): the
            // second call's packs reuse the staging of the first's sends.
            let fresh =
                ShardedRows::upload(&comm, cb, &packed.view(), rows.partition().clone()).unwrap();
            comm.all_to_all(&rows, &ex, &mut out, &CollectiveOptions::default())
                .unwrap();
            comm.all_to_all(&fresh, &ex, &mut again, &CollectiveOptions::default())
                .unwrap();
            comm.finish_blocking().unwrap();
            for (r, q) in requests.iter().enumerate() {
                comm.gpu(r).make_current().unwrap();
                for (k, o) in [&out[r], &again[r]].into_iter().enumerate() {
                    let got = copy_to_host_blocking(o).unwrap();
                    for (i, &id) in q.iter().enumerate() {
                        let (i, id) = (i * l, id as usize * l);
                        assert!(
                            got[i..i + l] == want[id..id + l],
                            "{name}: {g} GPUs: rank {r}, call {k}, output row {}",
                            i / l
                        );
                    }
                }
            }
        }
    }
}

fn cust_zeroed(bytes: usize) -> ibp::gpu::cust::memory::DeviceBuffer<u8> {
    ibp::gpu::cust::memory::DeviceBuffer::zeroed(bytes).unwrap()
}

#[test]
fn an_uneven_partition_with_an_empty_rank_gathers_across_gpus() {
    let test = "an_uneven_partition_with_an_empty_rank_gathers_across_gpus";
    let Some(counts) = gpu_counts(test) else {
        return;
    };
    let g = *counts.last().unwrap();
    if g < 2 {
        notice(&format!("{test}: skipped: needs 2 GPUs (found {g})"));
        return;
    }
    let mut rng = Rng(5);
    let (data, cb, packed) = synthetic(&mut rng, 200, 301);
    let want = cpu_decode(&cb, &packed, &data);
    let mut comm = communicator(g);
    // Rank 0 owns nothing; with three ranks or more, rank 1 owns one row
    // and the ranks between it and the last none; the last owns the rest.
    let mut bounds = vec![0u64, 0];
    if g > 2 {
        bounds.push(1);
    }
    bounds.resize(g as usize, 1);
    bounds.push(301);
    assert_eq!(bounds.len(), g as usize + 1);
    let part = Partition::from_bounds(bounds).unwrap();
    let rows = ShardedRows::upload(&comm, &cb, &packed.view(), part).unwrap();
    let mut out = comm.alloc_outputs(data.len() as u64).unwrap();
    comm.all_gather(
        &rows,
        &mut out,
        &CollectiveOptions::default().with_chunk_bytes(1000),
    )
    .unwrap();
    comm.finish_blocking().unwrap();
    for (r, o) in out.iter().enumerate() {
        comm.gpu(r).make_current().unwrap();
        assert!(
            copy_to_host_blocking(o).unwrap() == want,
            "rank {r} differs"
        );
    }
}

#[test]
fn bad_outputs_and_partitions_are_invalid_arguments_before_any_work() {
    let Some(_) = gpu_counts("bad_outputs_and_partitions_are_invalid_arguments_before_any_work")
    else {
        return;
    };
    let mut rng = Rng(3);
    let (data, cb, packed) = synthetic(&mut rng, 64, 100);
    let mut comm = communicator(1);
    let wrong = Partition::even(99, 1).unwrap();
    let e = ShardedRows::upload(&comm, &cb, &packed.view(), wrong)
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let part = Partition::even(100, 1).unwrap();
    let rows = ShardedRows::upload(&comm, &cb, &packed.view(), part).unwrap();
    let mut short = comm.alloc_outputs(data.len() as u64 - 1).unwrap();
    let e = comm
        .all_gather(&rows, &mut short, &CollectiveOptions::default())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = Exchange::new_blocking(&comm, &rows, &[&[100]], 0)
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // An exchange's copy lists fit the layout it was planned for: rows of
    // another layout (same partition) are refused.
    let (other, ocb, opacked) = synthetic(&mut rng, 64, 100);
    assert_ne!(other, data);
    let ex = Exchange::new_blocking(&comm, &rows, &[&[1, 2]], 0).unwrap();
    let orows =
        ShardedRows::upload(&comm, &ocb, &opacked.view(), rows.partition().clone()).unwrap();
    let mut out = comm.alloc_outputs(2 * 64).unwrap();
    if opacked.offsets != packed.offsets {
        let e = comm
            .all_to_all(&orows, &ex, &mut out, &CollectiveOptions::default())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
    comm.finish_blocking().unwrap();
}

#[test]
fn the_raw_all_to_all_puts_each_requested_row_in_place() {
    let Some(counts) = gpu_counts("the_raw_all_to_all_puts_each_requested_row_in_place") else {
        return;
    };
    let mut rng = Rng(13);
    let (data, cb, packed) = cora();
    let (l, n) = (packed.row_bytes, packed.rows as u64);
    for &g in &counts {
        let mut comm = communicator(g);
        let part = Partition::even(n, comm.ranks()).unwrap();
        let rows = ShardedRows::upload(&comm, &cb, &packed.view(), part.clone()).unwrap();
        let raw = RawRows::upload(&comm, &data, l, part).unwrap();
        let requests: Vec<Vec<u64>> = (0..comm.ranks())
            .map(|_| (0..200).map(|_| rng.next() % n).collect())
            .collect();
        let req: Vec<&[u64]> = requests.iter().map(|v| v.as_slice()).collect();
        for gap in [0, 5] {
            let ex = Exchange::new_blocking(&comm, &rows, &req, gap).unwrap();
            comm.all_to_all_raw(&raw, &ex).unwrap();
            comm.finish_blocking().unwrap();
            for (r, q) in requests.iter().enumerate() {
                comm.gpu(r).make_current().unwrap();
                let got = copy_to_host_blocking(raw.buffer(r)).unwrap();
                for &id in q {
                    let at = id as usize * l;
                    assert!(
                        got[at..at + l] == data[at..at + l],
                        "{g} GPUs, gap {gap}: rank {r}, row {id}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_path_delivers_the_same_rows_bit_for_bit() {
    let test = "every_path_delivers_the_same_rows_bit_for_bit";
    let Some(counts) = gpu_counts(test) else {
        return;
    };
    let (data, cb, packed) = cora();
    let want = cpu_decode(&cb, &packed, &data);
    let n = packed.rows as u64;
    const POISON: u8 = 0xA5;
    const GUARD: usize = 256;
    for &g in &counts {
        let mut comm = communicator(g);
        let ranks = comm.ranks();
        // Even (NCCL's all-gather on the raw way), uneven with an empty
        // rank (pipelined broadcasts), and one owner (a broadcast).
        let mut uneven = vec![0u64, 0];
        uneven.resize(ranks, 700);
        uneven.push(n);
        let parts = [
            Partition::even(n, ranks).unwrap(),
            Partition::from_bounds(uneven[uneven.len() - ranks - 1..].to_vec()).unwrap(),
            Partition::on_one(n, ranks, ranks - 1).unwrap(),
        ];
        for part in parts {
            let rows = ShardedRows::upload(&comm, &cb, &packed.view(), part.clone()).unwrap();
            for path in [GatherPath::Compressed, GatherPath::Raw, GatherPath::Auto] {
                for chunk in [u64::MAX, 20_000] {
                    let opts = CollectiveOptions::default()
                        .with_chunk_bytes(chunk)
                        .with_path(path);
                    let mut out: Vec<_> = (0..ranks)
                        .map(|r| {
                            comm.gpu(r).make_current().unwrap();
                            ibp::gpu::cust::memory::DeviceBuffer::from_slice(&vec![
                                POISON;
                                data.len()
                                    + GUARD
                            ])
                            .unwrap()
                        })
                        .collect();
                    let took = comm.all_gather(&rows, &mut out, &opts).unwrap();
                    comm.finish_blocking().unwrap();
                    match path {
                        GatherPath::Auto => assert_ne!(took, GatherPath::Auto),
                        p => assert_eq!(took, p),
                    }
                    for (r, o) in out.iter().enumerate() {
                        comm.gpu(r).make_current().unwrap();
                        let got = copy_to_host_blocking(o).unwrap();
                        assert!(
                            got[..data.len()] == want[..],
                            "{g} GPUs, {part:?}, {path:?} (took {took:?}), chunk {chunk}: rank {r} differs"
                        );
                        assert!(
                            got[data.len()..].iter().all(|&b| b == POISON),
                            "{g} GPUs, {path:?}: rank {r} written past its rows"
                        );
                    }
                }
            }
            // The rates behind the automatic way were measured once and
            // kept (one rank: no link to measure, no choice made).
            if ranks > 1 {
                let r = comm.known_rates(&rows).expect("measured");
                assert!(r.link > 0.0 && r.step_s > 0.0 && r.decode > 0.0, "{r:?}");
                let p = ibp::gpu::collective::predict_paths(
                    &comm.path_sizes(&rows, &CollectiveOptions::default()),
                    &r,
                );
                notice(&format!(
                    "{test}: {g} GPUs, {part:?}: {r:?}; predicted compressed {:.1} µs, raw {:.1} µs",
                    p.0 * 1e6,
                    p.1 * 1e6
                ));
            }
        }
    }
}
