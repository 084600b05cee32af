//! The codebook as the kernels read it, built on the host. No CUDA needed:
//! the host tests that emulate a warp use the same tables as the GPU.

use ibp_kernels::table::{Entry, entry_bytes};

use crate::codebook::Codebook;

/// Decoder table of a codebook (`ibp_kernels::table`): one entry per chunk,
/// then one byte per chunk with the popcount of its mask. The encoder reads
/// the same entries.
pub fn decoder_table(cb: &Codebook) -> Vec<u8> {
    let c = cb.chunk().bytes();
    let eb = entry_bytes(c) as usize;
    let k = cb.chunks();
    // Padded so a lane may read a whole 8-byte group of mask popcounts past
    // the last chunk.
    let mut out = vec![0u8; (k * eb + k + 16).next_multiple_of(16)];
    for (j, t) in cb.tables().entries().iter().enumerate() {
        let e = Entry::new(t.mask, t.bitval, t.width, c);
        debug_assert_eq!(e.free, t.free);
        e.write(c, &mut out[j * eb..(j + 1) * eb]);
        out[k * eb + j] = t.mask.count_ones() as u8;
    }
    out
}

/// Little-endian 8-byte word `q` of `bytes`, zero past the end.
fn le_word(bytes: &[u8], q: usize) -> u64 {
    let mut w = [0u8; 8];
    let part = &bytes[(8 * q).min(bytes.len())..(8 * q + 8).min(bytes.len())];
    w[..part.len()].copy_from_slice(part);
    u64::from_le_bytes(w)
}

/// The size query's and the encoder's book: `(bitval, mask)` per 8-byte word
/// of a tensor (`ibp_kernels::params::MeasureParams`).
pub fn size_book(cb: &Codebook) -> Vec<u64> {
    (0..cb.row_bytes().div_ceil(8))
        .flat_map(|q| [le_word(cb.bitval(), q), le_word(cb.mask(), q)])
        .collect()
}

/// The evaluation pass's book for up to eight `(mask, bitval)` pairs of one
/// fit (thresholds ascending): per 8-byte word, the bit values then each
/// mask. The bit values are the OR of every candidate's: a bit invariant
/// under two thresholds has the same value under both (`docs/FORMAT.md` §4:
/// 1 when set in more than half of the tensors, 0 when in fewer).
pub fn eval_book(books: &[(Vec<u8>, Vec<u8>)]) -> Vec<u64> {
    let l = books.first().map_or(0, |b| b.0.len());
    let mut out = Vec::with_capacity(l.div_ceil(8) * (1 + books.len()));
    for q in 0..l.div_ceil(8) {
        out.push(books.iter().fold(0, |v, (_, b)| v | le_word(b, q)));
        out.extend(books.iter().map(|(m, _)| le_word(m, q)));
    }
    out
}
