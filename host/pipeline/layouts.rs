//! What the pipeline does differently per [`Layout`], in one place: the
//! sections a layout writes after its codebook, the size of a batch's
//! payload or slots, and the encoding of a batch. Everything else (the
//! plan, the orchestrator, the devices) calls these, so a new layout is
//! added here and in the plan's rules, and nowhere else in the pipeline.

use rayon::prelude::*;

use crate::codebook::Codebook;
use crate::container::SectionKind;
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::layout::{
    Layout, LayoutOptions, compress_fixed, compress_packed, decompress_fixed_row,
    decompress_packed_row, size_query,
};

/// The sections of a group stored with one codebook in `layout`, after
/// the codebook, in file order (`docs/FORMAT.md` §6.4), with their lengths:
/// `n` rows, `data` bytes of payload or slots.
pub(super) fn coded_sections(layout: Layout, n: u64, data: u64) -> Vec<(SectionKind, u64)> {
    let flags = (SectionKind::Flags, n.div_ceil(8));
    match layout {
        Layout::Packed => vec![
            flags,
            (SectionKind::Offsets, 8 * (n + 1)),
            (SectionKind::Payload, data),
        ],
        Layout::FixedStride => vec![flags, (SectionKind::Slots, data)],
    }
}

/// Bytes of one batch's payload (packed: its size pass) or slots (fixed).
pub(super) fn batch_data_bytes(cb: &Codebook, layout: Layout, part: Rows<'_>) -> Result<u64> {
    match layout {
        Layout::Packed => Ok(size_query(cb, part)?.total_stored),
        Layout::FixedStride => Ok(part.bytes().len() as u64),
    }
}

/// One batch (the group's rows from `first` on) encoded in `layout`: its
/// flags, and its payload or slots; every row decoded again and compared
/// with its input when `verify`.
pub(super) fn encode_batch(
    cb: &Codebook,
    layout: Layout,
    part: Rows<'_>,
    first: usize,
    verify: bool,
    lo: &LayoutOptions<'_>,
) -> Result<(Vec<u8>, Vec<u8>)> {
    match layout {
        Layout::Packed => {
            let packed = compress_packed(cb, part, lo)?;
            if verify {
                let view = packed.view();
                verify_rows(part, first, |i, buf| {
                    decompress_packed_row(cb, &view, i, buf)
                })?;
            }
            Ok((packed.flags, packed.payload))
        }
        Layout::FixedStride => {
            let fixed = compress_fixed(cb, part, lo)?;
            if verify {
                let view = fixed.view();
                verify_rows(part, first, |i, buf| {
                    decompress_fixed_row(cb, &view, i, buf)
                })?;
            }
            Ok((fixed.flags, fixed.slots))
        }
    }
}

/// Decode every row of a batch (the group's rows from `first` on) with
/// `decode` and compare it with the input.
pub(super) fn verify_rows(
    rows: Rows<'_>,
    first: usize,
    decode: impl Fn(usize, &mut [u8]) -> Result<()> + Sync,
) -> Result<()> {
    (0..rows.rows()).into_par_iter().try_for_each_init(
        || vec![0u8; rows.row_bytes()],
        |buf, i| {
            decode(i, buf)?;
            if buf[..] != *rows.row(i) {
                return Err(Error::corrupt(format!(
                    "verification failed: row {} does not decompress to its input; this is an ibp bug, please report it",
                    first + i
                )));
            }
            Ok(())
        },
    )
}
