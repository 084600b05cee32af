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

    /// Row `i`.
    ///
    /// # Panics
    ///
    /// If `i >= rows()`, like slice indexing; [`Rows::get`] returns `None`
    /// instead.
    pub fn row(&self, i: usize) -> &'a [u8] {
        match self.get(i) {
            Some(r) => r,
            None => panic!("row {i} of a dataset of {} rows", self.rows()),
        }
    }

    /// Row `i`, or `None` if `i >= rows()`.
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        let start = i.checked_mul(self.row_bytes)?;
        self.bytes.get(start..start.checked_add(self.row_bytes)?)
    }

    /// Rows `start..end` as a dataset of their own.
    ///
    /// # Panics
    ///
    /// If `start > end` or `end > rows()`, like slice indexing;
    /// [`Rows::try_slice`] returns an error instead.
    pub fn slice(&self, start: usize, end: usize) -> Rows<'a> {
        match self.try_slice(start, end) {
            Ok(r) => r,
            Err(e) => panic!("{}", e.message()),
        }
    }

    /// Rows `start..end` as a dataset of their own, or
    /// [`crate::ErrorKind::InvalidArgument`] when `start > end` or
    /// `end > rows()`.
    pub fn try_slice(&self, start: usize, end: usize) -> Result<Rows<'a>> {
        if start > end || end > self.rows() {
            return Err(Error::invalid(format!(
                "rows {start}..{end} of a dataset of {} rows",
                self.rows()
            )));
        }
        Ok(Rows {
            bytes: &self.bytes[start * self.row_bytes..end * self.row_bytes],
            row_bytes: self.row_bytes,
        })
    }

    /// Iterator over the rows.
    pub fn iter(&self) -> std::slice::ChunksExact<'a, u8> {
        self.bytes.chunks_exact(self.row_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_access_errors_where_indexing_panics() {
        let bytes = [0u8, 1, 2, 3, 4, 5];
        let rows = Rows::new(&bytes, 2).unwrap();
        assert_eq!(rows.get(2), Some(&[4u8, 5][..]));
        assert_eq!(rows.get(3), None);
        assert_eq!(rows.get(usize::MAX), None);
        assert_eq!(rows.try_slice(1, 3).unwrap().bytes(), &bytes[2..]);
        assert_eq!(rows.try_slice(3, 3).unwrap().rows(), 0);
        for (s, e) in [(0, 4), (2, 1), (4, 4), (usize::MAX, usize::MAX)] {
            let err = rows.try_slice(s, e).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "{s}..{e}");
        }
    }

    #[test]
    #[should_panic(expected = "rows 2..4 of a dataset of 3 rows")]
    fn slice_past_the_end_panics_as_documented() {
        let bytes = [0u8; 6];
        let _ = Rows::new(&bytes, 2).unwrap().slice(2, 4);
    }

    #[test]
    #[should_panic(expected = "rows 2..1 of a dataset of 3 rows")]
    fn reversed_slice_panics_as_documented() {
        let bytes = [0u8; 6];
        let _ = Rows::new(&bytes, 2).unwrap().slice(2, 1);
    }

    #[test]
    #[should_panic(expected = "row 3 of a dataset of 3 rows")]
    fn row_past_the_end_panics_as_documented() {
        let bytes = [0u8; 6];
        let _ = Rows::new(&bytes, 2).unwrap().row(3);
    }
}
