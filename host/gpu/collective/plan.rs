//! Planning of the collectives in plain code, tested without a GPU: which
//! rank owns which rows ([`Partition`]), the pipeline's steps (each
//! owner's rows cut into pieces of about a chunk's bytes), the runs of
//! rows an all-to-all moves between each pair of ranks, and how each rank
//! packs them into one send per peer and unpacks what it receives.

use std::ops::Range;

use crate::error::{Error, Result};

/// Which rank owns which rows: rank `r` owns the contiguous rows
/// [`Partition::range`]`(r)`, and the ranges cover `0..rows` in rank order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// `ranks + 1` row numbers, non-decreasing, from 0 to the row count.
    bounds: Vec<u64>,
}

impl Partition {
    /// `rows` rows over `ranks` ranks as evenly as rows allow: the first
    /// `rows % ranks` ranks hold one row more.
    pub fn even(rows: u64, ranks: usize) -> Result<Self> {
        check_ranks(ranks)?;
        let n = ranks as u64;
        let (q, extra) = (rows / n, rows % n);
        let bounds = (0..=n).map(|r| r * q + r.min(extra)).collect();
        Ok(Self { bounds })
    }

    /// Every row on rank `root` (a broadcast's ownership).
    pub fn on_one(rows: u64, ranks: usize, root: usize) -> Result<Self> {
        check_ranks(ranks)?;
        if root >= ranks {
            return Err(Error::invalid(format!(
                "root rank {root} of {ranks} ranks; ranks count from 0"
            )));
        }
        let bounds = (0..=ranks)
            .map(|r| if r <= root { 0 } else { rows })
            .collect();
        Ok(Self { bounds })
    }

    /// Ranks' boundaries given: rank `r` owns `bounds[r]..bounds[r + 1]`.
    /// Errors ([`crate::ErrorKind::InvalidArgument`]) unless `bounds` has
    /// at least two entries, starts at 0 and never decreases.
    pub fn from_bounds(bounds: Vec<u64>) -> Result<Self> {
        if bounds.len() < 2 || bounds[0] != 0 || bounds.windows(2).any(|w| w[1] < w[0]) {
            return Err(Error::invalid(format!(
                "partition bounds {bounds:?}: give ranks + 1 row numbers from 0, never decreasing"
            )));
        }
        Ok(Self { bounds })
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.bounds.len() - 1
    }

    /// Number of rows.
    pub fn rows(&self) -> u64 {
        self.bounds[self.ranks()]
    }

    /// The rows rank `rank` owns (empty for a rank past the last).
    pub fn range(&self, rank: usize) -> Range<u64> {
        match (self.bounds.get(rank), self.bounds.get(rank + 1)) {
            (Some(&a), Some(&b)) => a..b,
            _ => 0..0,
        }
    }

    /// The rank that owns `row`, or `None` past the last row.
    pub fn owner(&self, row: u64) -> Option<usize> {
        if row >= self.rows() {
            return None;
        }
        // The first boundary past `row`, less one: empty ranks are skipped.
        Some(self.bounds.partition_point(|&b| b <= row) - 1)
    }
}

fn check_ranks(ranks: usize) -> Result<()> {
    if ranks == 0 || ranks > i32::MAX as usize {
        return Err(Error::invalid(format!(
            "{ranks} ranks; a partition needs 1 to 2^31 - 1"
        )));
    }
    Ok(())
}

/// The pipeline's steps: step `k` holds piece `k` of every owner's rows
/// (`(owner, rows)`, empty pieces left out), each piece the rows from
/// where the last ended whose bytes (`bytes_before(row)`: the stored bytes
/// before `row`) reach `chunk_bytes`, at least one row. Every row of
/// `part` is in exactly one piece, pieces of one owner in row order.
pub(crate) fn steps(
    part: &Partition,
    bytes_before: &dyn Fn(u64) -> u64,
    chunk_bytes: u64,
) -> Vec<Vec<(usize, Range<u64>)>> {
    let chunk = chunk_bytes.max(1);
    let mut out: Vec<Vec<(usize, Range<u64>)>> = Vec::new();
    for owner in 0..part.ranks() {
        let rows = part.range(owner);
        let (mut at, mut k) = (rows.start, 0);
        while at < rows.end {
            let want = bytes_before(at).saturating_add(chunk);
            // The first row whose end passes `want`, taken whole; at least
            // one row. Binary search: the bytes grow with the rows.
            let (mut lo, mut hi) = (at + 1, rows.end);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if bytes_before(mid) >= want {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            if out.len() <= k {
                out.push(Vec::new());
            }
            out[k].push((owner, at..lo));
            at = lo;
            k += 1;
        }
    }
    out
}

/// The bytes of rows `rows` in a payload where `bytes_before(row)` bytes
/// precede `row`: what one broadcast or one send of them moves, at the
/// same place on every rank.
pub(crate) fn bytes_of(bytes_before: &dyn Fn(u64) -> u64, rows: &Range<u64>) -> Range<u64> {
    bytes_before(rows.start)..bytes_before(rows.end)
}

/// `ranges` of rows sorted, with ranges that touch or overlap joined: one
/// decode launch each instead of one a piece (a rank's remote pieces of
/// one step are the other owners' rows, adjacent across owners). Empty
/// ranges are dropped.
pub(crate) fn merge_adjacent(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Rows an all-to-all moves: from rank `src` (their owner) to rank `dst`,
/// the consecutive rows `rows`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub src: usize,
    pub dst: usize,
    pub rows: Range<u64>,
}

/// The runs that bring every rank the rows it requests (`requests[dst]`,
/// any order, repeats allowed) that another rank owns: each rank's remote
/// rows sorted, without repeats, cut into runs of consecutive rows of one
/// owner. Two runs of one owner at most `max_gap` rows apart are merged
/// (the rows between travel too). Ordered by `dst`, then `src`, then row:
/// both ends of each pair walk the list in the same order, as NCCL's
/// matching of sends and receives needs.
///
/// Q: why send rows nobody asked for? A: each run is a send and a receive;
/// NCCL spends microseconds on each, while a few compressed rows in
/// between cost nanoseconds on the link. Random mini-batches are mostly
/// runs of one row.
///
/// Errors ([`crate::ErrorKind::InvalidArgument`]) for a request count
/// other than the ranks', or a row past the last.
pub(crate) fn exchange_runs(
    part: &Partition,
    requests: &[&[u64]],
    max_gap: u64,
) -> Result<Vec<Run>> {
    if requests.len() != part.ranks() {
        return Err(Error::invalid(format!(
            "{} request lists for {} ranks; give one per rank (empty for none)",
            requests.len(),
            part.ranks()
        )));
    }
    let mut runs = Vec::new();
    for (dst, req) in requests.iter().enumerate() {
        if let Some(&bad) = req.iter().find(|&&r| r >= part.rows()) {
            return Err(Error::invalid(format!(
                "rank {dst} requests row {bad}; there are {} rows",
                part.rows()
            )));
        }
        let mine = part.range(dst);
        let mut remote: Vec<u64> = req.iter().copied().filter(|r| !mine.contains(r)).collect();
        remote.sort_unstable();
        remote.dedup();
        // Sorted rows of ranks in order: the runs come out by src, then row.
        let mut i = 0;
        while i < remote.len() {
            let src = part.owner(remote[i]).unwrap_or(0);
            let end = part.range(src).end;
            let mut j = i + 1;
            while j < remote.len() && remote[j] - remote[j - 1] <= max_gap + 1 && remote[j] < end {
                j += 1;
            }
            runs.push(Run {
                src,
                dst,
                rows: remote[i]..remote[j - 1] + 1,
            });
            i = j;
        }
    }
    Ok(runs)
}

/// One rank's side of an all-to-all that moves each pair of ranks' runs
/// in one send: the runs it sends, packed back to back into its send
/// staging buffer, peer after peer in rank order; the runs it receives,
/// back to back in its receive staging buffer in the same order; and the
/// copies that pack and unpack them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PeerPlan {
    /// Per rank `p`: the bytes of the send staging buffer that go to `p`
    /// (empty for itself and for peers it sends nothing).
    pub send: Vec<Range<u64>>,
    /// Per rank `p`: the bytes of the receive staging buffer that come
    /// from `p`.
    pub recv: Vec<Range<u64>>,
    /// `[payload offset, staging offset, bytes]`: the runs it sends, from
    /// its payload into the send staging buffer.
    pub pack: Vec<[u64; 3]>,
    /// `[staging offset, payload offset, bytes]`: the runs it receives,
    /// from the receive staging buffer into their place in its payload.
    pub unpack: Vec<[u64; 3]>,
}

impl PeerPlan {
    /// Bytes of the send staging buffer.
    pub fn send_bytes(&self) -> u64 {
        self.send.iter().map(|r| r.end).max().unwrap_or(0)
    }

    /// Bytes of the receive staging buffer.
    pub fn recv_bytes(&self) -> u64 {
        self.recv.iter().map(|r| r.end).max().unwrap_or(0)
    }
}

/// Each of `ranks` ranks' [`PeerPlan`] for `runs` (as [`exchange_runs`]
/// orders them) in a payload where `bytes_before(row)` bytes precede
/// `row`. Runs of no bytes are left out.
///
/// Q: why does the receive side line up with the send side?
/// A: the sender packs its runs for peer `d` in the order the list holds
/// them (by row), and the receiver unpacks the bytes from `s` in the same
/// order: both walk the runs of the pair `(s, d)` alike, so the `k`-th
/// byte sent is the `k`-th received. One send per pair, so NCCL's matching
/// (in order per pair, inside a group) has nothing to reorder.
pub(crate) fn peer_plans(
    ranks: usize,
    runs: &[Run],
    bytes_before: &dyn Fn(u64) -> u64,
) -> Vec<PeerPlan> {
    let mut plans: Vec<PeerPlan> = (0..ranks)
        .map(|_| PeerPlan {
            send: vec![0..0; ranks],
            recv: vec![0..0; ranks],
            ..PeerPlan::default()
        })
        .collect();
    // The runs of each pair, in list order (by row within a pair).
    let mut pair: Vec<Vec<&Run>> = vec![Vec::new(); ranks * ranks];
    for run in runs {
        if run.src < ranks && run.dst < ranks && run.src != run.dst {
            pair[run.src * ranks + run.dst].push(run);
        }
    }
    for (s, plan) in plans.iter_mut().enumerate() {
        let mut at = 0u64;
        for d in 0..ranks {
            let start = at;
            for run in &pair[s * ranks + d] {
                let b = bytes_of(bytes_before, &run.rows);
                if b.end > b.start {
                    plan.pack.push([b.start, at, b.end - b.start]);
                    at += b.end - b.start;
                }
            }
            plan.send[d] = start..at;
        }
    }
    for (d, plan) in plans.iter_mut().enumerate() {
        let mut at = 0u64;
        for s in 0..ranks {
            let start = at;
            for run in &pair[s * ranks + d] {
                let b = bytes_of(bytes_before, &run.rows);
                if b.end > b.start {
                    plan.unpack.push([at, b.start, b.end - b.start]);
                    at += b.end - b.start;
                }
            }
            plan.recv[s] = start..at;
        }
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn an_even_partition_covers_every_row_once_in_rank_order() {
        for rows in [0u64, 1, 7, 8, 2708, 100_001] {
            for ranks in 1..=9 {
                let p = Partition::even(rows, ranks).unwrap();
                assert_eq!((p.ranks(), p.rows()), (ranks, rows));
                let mut next = 0;
                for r in 0..ranks {
                    let g = p.range(r);
                    assert_eq!(g.start, next);
                    let len = g.end - g.start;
                    assert!(len == rows / ranks as u64 || len == rows / ranks as u64 + 1);
                    next = g.end;
                }
                assert_eq!(next, rows);
                for row in [0, rows / 2, rows.saturating_sub(1)] {
                    if row < rows {
                        let o = p.owner(row).unwrap();
                        assert!(p.range(o).contains(&row), "{rows} {ranks} {row}");
                    }
                }
                assert_eq!(p.owner(rows), None);
            }
        }
    }

    #[test]
    fn owners_skip_empty_ranks_and_bad_bounds_are_refused() {
        let p = Partition::from_bounds(vec![0, 0, 5, 5, 9]).unwrap();
        assert_eq!(
            (p.owner(0), p.owner(4), p.owner(5), p.owner(8)),
            (Some(1), Some(1), Some(3), Some(3))
        );
        assert_eq!(p.range(0), 0..0);
        assert_eq!(p.range(7), 0..0);
        let b = Partition::on_one(10, 3, 1).unwrap();
        assert_eq!((b.range(0), b.range(1), b.range(2)), (0..0, 0..10, 10..10));
        for bad in [vec![], vec![0], vec![1, 2], vec![0, 5, 4]] {
            let e = Partition::from_bounds(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        }
        assert_eq!(
            Partition::even(5, 0).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            Partition::on_one(5, 2, 2).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn adjacent_pieces_merge_into_one_decode() {
        // Rank 1 of 4 after a one-step all-gather: the others' rows.
        assert_eq!(
            merge_adjacent(vec![0..10, 20..30, 30..40]),
            vec![0..10, 20..40]
        );
        assert_eq!(
            merge_adjacent(vec![30..40, 5..5, 10..30, 0..10]),
            vec![0..40]
        );
        assert_eq!(merge_adjacent(vec![0..5, 3..4, 8..9]), vec![0..5, 8..9]);
        assert!(merge_adjacent(vec![]).is_empty());
    }

    #[test]
    fn steps_cut_each_owners_rows_into_pieces_of_about_a_chunk() {
        // Rows of 10..=19 bytes.
        let mut offsets = vec![0u64];
        for i in 0..100u64 {
            offsets.push(offsets.last().unwrap() + 10 + i % 10);
        }
        let before = |r: u64| offsets[r as usize];
        let part = Partition::from_bounds(vec![0, 30, 30, 100]).unwrap();
        for chunk in [1, 15, 64, 500, 1 << 20] {
            let s = steps(&part, &before, chunk);
            let mut seen = vec![0u32; 100];
            for owner in 0..3 {
                let pieces: Vec<_> = s
                    .iter()
                    .flat_map(|st| st.iter().filter(|(o, _)| *o == owner))
                    .collect();
                let mut at = part.range(owner).start;
                for (i, (_, rows)) in pieces.iter().enumerate() {
                    assert_eq!(rows.start, at, "pieces in row order");
                    assert!(rows.end > rows.start);
                    let bytes = before(rows.end) - before(rows.start);
                    // Whole rows: the piece passes the chunk by less than
                    // its last row, and only the last piece falls short.
                    assert!(bytes < chunk + 19 || rows.end - rows.start == 1);
                    if i + 1 < pieces.len() {
                        assert!(bytes >= chunk);
                    }
                    for r in rows.clone() {
                        seen[r as usize] += 1;
                    }
                    at = rows.end;
                }
                assert_eq!(at, part.range(owner).end);
            }
            assert!(seen.iter().all(|&c| c == 1), "chunk {chunk}");
            assert!(s.iter().all(|st| !st.is_empty()));
        }
        // One chunk that holds all: one step, one piece per non-empty owner.
        let s = steps(&part, &before, u64::MAX);
        assert_eq!(s, vec![vec![(0, 0..30), (2, 30..100)]]);
    }

    #[test]
    fn runs_carry_each_remote_row_once_from_its_owner() {
        let part = Partition::even(20, 3).unwrap(); // 0..7, 7..14, 14..20
        let reqs: Vec<Vec<u64>> = vec![
            vec![19, 8, 9, 3, 10, 8, 14, 13, 6],
            vec![],
            vec![0, 1, 2, 15, 6, 7],
        ];
        let r: Vec<&[u64]> = reqs.iter().map(|v| v.as_slice()).collect();
        let runs = exchange_runs(&part, &r, 0).unwrap();
        let want = vec![
            Run {
                src: 1,
                dst: 0,
                rows: 8..11,
            },
            Run {
                src: 1,
                dst: 0,
                rows: 13..14,
            },
            Run {
                src: 2,
                dst: 0,
                rows: 14..15,
            },
            Run {
                src: 2,
                dst: 0,
                rows: 19..20,
            },
            Run {
                src: 0,
                dst: 2,
                rows: 0..3,
            },
            Run {
                src: 0,
                dst: 2,
                rows: 6..7,
            },
            Run {
                src: 1,
                dst: 2,
                rows: 7..8,
            },
        ];
        assert_eq!(runs, want);
        // A run never crosses an owner's boundary.
        let all: Vec<u64> = (0..20).collect();
        let runs = exchange_runs(&part, &[&[], &[], &all], 0).unwrap();
        assert_eq!(
            runs.iter().map(|r| r.rows.clone()).collect::<Vec<_>>(),
            vec![0..7, 7..14]
        );
        // Gaps of up to two rows merged, never across owners: rank 0's
        // 8..11 and 13 become 8..14; 14 and 19 stay apart (gap 4).
        let runs = exchange_runs(&part, &r, 2).unwrap();
        let got: Vec<_> = runs
            .iter()
            .map(|r| (r.src, r.dst, r.rows.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, 0, 8..14),
                (2, 0, 14..15),
                (2, 0, 19..20),
                (0, 2, 0..3),
                (0, 2, 6..7),
                (1, 2, 7..8)
            ]
        );
        let runs = exchange_runs(&part, &r, 100).unwrap();
        let got: Vec<_> = runs
            .iter()
            .map(|r| (r.src, r.dst, r.rows.clone()))
            .collect();
        assert_eq!(
            got,
            vec![(1, 0, 8..14), (2, 0, 14..20), (0, 2, 0..7), (1, 2, 7..8)]
        );
    }

    /// Rows of 1..=40 bytes, each byte its row's number: a payload whose
    /// every byte says which row it belongs to.
    fn payload(rows: u64) -> (Vec<u64>, Vec<u8>) {
        let mut offsets = vec![0u64];
        let mut bytes = Vec::new();
        for r in 0..rows {
            let len = 1 + (r * 7) % 40;
            bytes.extend(std::iter::repeat_n(r as u8, len as usize));
            offsets.push(bytes.len() as u64);
        }
        (offsets, bytes)
    }

    #[test]
    fn the_steps_in_place_broadcasts_rebuild_every_ranks_payload() {
        // The collective's walk, on the host: each rank starts with its
        // own rows' bytes; each step copies every piece from its owner to
        // every rank, at the same place.
        let (offsets, full) = payload(300);
        let before = |r: u64| offsets[r as usize];
        for ranks in 1..=5 {
            for part in [
                Partition::even(300, ranks).unwrap(),
                Partition::on_one(300, ranks, ranks - 1).unwrap(),
            ] {
                let mut bufs: Vec<Vec<u8>> = (0..ranks)
                    .map(|r| {
                        let mut b = vec![0xEEu8; full.len()];
                        let own = bytes_of(&before, &part.range(r));
                        let own = own.start as usize..own.end as usize;
                        b[own.clone()].copy_from_slice(&full[own]);
                        b
                    })
                    .collect();
                for step in steps(&part, &before, 97) {
                    for (owner, piece) in &step {
                        let b = bytes_of(&before, piece);
                        let b = b.start as usize..b.end as usize;
                        let src = bufs[*owner][b.clone()].to_vec();
                        for buf in bufs.iter_mut() {
                            buf[b.clone()].copy_from_slice(&src);
                        }
                    }
                }
                assert!(bufs.iter().all(|b| *b == full), "{ranks} ranks, {part:?}");
            }
        }
    }

    #[test]
    fn the_runs_sends_bring_every_requested_row() {
        let (offsets, full) = payload(500);
        let before = |r: u64| offsets[r as usize];
        let mut x = 0x1234_5678u64;
        for ranks in 1..=4 {
            let part = Partition::even(500, ranks).unwrap();
            let requests: Vec<Vec<u64>> = (0..ranks)
                .map(|_| {
                    (0..120)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x % 500
                        })
                        .collect()
                })
                .collect();
            let req: Vec<&[u64]> = requests.iter().map(|v| v.as_slice()).collect();
            for gap in [0, 3, 50] {
                let mut bufs: Vec<Vec<u8>> = (0..ranks)
                    .map(|r| {
                        let mut b = vec![0xEEu8; full.len()];
                        let own = bytes_of(&before, &part.range(r));
                        let own = own.start as usize..own.end as usize;
                        b[own.clone()].copy_from_slice(&full[own]);
                        b
                    })
                    .collect();
                for run in exchange_runs(&part, &req, gap).unwrap() {
                    assert_ne!(run.src, run.dst);
                    assert!(part.range(run.src).start <= run.rows.start);
                    assert!(run.rows.end <= part.range(run.src).end);
                    let b = bytes_of(&before, &run.rows);
                    let b = b.start as usize..b.end as usize;
                    let src = bufs[run.src][b.clone()].to_vec();
                    bufs[run.dst][b].copy_from_slice(&src);
                }
                for (r, q) in requests.iter().enumerate() {
                    for &id in q {
                        let b = bytes_of(&before, &(id..id + 1));
                        let b = b.start as usize..b.end as usize;
                        assert!(
                            bufs[r][b.clone()] == full[b],
                            "{ranks} ranks, gap {gap}: rank {r}, row {id}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn peer_plans_pack_each_pairs_runs_in_row_order_peer_after_peer() {
        // 0..7, 7..14, 14..20; rows of 10 bytes.
        let part = Partition::even(20, 3).unwrap();
        let reqs: Vec<Vec<u64>> = vec![vec![19, 8, 9, 3, 10, 14, 13], vec![], vec![0, 1, 15, 6, 7]];
        let r: Vec<&[u64]> = reqs.iter().map(|v| v.as_slice()).collect();
        let runs = exchange_runs(&part, &r, 0).unwrap();
        let p = peer_plans(3, &runs, &|row| 10 * row);
        // Rank 0 sends rows 0..2 and 6 to rank 2 (nothing to rank 1).
        assert_eq!(p[0].pack, vec![[0, 0, 20], [60, 20, 10]]);
        assert_eq!(p[0].send, vec![0..0, 0..0, 0..30]);
        // Rank 1 sends 8..11 and 13 to rank 0, then 7 to rank 2.
        assert_eq!(p[1].pack, vec![[80, 0, 30], [130, 30, 10], [70, 40, 10]]);
        assert_eq!(p[1].send, vec![0..40, 40..40, 40..50]);
        // Rank 2 sends 14 and 19 to rank 0.
        assert_eq!(p[2].pack, vec![[140, 0, 10], [190, 10, 10]]);
        // Rank 0 receives rank 1's runs, then rank 2's, each in row order,
        // each back at its payload offset.
        assert_eq!(p[0].recv, vec![0..0, 0..40, 40..60]);
        assert_eq!(
            p[0].unpack,
            vec![[0, 80, 30], [30, 130, 10], [40, 140, 10], [50, 190, 10]]
        );
        assert!(p[1].unpack.is_empty() && p[1].recv_bytes() == 0);
        assert_eq!(p[2].recv, vec![0..30, 30..40, 40..40]);
        assert_eq!(p[2].unpack, vec![[0, 0, 20], [20, 60, 10], [30, 70, 10]]);
        // Each pair's send and receive are the same size.
        for s in 0..3 {
            for d in 0..3 {
                let (a, b) = (&p[s].send[d], &p[d].recv[s]);
                assert_eq!(a.end - a.start, b.end - b.start, "{s} -> {d}");
            }
            assert_eq!(
                p[s].send_bytes(),
                p[s].pack.iter().map(|x| x[2]).sum::<u64>()
            );
        }
        // Runs of no bytes are left out.
        let p = peer_plans(3, &runs, &|row| row.saturating_sub(14));
        assert!(p[0].pack.is_empty() && p[1].pack.is_empty());
        assert_eq!(p[2].pack, vec![[0, 0, 1], [5, 1, 1]]);
        assert_eq!(p[0].unpack, vec![[0, 0, 1], [1, 5, 1]]);
        assert_eq!(p[0].recv, vec![0..0, 0..0, 0..2]);
    }

    #[test]
    fn packed_sends_bring_every_requested_row() {
        // The all-to-all's walk on the host: pack each rank's runs into
        // its send buffer, one copy per pair into the receiver's buffer,
        // unpack into the payload; every requested row arrives.
        let (offsets, full) = payload(500);
        let before = |r: u64| offsets[r as usize];
        let mut x = 0x2545_f491u64;
        for ranks in 1..=5 {
            let part = Partition::even(500, ranks).unwrap();
            let requests: Vec<Vec<u64>> = (0..ranks)
                .map(|_| {
                    (0..150)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x % 500
                        })
                        .collect()
                })
                .collect();
            let req: Vec<&[u64]> = requests.iter().map(|v| v.as_slice()).collect();
            for gap in [0, 4] {
                let mut bufs: Vec<Vec<u8>> = (0..ranks)
                    .map(|r| {
                        let mut b = vec![0xEEu8; full.len()];
                        let own = bytes_of(&before, &part.range(r));
                        let own = own.start as usize..own.end as usize;
                        b[own.clone()].copy_from_slice(&full[own]);
                        b
                    })
                    .collect();
                let runs = exchange_runs(&part, &req, gap).unwrap();
                let plans = peer_plans(ranks, &runs, &before);
                let copy = |from: &[u8], to: &mut [u8], list: &[[u64; 3]]| {
                    for &[s, d, n] in list {
                        let (s, d, n) = (s as usize, d as usize, n as usize);
                        to[d..d + n].copy_from_slice(&from[s..s + n]);
                    }
                };
                let sends: Vec<Vec<u8>> = (0..ranks)
                    .map(|r| {
                        let mut st = vec![0u8; plans[r].send_bytes() as usize];
                        copy(&bufs[r], &mut st, &plans[r].pack);
                        st
                    })
                    .collect();
                for d in 0..ranks {
                    let mut rv = vec![0xCCu8; plans[d].recv_bytes() as usize];
                    for s in 0..ranks {
                        let (a, b) = (&plans[s].send[d], &plans[d].recv[s]);
                        rv[b.start as usize..b.end as usize]
                            .copy_from_slice(&sends[s][a.start as usize..a.end as usize]);
                    }
                    copy(&rv, &mut bufs[d], &plans[d].unpack);
                }
                for (r, q) in requests.iter().enumerate() {
                    for &id in q {
                        let b = bytes_of(&before, &(id..id + 1));
                        let b = b.start as usize..b.end as usize;
                        assert!(
                            bufs[r][b.clone()] == full[b],
                            "{ranks} ranks, gap {gap}: rank {r}, row {id}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bad_requests_are_invalid_arguments() {
        let part = Partition::even(20, 2).unwrap();
        let e = exchange_runs(&part, &[&[1]], 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let e = exchange_runs(&part, &[&[1], &[20]], 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("row 20"), "{e}");
    }
}
