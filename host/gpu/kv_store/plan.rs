//! The store's page and slot arithmetic, on the host: options, capacity,
//! where a row's slot is, what an append may take and where a refit's
//! segment starts. Plain code, tested without a GPU.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::fit::FitOptions;

use super::super::MAX_ROW_BYTES;

/// Options of a [`super::KvStore`].
#[derive(Clone, Debug)]
pub struct KvStoreOptions {
    /// Rows (slots of `L` bytes) per page of pinned host memory.
    pub page_rows: u64,
    /// Pages reserved when the store is created: the store holds at most
    /// `page_rows · page_budget` rows, and an append beyond them fails.
    pub page_budget: u64,
    /// Rows per piece of an append: a larger append is split, on the same
    /// stream. The store reserves device scratch for one piece: stored
    /// sizes (`8 · step_rows` bytes) and two staging halves of `step_rows`
    /// slots, each at most 32 MiB (fewer rows when `L` is large).
    pub step_rows: usize,
    /// The fit of the prefill and of every refit (sampled by default).
    pub fit: FitOptions,
    /// How the stored forms reach the pages.
    pub page_writes: PageWrites,
}

/// How an append's stored forms reach the pinned pages (see
/// [`super::KvStore`], "Append").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PageWrites {
    /// The kernel's blocks copy their finished slots into the pages, for
    /// rows up to 2 KiB; wider rows go as [`PageWrites::Dma`].
    #[default]
    Kernel,
    /// A DMA copy of each piece's staging half, the next piece encoded
    /// meanwhile (the copy engine's way; measured beside the default).
    Dma,
}

impl Default for KvStoreOptions {
    fn default() -> Self {
        Self {
            page_rows: 4096,
            page_budget: 256,
            step_rows: 1 << 16,
            fit: FitOptions::default(),
            page_writes: PageWrites::Kernel,
        }
    }
}

impl KvStoreOptions {
    /// Pages of `rows` slots.
    pub fn with_page_rows(mut self, rows: u64) -> Self {
        self.page_rows = rows;
        self
    }

    /// Reserve `pages` pages.
    pub fn with_page_budget(mut self, pages: u64) -> Self {
        self.page_budget = pages;
        self
    }

    /// Measure up to `rows` rows per launch.
    pub fn with_step_rows(mut self, rows: usize) -> Self {
        self.step_rows = rows;
        self
    }

    /// Fit with `fit`.
    pub fn with_fit(mut self, fit: FitOptions) -> Self {
        self.fit = fit;
        self
    }

    /// Write the pages as `w` says.
    pub fn with_page_writes(mut self, w: PageWrites) -> Self {
        self.page_writes = w;
        self
    }
}

/// The slots of a store: `pages × page_rows` rows of `row_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slots {
    pub row_bytes: u64,
    pub page_rows: u64,
    pub pages: u64,
}

impl Slots {
    /// Validate the options for rows of `row_bytes`.
    pub fn new(row_bytes: usize, opts: &KvStoreOptions) -> Result<Self> {
        if row_bytes == 0 || !row_bytes.is_multiple_of(4) {
            // Q: why whole 4-byte words?
            // A: the encoder writes each slot in 32-bit words and ORs the
            // one it shares with a neighbour (an unaligned slot's first and
            // last words) with an atomic; slots of whole words share none,
            // and no atomic goes over PCIe to host memory.
            return Err(Error::unsupported(format!(
                "rows of {row_bytes} bytes; a KV store takes rows of a non-zero multiple of 4 bytes"
            )));
        }
        if row_bytes > MAX_ROW_BYTES {
            return Err(Error::unsupported(format!(
                "rows of {row_bytes} bytes; the GPU compressor takes up to {MAX_ROW_BYTES}"
            )));
        }
        if opts.page_rows == 0 || opts.page_budget == 0 || opts.step_rows == 0 {
            return Err(Error::invalid(
                "a KV store needs at least one page of at least one row, and a step of at least one row",
            ));
        }
        let s = Slots {
            row_bytes: row_bytes as u64,
            page_rows: opts.page_rows,
            pages: opts.page_budget,
        };
        let bytes = s
            .page_rows
            .checked_mul(s.pages)
            .and_then(|r| r.checked_mul(s.row_bytes))
            .filter(|&b| usize::try_from(b).is_ok() && b < 1 << 62)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{} pages of {} rows of {row_bytes} bytes do not fit in this machine's address space",
                    s.pages, s.page_rows
                ))
            })?;
        debug_assert_eq!(bytes, s.bytes());
        Ok(s)
    }

    /// Rows the store can hold.
    pub fn capacity(&self) -> u64 {
        self.page_rows * self.pages
    }

    /// Bytes of pinned host memory reserved.
    pub fn bytes(&self) -> u64 {
        self.capacity() * self.row_bytes
    }

    /// Bytes of one page.
    pub fn page_bytes(&self) -> u64 {
        self.page_rows * self.row_bytes
    }

    /// Byte offset of row `row`'s slot from the first page's start.
    pub fn slot_offset(&self, row: u64) -> u64 {
        row * self.row_bytes
    }

    /// The page that holds row `row`, and the slot's byte offset in it.
    pub fn page_of(&self, row: u64) -> (u64, u64) {
        (
            row / self.page_rows,
            (row % self.page_rows) * self.row_bytes,
        )
    }

    /// Pages holding at least one of the first `rows` rows.
    pub fn pages_used(&self, rows: u64) -> u64 {
        rows.div_ceil(self.page_rows)
    }

    /// The rows an append of `bytes` bytes of rows of `row_bytes` takes
    /// when `next` rows are in use, or why it cannot.
    pub fn take(&self, next: u64, bytes: usize, row_bytes: usize) -> Result<Range<u64>> {
        take_rows(
            (next, bytes, row_bytes),
            self.row_bytes,
            self.capacity(),
            "a KV store",
            |n| {
                format!(
                    "appending {n} rows to a KV store holding {next} of {} rows ({} pages of {}): past its page budget; create it with more pages (KvStoreOptions::page_budget)",
                    self.capacity(),
                    self.pages,
                    self.page_rows
                )
            },
        )
    }

    /// First row of a segment started when `next` rows are in use: the
    /// next multiple of 8, so the segment's flags start on a byte of the
    /// bitmap (the decoder reads a segment as a dataset of its own).
    pub fn segment_start(&self, next: u64) -> Result<u64> {
        let first = next.next_multiple_of(8);
        if first > self.capacity() {
            return Err(Error::invalid(format!(
                "a new segment would start at row {first}, past the store's {} rows; create it with more pages (KvStoreOptions::page_budget)",
                self.capacity()
            )));
        }
        Ok(first)
    }
}

/// The rows `[next, next + n)` that an append of `bytes` bytes of rows of
/// `row_bytes` takes in a store (`what`, for messages) of rows of
/// `store_row_bytes` and `capacity` rows; `full(n)` says why `n` more rows
/// do not fit. Shared by both KV stores' plans.
pub(crate) fn take_rows(
    (next, bytes, row_bytes): (u64, usize, usize),
    store_row_bytes: u64,
    capacity: u64,
    what: &str,
    full: impl FnOnce(u64) -> String,
) -> Result<Range<u64>> {
    if row_bytes as u64 != store_row_bytes {
        return Err(Error::invalid(format!(
            "rows of {row_bytes} bytes appended to {what} of {store_row_bytes}-byte rows"
        )));
    }
    if !bytes.is_multiple_of(row_bytes) {
        return Err(Error::invalid(format!(
            "{bytes} bytes do not split into rows of {row_bytes} bytes"
        )));
    }
    let n = (bytes / row_bytes) as u64;
    match next.checked_add(n) {
        Some(end) if end <= capacity => Ok(next..end),
        _ => Err(Error::invalid(full(n))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(page_rows: u64, pages: u64) -> Slots {
        let o = KvStoreOptions::default()
            .with_page_rows(page_rows)
            .with_page_budget(pages);
        Slots::new(768, &o).unwrap()
    }

    #[test]
    fn slots_are_row_bytes_apart_and_pages_follow_each_other() {
        let s = slots(100, 3);
        assert_eq!(s.capacity(), 300);
        assert_eq!(s.bytes(), 300 * 768);
        assert_eq!(s.page_bytes(), 76_800);
        assert_eq!(s.page_of(0), (0, 0));
        assert_eq!(s.page_of(99), (0, 99 * 768));
        assert_eq!(s.page_of(100), (1, 0));
        assert_eq!(s.page_of(257), (2, 57 * 768));
        for r in [0, 1, 99, 100, 257, 299] {
            let (p, o) = s.page_of(r);
            assert_eq!(p * s.page_bytes() + o, s.slot_offset(r));
        }
        assert_eq!(s.pages_used(0), 0);
        assert_eq!(s.pages_used(1), 1);
        assert_eq!(s.pages_used(100), 1);
        assert_eq!(s.pages_used(101), 2);
    }

    #[test]
    fn appends_take_consecutive_rows_up_to_the_budget() {
        let s = slots(16, 2);
        assert_eq!(s.take(0, 10 * 768, 768).unwrap(), 0..10);
        assert_eq!(s.take(10, 22 * 768, 768).unwrap(), 10..32);
        assert_eq!(s.take(32, 0, 768).unwrap(), 32..32);
        let full = s.take(30, 3 * 768, 768).unwrap_err();
        assert_eq!(full.kind(), crate::ErrorKind::InvalidArgument);
        assert!(full.to_string().contains("page budget"), "{full}");
        assert!(s.take(u64::MAX, 768, 768).is_err());
    }

    #[test]
    fn wrong_widths_are_refused() {
        let s = slots(16, 2);
        let e = s.take(0, 2 * 768, 384).unwrap_err();
        assert!(e.to_string().contains("384-byte") || e.to_string().contains("384 bytes"));
        assert!(s.take(0, 768 + 1, 768).is_err());
        let o = KvStoreOptions::default();
        assert_eq!(
            Slots::new(6, &o).unwrap_err().kind(),
            crate::ErrorKind::Unsupported
        );
        assert!(Slots::new(0, &o).is_err());
        assert!(Slots::new(768, &o.clone().with_page_rows(0)).is_err());
        assert!(Slots::new(768, &o.clone().with_page_budget(0)).is_err());
        assert!(Slots::new(768, &o.clone().with_step_rows(0)).is_err());
        assert!(Slots::new(768, &o.with_page_rows(u64::MAX / 2)).is_err());
    }

    #[test]
    fn segments_start_on_a_flag_byte() {
        let s = slots(10, 3);
        assert_eq!(s.segment_start(0).unwrap(), 0);
        assert_eq!(s.segment_start(8).unwrap(), 8);
        assert_eq!(s.segment_start(9).unwrap(), 16);
        assert_eq!(s.segment_start(17).unwrap(), 24);
        assert_eq!(s.segment_start(24).unwrap(), 24);
        // A full store may still start a (necessarily empty) segment at its
        // end, but not past it.
        assert_eq!(
            s.segment_start(30).unwrap_err().kind(),
            crate::ErrorKind::InvalidArgument
        );
        let s = slots(10, 1);
        assert!(s.segment_start(9).is_err());
        assert_eq!(slots(8, 1).segment_start(8).unwrap(), 8);
    }
}
