//! The collectives' pack and unpack body
//! (`ibp_kernels::detail::copy_runs`) on the emulated warp, against a
//! plain CPU copy: every length from 0 to 100 at every pair of source and
//! destination alignments, long ranges, ranges that meet inside a 16-byte
//! group, and the bytes outside every range left as they were.

use ibp_kernels::detail::copy_runs::copy_runs;
use ibp_kernels::params::CopyRunsParams;

use super::*;

/// Run the body over `ranges` (`[src_off, dst_off, len]`) from `src` into
/// `dst` as `warps` warps (run one after the other, in reverse order) and
/// compare with the CPU copy of the same ranges into the same `dst`.
fn check(src: &[u8], dst: &[u8], ranges: &[[u64; 3]], warps: u64) {
    let mut want = dst.to_vec();
    for &[s, d, n] in ranges {
        let (s, d, n) = (s as usize, d as usize, n as usize);
        want[d..d + n].copy_from_slice(&src[s..s + n]);
    }
    let a = Aligned::from(src);
    let out = Aligned::from(dst);
    let list: Vec<u64> = ranges.iter().flatten().copied().collect();
    let p = CopyRunsParams {
        ranges: list.as_ptr() as u64,
        count: ranges.len() as u64,
        src: a.addr(),
        dst: out.addr(),
    };
    for wid in (0..warps).rev() {
        // SAFETY: every range lies inside both buffers (built so below),
        // the destination ranges do not overlap, and `Aligned` pads the
        // source to whole 8-byte words past its end.
        run_warp(|w| unsafe { copy_runs(w, &HostMem, &p, wid, warps) });
    }
    assert!(
        out.bytes() == &want[..],
        "{} ranges, {warps} warps",
        ranges.len()
    );
}

fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n).map(|_| xorshift(&mut s) as u8).collect()
}

#[test]
fn emulated_copy_runs_copies_every_length_at_every_alignment() {
    // Lengths 0..=100 (and a few long ones) with source and destination at
    // every residue mod 16 (the buffers' bases are 8-aligned, so the
    // offsets cover every absolute residue too), ranges 16 bytes apart.
    let aligns = [0u64, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 15];
    let mut ranges = Vec::new();
    let (mut s_at, mut d_at) = (0u64, 0u64);
    for len in (0..=100u64).chain([255, 256, 257, 700, 1531]) {
        for &sa in &aligns {
            for &da in &aligns {
                let s = s_at.next_multiple_of(16) + sa;
                let d = d_at.next_multiple_of(16) + 16 + da;
                ranges.push([s, d, len]);
                s_at = s + len;
                d_at = d + len;
            }
        }
    }
    let src = noise(s_at as usize + 16, 7);
    let dst = vec![0xEEu8; d_at as usize + 32];
    check(&src, &dst, &ranges, 5);
}

#[test]
fn emulated_copy_runs_keeps_ranges_that_meet_inside_a_group_apart() {
    // Destination ranges back to back (a packed staging buffer), sources
    // scattered, lengths 0..40 and some long: neighbours share groups.
    let mut x = 0x5eed_u64;
    let (mut ranges, mut d) = (Vec::new(), 3u64);
    for _ in 0..400 {
        let len = match xorshift(&mut x) % 10 {
            0 => 100 + xorshift(&mut x) % 900,
            1 => 0,
            _ => xorshift(&mut x) % 40,
        };
        let s = xorshift(&mut x) % 5000;
        ranges.push([s, d, len]);
        d += len;
    }
    let src = noise(6100, 11);
    let dst = vec![0x5Au8; d as usize + 40];
    for warps in [1, 3, 32] {
        check(&src, &dst, &ranges, warps);
    }
    // No ranges, and ranges of no bytes: nothing written.
    check(&src, &dst, &[], 2);
    check(&src, &dst, &[[5, 9, 0], [0, 0, 0]], 1);
}
