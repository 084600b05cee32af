//! The emulated machine against the PTX semantics it stands in for:
//! shuffles and ballot, the block barrier and shared memory, `cp.async`
//! landing only when waited for, the launch's ids, and the two failures a
//! body can cause (a panicking lane, lanes that disagree on their
//! shuffles).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use ibp_kernel_emu::{Buffer, Grid, SHARED_FILL, launch, run_block, run_warp, run_warp_with};
use ibp_kernels::simt::{Async, Block, Lanes, Mem, Shared, exclusive_scan, inclusive_scan};

/// A lane's input: distinct, and odd for about half the lanes.
fn input(lane: u32) -> u32 {
    lane.wrapping_mul(0x9e37_79b9) ^ 0x5bd1
}

#[test]
fn shuffles_and_ballot_follow_the_ptx_semantics() {
    let got = Mutex::new(vec![[0u32; 8]; 32]);
    run_warp(|w| {
        let l = w.lane();
        let x = input(l);
        let r = [
            w.shfl_up(x, 3),
            w.shfl_down(x, 5),
            w.shfl_idx(x, 31 - l),
            w.shfl_xor(x, 6),
            w.ballot(x & 1 == 1),
            w.shfl_up_add(x, 4),
            inclusive_scan(w, l),
            exclusive_scan(w, l).0,
        ];
        got.lock().unwrap()[l as usize] = r;
    });
    let x: Vec<u32> = (0..32).map(input).collect();
    let ballot = (0..32)
        .filter(|&l| x[l] & 1 == 1)
        .map(|l| 1u32 << l)
        .sum::<u32>();
    for (l, r) in got.into_inner().unwrap().into_iter().enumerate() {
        let own = x[l];
        let want = [
            if l >= 3 { x[l - 3] } else { own },
            if l + 5 < 32 { x[l + 5] } else { own },
            x[31 - l],
            x[l ^ 6],
            ballot,
            if l >= 4 {
                own.wrapping_add(x[l - 4])
            } else {
                own
            },
            (0..=l as u32).sum(),
            (0..l as u32).sum(),
        ];
        assert_eq!(r, want, "lane {l}");
    }
}

#[test]
fn the_block_barrier_publishes_shared_memory_to_every_warp() {
    // Each warp writes its slice of shared memory, the block meets, then
    // every thread reads another warp's slice: without the barrier the
    // first warp to run would read bytes not yet written.
    let smem = Buffer::zeroed(4 * 128);
    let out = Buffer::zeroed(4 * 128);
    run_block(4, smem.addr(), |w, warp| {
        let t = 32 * warp + w.lane();
        // SAFETY: t < 128, the shared buffer holds 128 u32s.
        unsafe { w.sts_u32(4 * t, 1000 + t) };
        w.sync_threads();
        let from = (t + 32) % 128;
        // SAFETY: as above; `out` holds 128 u32s.
        unsafe { w.st_u32(out.addr() + 4 * t as u64, w.lds_u32(4 * from)) };
    });
    let want: Vec<u32> = (0..128).map(|t| 1000 + (t + 32) % 128).collect();
    assert_eq!(out.as_slice::<u32>(), &want[..]);
}

#[test]
fn async_copies_land_only_at_the_wait_that_covers_them() {
    let src = Buffer::from_slice(&(0..32 * 8).collect::<Vec<u32>>());
    let smem = Buffer::zeroed(32 * 32);
    let seen = Mutex::new(Vec::new());
    run_warp_with(smem.addr(), |w| {
        let l = w.lane();
        // Two groups: lane l copies its 16 bytes of each half.
        let (a, b) = (16 * l, 512 + 16 * l);
        // SAFETY: 16-aligned, inside `src` (1 KiB) and shared (1 KiB).
        unsafe { w.cp16(a, src.addr() + a as u64) };
        w.commit();
        // SAFETY: as above.
        unsafe { w.cp16(b, src.addr() + b as u64) };
        w.commit();
        // SAFETY: `a` and `b` are inside shared memory, 4-aligned.
        let read = || unsafe { [w.lds_u32(a), w.lds_u32(b)] };
        let before = read();
        w.wait_all_but_last();
        let middle = read();
        w.wait_all();
        let after = read();
        seen.lock().unwrap().push((l, before, middle, after));
    });
    for (l, before, middle, after) in seen.into_inner().unwrap() {
        let (a, b) = (4 * l, 128 + 4 * l);
        assert_eq!(before, [0, 0], "lane {l}: nothing landed before a wait");
        assert_eq!(
            middle,
            [a, 0],
            "lane {l}: the older group landed, the newest not"
        );
        assert_eq!(after, [a, b], "lane {l}: everything landed");
    }
}

#[test]
fn a_launch_runs_every_thread_once_with_its_ids_and_fresh_shared_memory() {
    let grid = Grid::new(3, 2).with_shared_bytes(64);
    let threads = grid.blocks as usize * 64;
    let hits = Buffer::zeroed(8 * threads);
    let fill_seen = AtomicU32::new(0);
    let warps = AtomicU64::new(0);
    launch(grid, |lane| {
        assert_eq!(lane.grid_threads(), threads as u64);
        assert_eq!(lane.block_dim(), 64);
        assert_eq!(lane.grid_dim(), 3);
        assert_eq!(lane.thread_idx(), 32 * lane.warp_in_block() + lane.lane());
        let (w, n) = lane.global_warp();
        assert_eq!((w, n), (lane.global_thread() / 32, 6));
        let t = lane.global_thread();
        // SAFETY: t < threads, `hits` holds `threads` u64s.
        unsafe { lane.add_u64(hits.addr() + 8 * t, 1 + lane.block_idx() as u64) };
        // Shared memory starts filled, in every block; thread 0 then
        // overwrites it, which the next block must not see.
        if lane.thread_idx() == 0 {
            // SAFETY: 4 bytes inside 64 of shared memory.
            let first = unsafe { lane.lds_u8(0) };
            if first == SHARED_FILL as u32 {
                fill_seen.fetch_add(1, Relaxed);
            }
            // SAFETY: as above.
            unsafe { lane.sts_u32(0, 0) };
        }
        if lane.lane() == 0 {
            warps.fetch_add(1, Relaxed);
        }
    });
    let want: Vec<u64> = (0..threads as u64).map(|t| 1 + t / 64).collect();
    assert_eq!(hits.as_slice::<u64>(), &want[..]);
    assert_eq!(
        fill_seen.load(Relaxed),
        3,
        "each block's shared memory starts filled"
    );
    assert_eq!(warps.load(Relaxed), 6);
}

#[test]
fn a_lane_that_panics_fails_the_warp_instead_of_hanging_it() {
    // Lane 5 panics before the shuffle the other 31 wait at; with a
    // barrier that cannot be broken this test would never return.
    let r = std::panic::catch_unwind(|| {
        run_warp(|w| {
            assert!(w.lane() != 5, "lane 5 fails");
            w.shfl_idx(w.lane(), 0);
        })
    });
    assert!(r.is_err(), "the warp's panic reaches its caller");
    // A warp after it runs normally.
    let sum = AtomicU32::new(0);
    run_warp(|w| {
        sum.fetch_add(w.shfl_idx(w.lane(), 31), Relaxed);
    });
    assert_eq!(sum.load(Relaxed), 32 * 31);
}

#[test]
fn lanes_that_disagree_on_their_shuffles_are_reported_stuck() {
    // Odd lanes make one shuffle more than even ones: on the GPU that is
    // undefined behaviour; here the launch says so.
    let r = std::panic::catch_unwind(|| {
        run_warp(|w| {
            let x = w.shfl_xor(w.lane(), 1);
            if w.lane() % 2 == 1 {
                w.shfl_xor(x, 2);
            }
        })
    });
    let msg = r.expect_err("a stuck warp panics");
    let msg = msg
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| msg.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(msg.contains("stuck"), "{msg}");
}

#[test]
fn a_buffer_is_line_aligned_and_round_trips_its_contents() {
    for len in [0usize, 1, 15, 16, 17, 1000] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let b = Buffer::from_bytes(&bytes);
        assert_eq!(b.addr() % 128, 0, "len {len}");
        assert_eq!((b.len(), b.is_empty()), (len, len == 0));
        assert_eq!(b.bytes(), &bytes[..]);
    }
}
