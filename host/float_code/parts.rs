//! A group from its parts: the index's block bases and relative starts and
//! the payload, checked against each other (`FloatCoded::from_bytes` and
//! the GPU encoder's output, `ibp::gpu::FloatEncoder`, both build through
//! it).

use super::{FloatCoded, RowShapeKey, Table, index_shape};
use crate::error::{Error, Result};

impl FloatCoded {
    /// A group from the GPU encoder's output: `rows` rows of `row_bytes`
    /// under `table`, the index's block bases (`⌈rows / B⌉ + 1` u64) and
    /// relative starts (`rel_width` bytes a row, little-endian, as the
    /// kernel writes them; extra bytes ignored) and the payload.
    ///
    /// Errors with [`crate::ErrorKind::Corrupt`] when the parts do not
    /// make a valid group (an index outside the payload).
    pub(crate) fn from_parts(
        table: &Table,
        rows: usize,
        row_bytes: usize,
        bases: Vec<u64>,
        rel: &[u8],
        payload: Vec<u8>,
    ) -> Result<Self> {
        let (block_log2, rel_width) = index_shape(row_bytes);
        let w = usize::from(rel_width);
        let nb = rows.div_ceil(1 << block_log2) + 1;
        if bases.len() != nb || rel.len() < w * rows {
            return Err(Error::corrupt(format!(
                "an index of {} bases and {} relative bytes for {rows} rows",
                bases.len(),
                rel.len()
            )));
        }
        let rel: Vec<u32> = if w == 0 {
            vec![0; rows]
        } else {
            rel[..w * rows]
                .chunks_exact(w)
                .map(|c| {
                    let mut v = [0u8; 4];
                    v[..w].copy_from_slice(c);
                    u32::from_le_bytes(v)
                })
                .collect()
        };
        if bases[0] != 0 || bases[nb - 1] != payload.len() as u64 {
            return Err(Error::corrupt(
                "a float-coded group's offsets do not span its payload",
            ));
        }
        let g = Self {
            table: table.clone(),
            shape: RowShapeKey { row_bytes },
            rows,
            block_log2,
            rel_width,
            bases,
            rel,
            payload,
        };
        for i in 0..rows {
            g.row_range(i)?;
        }
        Ok(g)
    }
}
