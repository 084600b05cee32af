//! Warp-scan lane arithmetic, written once and run two ways: by the kernels,
//! where each lane executes it with real `shfl.sync` shuffles, and on the host
//! by [`EmulatedWarp`], which steps 32 lanes in lockstep so the CPU tests
//! exercise the very same step functions.
//!
//! The scan is Kogge–Stone over `shfl.sync.up`: five rounds with distances
//! 1, 2, 4, 8, 16. In round `d` lane `l` receives the value of lane `l - d`
//! (or its own value when `l < d`, the hardware's clamp) and adds it when
//! `l >= d`.

use crate::detail::bits::WARP;

/// Shuffle distances of the five scan rounds.
pub const SCAN_DISTANCES: [u32; 5] = [1, 2, 4, 8, 16];

/// Source lane of `shfl.sync.up` with distance `d` for lane `lane`: the
/// hardware clamps to the caller's own lane when `lane < d`.
#[inline(always)]
pub const fn shfl_up_source(lane: u32, d: u32) -> u32 {
    if lane >= d { lane - d } else { lane }
}

/// Source lane of `shfl.sync.down` with distance `d` (clamped at lane 31).
#[inline(always)]
pub const fn shfl_down_source(lane: u32, d: u32) -> u32 {
    if lane + d < WARP { lane + d } else { lane }
}

/// One Kogge–Stone round: lane `lane` holding `x` received `up` from
/// `shfl_up(x, d)`.
#[inline(always)]
pub const fn scan_step(lane: u32, d: u32, x: u32, up: u32) -> u32 {
    if lane >= d { x.wrapping_add(up) } else { x }
}

/// 64-bit variant of [`scan_step`].
#[inline(always)]
pub const fn scan_step64(lane: u32, d: u32, x: u64, up: u64) -> u64 {
    if lane >= d { x.wrapping_add(up) } else { x }
}

/// A warp of 32 lanes stepped in lockstep on the host.
///
/// Each method takes the 32 lane values and returns the 32 results, with the
/// semantics of the corresponding PTX instruction under a full member mask.
pub struct EmulatedWarp;

impl EmulatedWarp {
    /// `shfl.sync.up.b32` on every lane.
    pub fn shfl_up(v: &[u32; 32], d: u32) -> [u32; 32] {
        core::array::from_fn(|l| v[shfl_up_source(l as u32, d) as usize])
    }

    /// `shfl.sync.down.b32` on every lane.
    pub fn shfl_down(v: &[u32; 32], d: u32) -> [u32; 32] {
        core::array::from_fn(|l| v[shfl_down_source(l as u32, d) as usize])
    }

    /// `shfl.sync.idx.b32` on every lane, each lane naming its source.
    pub fn shfl_idx(v: &[u32; 32], src: &[u32; 32]) -> [u32; 32] {
        core::array::from_fn(|l| v[(src[l] % WARP) as usize])
    }

    /// `vote.sync.ballot.b32`: bit `l` set when lane `l`'s value is non-zero.
    pub fn ballot(v: &[u32; 32]) -> u32 {
        v.iter()
            .enumerate()
            .fold(0, |acc, (l, &x)| acc | (((x != 0) as u32) << l))
    }

    /// Inclusive warp scan, built from [`scan_step`] exactly as the kernel does.
    pub fn inclusive_scan(v: &[u32; 32]) -> [u32; 32] {
        let mut x = *v;
        for d in SCAN_DISTANCES {
            let up = Self::shfl_up(&x, d);
            x = core::array::from_fn(|l| scan_step(l as u32, d, x[l], up[l]));
        }
        x
    }

    /// Exclusive warp scan: the inclusive scan minus the lane's own value.
    pub fn exclusive_scan(v: &[u32; 32]) -> [u32; 32] {
        let inc = Self::inclusive_scan(v);
        core::array::from_fn(|l| inc[l].wrapping_sub(v[l]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_scans_equal_sequential_prefix_sums() {
        let mut s = 7u32;
        for round in 0..200 {
            let v: [u32; 32] = core::array::from_fn(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                if round % 2 == 0 { s >> 26 } else { s }
            });
            let inc = EmulatedWarp::inclusive_scan(&v);
            let exc = EmulatedWarp::exclusive_scan(&v);
            let mut acc = 0u32;
            for l in 0..32 {
                assert_eq!(exc[l], acc, "exclusive lane {l}");
                acc = acc.wrapping_add(v[l]);
                assert_eq!(inc[l], acc, "inclusive lane {l}");
            }
        }
    }

    #[test]
    fn shuffle_emulation_clamps_like_the_hardware() {
        let v: [u32; 32] = core::array::from_fn(|l| 100 + l as u32);
        let up = EmulatedWarp::shfl_up(&v, 3);
        assert_eq!(&up[..4], &[100, 101, 102, 100]);
        let down = EmulatedWarp::shfl_down(&v, 3);
        assert_eq!(&down[28..], &[131, 129, 130, 131]);
        let idx = EmulatedWarp::shfl_idx(&v, &[5; 32]);
        assert!(idx.iter().all(|&x| x == 105));
        let mut b = [0u32; 32];
        b[0] = 1;
        b[31] = 9;
        assert_eq!(EmulatedWarp::ballot(&b), 0x8000_0001);
    }
}
