//! What a decode launch decodes (a range of rows, or rows by index) and how
//! (decode, or the ideal read the benchmarks compare with): [`Request`].

use std::marker::PhantomData;

use cust::memory::DeviceSlice;

use super::GatherIndex;
use crate::error::{Error, Result};
use crate::gpu::memory::{GpuReadable, Span};

/// How a launch treats the rows it selects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Decode every selected row into its output row.
    #[default]
    Decode,
    /// The benchmarks' baseline: read exactly the stored bytes with the
    /// same aligned line copies, write `L` bytes per row, decode nothing.
    /// Needs stored lengths (the packed layout, or a fixed-stride dataset
    /// with a length table) and rows of whole `u32`.
    Ideal,
}

/// Which rows a launch decodes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Select {
    /// Output row `i` receives row `first + i`.
    Range { first: u64, count: u64 },
    /// Output row `i` receives row `index[i]`: `len` indices at device
    /// address `addr`, u64 when `wide`, else u32.
    Index { addr: u64, len: u64, wide: bool },
}

/// One decode, as [`super::Decoder::enqueue`] takes it: which rows, into
/// which output rows, and how.
///
/// ```text
/// dec.enqueue(&gpu, &Request::gather(&index), &mut out, &status, &stream)?;
/// dec.enqueue(&gpu, &Request::range(0, n).with_mode(Mode::Ideal), &mut out, &status, &stream)?;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Request<'i> {
    pub(crate) select: Select,
    pub(crate) mode: Mode,
    pub(crate) out_stride: Option<u64>,
    /// A gather borrows its index for as long as the request lives.
    index: PhantomData<&'i ()>,
}

impl<'i> Request<'i> {
    /// Output row `i` receives row `first + i`, for `count` rows.
    pub fn range(first: u64, count: u64) -> Self {
        Self::of(Select::Range { first, count })
    }

    /// Output row `i` receives row `index[i]`: any order, repeats allowed,
    /// indices `u32` or `u64` in device memory. An index out of range
    /// zero-fills its output row and is reported in the status.
    pub fn gather<I: GatherIndex>(index: &'i DeviceSlice<I>) -> Self {
        Self::of(Select::Index {
            addr: index.as_device_ptr().as_raw(),
            len: index.len() as u64,
            wide: I::WIDE,
        })
    }

    /// [`Request::gather`] with its index in memory of another library
    /// (a [`Span`] from raw parts: cudarc's `CudaSlice<u32>`, a C buffer),
    /// `index.byte_len() / size_of::<I>()` row numbers of type `I`.
    /// Errors ([`crate::ErrorKind::InvalidArgument`]) when the span is not
    /// whole `I`s, or its address is not aligned to `I`.
    pub fn gather_span<I: GatherIndex>(index: &Span<'i>) -> Result<Self> {
        let size = size_of::<I>();
        let (addr, bytes) = (index.device_addr(), index.byte_len());
        if !bytes.is_multiple_of(size) || !addr.is_multiple_of(size as u64) {
            return Err(Error::invalid(format!(
                "a gather index of {size}-byte integers at 0x{addr:x}, {bytes} bytes: not aligned to {size} or not whole integers"
            )));
        }
        Ok(Self::of(Select::Index {
            addr,
            len: (bytes / size) as u64,
            wide: I::WIDE,
        }))
    }

    /// Output rows `bytes` apart (at least `L`; default `L`): row `i` is
    /// `out[i·bytes ..][..L]`, and the bytes between rows are left as they
    /// are (a column of a wider table, padded rows).
    pub fn with_out_stride(mut self, bytes: usize) -> Self {
        self.out_stride = Some(bytes as u64);
        self
    }

    /// Decode (the default), or the ideal read ([`Mode::Ideal`]).
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    pub(crate) fn of(select: Select) -> Self {
        Request {
            select,
            mode: Mode::Decode,
            out_stride: None,
            index: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(addr: u64, len: usize) -> Span<'static> {
        // SAFETY: never handed to a kernel; the tests read the request only.
        unsafe { Span::from_raw_parts(addr, len) }
    }

    #[test]
    fn a_span_index_counts_its_integers() {
        let r = Request::gather_span::<u32>(&raw(0x1000, 40)).unwrap();
        assert!(matches!(
            r.select,
            Select::Index {
                addr: 0x1000,
                len: 10,
                wide: false
            }
        ));
        let r = Request::gather_span::<u64>(&raw(0x2000, 16)).unwrap();
        assert!(matches!(
            r.select,
            Select::Index {
                addr: 0x2000,
                len: 2,
                wide: true
            }
        ));
        let r = Request::gather_span::<u64>(&raw(0x2000, 0)).unwrap();
        assert!(matches!(r.select, Select::Index { len: 0, .. }));
    }

    #[test]
    fn a_ragged_or_misaligned_span_index_is_refused() {
        for (addr, len) in [(0x1000, 6), (0x1004, 8), (0x1001, 16)] {
            let e = Request::gather_span::<u64>(&raw(addr, len)).unwrap_err();
            assert_eq!(
                e.kind(),
                crate::ErrorKind::InvalidArgument,
                "{addr:x} {len}"
            );
        }
        let e = Request::gather_span::<u32>(&raw(0x1002, 8)).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
    }
}
