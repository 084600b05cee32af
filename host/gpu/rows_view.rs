//! Where a decode launch finds its rows: a borrowed description of the
//! stored bytes and their tables in memory the GPU reads ([`RowsView`]).
//!
//! A [`super::GpuDataset`] describes its own rows; so do a DMA piece (a
//! copy of part of a payload in device scratch, with its own offsets and
//! flags), a KV store's segment (a window of the store's pinned pages and
//! tables) and a feature cache's host rows. With a [`super::DeviceBook`] a
//! view makes the one description that crosses to the device,
//! `ibp_kernels::device::DatasetView`.

use super::book::DeviceBook;

/// Device addresses of a run of stored rows, and how to read them.
///
/// Q: why raw addresses, not borrowed buffers?
/// A: the views point into buffers of different owners (a dataset, a DMA
/// scratch, a KV store's pages) and often at an offset inside them; each
/// constructor is crate-internal and states what it covers, and the
/// launch's safety comment rests on those constructors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowsView {
    /// The stored bytes (payload or slots), minus `offset_base`.
    pub src: u64,
    /// Packed layout: `rows + 1` u64 offsets (0: fixed-stride).
    pub offsets: u64,
    /// Fixed-stride, optional: one u32 stored length per row (0: derive
    /// each from its participation bits).
    pub lengths: u64,
    /// The flag bitmap.
    pub flags: u64,
    /// Rows behind the tables.
    pub rows: u64,
    /// Packed layout: subtracted from every offset (`src` holds the payload
    /// from that offset on: a DMA piece).
    pub offset_base: u64,
    /// A clustered dataset's ids: their address and bits per id.
    pub clusters: Option<(u64, u32)>,
    /// Whether `src` is host memory the kernel reads over PCIe.
    pub host: bool,
    /// How the lines must be fetched, when the view decides (a DMA piece is
    /// always in device memory); else the decoder's choice.
    pub fetch: Option<Fetch>,
}

impl RowsView {
    /// The view with `book`'s tables, as a user kernel reads a dataset
    /// (`ibp_kernels::device::decode_row`).
    pub fn view(&self, book: &DeviceBook) -> ibp_kernels::device::DatasetView {
        let (book_addr, entries) = book.addrs();
        ibp_kernels::device::DatasetView {
            src: self.src,
            offsets: self.offsets,
            lengths: self.lengths,
            flags: self.flags,
            book: book_addr,
            entries,
            rows: self.rows,
            row_bytes: book.row_bytes,
            book_bytes: book.book_bytes as u32,
            chunk: book.chunk,
        }
    }

    /// Whether a tensor's stored length is read from a table (packed
    /// offsets or fixed-stride lengths), as the ideal-read baseline needs.
    pub fn has_lengths(&self) -> bool {
        self.offsets != 0 || self.lengths != 0
    }
}

/// How the decoder moves source lines into shared memory.
///
/// Q: why not always `cp.async`, as the paper does?
/// A: measured on an H200 (driver 580.159.04, PCIe Gen5): `cp.async.cg`
/// reading mapped pinned host memory tops out at 29.5 GB/s, while 16-byte
/// loads plus shared stores reach the link's 51 GB/s (the same kernel
/// otherwise). From device memory `cp.async` is faster (its copies overlap
/// the decode of the previous batch): 623 against 577 GB/s decoded for 4 KB
/// tensors at 50% savings. So the default picks by residency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// `cp.async.cg`, 16 bytes per lane (default for device memory).
    CpAsync,
    /// 16-byte loads and shared-memory stores (default for pinned host
    /// memory).
    LoadStore,
}
