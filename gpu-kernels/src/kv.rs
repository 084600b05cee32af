//! The appendable KV store's commit step (`ibp::gpu::KvStore`): after the
//! size kernel has measured a step's rows, record each row's stored length
//! in the store's length table and its encoded flag in the store's flag
//! bitmap, at the rows' place in the store.
//!
//! Plain integer code, run by `ibp_kv_commit` on the GPU and by host tests.
//!
//! Q: why one thread per flag byte rather than one per row?
//! A: eight rows share a flag byte, and an append may start and end in the
//! middle of one. A thread that owns a whole byte reads it, sets the bits
//! of its rows and writes it back: no atomics, and the bits of earlier rows
//! in that byte (committed by an earlier launch on the same stream) stay.

/// Flag bytes touched by rows `first .. first + rows`: `(first byte, count)`.
#[inline(always)]
pub const fn commit_bytes(first: u64, rows: u64) -> (u64, u64) {
    if rows == 0 {
        return (first / 8, 0);
    }
    let lo = first / 8;
    let hi = (first + rows - 1) / 8;
    (lo, hi - lo + 1)
}

/// The new value of flag byte `byte` (holding `old`) once the rows
/// `first .. first + rows` are committed; `encoded(r)` tells whether row `r`
/// (a store row) is stored encoded. Bits of rows outside that range keep
/// their value; bit `r % 8` is row `r` (`docs/FORMAT.md` §3).
#[inline(always)]
pub fn commit_flag_byte(
    old: u32,
    byte: u64,
    first: u64,
    rows: u64,
    encoded: impl Fn(u64) -> bool,
) -> u32 {
    let mut v = old & 0xff;
    let mut j = 0;
    while j < 8 {
        let r = 8 * byte + j;
        if r >= first && r < first + rows {
            if encoded(r) {
                v |= 1 << j;
            } else {
                v &= !(1 << j);
            }
        }
        j += 1;
    }
    v
}

/// The length-table entry of a row of `row_bytes` measured at `size`
/// stored bytes (raw rows store `row_bytes`).
#[inline(always)]
pub const fn stored_len(size: u64, row_bytes: u64) -> u32 {
    if size < row_bytes {
        size as u32
    } else {
        row_bytes as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Commit ranges one after another into a bitmap, as the launches of
    /// successive appends do, and compare with the bits set directly.
    #[test]
    fn successive_commits_set_exactly_their_rows_bits() {
        let encoded = |r: u64| !r.is_multiple_of(3);
        let ranges = [
            (0u64, 5u64),
            (5, 3),
            (8, 1),
            (9, 20),
            (29, 7),
            (36, 0),
            (36, 1),
        ];
        let mut bitmap = [0u32; 8];
        for &(first, rows) in &ranges {
            let (b0, n) = commit_bytes(first, rows);
            for b in b0..b0 + n {
                bitmap[b as usize] = commit_flag_byte(bitmap[b as usize], b, first, rows, encoded);
            }
        }
        for r in 0..64u64 {
            let bit = bitmap[(r / 8) as usize] >> (r % 8) & 1 == 1;
            assert_eq!(bit, r < 37 && encoded(r), "row {r}");
        }
    }

    #[test]
    fn byte_spans_cover_partial_bytes() {
        assert_eq!(commit_bytes(0, 8), (0, 1));
        assert_eq!(commit_bytes(7, 2), (0, 2));
        assert_eq!(commit_bytes(9, 0), (1, 0));
        assert_eq!(commit_bytes(16, 17), (2, 3));
        assert_eq!(stored_len(10, 768), 10);
        assert_eq!(stored_len(768, 768), 768);
        assert_eq!(stored_len(900, 768), 768);
    }

    #[test]
    fn rows_outside_the_range_keep_their_bits() {
        // A raw row in range clears its bit; bits 0..3 are earlier rows.
        assert_eq!(
            commit_flag_byte(0b0000_0111, 0, 3, 2, |_| false),
            0b0000_0111
        );
        assert_eq!(
            commit_flag_byte(0b0001_1111, 0, 3, 2, |_| false),
            0b0000_0111
        );
        assert_eq!(commit_flag_byte(0, 1, 3, 10, |_| true), 0b0001_1111);
    }
}
