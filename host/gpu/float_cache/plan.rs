//! What a [`super::FloatFeatureCache`] holds, on the host: how much of the
//! budget its slab gets once the index is paid for, which hot rows go in
//! the slab and where, and the direct index (a start address and a length
//! a row) the gather reads. Plain code, tested without a GPU.

use crate::error::{Error, Result};

/// Bytes of padding after the slab: the decoder reads the 16-byte pieces
/// around a row and the 16 bytes after it
/// (`ibp_kernels::params::FLOAT_DIRECT_INDEX`).
pub(crate) const PAD: u64 = 16;

/// Bytes of the device index a row: its start (u64) and its length (u32).
pub(crate) const INDEX_BYTES_PER_ROW: u64 = 12;

/// Bytes of the device index of `rows` rows.
pub(crate) fn index_bytes(rows: u64) -> Result<u64> {
    rows.checked_mul(INDEX_BYTES_PER_ROW)
        .ok_or_else(|| Error::invalid(format!("an index of {rows} rows overflows u64")))
}

/// The stored bytes the slab may hold under `budget` bytes of device
/// memory for a group of `rows` rows: what is left once the index is paid
/// for, less the slab's padding, rounded down to 16 (so that the slab's
/// allocation, its used bytes rounded up to 16 plus [`PAD`], stays inside
/// the budget). 0 when only the index fits.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when the budget does
/// not hold the index itself.
pub(crate) fn slab_capacity(budget: u64, rows: u64) -> Result<u64> {
    let index = index_bytes(rows)?;
    let left = budget.checked_sub(index).ok_or_else(|| {
        Error::invalid(format!(
            "a budget of {budget} bytes does not hold the cache's index ({index} bytes: {INDEX_BYTES_PER_ROW} a row for {rows} rows)"
        ))
    })?;
    Ok(left.saturating_sub(PAD) / 16 * 16)
}

/// Bytes of the slab's allocation for `used` stored bytes: rounded up to
/// 16, plus [`PAD`]; 0 for an empty slab (none is allocated).
pub(crate) fn slab_alloc(used: u64) -> u64 {
    if used == 0 {
        0
    } else {
        used.next_multiple_of(16) + PAD
    }
}

/// The slab's rows: `(row, offset)` in priority order, and the bytes they
/// take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlabPlan {
    pub rows: Vec<(u64, u64)>,
    pub used: u64,
}

/// Place the rows `hot` (priority order) of a group of `rows` rows in a
/// slab of `capacity` bytes, back to back (packed): each row that still
/// fits goes in; one that does not is left out and the later (smaller)
/// ones are still tried; a repeated id counts once. `stored(t)` is row
/// `t`'s stored length.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] for a hot id past the
/// end.
pub(crate) fn place(
    hot: &[u64],
    rows: u64,
    stored: impl Fn(u64) -> u64,
    capacity: u64,
) -> Result<SlabPlan> {
    if let Some(&bad) = hot.iter().find(|&&t| t >= rows) {
        return Err(Error::invalid(format!(
            "hot row {bad} is out of range for a group of {rows} rows"
        )));
    }
    // One bit a row, for rows of the hot set only.
    let words = if hot.is_empty() { 0 } else { rows.div_ceil(64) };
    let mut seen = vec![0u64; words as usize];
    let mut plan = SlabPlan::default();
    for &t in hot {
        let n = stored(t);
        let (w, bit) = (t as usize / 64, 1u64 << (t % 64));
        if seen[w] & bit != 0 || plan.used + n > capacity {
            continue;
        }
        seen[w] |= bit;
        plan.rows.push((t, plan.used));
        plan.used += n;
    }
    Ok(plan)
}

/// The direct index of a group of `rows` rows: row `t` at `slab + offset`
/// when the plan put it in the slab, else at `host + start(t)` (its place
/// in the pinned payload, mapped at device address `host`); its length
/// `stored(t)` either way. `start` and `stored` describe the payload.
pub(crate) fn direct_index(
    rows: u64,
    start: impl Fn(u64) -> u64,
    stored: impl Fn(u64) -> u64,
    plan: &SlabPlan,
    slab: u64,
    host: u64,
) -> (Vec<u64>, Vec<u32>) {
    let mut starts: Vec<u64> = (0..rows).map(|t| host + start(t)).collect();
    // Stored rows are at most a raw row: below 16 MiB on the GPU.
    let lens: Vec<u32> = (0..rows).map(|t| stored(t) as u32).collect();
    for &(t, o) in &plan.rows {
        starts[t as usize] = slab + o;
    }
    (starts, lens)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of 10, 20, 30, … stored bytes (row t: 10 · (t % 7 + 1)),
    /// packed from 0.
    fn stored(t: u64) -> u64 {
        10 * (t % 7 + 1)
    }
    fn start(t: u64) -> u64 {
        (0..t).map(stored).sum()
    }

    #[test]
    fn the_index_is_paid_for_before_the_slab() {
        assert_eq!(index_bytes(100).unwrap(), 1200);
        // Too small for the index: a typed error, not a panic.
        let e = slab_capacity(1199, 100).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert_eq!(slab_capacity(0, 1).unwrap_err().kind(), e.kind());
        // The index alone, or too little more for the padding: no slab.
        assert_eq!(slab_capacity(1200, 100).unwrap(), 0);
        assert_eq!(slab_capacity(1200 + 31, 100).unwrap(), 0);
        assert_eq!(slab_capacity(1200 + 32, 100).unwrap(), 16);
        assert_eq!(slab_capacity(1200 + 16 + 100, 100).unwrap(), 96);
        // No rows: no index.
        assert_eq!(slab_capacity(0, 0).unwrap(), 0);
        assert!(index_bytes(u64::MAX).is_err());
        // The allocation of whatever fits stays inside the budget.
        for budget in 1200..1500 {
            let cap = slab_capacity(budget, 100).unwrap();
            for used in 0..=cap {
                assert!(1200 + slab_alloc(used) <= budget, "{budget} {used}");
            }
        }
        assert_eq!(slab_alloc(0), 0);
        assert_eq!(slab_alloc(1), 32);
        assert_eq!(slab_alloc(16), 32);
        assert_eq!(slab_alloc(17), 48);
    }

    #[test]
    fn hot_rows_go_in_order_while_they_fit_and_smaller_ones_fill_the_rest() {
        // Rows 6 (70 B), 0 (10), 5 (60), 2 (30), 1 (20) in a slab of 100.
        let plan = place(&[6, 0, 5, 2, 1], 20, stored, 100).unwrap();
        // 6 at 0, 0 at 70, 5 does not fit (140), 2 does not (110), 1 does.
        assert_eq!(plan.rows, vec![(6, 0), (0, 70), (1, 80)]);
        assert_eq!(plan.used, 100);
        // Repeats count once.
        let plan = place(&[3, 3, 0, 3], 20, stored, 1000).unwrap();
        assert_eq!(plan.rows, vec![(3, 0), (0, 40)]);
        // Nothing fits, nothing hot, every row fits.
        assert_eq!(place(&[6], 20, stored, 69).unwrap(), SlabPlan::default());
        assert_eq!(place(&[], 20, stored, 1000).unwrap(), SlabPlan::default());
        let all: Vec<u64> = (0..20).collect();
        let plan = place(&all, 20, stored, u64::MAX).unwrap();
        assert_eq!(plan.used, start(20));
        assert!(plan.rows.iter().all(|&(t, o)| o == start(t)));
        // A hot id past the end is refused.
        let e = place(&[1, 20], 20, stored, 1000).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
    }

    #[test]
    fn the_index_points_at_the_slab_for_cached_rows_and_at_the_host_otherwise() {
        let (slab, host) = (0x7000_0000u64, 0x1_0000_0000u64);
        let plan = place(&[4, 9, 4], 12, stored, 1000).unwrap();
        let (starts, lens) = direct_index(12, start, stored, &plan, slab, host);
        assert_eq!((starts.len(), lens.len()), (12, 12));
        for t in 0..12u64 {
            assert_eq!(u64::from(lens[t as usize]), stored(t));
            let want = match t {
                4 => slab,
                9 => slab + stored(4),
                _ => host + start(t),
            };
            assert_eq!(starts[t as usize], want, "row {t}");
        }
    }
}
