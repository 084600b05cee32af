//! The float-coded KV store's arithmetic, on the host: its options, the
//! slot's rule (the slot length from the prefill's stored sizes), the
//! layout of its span (slots, then the overflow area), the bytes it
//! reserves and its capacity against raw rows, and what an append may take.
//! Plain code, tested without a GPU.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::float_code::FitOptions;

/// Bytes of a row's direct index entry: its start (u64) and its stored
/// length (u32), in device memory (`FLOAT_DIRECT_INDEX`).
pub(crate) const INDEX_BYTES_PER_ROW: u64 = 12;

/// Options of a [`super::FloatKvStore`].
#[derive(Clone, Debug)]
pub struct FloatKvOptions {
    /// Rows the store holds (every slot reserved when it is created); an
    /// append beyond them fails before anything is enqueued.
    pub capacity: u64,
    /// The slot's rule: the slot holds the stored form of this fraction of
    /// the prefill's rows (0 < f ≤ 1; 1: all of them).
    pub slot_fraction: f64,
    /// The slot's rule: that size times this margin (≥ 1), then rounded up
    /// to a multiple of 16 bytes.
    pub slot_margin: f64,
    /// A slot of exactly this many bytes (a multiple of 16, not more than
    /// the raw row rounded up to 16) instead of the rule: for tests, and
    /// for a store sized from an earlier one.
    pub slot_bytes: Option<u64>,
    /// Overflow entries (raw-sized, for rows longer than a slot) as a
    /// fraction of `capacity`, rounded up (0: none, every row must fit its
    /// slot).
    pub overflow_fraction: f64,
    /// Rows per piece of an append: a larger append is split, on the same
    /// stream. The store reserves device scratch for one piece (its rows'
    /// stored forms, at most 32 MiB, and their sizes).
    pub step_rows: usize,
    /// The fit of the table on the prefill.
    pub fit: FitOptions,
}

/// Q: why 95% of the prefill in a slot and 5% of the capacity in
/// overflow entries?
/// A: MiniLM's real KV rows (CPU, the table fitted on a 64-token prefill,
/// all 45 276 rows of the card sized under it; bf16): most rows code to
/// 510–545 bytes of 768, and 1–4% are long (up to 736, or raw where the
/// prefill never saw a symbol). A slot for 99.9% of the prefill is 736
/// bytes (capacity 1.02× raw); for 95% it is 544, with 3.7% of the later
/// rows overflowing, and 5% of entries give 1.29× raw, index counted
/// (1.31× with 4%, too close to the rate to default to).
impl Default for FloatKvOptions {
    fn default() -> Self {
        Self {
            capacity: 1 << 20,
            slot_fraction: 0.95,
            slot_margin: 1.0,
            slot_bytes: None,
            overflow_fraction: 0.05,
            step_rows: 1 << 16,
            fit: FitOptions::default(),
        }
    }
}

impl FloatKvOptions {
    /// Hold `rows` rows.
    pub fn with_capacity(mut self, rows: u64) -> Self {
        self.capacity = rows;
        self
    }

    /// Slots that hold `fraction` of the prefill's rows, times `margin`.
    pub fn with_slot_rule(mut self, fraction: f64, margin: f64) -> Self {
        self.slot_fraction = fraction;
        self.slot_margin = margin;
        self
    }

    /// Slots of exactly `bytes` bytes.
    pub fn with_slot_bytes(mut self, bytes: u64) -> Self {
        self.slot_bytes = Some(bytes);
        self
    }

    /// Overflow entries for `fraction` of the capacity's rows.
    pub fn with_overflow_fraction(mut self, fraction: f64) -> Self {
        self.overflow_fraction = fraction;
        self
    }

    /// Append in pieces of up to `rows` rows.
    pub fn with_step_rows(mut self, rows: usize) -> Self {
        self.step_rows = rows;
        self
    }

    /// Fit the table with `fit`.
    pub fn with_fit(mut self, fit: FitOptions) -> Self {
        self.fit = fit;
        self
    }
}

/// The slot length by the rule: the smallest multiple of 16 bytes holding
/// `margin` times the stored size below which `fraction` of `sizes` lie
/// (the ⌈fraction · n⌉-th smallest), at least 16 and at most the raw row
/// rounded up to 16 (a slot that holds a raw row holds every row).
pub(crate) fn slot_by_rule(
    sizes: &[u64],
    row_bytes: u64,
    fraction: f64,
    margin: f64,
) -> Result<u64> {
    if !(fraction > 0.0 && fraction <= 1.0) || !(margin >= 1.0 && margin.is_finite()) {
        return Err(Error::invalid(format!(
            "a slot rule of fraction {fraction} and margin {margin}; the fraction is in (0, 1], the margin at least 1"
        )));
    }
    let top = row_bytes.next_multiple_of(16);
    if sizes.is_empty() {
        return Ok(top);
    }
    let mut s = sizes.to_vec();
    let k = ((fraction * s.len() as f64).ceil() as usize).clamp(1, s.len());
    let (_, q, _) = s.select_nth_unstable(k - 1);
    let want = (*q as f64 * margin).ceil() as u64;
    Ok(want.next_multiple_of(16).clamp(16, top))
}

/// Where everything of a store lies, and what it reserves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Bytes of a raw row (`L`).
    pub row_bytes: u64,
    /// Rows the store holds.
    pub capacity: u64,
    /// Bytes of a slot (`S`, a multiple of 16); row `r`'s is at `r · S`.
    pub slot_bytes: u64,
    /// Overflow entries, after the slots (`overflow_at`), `entry_bytes`
    /// each.
    pub overflow_entries: u64,
    pub entry_bytes: u64,
}

impl Layout {
    /// The layout of `opts` for rows of `row_bytes` with slots of
    /// `slot_bytes`.
    pub fn new(row_bytes: u64, slot_bytes: u64, opts: &FloatKvOptions) -> Result<Self> {
        if row_bytes == 0 || !row_bytes.is_multiple_of(4) {
            // Q: why whole 4-byte words? A: the GPU encoder reads rows in
            // aligned words, and every KV row (bf16, f16, f32 heads) is.
            return Err(Error::unsupported(format!(
                "rows of {row_bytes} bytes; a float-coded KV store takes rows of a non-zero multiple of 4 bytes"
            )));
        }
        let entry_bytes = row_bytes.next_multiple_of(16);
        if slot_bytes == 0 || !slot_bytes.is_multiple_of(16) || slot_bytes > entry_bytes {
            return Err(Error::invalid(format!(
                "slots of {slot_bytes} bytes; a slot is a non-zero multiple of 16 bytes, at most the raw row rounded up to 16 ({entry_bytes})"
            )));
        }
        if opts.capacity == 0 || opts.step_rows == 0 {
            return Err(Error::invalid(
                "a float-coded KV store needs a capacity and a step of at least one row",
            ));
        }
        let f = opts.overflow_fraction;
        if !(0.0..=1.0).contains(&f) {
            return Err(Error::invalid(format!(
                "an overflow fraction of {f}; it is in [0, 1]"
            )));
        }
        let l = Layout {
            row_bytes,
            capacity: opts.capacity,
            slot_bytes,
            overflow_entries: (opts.capacity as f64 * f).ceil() as u64,
            entry_bytes,
        };
        l.capacity
            .checked_mul(l.slot_bytes)
            .and_then(|s| s.checked_add(l.overflow_entries.checked_mul(l.entry_bytes)?))
            .and_then(|b| b.checked_add(l.capacity.checked_mul(INDEX_BYTES_PER_ROW)?))
            .filter(|&b| usize::try_from(b).is_ok() && b < 1 << 62)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "a store of {} rows of {slot_bytes}-byte slots does not fit in this machine's address space",
                    l.capacity
                ))
            })?;
        Ok(l)
    }

    /// Byte offset of overflow entry 0 from the span's start (after the
    /// slots; a multiple of 16).
    pub fn overflow_at(&self) -> u64 {
        self.capacity * self.slot_bytes
    }

    /// Bytes of the span rows lie in: the slots and the overflow area.
    pub fn span_len(&self) -> u64 {
        self.overflow_at() + self.overflow_entries * self.entry_bytes
    }

    /// Bytes of pinned host memory reserved: the span, and 32 more (the
    /// decoder reads the 16-byte pieces around a row and the 16 bytes
    /// after it), in whole 128-byte lines.
    pub fn pinned_bytes(&self) -> u64 {
        (self.span_len() + 32).next_multiple_of(128)
    }

    /// Bytes of the direct index (device memory): a start and a length a
    /// row.
    pub fn index_bytes(&self) -> u64 {
        self.capacity * INDEX_BYTES_PER_ROW
    }

    /// Capacity against raw rows: rows held per byte reserved (pinned
    /// pages and the index) over raw rows per byte, `capacity · L /
    /// (pinned + index)`. Rows per GiB of it is this times raw rows per
    /// GiB.
    pub fn capacity_ratio(&self) -> f64 {
        (self.capacity * self.row_bytes) as f64 / (self.pinned_bytes() + self.index_bytes()) as f64
    }

    /// The rows an append of `bytes` bytes of rows of `row_bytes` takes
    /// when `next` rows are in use, or why it cannot.
    pub fn take(&self, next: u64, bytes: usize, row_bytes: usize) -> Result<Range<u64>> {
        crate::gpu::kv_store::plan::take_rows(
            (next, bytes, row_bytes),
            self.row_bytes,
            self.capacity,
            "a float-coded KV store",
            |n| {
                format!(
                    "appending {n} rows to a float-coded KV store holding {next} of {} rows: past its capacity; create it with more (FloatKvOptions::capacity)",
                    self.capacity
                )
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_holds_the_fraction_rounded_up_to_16() {
        let sizes: Vec<u64> = (1..=1000).collect();
        assert_eq!(slot_by_rule(&sizes, 2048, 1.0, 1.0).unwrap(), 1008);
        assert_eq!(slot_by_rule(&sizes, 2048, 0.999, 1.0).unwrap(), 1008);
        assert_eq!(slot_by_rule(&sizes, 2048, 0.5, 1.0).unwrap(), 512);
        assert_eq!(slot_by_rule(&sizes, 2048, 0.5, 1.1).unwrap(), 560);
        // Never past the raw row rounded up, never below 16.
        assert_eq!(slot_by_rule(&sizes, 700, 1.0, 1.0).unwrap(), 704);
        assert_eq!(slot_by_rule(&[1, 2, 3], 768, 1.0, 1.0).unwrap(), 16);
        assert_eq!(slot_by_rule(&[], 768, 0.9, 1.0).unwrap(), 768);
        // Unsorted input, one row: that row.
        assert_eq!(slot_by_rule(&[500, 17, 300], 768, 0.6, 1.0).unwrap(), 304);
        for (f, m) in [(0.0, 1.0), (1.5, 1.0), (0.9, 0.5), (f64::NAN, 1.0)] {
            assert!(slot_by_rule(&sizes, 768, f, m).is_err(), "{f} {m}");
        }
    }

    #[test]
    fn the_span_is_slots_then_overflow_and_the_ratio_counts_everything() {
        let o = FloatKvOptions::default()
            .with_capacity(1000)
            .with_overflow_fraction(0.01);
        let l = Layout::new(768, 512, &o).unwrap();
        assert_eq!(l.overflow_entries, 10);
        assert_eq!(l.entry_bytes, 768);
        assert_eq!(l.overflow_at(), 512_000);
        assert_eq!(l.span_len(), 512_000 + 7680);
        assert_eq!(l.pinned_bytes(), (519_680u64 + 32).next_multiple_of(128));
        assert_eq!(l.index_bytes(), 12_000);
        let want = 768_000.0 / (l.pinned_bytes() + 12_000) as f64;
        assert!((l.capacity_ratio() - want).abs() < 1e-12);
        // Rows not a multiple of 16: entries rounded up.
        let l = Layout::new(36, 48, &o).unwrap();
        assert_eq!(l.entry_bytes, 48);
        assert_eq!(
            Layout::new(768, 0, &o).unwrap_err().kind(),
            crate::ErrorKind::InvalidArgument
        );
        assert!(Layout::new(768, 520, &o).is_err());
        assert!(Layout::new(768, 784, &o).is_err());
        assert_eq!(
            Layout::new(6, 16, &o).unwrap_err().kind(),
            crate::ErrorKind::Unsupported
        );
        assert!(Layout::new(768, 512, &o.clone().with_capacity(0)).is_err());
        assert!(Layout::new(768, 512, &o.clone().with_overflow_fraction(1.5)).is_err());
        assert!(Layout::new(768, 512, &o.clone().with_capacity(u64::MAX / 4)).is_err());
        let none = Layout::new(768, 512, &o.with_overflow_fraction(0.0)).unwrap();
        assert_eq!(none.overflow_entries, 0);
    }

    #[test]
    fn appends_take_consecutive_rows_up_to_the_capacity() {
        let o = FloatKvOptions::default().with_capacity(32);
        let l = Layout::new(768, 512, &o).unwrap();
        assert_eq!(l.take(0, 10 * 768, 768).unwrap(), 0..10);
        assert_eq!(l.take(10, 22 * 768, 768).unwrap(), 10..32);
        assert_eq!(l.take(32, 0, 768).unwrap(), 32..32);
        let full = l.take(30, 3 * 768, 768).unwrap_err();
        assert_eq!(full.kind(), crate::ErrorKind::InvalidArgument);
        assert!(full.to_string().contains("capacity"), "{full}");
        assert!(l.take(u64::MAX, 768, 768).is_err());
        assert!(l.take(0, 2 * 768, 384).is_err());
        assert!(l.take(0, 769, 768).is_err());
    }
}
