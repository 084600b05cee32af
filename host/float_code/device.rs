//! The float coding's tables and groups as the GPU reads and writes them:
//! the decoder's image of a group ([`DeviceImage`]), the encoder's table and
//! shape ([`Table::encode_image`]) and a group put together from the
//! encoder's device buffers ([`FloatCoded::from_parts`]).

use super::row::RowShape;
use super::{FloatCoded, Table, index_shape, table};
use crate::error::{Error, Result};

/// What the GPU decoder reads of a group, laid out for device memory
/// (`ibp_kernels::params::FloatDecodeParams`): the decode table as u16
/// entries, the block bases and the relative starts, each padded to whole
/// 4-byte words, and the parameter block with every shape field filled
/// (the addresses, `count`, `ids`, `first` and `status` left 0).
pub(crate) struct DeviceImage {
    pub table: Vec<u8>,
    pub bases: Vec<u8>,
    pub rel: Vec<u8>,
    pub params: ibp_kernels::params::FloatDecodeParams,
}

impl FloatCoded {
    /// The group as the GPU decoder reads it.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] when its codes are
    /// longer than the GPU decoder's limit
    /// ([`ibp_kernels::params::FLOAT_MAX_CODE_LEN`], 12 bits: fit with
    /// [`FitOptions::max_code_len`] at most 12, the default) or rows longer
    /// than [`ibp_kernels::params::FLOAT_MAX_ROW_BYTES`] (16 MiB).
    pub(crate) fn device_image(&self) -> Result<DeviceImage> {
        use ibp_kernels::params::{
            FLOAT_MAX_CODE_LEN, FLOAT_MAX_ROW_BYTES, FLOAT_NO_SYMBOL, FloatDecodeParams,
        };
        let t = &self.table;
        if u32::from(t.max_len) > FLOAT_MAX_CODE_LEN {
            return Err(Error::invalid(format!(
                "codes of up to {} bits; the GPU decoder takes up to {FLOAT_MAX_CODE_LEN} (fit with max_code_len {FLOAT_MAX_CODE_LEN} or less)",
                t.max_len
            )));
        }
        let sh = RowShape::new(t, self.row_bytes())?;
        if self.row_bytes() > FLOAT_MAX_ROW_BYTES as usize {
            return Err(Error::invalid(format!(
                "rows of {} bytes; the GPU decoder takes rows of up to {FLOAT_MAX_ROW_BYTES} bytes",
                self.row_bytes()
            )));
        }
        let mut table: Vec<u8> = t
            .dec
            .iter()
            .flat_map(|&e| {
                let v = if e == table::NO_SYMBOL {
                    FLOAT_NO_SYMBOL as u16
                } else {
                    // Symbols are below 2^12 and lengths at most 12.
                    ((e & 0xfff) | (e >> 16) << 12) as u16
                };
                v.to_le_bytes()
            })
            .collect();
        table.resize(table.len().next_multiple_of(4), 0);
        let bases: Vec<u8> = self.bases.iter().flat_map(|b| b.to_le_bytes()).collect();
        let w = usize::from(self.rel_width);
        let mut rel: Vec<u8> = self
            .rel
            .iter()
            .flat_map(|r| r.to_le_bytes().into_iter().take(w))
            .collect();
        rel.resize(rel.len().next_multiple_of(4).max(4), 0);
        let params = FloatDecodeParams {
            payload_len: self.payload.len() as u64,
            rows: self.rows as u64,
            // Below 4 GiB, as `compress` checked.
            row_bytes: self.row_bytes() as u32,
            elem_bytes: sh.elem as u32,
            residual_bits: sh.r,
            low: sh.low,
            width: sh.width,
            sub_streams: sh.s as u32,
            len_bits: sh.len_bits,
            max_len: sh.max_len,
            block_log2: u32::from(self.block_log2),
            rel_width: u32::from(self.rel_width),
            ..Default::default()
        };
        Ok(DeviceImage {
            table,
            bases,
            rel,
            params,
        })
    }
}

impl Table {
    /// The GPU encoder's table (`ibp_kernels::params::FloatEncodeParams`):
    /// per symbol value (`2^width` u32) `rev | code << 12 | len << 24`, or
    /// [`ibp_kernels::params::FLOAT_NO_CODE`] for a symbol without a code.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] when its codes are
    /// longer than [`ibp_kernels::params::FLOAT_MAX_CODE_LEN`] (12 bits, the
    /// GPU decoder's limit too).
    pub(crate) fn encode_image(&self) -> Result<Vec<u32>> {
        use ibp_kernels::params::{FLOAT_MAX_CODE_LEN, FLOAT_NO_CODE};
        if u32::from(self.max_len) > FLOAT_MAX_CODE_LEN {
            return Err(Error::invalid(format!(
                "codes of up to {} bits; the GPU encoder takes up to {FLOAT_MAX_CODE_LEN} (fit with max_code_len {FLOAT_MAX_CODE_LEN} or less)",
                self.max_len
            )));
        }
        Ok(self
            .enc
            .iter()
            .map(|&e| {
                if e == table::NO_CODE {
                    FLOAT_NO_CODE
                } else {
                    // rev and code below 2^12, the length at most 12.
                    ((e & 0xfff) | ((e >> 16) & 0xfff) << 12 | (e >> 32) << 24) as u32
                }
            })
            .collect())
    }

    /// The GPU encoder's parameters for rows of `row_bytes` (the shape
    /// fields; the addresses and `rows` left 0).
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for rows that are
    /// not whole elements or longer than
    /// [`ibp_kernels::params::FLOAT_MAX_ROW_BYTES`].
    pub(crate) fn encode_params(
        &self,
        row_bytes: usize,
    ) -> Result<ibp_kernels::params::FloatEncodeParams> {
        use ibp_kernels::params::{FLOAT_MAX_ROW_BYTES, FloatEncodeParams};
        let sh = RowShape::new(self, row_bytes)?;
        if row_bytes > FLOAT_MAX_ROW_BYTES as usize {
            return Err(Error::invalid(format!(
                "rows of {row_bytes} bytes; the GPU encoder takes rows of up to {FLOAT_MAX_ROW_BYTES} bytes"
            )));
        }
        let (block_log2, rel_width) = index_shape(row_bytes);
        Ok(FloatEncodeParams {
            row_bytes: row_bytes as u32,
            elem_bytes: sh.elem as u32,
            residual_bits: sh.r,
            low: sh.low,
            width: sh.width,
            sub_streams: sh.s as u32,
            len_bits: sh.len_bits,
            block_log2: u32::from(block_log2),
            rel_width: u32::from(rel_width),
            table_smem_bytes: 4 << sh.width,
            ..Default::default()
        })
    }
}
