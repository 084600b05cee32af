//! Compressed rows for the emulated machine (feature `emu`): a packed
//! dataset laid out in host memory as [`crate::gpu::GpuDataset`] lays it
//! out on the device, so that a kernel body which decodes with ibp's
//! device API (`ibp_kernels::device`) runs in a test on the CPU, on
//! `ibp-kernel-emu`'s lanes, with no GPU and no CUDA.
//!
//! ```
//! use ibp::Rows;
//! use ibp::emu::EmuDataset;
//! use ibp::fit::{FitOptions, fit};
//! use ibp::layout::{LayoutOptions, compress_packed};
//! use ibp_kernel_emu::{Buffer, Grid, HostMem, launch};
//! use ibp_kernels::device::decode_row;
//! use ibp_kernels::step::RowStore;
//!
//! // 40 rows of 96 f32s, compressed on the host.
//! let values: Vec<f32> = (0..40 * 96).map(|i| 1.0 + (i % 89) as f32 / 64.0).collect();
//! let rows = Rows::of(&values, 96)?;
//! let cb = fit(rows, &FitOptions::default())?.codebook;
//! let packed = compress_packed(&cb, rows, &LayoutOptions::default())?;
//! let ds = EmuDataset::new(&cb, &packed.view())?;
//! let view = ds.view();
//!
//! // Four warps a block, each decoding rows into `out` through the
//! // device API's `RowStore` sink, its workspace in shared memory.
//! let out = Buffer::zeroed(rows.bytes().len());
//! let ws = view.workspace_bytes();
//! launch(Grid::new(2, 4).with_shared_bytes(4 * ws as usize), |lane| {
//!     let (first, warps) = lane.global_warp();
//!     let mut t = first;
//!     while t < view.rows {
//!         // SAFETY: `out` holds every row; the view is `ds`'s, which
//!         // outlives the launch; the warp's workspace is its own.
//!         unsafe {
//!             let dst = out.addr() + t * view.row_bytes;
//!             let mut sink = RowStore::new(&HostMem, dst);
//!             let ws_addr = lane.warp_in_block() * ws;
//!             decode_row(lane, &view, &ds.book(), ws_addr, t, &mut sink).unwrap();
//!         }
//!         t += warps;
//!     }
//! });
//! assert_eq!(out.bytes(), rows.bytes());
//! # Ok::<(), ibp::Error>(())
//! ```

use ibp_kernel_emu::{Buffer, HostBytes};
use ibp_kernels::device::DatasetView;

use crate::codebook::Codebook;
use crate::error::{Error, Result};
use crate::kernel_tables::{decode_book, decoder_table};
use crate::layout::PackedRef;

/// A packed dataset and its codebook's decode tables in host buffers
/// ([`ibp_kernel_emu::Buffer`]: 128-aligned, in whole lines, as device
/// allocations are), for the device API on the emulated machine.
#[derive(Debug)]
pub struct EmuDataset {
    payload: Buffer,
    offsets: Buffer,
    flags: Buffer,
    book: Buffer,
    entries: Buffer,
    rows: u64,
    row_bytes: u64,
    chunk: u32,
}

impl EmuDataset {
    /// Copy `packed` and `cb`'s decode tables into host buffers. The
    /// layout is validated first, as `GpuDataset::upload_packed` does (the
    /// device API trusts slot boundaries): errors with
    /// [`crate::ErrorKind::InvalidArgument`] when `cb` is for rows of
    /// another length, and [`crate::ErrorKind::Corrupt`] for an
    /// inconsistent packed layout.
    pub fn new(cb: &Codebook, packed: &PackedRef<'_>) -> Result<Self> {
        if cb.row_bytes() != packed.row_bytes() {
            return Err(Error::invalid(format!(
                "codebook is for {}-byte tensors, the dataset has {}-byte tensors",
                cb.row_bytes(),
                packed.row_bytes()
            )));
        }
        packed.validate()?;
        Ok(EmuDataset {
            payload: Buffer::from_bytes(packed.payload()),
            offsets: Buffer::from_slice(packed.offsets()),
            flags: Buffer::from_bytes(packed.flags()),
            book: Buffer::from_bytes(&decode_book(cb)),
            entries: Buffer::from_bytes(&decoder_table(cb)),
            rows: packed.rows() as u64,
            row_bytes: packed.row_bytes() as u64,
            chunk: cb.chunk().bytes(),
        })
    }

    /// The view a kernel gets, as `GpuDataset::device_view` gives it on
    /// the GPU; its addresses are valid while `self` lives.
    pub fn view(&self) -> DatasetView {
        DatasetView {
            src: self.payload.addr(),
            offsets: self.offsets.addr(),
            lengths: 0,
            flags: self.flags.addr(),
            book: self.book.addr(),
            entries: self.entries.addr(),
            rows: self.rows,
            row_bytes: self.row_bytes,
            book_bytes: self.book.len() as u32,
            chunk: self.chunk,
        }
    }

    /// The decode book as the `Book` a decode reads (on the GPU, a
    /// `GlobalBook` or a copy in shared memory); valid while `self` lives.
    pub fn book(&self) -> HostBytes {
        HostBytes(self.book.addr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use crate::Rows;
    use crate::fit::{FitOptions, fit};
    use crate::layout::{LayoutOptions, compress_packed};

    #[test]
    fn a_mismatched_codebook_or_a_corrupt_layout_is_refused() {
        let values: Vec<u16> = (0..64 * 20).map(|i| (i % 13) as u16).collect();
        let rows = Rows::of(&values, 64).unwrap();
        let cb = fit(rows, &FitOptions::default()).unwrap().codebook;
        let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        let ok = EmuDataset::new(&cb, &packed.view()).unwrap();
        let v = ok.view();
        assert_eq!(
            (v.rows, v.row_bytes, v.chunk),
            (20, 128, cb.chunk().bytes())
        );

        let other = Rows::of(&values, 32).unwrap();
        let cb32 = fit(other, &FitOptions::default()).unwrap().codebook;
        let err = EmuDataset::new(&cb32, &packed.view()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);

        let mut bad = packed.clone();
        bad.offsets[3] = bad.offsets[4] + 1;
        let err = EmuDataset::new(&cb, &bad.view()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
    }
}
