//! The codebook as the kernels read it, built on the host. No CUDA needed:
//! the host tests that emulate a warp use the same tables as the GPU.

use crate::codebook::Codebook;
use crate::fit::choose::le_word;
use ibp_kernels::detail::bits;
use ibp_kernels::detail::book::{lowest_run, params_two_runs};

/// Decoder table of a codebook (`ibp_kernels::detail::table`): one entry per chunk,
/// then one byte per chunk with the popcount of its mask. The encoder reads
/// the same entries.
pub fn decoder_table(cb: &Codebook) -> Vec<u8> {
    use ibp_kernels::detail::table::{Entry, entry_bytes, table_bytes};

    let c = cb.chunk().bytes();
    let eb = entry_bytes(c) as usize;
    let k = cb.chunks();
    let mut out = vec![0u8; table_bytes(k as u32, c) as usize];
    for (j, t) in cb.tables().entries().iter().enumerate() {
        let e = Entry::new(t.mask, t.bitval, t.width, c);
        debug_assert_eq!(e.free, t.free);
        e.write(c, &mut out[j * eb..(j + 1) * eb]);
        out[k * eb + j] = t.mask.count_ones() as u8;
    }
    out
}

/// The decode book of a codebook (`ibp_kernels::detail::book`): the fields the batch
/// decoder's 16-bytes-per-lane step reads, in chunk order, and the class and
/// all-match prefix of every step.
pub fn decode_book(cb: &Codebook) -> Vec<u8> {
    use ibp_kernels::detail::book::{
        CLASS_GENERAL, CLASS_NONE_FREE, CLASS_TWO_RUNS, CLASS_UNIFORM, Layout, params_general,
        step_chunks,
    };

    let c = cb.chunk().bytes();
    let cu = c as usize;
    let entries = cb.tables().entries();
    let lay = Layout::new(entries.len() as u32, c);
    let mut out = vec![0u8; lay.bytes as usize];
    let per_step = step_chunks(c) as usize;
    let cpl = per_step / 32;
    for (k, t) in entries.iter().enumerate() {
        let put = |out: &mut [u8], field: u32, v: u64| {
            let at = field as usize + k * cu;
            out[at..at + cu].copy_from_slice(&v.to_le_bytes()[..cu]);
        };
        put(&mut out, lay.bitval, t.bitval);
        put(&mut out, lay.run1, lowest_run(t.free));
        put(&mut out, lay.free, t.free);
        // A general chunk's PARAMS word is read for `pw` and `fw` only: its
        // low 16 bits carry the byte pattern's two-run shifts when the
        // chunk's free bits repeat one byte pattern (the periodic kernel,
        // `ibp_kernels::detail::book::CLASS_PERIODIC`).
        let mut q = params_two_runs(t.free, t.width).unwrap_or_else(|| {
            params_general(t.free, t.width)
                | periodic_pattern(t.free, c).map_or(0, |(bits, pattern)| {
                    params_two_runs(pattern, bits).map_or(0, |b| b & 0xffff)
                })
        });
        // 1- and 2-byte chunks expand in place in their output word: their
        // shifts include the chunk's offset in it (`ibp_kernels::detail::step`).
        if c <= 2 {
            let sh = 8 * c * (k as u32 % (4 / c));
            q += sh | sh << 8;
        }
        let at = lay.params as usize + 4 * k;
        out[at..at + 4].copy_from_slice(&q.to_le_bytes());
    }
    for step in 0..lay.steps as usize {
        let cols = &entries
            [(step * per_step).min(entries.len())..((step + 1) * per_step).min(entries.len())];
        let first = (cols[0].free, cols[0].bitval, cols[0].width);
        let class = if cols.iter().all(|t| t.free == 0) {
            CLASS_NONE_FREE
        } else if cols.iter().all(|t| (t.free, t.bitval, t.width) == first)
            && params_two_runs(first.0, first.2).is_some()
        {
            CLASS_UNIFORM
        } else if cols
            .iter()
            .all(|t| params_two_runs(t.free, t.width).is_some())
        {
            CLASS_TWO_RUNS
        } else {
            CLASS_GENERAL
        };
        out[lay.class as usize + step] = class;
        let mut incl = 0u32;
        for lane in 0..32 {
            let first = step * per_step + lane * cpl;
            incl += (first..first + cpl)
                .filter_map(|k| entries.get(k))
                .map(|t| t.free_bits)
                .sum::<u32>();
            let at = lay.prefix as usize + 128 * step + 4 * lane;
            out[at..at + 4].copy_from_slice(&incl.to_le_bytes());
        }
    }
    out
}

/// Whether every step of `book` (the decode book of `cb`) is uniform, so
/// that the uniform kernels may decode it: chunks of at most 4
/// bytes, every step [`ibp_kernels::detail::book::CLASS_UNIFORM`].
pub fn book_is_uniform(cb: &Codebook, book: &[u8]) -> bool {
    use ibp_kernels::detail::book::{CLASS_UNIFORM, Layout};
    let c = cb.chunk().bytes();
    let lay = Layout::new(cb.chunks() as u32, c);
    let at = lay.class as usize;
    c <= 4
        && book
            .get(at..at + lay.steps as usize)
            .is_some_and(|classes| classes.iter().all(|&x| x == CLASS_UNIFORM))
}

/// The pattern a chunk of `c` bytes (2 or 4) repeats in its free bits,
/// as (its bits, the pattern): the same 8-bit pattern in every byte, else
/// (4-byte chunks) the same 16-bit pattern in both halves, with at least
/// one free and one fixed bit in it and at most two runs: what a periodic
/// step expands by (`ibp_kernels::detail::book::spread`). The byte is
/// tried first; the host tells the kernel which piece a book takes by a
/// launch flag (`ibp_kernels::params::DECODE_FLAG_HALVES`, from
/// [`book_period`]).
pub fn periodic_pattern(free: u64, c: u32) -> Option<(u32, u64)> {
    if !matches!(c, 2 | 4) || free >> (8 * c) != 0 {
        return None;
    }
    [8u32, 16].into_iter().filter(|&b| b < 8 * c).find_map(|b| {
        let all = bits::low_mask(b);
        let pattern = free & all;
        let same = (0..8 * c / b).all(|i| (free >> (b * i)) & all == pattern);
        let runs = (pattern ^ (pattern << 1)).count_ones().div_ceil(2);
        (same && pattern != 0 && pattern != all && runs <= 2).then_some((b, pattern))
    })
}

/// The piece (8 or 16 bits) by which the periodic kernel decodes every
/// step of `cb`'s book, or `None` where it may not
/// (`ibp_kernels::detail::book::CLASS_PERIODIC`, `CLASS_PERIODIC_HALVES`):
/// chunks of 2 or 4 bytes, every chunk's free bits one pattern of at most
/// two runs repeated by the same piece in every step ([`periodic_pattern`];
/// and not two runs a chunk: those steps are uniform or two-run), and
/// within each step every chunk's free bits, bit values and width alike.
pub fn book_period(cb: &Codebook) -> Option<u32> {
    use ibp_kernels::detail::book::step_chunks;
    let c = cb.chunk().bytes();
    let entries = cb.tables().entries();
    let per_step = step_chunks(c) as usize;
    if !matches!(c, 2 | 4) || entries.is_empty() {
        return None;
    }
    let mut piece = None;
    for cols in entries.chunks(per_step) {
        let first = (cols[0].free, cols[0].bitval, cols[0].width);
        let alike = cols.iter().all(|t| (t.free, t.bitval, t.width) == first);
        let (bits, _) = periodic_pattern(first.0, c)?;
        if !alike
            || params_two_runs(first.0, first.2).is_some()
            || *piece.get_or_insert(bits) != bits
        {
            return None;
        }
    }
    piece
}

/// The encoder book of a codebook (`ibp_kernels::params::EncodeParams`),
/// field-major: the bit values, the mask, the free bits, the lowest run of
/// free bits, the two-run shifts, then the move masks of each chunk's free
/// bits, one u64 per 8-byte word of a tensor in each field. Its first two
/// fields are what the size query reads.
pub fn encoder_book(cb: &Codebook) -> Vec<u64> {
    // Q: why word by word, not field by field as byte strings?
    // A: `GpuCodebook::new` builds this on every fit-and-compress; as byte
    // strings turned into words it took 53 µs for Cora's 5732-byte rows on
    // a 2.5 GHz core, a few percent of compressing 1 GiB on the H200. Each
    // chunk's values go straight into their word at their byte offset.
    let l = cb.row_bytes();
    let c = cb.chunk().bytes() as usize;
    let per = 8 / c;
    let words = l.div_ceil(8);
    let steps = cb.chunk().steps() as usize;
    let mut book = vec![0u64; (5 + steps) * words];
    for q in 0..words {
        let m = le_word(cb.mask(), q);
        // The free bits: the mask's complement inside the tensor only.
        let inside = bits::low_mask(8 * (l - 8 * q).min(8) as u32);
        book[q] = le_word(cb.bitval(), q);
        book[words + q] = m;
        book[2 * words + q] = !m & inside;
    }
    // The two-run fields: the lowest run of free bits, and the shifts s1
    // and d2 (a nibble each for 1-byte chunks, else a byte each from the
    // chunk's first byte, kept past the tensor's end so that a tail chunk
    // of one byte keeps its d2); then the move masks. Values past the
    // tensor's end are cut (`keep`).
    for (j, t) in cb.tables().entries().iter().enumerate() {
        let (q, sh) = (j / per, 8 * c * (j % per));
        let keep = bits::low_mask(t.width);
        book[3 * words + q] |= (lowest_run(t.free) & keep) << sh;
        if let Some(p) = params_two_runs(t.free, t.width) {
            let (s1, d2) = (u64::from(p & 0xff), u64::from(p >> 8 & 0xff));
            book[4 * words + q] |= if c == 1 { s1 | d2 << 4 } else { s1 | d2 << 8 } << sh;
        }
        for i in 0..steps {
            book[(5 + i) * words + q] |= (t.mv[i] & keep) << sh;
        }
    }
    book
}

/// The encoder's [`EncodeParams::flags`](ibp_kernels::params::EncodeParams)
/// for a codebook: whether every chunk's free bits form at most two runs.
pub fn encoder_flags(cb: &Codebook) -> u64 {
    let two = cb
        .tables()
        .entries()
        .iter()
        .all(|t| params_two_runs(t.free, t.width).is_some());
    if two {
        ibp_kernels::params::ENCODE_TWO_RUNS
    } else {
        0
    }
}

/// Fields (byte strings of one length) as u64 words, field after field.
// The evaluation book: the emulator's tests and the benchmark harness's
// stage profile (`gpu::bench`); the fitter builds its own on the device.
#[cfg(any(test, feature = "bench-hooks"))]
fn field_major(fields: &[Vec<u8>]) -> Vec<u64> {
    let words = fields.first().map_or(0, |f| f.len().div_ceil(8));
    fields
        .iter()
        .flat_map(|f| (0..words).map(move |q| le_word(f, q)))
        .collect()
}

/// The evaluation pass's book for up to eight `(mask, bitval)` pairs of one
/// fit (thresholds ascending), field-major: the bit values, then each mask,
/// then the trailer of [`ibp_kernels::params::MAX_THRESHOLDS`] u64 (entry `t`
/// the bits set in mask `t`, 0 past the last). The bit values are the OR of
/// every candidate's: a bit invariant under two thresholds has the same value
/// under both (`docs/FORMAT.md` §4: 1 when set in more than half of the
/// tensors, 0 when in fewer).
#[cfg(any(test, feature = "bench-hooks"))]
pub fn eval_book(books: &[(Vec<u8>, Vec<u8>)]) -> Vec<u64> {
    let l = books.first().map_or(0, |b| b.0.len());
    let v = books.iter().fold(vec![0u8; l], |mut v, (_, b)| {
        v.iter_mut().zip(b).for_each(|(x, y)| *x |= y);
        v
    });
    let mut fields = vec![v];
    fields.extend(books.iter().map(|(m, _)| m.clone()));
    let mut book = field_major(&fields);
    let trailer = (0..ibp_kernels::params::MAX_THRESHOLDS as usize).map(|t| {
        books.get(t).map_or(0, |(m, _)| {
            m.iter().map(|b| u64::from(b.count_ones())).sum::<u64>()
        })
    });
    book.extend(trailer);
    book
}

/// Lines per half ring in the decoder's batch mode for device-resident
/// tensors (pinned ones keep one tensor's span, at least 16 lines: see
/// `Decoder::new`), for a largest stored
/// tensor of `span_max` lines and at most `cap` lines a half (what shared
/// memory allows).
///
/// Q: why room for four tensors?
/// A: a batch pays its scan, its shuffles of the items and its wait once,
/// whatever it holds; with room for one tensor a half, MiniLM's f32 rows
/// (12 lines stored) went one per batch and the batch work was a quarter
/// of the kernel's instructions (profiled on the H200). At least 32 lines
/// (small tensors: many per batch), at most 128 (the kernel's item keeps
/// line counts in a byte), never less than one tensor.
pub(crate) fn batch_half_lines(span_max: u64, cap: u64) -> u64 {
    (4 * span_max).clamp(32, 128).min(cap).max(span_max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codebook::ChunkSize;

    /// The encoder book as FORMAT-level byte strings, field by field (the
    /// first implementation): the reference `encoder_book` must equal.
    fn encoder_book_by_fields(cb: &Codebook) -> Vec<u64> {
        let l = cb.row_bytes();
        let c = cb.chunk().bytes() as usize;
        let free: Vec<u8> = cb.mask().iter().map(|m| !m).collect();
        let mut run1 = vec![0u8; l];
        let mut sd = vec![0u8; l.next_multiple_of(8)];
        for (j, t) in cb.tables().entries().iter().enumerate() {
            let end = (j * c + c).min(l);
            run1[j * c..end].copy_from_slice(&lowest_run(t.free).to_le_bytes()[..end - j * c]);
            if let Some(q) = params_two_runs(t.free, t.width) {
                let (s1, d2) = ((q & 0xff) as u8, (q >> 8 & 0xff) as u8);
                if c == 1 {
                    sd[j] = s1 | d2 << 4;
                } else {
                    sd[j * c] = s1;
                    sd[j * c + 1] = d2;
                }
            }
        }
        let mut fields = vec![cb.bitval().to_vec(), cb.mask().to_vec(), free, run1, sd];
        for i in 0..cb.chunk().steps() as usize {
            let mut f = vec![0u8; l];
            for (j, t) in cb.tables().entries().iter().enumerate() {
                let end = (j * c + c).min(l);
                f[j * c..end].copy_from_slice(&t.mv[i].to_le_bytes()[..end - j * c]);
            }
            fields.push(f);
        }
        field_major(&fields)
    }

    #[test]
    fn encoder_book_equals_its_fields_as_byte_strings() {
        let mut s = 0x243f_6a88_85a3_08d3u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for l in [1usize, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 100, 301, 5732] {
            for chunk in ChunkSize::ALL {
                // Masks from all-free to all-invariant bytes, and bytes
                // whose free bits form one, two or more runs.
                for density in 0..4 {
                    let mask: Vec<u8> = (0..l)
                        .map(|_| {
                            let r = next();
                            match (density, r % 4) {
                                (0, _) => 0,
                                (3, _) => 0xff,
                                (_, 0) => 0xff,
                                (1, _) => 0x0f << ((r >> 8) % 5),
                                _ => r as u8,
                            }
                        })
                        .collect();
                    let bitval: Vec<u8> = mask.iter().map(|&m| next() as u8 & m).collect();
                    let cb = Codebook::new(chunk, mask, bitval).unwrap();
                    assert_eq!(
                        encoder_book(&cb),
                        encoder_book_by_fields(&cb),
                        "L={l} C={chunk:?} density={density}"
                    );
                }
            }
        }
    }
}
