//! Where a [`super::FeatureCache`] finds each row's stored bytes in a
//! dataset held in pinned host memory, in either layout, and what a miss
//! costs on the link.
//!
//! - **Packed** (`docs/FORMAT.md` §3.2): stored forms back to back, the
//!   offsets table gives row `t` the bytes `offsets[t] .. offsets[t + 1]`.
//!   Host memory holds only the compressed bytes, but a row starts wherever
//!   its predecessor ended and shares its first and last 128-byte lines
//!   with its neighbours.
//! - **Fixed-stride with a length table** (§3.1,
//!   `GpuDataset::with_length_table`): row `t` is the prefix of its
//!   `L`-byte slot at `t · L`, its length in the table (device memory, so
//!   the kernel learns it without crossing the link). When `L` is a
//!   multiple of 128 every row starts on a line, and a row of `s` stored
//!   bytes costs `⌈s / 128⌉` lines; for any `L` a compressed row costs at
//!   most the lines of its raw slot. Host memory holds `N · L` bytes, as
//!   the raw table does.
//!
//! Q: why not give the cache its own line-aligned host copy instead?
//! A: the fixed-stride layout is the format's own answer to "rows fetched
//! by index from host memory", and the kernels already decode it
//! ([`ibp_kernels::device::decode_row`]); a third layout would need its own
//! validation, its own kernel path and its own tests.

use super::super::dataset::{GpuDataset, Payload};
use crate::error::{Error, Result};

/// Bytes of a 128-byte line: the unit in which PCIe reads are counted.
pub(crate) const LINE: u64 = 128;

/// A pinned dataset's stored rows, as the host sees them.
pub(crate) struct HostRows<'a> {
    /// The stored bytes (payload or slots).
    pub payload: &'a [u8],
    spans: Spans<'a>,
}

enum Spans<'a> {
    Packed(&'a [u64]),
    Fixed { stride: u64, lengths: &'a [u32] },
}

impl<'a> HostRows<'a> {
    /// The rows of `ds`. Errors (`Unsupported`) for a dataset in device
    /// memory, or fixed-stride without its length table (the cache could
    /// not pack its rows, and each miss would read its whole slot).
    pub fn of(ds: &'a GpuDataset) -> Result<Self> {
        let Payload::Pinned(p) = &ds.payload else {
            return Err(Error::unsupported(
                "a feature cache takes datasets in pinned host memory (Residency::Pinned)",
            ));
        };
        let spans = match (&ds.host_offsets, &ds.host_lengths) {
            (Some(o), _) => Spans::Packed(o),
            (None, Some(l)) => Spans::Fixed {
                stride: ds.row_bytes,
                lengths: l,
            },
            (None, None) => {
                return Err(Error::unsupported(
                    "a feature cache over a fixed-stride dataset needs its length table: upload it with GpuDataset::with_length_table",
                ));
            }
        };
        Ok(HostRows { payload: p, spans })
    }

    /// Row `t`'s stored bytes: `start .. end` of the payload (`t` < rows).
    pub fn span(&self, t: u64) -> (u64, u64) {
        match self.spans {
            Spans::Packed(o) => (o[t as usize], o[t as usize + 1]),
            Spans::Fixed { stride, lengths } => {
                let a = t * stride;
                (a, a + lengths[t as usize] as u64)
            }
        }
    }

    /// Row `t`'s stored length.
    pub fn stored(&self, t: u64) -> u64 {
        let (a, b) = self.span(t);
        b - a
    }

    /// Row `t`'s stored bytes.
    pub fn bytes(&self, t: u64) -> &'a [u8] {
        let (a, b) = self.span(t);
        &self.payload[a as usize..b as usize]
    }

    /// What tells the rows apart besides their bytes: the layout and its
    /// offsets or lengths, for the dataset's fingerprint.
    pub fn hash_into(&self, h: &mut xxhash_rust::xxh3::Xxh3) {
        match self.spans {
            Spans::Packed(o) => {
                h.update(b"packed");
                h.update(bytemuck::cast_slice(o));
            }
            Spans::Fixed { lengths, .. } => {
                h.update(b"fixed-stride");
                h.update(bytemuck::cast_slice(lengths));
            }
        }
    }
}

/// Bytes of the whole 128-byte lines that hold `addr .. addr + len` (0 for
/// an empty range): what a miss costs on the link.
pub(crate) fn line_bytes(addr: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    ((addr + len).div_ceil(LINE) - addr / LINE) * LINE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_costs_the_lines_it_touches() {
        assert_eq!(line_bytes(0, 0), 0);
        assert_eq!(line_bytes(0, 1), 128);
        assert_eq!(line_bytes(0, 128), 128);
        assert_eq!(line_bytes(0, 129), 256);
        // MiniLM bf16: 572 stored bytes cost 5 lines line-aligned, and 6
        // when the row starts late in a line, as packed rows do.
        assert_eq!(line_bytes(768 * 9, 572), 5 * 128);
        assert_eq!(line_bytes(100, 572), 6 * 128);
        // Never more than the raw slot at the same place.
        for addr in [0u64, 5, 127, 4096 + 77] {
            for s in 1..=768 {
                assert!(line_bytes(addr, s) <= line_bytes(addr, 768));
            }
        }
    }
}
