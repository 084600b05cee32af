//! Reading a tensor a lane word at a time, and the walk of the sampled
//! tensors that [`eval`](super::eval()) and [`size`](super::size()) share.

use crate::params::MeasureParams;
use crate::simt::Mem;

/// Row `i` of a sample of `sample` of `rows` rows: `⌊i · rows / sample⌋`
/// (`docs/FORMAT.md` §4). The host guarantees `i · rows` fits in a u64
/// whenever `sample < rows`.
#[inline(always)]
pub const fn sample_row(i: u64, rows: u64, sample: u64) -> u64 {
    if sample >= rows { i } else { i * rows / sample }
}

/// Bytes `[8q, 8q + 8)` of the `len`-byte tensor at `start`, little-endian,
/// zero past the end.
///
/// # Safety
/// The tensor's bytes are readable.
#[inline(always)]
pub unsafe fn row_word<M: Mem>(m: &M, start: u64, len: u64, q: u64) -> u64 {
    // 32-bit offsets: tensors are at most 2^28 bytes (the host's
    // `MAX_ROW_BYTES`), and a lane's word index stays near the tensor's.
    let (len, off) = (len as u32, 8 * q as u32);
    if off >= len {
        return 0;
    }
    let a = start + off as u64;
    // SAFETY: (all loads) inside the tensor, aligned as each width needs.
    unsafe {
        if off + 8 <= len {
            if a.is_multiple_of(8) {
                return m.ld_u64(a);
            }
            if a.is_multiple_of(4) {
                return m.ld_u32(a) as u64 | (m.ld_u32(a + 4) as u64) << 32;
            }
        }
        let n = if len - off < 8 { len - off } else { 8 };
        let mut w = 0u64;
        let mut k = 0;
        while k < n {
            w |= (m.ld_u8(a + k as u64) as u64) << (8 * k);
            k += 1;
        }
        w
    }
}

/// Store the low `n` bytes of `w` at `a`.
///
/// # Safety
/// `a .. a + n` writable.
#[inline(always)]
pub unsafe fn store_bytes<M: Mem>(m: &M, a: u64, w: u64, n: u64) {
    // SAFETY: (all stores) inside the destination, aligned as each needs.
    unsafe {
        if n == 8 && a.is_multiple_of(8) {
            m.st_u64(a, w);
        } else if n == 8 && a.is_multiple_of(4) {
            m.st_u32(a, w as u32);
            m.st_u32(a + 4, (w >> 32) as u32);
        } else {
            let mut k = 0;
            while k < n {
                m.st_u8(a + k, ((w >> (8 * k)) & 0xff) as u32);
                k += 1;
            }
        }
    }
}

/// Visit the sampled tensors `wid, wid + nwarps, …` of `p` (warp-uniform)
/// a batch of four words a lane at a time: `visit(i, k, x, last)` gets
/// tensor `i`, batch `k` (this lane's words `128k + lane + 32j`, zero past
/// the tensor's end) and whether it is the tensor's last batch. The size
/// pass and the fit's evaluation share this loop.
///
/// Q: why one loop over every (tensor, batch), each batch loaded one ahead?
/// A: so that the next batch's loads are in flight, across the end of a
/// tensor too, while this one is worked on: a warp that waits for its
/// loads at every tensor runs at the memory's latency. Tensors under 1 KiB
/// (MiniLM's rows) are one batch each, and were measured at 1.3–1.6 TB/s
/// by the size pass loading as it went.
///
/// # Safety
/// As [`MeasureParams`] states (the tensors are readable).
#[inline(always)]
pub(super) unsafe fn each_batch<M: Mem>(
    m: &M,
    p: &MeasureParams,
    wid: u64,
    nwarps: u64,
    lane: u64,
    mut visit: impl FnMut(u64, u64, [u64; 4], bool),
) {
    let l = p.row_bytes;
    let batches = l.div_ceil(8).div_ceil(128);
    let start_of = |i: u64| p.src + sample_row(i, p.rows, p.sample) * p.stride;
    // SAFETY: (the closure's body) row_word reads inside the tensor only.
    let load = |start: u64, k: u64| unsafe {
        let q = 128 * k + lane;
        // Written out, not looped, so that the words stay in registers.
        [
            row_word(m, start, l, q),
            row_word(m, start, l, q + 32),
            row_word(m, start, l, q + 64),
            row_word(m, start, l, q + 96),
        ]
    };
    if wid >= p.sample {
        return;
    }
    let (mut i, mut k) = (wid, 0);
    let mut start = start_of(i);
    let mut x = load(start, 0);
    loop {
        let (ni, nk) = if k + 1 < batches {
            (i, k + 1)
        } else {
            (i + nwarps, 0)
        };
        let nstart = if nk == 0 && ni < p.sample {
            start_of(ni)
        } else {
            start
        };
        let xn = if ni < p.sample {
            load(nstart, nk)
        } else {
            [0; 4]
        };
        visit(i, k, x, nk == 0);
        if nk == 0 && ni >= p.sample {
            break;
        }
        (i, k, start, x) = (ni, nk, nstart, xn);
    }
}
