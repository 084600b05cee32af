//! Kernel parameter blocks. Each kernel takes exactly one of these by value;
//! the host fills the same struct, so the two sides cannot disagree on the
//! order or width of a field. Pointers travel as `u64` device addresses (a
//! mapped pinned host buffer's device address works wherever device memory
//! does).

/// `ibp_count_bits`: add, for every bit position of a row of `row_bytes`
/// bytes, the number of the `rows` rows that have it set, into
/// `counts[8 * row_bytes]` (u64, accumulated, never cleared by the kernel).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountParams {
    /// Address of row 0; rows follow each other with no gap.
    pub data: u64,
    /// Number of rows.
    pub rows: u64,
    /// Bytes per row (>= 1).
    pub row_bytes: u64,
    /// Address of `8 * row_bytes` u64 counters.
    pub counts: u64,
}

/// `ibp_test_warp`: exercise the warp helpers. For every lane `l` of every
/// warp `w` (global lane `g = 32 * w + l`), with input `x = input[g]`:
/// `out[g * 8 + k]` for k = 0 lane id, 1 warp id, 2 shfl_up(x, 1),
/// 3 shfl_down(x, 2), 4 shfl_idx(x, 31 - l), 5 inclusive scan, 6 exclusive
/// scan, 7 ballot(x & 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WarpTestParams {
    pub input: u64,
    pub out: u64,
    /// Number of lanes (a multiple of 32).
    pub lanes: u64,
}

/// `ibp_test_cp_async`: each block copies `bytes` bytes from `src` into
/// dynamic shared memory with `cp.async` of `width` bytes (4, 8 or 16), waits,
/// and writes the shared copy to `dst` (`bytes` a multiple of `width`, both
/// addresses aligned to `width`). Block `b` copies `src + b * bytes` to
/// `dst + b * bytes`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpAsyncTestParams {
    pub src: u64,
    pub dst: u64,
    pub bytes: u32,
    pub width: u32,
}
