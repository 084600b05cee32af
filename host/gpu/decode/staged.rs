//! The staged range path: the caller has copied a range's stored bytes
//! into device memory (by DMA, on a stream of its own, in pieces as large
//! as it likes) and the decoder reads them there. [`Decoder::range_dma`]
//! does the copying itself, from its own scratch and copy stream; this path
//! leaves both to the caller, for one who schedules its own copies (an
//! offloading runtime that moves a whole layer's weights at once).

use super::request::Request;
use super::{DecodeStatus, Decoder};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::gpu::dataset::GpuDataset;
use crate::gpu::memory::{GpuReadable, GpuWritable, Span};
use crate::gpu::rows_view::Fetch;
use crate::gpu::stream::GpuStream;

/// Alignment a staging area must have, and the multiple its length is
/// rounded up to: the decoder fetches whole aligned 128-byte lines.
pub const STAGING_ALIGN: usize = 128;

impl GpuDataset {
    /// Where rows `first .. first + count` of a packed dataset lie in its
    /// payload ([`GpuDataset::payload`]): the bytes a caller copies into a
    /// staging area for [`Decoder::range_staged`]. `None` for a
    /// fixed-stride dataset (no host offsets) or rows past the end.
    pub fn stored_range(&self, first: u64, count: u64) -> Option<std::ops::Range<u64>> {
        let offsets = self.host_offsets.as_ref()?;
        let end = first.checked_add(count).filter(|&e| e <= self.rows)?;
        Some(offsets[first as usize]..offsets[end as usize])
    }

    /// Bytes a staging area must hold for rows `first .. first + count`:
    /// their stored bytes rounded up to whole lines ([`STAGING_ALIGN`]).
    /// `None` as for [`GpuDataset::stored_range`].
    pub fn staging_bytes(&self, first: u64, count: u64) -> Option<usize> {
        let r = self.stored_range(first, count)?;
        Some(((r.end - r.start) as usize).next_multiple_of(STAGING_ALIGN))
    }
}

impl Decoder<'_> {
    /// Enqueue the decode of rows `first .. first + count` of this
    /// decoder's packed dataset (output row `i` receives row `first + i`,
    /// as [`Decoder::range`] does) from `staged`: device memory holding the
    /// rows' stored bytes, [`GpuDataset::stored_range`] of the payload,
    /// copied there by the caller. The dataset's tables (codebook, offsets,
    /// flags) are read where the dataset keeps them; only the stored bytes
    /// come from `staged`. No host synchronisation, no allocation.
    ///
    /// The copy into `staged` must be complete, or ordered before `stream`
    /// (an event the stream waits on), before this launch runs; what the
    /// staging area holds otherwise decodes to wrong rows or is reported as
    /// corrupt, never read or written out of bounds.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for a fixed-stride
    /// dataset, rows past the end, a staging area not aligned to
    /// [`STAGING_ALIGN`] bytes or shorter than
    /// [`GpuDataset::staging_bytes`], or an output shorter than
    /// `count × row_bytes`.
    ///
    /// Q: why a path where the caller copies?
    /// A: [`Decoder::range_dma`] pipelines 8 MB pieces on a copy stream of
    /// its own and orders every call after the previous call's decodes, so
    /// back-to-back ranges (a layer's tensors) wait for each other. A
    /// caller that copies a layer at a time onto its own stream keeps the
    /// copy engine busy across tensors and decodes each one as soon as its
    /// bytes are in.
    #[allow(clippy::too_many_arguments)]
    pub fn range_staged<O: GpuWritable + ?Sized, S: GpuStream + ?Sized>(
        &self,
        gpu: &Gpu,
        first: u64,
        count: u64,
        staged: &Span<'_>,
        out: &mut O,
        status: &DecodeStatus,
        stream: &S,
    ) -> Result<()> {
        let ds = self.dataset()?;
        let Some(range) = ds.stored_range(first, count) else {
            return Err(Error::invalid(if ds.host_offsets.is_none() {
                "the staged path needs a packed dataset (a fixed-stride one has no host offsets)"
                    .to_string()
            } else {
                format!(
                    "rows {first}..{} of {} requested",
                    first.saturating_add(count),
                    ds.rows
                )
            }));
        };
        let need = ((range.end - range.start) as usize).next_multiple_of(STAGING_ALIGN);
        let addr = staged.device_addr();
        if !addr.is_multiple_of(STAGING_ALIGN as u64) || staged.byte_len() < need {
            return Err(Error::invalid(format!(
                "a staging area of {} bytes at {addr:#x}; the rows need {need} bytes aligned to {STAGING_ALIGN} (GpuDataset::staging_bytes)",
                staged.byte_len()
            )));
        }
        // The dataset's tables, its stored bytes from `range.start` on in
        // the staging area (a DMA piece's view, with the caller's buffer).
        let rows = crate::gpu::rows_view::RowsView {
            src: addr,
            offset_base: range.start,
            host: false,
            fetch: Some(Fetch::CpAsync),
            ..ds.rows_view()
        };
        self.launch(
            gpu,
            &rows,
            &Request::range(first, count),
            0,
            out,
            status,
            stream,
        )
    }
}
