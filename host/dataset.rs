//! A borrowed view of a dataset: `rows` tensors of `row_bytes` bytes each,
//! stored back to back.

use crate::error::{Error, Result};

/// `rows()` tensors of `row_bytes()` bytes, contiguous. Element types do not
/// matter to the codec: any `bytemuck::Pod` slice can be viewed as rows.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    bytes: &'a [u8],
    row_bytes: usize,
}

impl<'a> Rows<'a> {
    /// View `bytes` as rows of `row_bytes` bytes.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] when `row_bytes` is 0
    /// or does not divide `bytes.len()`.
    pub fn new(bytes: &'a [u8], row_bytes: usize) -> Result<Self> {
        if row_bytes == 0 {
            return Err(Error::invalid(
                "row length is 0 bytes; every tensor needs at least one byte",
            ));
        }
        if !bytes.len().is_multiple_of(row_bytes) {
            return Err(Error::invalid(format!(
                "{} bytes do not split into rows of {row_bytes} bytes ({} bytes left over)",
                bytes.len(),
                bytes.len() % row_bytes
            )));
        }
        Ok(Self { bytes, row_bytes })
    }

    /// View a typed slice as rows of `row_len` elements.
    pub fn of<T: bytemuck::Pod>(values: &'a [T], row_len: usize) -> Result<Self> {
        let row_bytes = row_len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::invalid("row length in bytes overflows usize"))?;
        Self::new(bytemuck::cast_slice(values), row_bytes)
    }

    /// All bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Bytes per row (`L`).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Number of rows (`N`).
    pub fn rows(&self) -> usize {
        self.bytes.len() / self.row_bytes
    }

    /// Row `i`. Panics if `i >= rows()`, like slice indexing.
    pub fn row(&self, i: usize) -> &'a [u8] {
        &self.bytes[i * self.row_bytes..(i + 1) * self.row_bytes]
    }

    /// Rows `start..end` as a dataset of their own.
    pub fn slice(&self, start: usize, end: usize) -> Rows<'a> {
        Rows {
            bytes: &self.bytes[start * self.row_bytes..end * self.row_bytes],
            row_bytes: self.row_bytes,
        }
    }

    /// Iterator over the rows.
    pub fn iter(&self) -> std::slice::ChunksExact<'a, u8> {
        self.bytes.chunks_exact(self.row_bytes)
    }
}
