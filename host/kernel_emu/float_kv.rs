//! The float-coded KV store's placement body
//! (`ibp_kernels::detail::float_kv::place`) on the emulated grid, against a
//! CPU model of the store: the CPU codec's stored forms (synthetic bf16
//! rows, a raw one every eleventh, staged at a stride as the encoder
//! writes them, poisoned past each) placed in successive appends, each row
//! in its slot when it fits, else in an overflow entry; the index entries,
//! the counters, the slots' bytes past each row (its last 16-byte piece
//! zeroed, the rest untouched), and an overflow area that fills up (the
//! rows past it refused, those before and after still placed).

use std::collections::HashSet;

use ibp_kernel_emu::{Buffer, Grid, launch};
use ibp_kernels::detail::float_kv::place;
use ibp_kernels::params::{FLOAT_KV_REFUSED, FloatKvPlaceParams};

use crate::Rows;
use crate::float_code::{FitOptions, FloatCoded, FloatType, compress, fit};

use super::float::synthetic;

const POISON: u8 = 0x5C;

/// A store's buffers as the kernel sees them.
struct Store {
    pages: Buffer,
    starts: Buffer,
    lens: Buffer,
    counters: Buffer,
    cap: u64,
    slot: u64,
    entry: u64,
    entries: u64,
}

impl Store {
    fn new(cap: u64, slot: u64, l: usize, entries: u64) -> Self {
        let entry = (l as u64).next_multiple_of(16);
        let span = cap * slot + entries * entry;
        Store {
            pages: Buffer::from_bytes(&vec![POISON; span as usize + 32]),
            starts: Buffer::zeroed(8 * cap as usize),
            lens: Buffer::zeroed(4 * cap as usize),
            counters: Buffer::from_slice(&[0u64, u64::MAX]),
            cap,
            slot,
            entry,
            entries,
        }
    }

    /// Place rows `rows` of `coded` as store rows from `first`, their
    /// stored forms in a stage as the encoder leaves them (a row every
    /// `⌈L⌉₁₆` bytes, poisoned past each), on a grid of `blocks` × `warps`.
    fn place(
        &self,
        coded: &FloatCoded,
        rows: std::ops::Range<usize>,
        first: u64,
        grid: (u32, u32),
    ) {
        let stride = self.entry as usize;
        let mut stage = vec![0xEE; rows.len() * stride];
        let mut sizes = Vec::new();
        for (k, i) in rows.clone().enumerate() {
            let r = &coded.payload()[coded.row_range(i).unwrap()];
            stage[k * stride..][..r.len()].copy_from_slice(r);
            sizes.push(r.len() as u64);
        }
        let stage = Buffer::from_bytes(&stage);
        let sizes = Buffer::from_slice(&sizes);
        let p = FloatKvPlaceParams {
            stage: stage.addr(),
            stage_stride: stride as u64,
            sizes: sizes.addr(),
            rows: rows.len() as u64,
            first,
            pages: self.pages.addr(),
            slot_bytes: self.slot,
            overflow_at: self.cap * self.slot,
            entry_bytes: self.entry,
            overflow_entries: self.entries,
            counters: self.counters.addr(),
            starts: self.starts.addr(),
            lens: self.lens.addr(),
        };
        launch(Grid::new(grid.0, grid.1), |lane| {
            let (w, n) = lane.global_warp();
            // SAFETY: every buffer is sized as FloatKvPlaceParams requires
            // (the stage a stride of 16 a row, the pages holding every slot
            // and entry) and outlives the launch.
            unsafe { place(lane, lane, &p, w, n) }
        });
    }
}

/// Check the store after rows `0 .. n` of `coded` were placed (store row
/// `r` is row `r`): every placed row's bytes, its slot's tail, the
/// overflow entries taken once each, the refused rows and the counters.
/// Returns the refused rows.
fn check(s: &Store, coded: &FloatCoded, n: usize) -> Vec<u64> {
    let pages = s.pages.bytes();
    let starts: &[u64] = s.starts.as_slice();
    let lens: &[u32] = s.lens.as_slice();
    let counters: &[u64] = s.counters.as_slice();
    let over_at = s.cap * s.slot;
    let (mut taken, mut refused, mut asked) = (HashSet::new(), Vec::new(), 0u64);
    for r in 0..n {
        let want = &coded.payload()[coded.row_range(r).unwrap()];
        let len = want.len() as u64;
        if len > s.slot {
            asked += 1;
        }
        if lens[r] == FLOAT_KV_REFUSED {
            assert!(len > s.slot, "row {r} fits its slot but was refused");
            assert_eq!(starts[r], 0);
            refused.push(r as u64);
            continue;
        }
        assert_eq!(lens[r] as u64, len, "row {r}'s length");
        let at = starts[r];
        if len <= s.slot {
            assert_eq!(at, r as u64 * s.slot, "row {r} is not in its slot");
        } else {
            assert!(at >= over_at, "row {r} overflows but is at {at}");
            let e = (at - over_at) / s.entry;
            assert_eq!(at, over_at + e * s.entry);
            assert!(e < s.entries && taken.insert(e), "entry {e} of row {r}");
        }
        let at = at as usize;
        assert_eq!(&pages[at..at + want.len()], want, "row {r}'s bytes");
        // The last 16-byte piece zeroed past the row; nothing after it
        // written (a slot's tail, an entry's).
        let piece_end = at + want.len().next_multiple_of(16);
        assert!(
            pages[at + want.len()..piece_end].iter().all(|&b| b == 0),
            "row {r}"
        );
        let room = if len <= s.slot { s.slot } else { s.entry } as usize;
        assert!(
            pages[piece_end..at + room].iter().all(|&b| b == POISON),
            "row {r}"
        );
    }
    // Untouched slots of refused rows.
    for &r in &refused {
        let a = (r * s.slot) as usize;
        assert!(pages[a..a + s.slot as usize].iter().all(|&b| b == POISON));
    }
    assert_eq!(
        counters[0], asked,
        "the counter counts every overflowing row"
    );
    assert_eq!(taken.len() as u64, asked.min(s.entries));
    assert_eq!(refused.len() as u64, asked.saturating_sub(s.entries));
    assert_eq!(
        counters[1],
        refused.iter().copied().min().unwrap_or(u64::MAX)
    );
    refused
}

/// bf16 rows of 200 values (400 bytes: not a multiple of 16), coded by the
/// CPU, a raw row every eleventh.
fn coded(rows: usize) -> FloatCoded {
    let t = FloatType::Bf16;
    let bytes = synthetic(t, rows, 200, 7);
    let rows = Rows::new(&bytes, 400).unwrap();
    compress(&fit(t, rows, &FitOptions::default()).unwrap(), rows).unwrap()
}

#[test]
fn emulated_float_kv_place_fills_slots_and_overflow_entries() {
    let c = coded(90);
    let lens: Vec<usize> = (0..90).map(|i| c.row_range(i).unwrap().len()).collect();
    let mut sorted = lens.clone();
    sorted.sort_unstable();
    // A slot that holds about three rows in four (rounded down to 16):
    // coded rows overflow too, not only the raw ones.
    let slot = sorted[67] as u64 / 16 * 16;
    assert!(slot < 400 && lens.iter().filter(|&&n| n as u64 > slot).count() > 9);
    let s = Store::new(100, slot, 400, 90);
    // Three appends, as pieces of a store's appends: 25, 1, 64 rows on
    // grids of several shapes (fewer warps than rows too).
    s.place(&c, 0..25, 0, (2, 4));
    s.place(&c, 25..26, 25, (1, 1));
    s.place(&c, 26..90, 26, (3, 2));
    assert!(check(&s, &c, 90).is_empty());
}

#[test]
fn emulated_float_kv_place_refuses_rows_past_a_full_overflow_area_and_keeps_the_others() {
    let c = coded(90);
    // A tiny slot: only the shortest rows fit, the rest ask for entries.
    let s = Store::new(90, 16 * 12, 400, 7);
    s.place(&c, 0..30, 0, (1, 2));
    let before = check(&s, &c, 30);
    s.place(&c, 30..90, 30, (2, 2));
    let refused = check(&s, &c, 90);
    assert!(!refused.is_empty());
    // What was refused in the first append stays so; nothing placed then
    // moved.
    assert!(before.iter().all(|r| refused.contains(r)));
    // No overflow area at all: every long row refused, short ones placed.
    let s = Store::new(90, 16 * 12, 400, 0);
    s.place(&c, 0..90, 0, (2, 4));
    assert!(!check(&s, &c, 90).is_empty());
}
