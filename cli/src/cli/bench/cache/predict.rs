//! `cargo test --release -p ibp-cli --features cuda --bin ibp -- --ignored predicted_placements --nocapture`:
//! the automatic placement the section's cells will take, on the CPU
//! (the same graph, tables, hot sets and rule), with each cell's share
//! of accesses found locally, on a peer and on the host.

use super::*;

#[test]
#[ignore]
fn predicted_placements() {
    let (v, e) = (2_400_000, 62_000_000);
    let g = rmat(v, e, SEED);
    let mut r = SplitMix(SEED ^ 1);
    let mut order: Vec<u32> = (0..v as u32).collect();
    for i in (1..v).rev() {
        order.swap(i, r.below(i as u64 + 1) as usize);
    }
    let mut seen = vec![0u64; v.div_ceil(64)];
    let gnn: Vec<Vec<u32>> = order
        .chunks(SEEDS_PER_BATCH)
        .take(4)
        .map(|s| sage_batch(&g, s, &FANOUTS, &mut r, &mut seen))
        .collect();
    let degrees: Vec<u64> = (0..v).map(|x| g.degree(x)).collect();
    let w = workload("GNN", gnn, &degrees, v);
    for (name, data, l) in super::super::real_tables().unwrap() {
        // The stored lengths `scaled_up` gives each vertex, without
        // building the scaled tables.
        let rows = Rows::new(&data, l).unwrap();
        let cb = ibp::fit::fit(rows, &Default::default()).unwrap().codebook;
        let small = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        let mut pr = SplitMix(SEED ^ 3);
        let len: Vec<u64> = (0..v)
            .map(|_| {
                let t = pr.below(rows.rows() as u64) as usize;
                small.offsets[t + 1] - small.offsets[t]
            })
            .collect();
        let stored = |r: u64| len[r as usize];
        let total = (v * l) as u64;
        for pct in BUDGETS {
            let budget = total * pct / 100;
            let rows: Vec<(u64, f64)> = w
                .hot
                .iter()
                .zip(&w.scores)
                .map(|(&h, &s)| (stored(h), s))
                .collect();
            for gpus in [2usize, 4] {
                let rep = ibp::gpu::replicated_rows(&rows, budget, gpus, &Default::default());
                // Fluid placement: R replicated, then partitioned rows
                // while the room lasts.
                let mut place = vec![0u8; v]; // 0 miss, 1 replicated, 2 partitioned
                let mut used = 0u64;
                let mut k = 0;
                while k < rep as usize {
                    place[w.hot[k] as usize] = 1;
                    used += rows[k].0;
                    k += 1;
                }
                let mut room = gpus as u64 * (budget - used);
                while k < rows.len() && rows[k].0 <= room {
                    place[w.hot[k] as usize] = 2;
                    room -= rows[k].0;
                    k += 1;
                }
                let (mut loc, mut peer, mut miss) = (0f64, 0f64, 0f64);
                for b in &w.batches {
                    for &id in b {
                        match place[id as usize] {
                            1 => loc += 1.0,
                            2 => {
                                loc += 1.0 / gpus as f64;
                                peer += (gpus - 1) as f64 / gpus as f64;
                            }
                            _ => miss += 1.0,
                        }
                    }
                }
                let n = loc + peer + miss;
                eprintln!(
                    "{name} {pct}% {gpus} GPUs: R = {rep} ({:.1}% of one budget), local {:.3} peer {:.3} miss {:.3}",
                    100.0 * rows[..rep as usize].iter().map(|r| r.0).sum::<u64>() as f64
                        / budget as f64,
                    loc / n,
                    peer / n,
                    miss / n
                );
            }
        }
    }
}
