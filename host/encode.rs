//! Encoding and decoding one tensor (`docs/FORMAT.md` §2): participation
//! bits, then per chunk either its free bits (`pext`) or all of its bits,
//! then zero padding to a byte boundary.
//!
//! Every function takes the codebook's [`ChunkTables`] (a [`Codebook`] works
//! too: it is `AsRef<ChunkTables>`). The size functions run only the match
//! test; [`encode_row`] and [`decode_row`] move whole 64-bit words through a
//! bit writer and reader, never single bits.
//!
//! [`Codebook`]: crate::codebook::Codebook
#![forbid(unsafe_code)]

use ibp_kernels::bits;

use crate::codebook::{ChunkSize, ChunkTable, ChunkTables};
use crate::error::{Error, Result};

/// Call `$f::<C>(args)` with the chunk size as a const generic.
///
/// Q: why monomorphise on the chunk size?
/// A: with `C` known, chunk loads and stores become single 1/2/4/8-byte moves
/// and the compress/expand rounds (`log2(8C)` of them) unroll completely.
macro_rules! with_chunk {
    ($chunk:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $chunk {
            ChunkSize::One => $f::<1>($($arg),*),
            ChunkSize::Two => $f::<2>($($arg),*),
            ChunkSize::Four => $f::<4>($($arg),*),
            ChunkSize::Eight => $f::<8>($($arg),*),
        }
    };
}

/// Bits of the encoding of `row`, `K + P` (participation plus payload bits,
/// before padding).
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when `row` is not
/// `L` bytes long.
pub fn encoded_bits(tables: &impl AsRef<ChunkTables>, row: &[u8]) -> Result<u64> {
    let t = tables.as_ref();
    check_row(t, row)?;
    Ok(encoded_bits_unchecked(t, row))
}

/// Encoded length `E` of `row` in bytes. May be `≥ L`: then the tensor is
/// stored raw.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when `row` is not
/// `L` bytes long.
pub fn encoded_len(tables: &impl AsRef<ChunkTables>, row: &[u8]) -> Result<usize> {
    Ok(encoded_bits(tables, row)?.div_ceil(8) as usize)
}

/// Stored length of `row`: `E` when `E < L` (stored encoded), `L` otherwise
/// (stored raw).
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when `row` is not
/// `L` bytes long.
pub fn stored_len(tables: &impl AsRef<ChunkTables>, row: &[u8]) -> Result<usize> {
    Ok(encoded_len(tables, row)?.min(row.len()))
}

/// Encode `row` into `out[..E]` when that is smaller than the row (`E < L`)
/// and return `Some(E)`; return `None`, leaving `out` untouched, when the row
/// is to be stored raw.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when `row` is not `L`
/// bytes long or `out` is shorter than `E` (`L − 1` bytes always suffice).
pub fn encode_row(tables: &impl AsRef<ChunkTables>, row: &[u8], out: &mut [u8]) -> Result<Option<usize>> {
    let t = tables.as_ref();
    check_row(t, row)?;
    let e = encoded_bits_unchecked(t, row).div_ceil(8) as usize;
    if e >= row.len() {
        return Ok(None);
    }
    if out.len() < e {
        return Err(Error::invalid(format!(
            "output buffer has {} bytes but the encoded tensor needs {e}; \
             reserve row length − 1 bytes (or use stored_len)",
            out.len()
        )));
    }
    encode_exact(t, row, &mut out[..e]);
    Ok(Some(e))
}

/// Decode the encoded tensor at the start of `encoded` into `out`
/// (`L` bytes) and return its encoded length `E`. Bytes of `encoded` past
/// `E` are not read; callers that know the stored length compare it with `E`.
///
/// Errors, without panicking or reading out of bounds, with
/// - [`crate::ErrorKind::InvalidArgument`] when `out` is not `L` bytes long;
/// - [`crate::ErrorKind::Truncated`] when `encoded` is shorter than `E`;
/// - [`crate::ErrorKind::Corrupt`] when `E ≥ L` (an encoder would have stored
///   the tensor raw) or a padding bit is set.
///
/// On error the contents of `out` are unspecified.
pub fn decode_row(tables: &impl AsRef<ChunkTables>, encoded: &[u8], out: &mut [u8]) -> Result<usize> {
    let t = tables.as_ref();
    if out.len() != t.row_bytes() {
        return Err(Error::invalid(format!(
            "output buffer has {} bytes; a decoded tensor has {}",
            out.len(),
            t.row_bytes()
        )));
    }
    let e = stream_len(t, encoded)?;
    with_chunk!(t.chunk(), decode_c(t, &encoded[..e], out));
    Ok(e)
}

/// Encoded length `E` of the encoded tensor at the start of `encoded`, read
/// from its participation bits, after the checks of [`decode_row`]: enough
/// bytes, `E < L`, zero padding.
pub fn stream_len(tables: &impl AsRef<ChunkTables>, encoded: &[u8]) -> Result<usize> {
    let t = tables.as_ref();
    let k = t.chunks();
    if encoded.len() < k.div_ceil(8) {
        return Err(Error::truncated(format!(
            "encoded tensor has {} bytes, fewer than its {} bytes of participation bits",
            encoded.len(),
            k.div_ceil(8)
        )));
    }
    let total = k as u64 + t.total_width() - saved_bits(t.entries(), encoded);
    let e = total.div_ceil(8);
    let l = t.row_bytes() as u64;
    if e >= l {
        return Err(Error::corrupt(format!(
            "participation bits give an encoded length of {e} bytes, not less than the \
             {l}-byte tensor; such a tensor is stored raw"
        )));
    }
    if (encoded.len() as u64) < e {
        return Err(Error::truncated(format!(
            "encoded tensor has {} bytes; its participation bits say {e}",
            encoded.len()
        )));
    }
    let e = e as usize;
    if !total.is_multiple_of(8) && encoded[e - 1] >> (total % 8) != 0 {
        return Err(Error::corrupt("padding bits after the encoded tensor are not zero"));
    }
    Ok(e)
}

fn check_row(t: &ChunkTables, row: &[u8]) -> Result<()> {
    if row.len() != t.row_bytes() {
        return Err(Error::invalid(format!(
            "tensor has {} bytes but the codebook is for {}-byte tensors",
            row.len(),
            t.row_bytes()
        )));
    }
    Ok(())
}

/// [`encoded_bits`] for a row already known to be `L` bytes.
pub(crate) fn encoded_bits_unchecked(t: &ChunkTables, row: &[u8]) -> u64 {
    let saved = with_chunk!(t.chunk(), matched_mask_bits(t.entries(), row));
    t.chunks() as u64 + t.total_width() - saved
}

/// Encode `row` (`L` bytes) into `out`, which is exactly its `E < L` bytes.
pub(crate) fn encode_exact(t: &ChunkTables, row: &[u8], out: &mut [u8]) {
    with_chunk!(t.chunk(), encode_c(t, row, out))
}

/// Little-endian value of a `C`-byte chunk.
#[inline(always)]
fn load<const C: usize>(b: &[u8; C]) -> u64 {
    let mut w = [0u8; 8];
    w[..C].copy_from_slice(b);
    u64::from_le_bytes(w)
}

/// Little-endian value of a short (tail) chunk.
#[inline(always)]
fn load_tail(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

/// Invariant bits dropped from `row`: `Σ popcount(m_j)` over matching chunks.
#[inline(always)]
fn matched_mask_bits<const C: usize>(entries: &[ChunkTable], row: &[u8]) -> u64 {
    let (full, tail) = row.as_chunks::<C>();
    // Q: why multiply instead of branching on the match?
    // A: whether a chunk matches is data-dependent and often close to random
    // (mixed rows); a mispredicted branch costs more than the whole test.
    let mut saved: u64 = full
        .iter()
        .zip(entries)
        .map(|(x, e)| u64::from(load::<C>(x) & e.mask == e.bitval) * u64::from(e.width - e.free_bits))
        .sum();
    if let Some(e) = entries.get(full.len()).filter(|_| !tail.is_empty()) {
        saved += u64::from(load_tail(tail) & e.mask == e.bitval) * u64::from(e.width - e.free_bits);
    }
    saved
}

/// Invariant bits dropped, read from the participation bits at the start of
/// `encoded` (at least `⌈K/8⌉` bytes).
fn saved_bits(entries: &[ChunkTable], encoded: &[u8]) -> u64 {
    entries
        .chunks(64)
        .enumerate()
        .map(|(g, es)| {
            let pw = participation_word(encoded, g, es.len());
            es.iter().enumerate().map(|(i, e)| (pw >> i & 1) * u64::from(e.width - e.free_bits)).sum::<u64>()
        })
        .sum()
}

/// Participation bits `64g .. 64g + n` (`n ≤ 64`) as one word.
#[inline(always)]
fn participation_word(encoded: &[u8], g: usize, n: usize) -> u64 {
    let start = 8 * g;
    let bytes = &encoded[start..start + n.div_ceil(8)];
    load_tail(bytes) & bits::low_mask(n as u32)
}

/// A bit writer that appends to a byte slice sized exactly for the stream.
///
/// Q: why a u64 accumulator flushed as whole words?
/// A: a chunk's payload is up to 64 bits at an arbitrary bit offset; OR-ing
/// it into a 64-bit accumulator (the overflow carried through a 128-bit
/// shift) and storing 8 bytes at a time costs a few instructions per chunk,
/// independent of its width.
struct BitWriter<'a> {
    out: &'a mut [u8],
    /// Byte where `acc` goes.
    byte: usize,
    acc: u64,
    /// Bits pending in `acc` (< 64).
    n: u32,
}

impl<'a> BitWriter<'a> {
    /// A writer whose first bit lands at bit `bit` of `out`. The bits below it
    /// in that byte are written as zeros.
    fn new(out: &'a mut [u8], bit: usize) -> Self {
        Self { out, byte: bit / 8, acc: 0, n: (bit % 8) as u32 }
    }

    /// Append the low `width` bits of `v` (`v < 2^width`, `width ≤ 64`).
    #[inline(always)]
    fn put(&mut self, v: u64, width: u32) {
        let n = self.n & 63;
        let wide = u128::from(v) << n;
        let acc = self.acc | wide as u64;
        let end = n + width;
        if end >= 64 {
            // Every bit of these 8 bytes belongs to the stream, so they lie
            // inside `out` when it is sized for the stream.
            self.out[self.byte..self.byte + 8].copy_from_slice(&acc.to_le_bytes());
            self.byte += 8;
            self.acc = (wide >> 64) as u64;
            self.n = end - 64;
        } else {
            self.acc = acc;
            self.n = end;
        }
    }

    /// Write the pending bits, zero-padded to a byte boundary.
    fn finish(self) {
        let nb = self.n.div_ceil(8) as usize;
        self.out[self.byte..self.byte + nb].copy_from_slice(&self.acc.to_le_bytes()[..nb]);
    }
}

/// Reads bits at increasing positions of a byte slice. Reads past the end
/// see zeros (so a corrupt stream cannot make it read out of bounds).
struct BitReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> BitReader<'a> {
    fn new(bytes: &'a [u8], pos: usize) -> Self {
        Self { bytes, pos }
    }

    /// The next `n ≤ 56` bits.
    ///
    /// Q: why re-load an unaligned 8-byte window for every read?
    /// A: it is one load and one shift, with no refill state to branch on;
    /// a window starting at any bit holds at least 57 bits.
    #[inline(always)]
    fn get56(&mut self, n: u32) -> u64 {
        let byte = self.pos / 8;
        let w = match self.bytes.get(byte..byte + 8) {
            Some(w) => u64::from_le_bytes(w.try_into().unwrap_or_default()),
            None => load_tail(self.bytes.get(byte..).unwrap_or_default()),
        };
        let v = (w >> (self.pos % 8)) & bits::low_mask(n);
        self.pos += n as usize;
        v
    }

    /// The next `n ≤ 64` bits.
    #[inline(always)]
    fn get64(&mut self, n: u32) -> u64 {
        if n <= 56 {
            self.get56(n)
        } else {
            let lo = self.get56(32);
            lo | self.get56(n - 32) << 32
        }
    }

    /// The next `n` bits, for chunks of `C` bytes (`n ≤ 8C`).
    #[inline(always)]
    fn get<const C: usize>(&mut self, n: u32) -> u64 {
        if C <= 4 { self.get56(n) } else { self.get64(n) }
    }
}

/// Encode with the chunk size known: one pass over the chunks writes the
/// payload through a [`BitWriter`] that starts at bit `K`, and collects the
/// participation bits in a word that is stored every 64 chunks.
fn encode_c<const C: usize>(t: &ChunkTables, row: &[u8], out: &mut [u8]) {
    let k = t.chunks();
    let steps = bits::move_steps(C as u32);
    let entries = t.entries();
    let (full, tail) = row.as_chunks::<C>();
    let mut w = BitWriter::new(out, k);
    let mut pw = 0u64;
    let mut emit = |w: &mut BitWriter<'_>, j: usize, x: u64, e: &ChunkTable| {
        if x & e.mask == e.bitval {
            pw |= 1 << (j % 64);
            w.put(bits::compress(x, e.free, &e.mv, steps), e.free_bits);
        } else {
            w.put(x, e.width);
        }
        if j % 64 == 63 {
            // A complete word of participation bits lies wholly before bit K,
            // below every payload byte.
            w.out[8 * (j / 64)..8 * (j / 64) + 8].copy_from_slice(&pw.to_le_bytes());
            pw = 0;
        }
    };
    for (j, (x, e)) in full.iter().zip(entries).enumerate() {
        emit(&mut w, j, load::<C>(x), e);
    }
    if !tail.is_empty() {
        emit(&mut w, k - 1, load_tail(tail), &entries[k - 1]);
    }
    w.finish();
    if !k.is_multiple_of(64) {
        // The last, partial participation word. Its final byte is shared with
        // the first payload bits when K is not a multiple of 8 (the writer
        // left zeros there), so it is OR-ed in.
        let bytes = pw.to_le_bytes();
        let (start, end) = (8 * (k / 64), k.div_ceil(8));
        let dst = &mut out[start..end];
        if k.is_multiple_of(8) {
            dst.copy_from_slice(&bytes[..end - start]);
        } else {
            let last = dst.len() - 1;
            dst[..last].copy_from_slice(&bytes[..last]);
            dst[last] |= bytes[last];
        }
    }
}

/// Decode with the chunk size known. `encoded` is exactly the `E` bytes that
/// [`stream_len`] accepted, so every read stays inside it.
fn decode_c<const C: usize>(t: &ChunkTables, encoded: &[u8], out: &mut [u8]) {
    let k = t.chunks();
    let steps = bits::move_steps(C as u32);
    let entries = t.entries();
    let (full, tail) = out.as_chunks_mut::<C>();
    let mut r = BitReader::new(encoded, k);
    let mut pw = 0u64;
    let mut chunk = |j: usize, e: &ChunkTable| {
        if j.is_multiple_of(64) {
            pw = participation_word(encoded, j / 64, (k - j).min(64));
        }
        if pw >> (j % 64) & 1 == 1 {
            bits::expand(r.get::<C>(e.free_bits), e.free, &e.mv, steps) | e.bitval
        } else {
            r.get::<C>(e.width)
        }
    };
    for (j, (x, e)) in full.iter_mut().zip(entries).enumerate() {
        x.copy_from_slice(&chunk(j, e).to_le_bytes()[..C]);
    }
    if !tail.is_empty() {
        let n = tail.len();
        tail.copy_from_slice(&chunk(k - 1, &entries[k - 1]).to_le_bytes()[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use crate::codebook::Codebook;

    /// Reference encoder, one bit at a time, straight from the spec's text.
    fn encode_ref(cb: &Codebook, row: &[u8]) -> Vec<u8> {
        let c = cb.chunk().bytes() as usize;
        let bit = |s: &[u8], i: usize| s[i / 8] >> (i % 8) & 1;
        let mut out_bits = Vec::new();
        let chunks: Vec<(usize, usize)> =
            (0..row.len().div_ceil(c)).map(|j| (j * c, ((j + 1) * c).min(row.len()))).collect();
        let matches: Vec<bool> = chunks
            .iter()
            .map(|&(a, b)| {
                (8 * a..8 * b).all(|i| bit(cb.mask(), i) == 0 || bit(row, i) == bit(cb.bitval(), i))
            })
            .collect();
        out_bits.extend(matches.iter().map(|&m| m as u8));
        for (&(a, b), &m) in chunks.iter().zip(&matches) {
            for i in 8 * a..8 * b {
                if !m || bit(cb.mask(), i) == 0 {
                    out_bits.push(bit(row, i));
                }
            }
        }
        let mut out = vec![0u8; out_bits.len().div_ceil(8)];
        for (i, b) in out_bits.iter().enumerate() {
            out[i / 8] |= b << (i % 8);
        }
        out
    }

    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    #[test]
    fn encoder_matches_bitwise_reference_and_decoder_inverts_it() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for chunk in ChunkSize::ALL {
            for l in [1usize, 2, 3, 5, 7, 8, 9, 15, 17, 63, 64, 65, 130, 513, 520] {
                for case in 0..12 {
                    let mask: Vec<u8> = (0..l).map(|_| (xorshift(&mut s) | xorshift(&mut s)) as u8).collect();
                    let bitval: Vec<u8> = mask.iter().map(|m| m & xorshift(&mut s) as u8).collect();
                    let cb = Codebook::new(chunk, mask.clone(), bitval.clone()).unwrap();
                    // Rows that match the codebook except for a few flips.
                    let flips = case % 4;
                    let row: Vec<u8> = (0..l)
                        .map(|i| {
                            let free = !mask[i] & xorshift(&mut s) as u8;
                            let mut flip = 0u8;
                            for _ in 0..flips {
                                flip |= (xorshift(&mut s).is_multiple_of(40) as u8) << (xorshift(&mut s) % 8);
                            }
                            (bitval[i] | free) ^ flip
                        })
                        .collect();
                    let want = encode_ref(&cb, &row);
                    assert_eq!(encoded_len(&cb, &row).unwrap(), want.len());
                    assert_eq!(stored_len(&cb, &row).unwrap(), want.len().min(l));
                    let mut out = vec![0xa5u8; l + 8];
                    match encode_row(&cb, &row, &mut out).unwrap() {
                        Some(e) => {
                            assert_eq!(&out[..e], &want[..], "C={chunk} L={l} case {case}");
                            assert!(out[e..].iter().all(|&b| b == 0xa5), "wrote past E");
                            let mut back = vec![0u8; l];
                            assert_eq!(decode_row(&cb, &out[..e], &mut back).unwrap(), e);
                            assert_eq!(back, row);
                        }
                        None => assert!(want.len() >= l),
                    }
                }
            }
        }
    }

    fn sample() -> (Codebook, Vec<u8>, Vec<u8>) {
        // L = 20, C = 4: all-invariant mask with bitval 0, one non-zero chunk.
        let cb = Codebook::new(ChunkSize::Four, vec![0xff; 20], vec![0; 20]).unwrap();
        let mut row = vec![0u8; 20];
        row[5] = 0x3f;
        let mut enc = vec![0u8; 19];
        let e = encode_row(&cb, &row, &mut enc).unwrap().unwrap();
        enc.truncate(e);
        (cb, row, enc)
    }

    #[test]
    fn decode_rejects_truncation_raw_lengths_padding_and_bad_buffers() {
        let (cb, _, enc) = sample();
        // 5 participation bits + 32 payload bits = 37 bits = 5 bytes.
        assert_eq!(enc.len(), 5);
        let mut out = vec![0u8; 20];
        for cut in 0..enc.len() {
            assert_eq!(decode_row(&cb, &enc[..cut], &mut out).unwrap_err().kind(), ErrorKind::Truncated);
        }
        let mut bad = enc.clone();
        bad[4] |= 0x80; // a padding bit
        assert_eq!(decode_row(&cb, &bad, &mut out).unwrap_err().kind(), ErrorKind::Corrupt);
        // All participation bits clear: 5 + 160 bits = 21 bytes ≥ L.
        let raw = vec![0u8; 40];
        assert_eq!(decode_row(&cb, &raw, &mut out).unwrap_err().kind(), ErrorKind::Corrupt);
        assert_eq!(decode_row(&cb, &enc, &mut out[..19]).unwrap_err().kind(), ErrorKind::InvalidArgument);
        // Trailing bytes are ignored; E is returned for the caller to check.
        let mut longer = enc.clone();
        longer.push(0xff);
        assert_eq!(decode_row(&cb, &longer, &mut out).unwrap(), 5);
    }

    #[test]
    fn encode_rejects_bad_buffers_and_leaves_raw_rows_alone() {
        let (cb, row, _) = sample();
        assert_eq!(
            encode_row(&cb, &row[..19], &mut [0u8; 20]).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(encode_row(&cb, &row, &mut [0u8; 4]).unwrap_err().kind(), ErrorKind::InvalidArgument);
        let noisy = vec![0xffu8; 20];
        let mut out = vec![7u8; 20];
        assert_eq!(encode_row(&cb, &noisy, &mut out).unwrap(), None);
        assert_eq!(out, vec![7u8; 20]);
        assert_eq!(encoded_len(&cb, &noisy).unwrap(), 21);
        assert_eq!(stored_len(&cb, &noisy).unwrap(), 20);
        assert_eq!(encoded_bits(&cb, &noisy).unwrap(), 165);
        assert_eq!(encoded_len(cb.tables(), &row[..3]).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
}
