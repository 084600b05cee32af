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

use std::hint::select_unpredictable;

use ibp_kernels::detail::bits;

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
pub fn encode_row(
    tables: &impl AsRef<ChunkTables>,
    row: &[u8],
    out: &mut [u8],
) -> Result<Option<usize>> {
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
/// `E` are ignored; callers that know the stored length compare it with `E`.
///
/// Errors, without panicking or reading out of bounds, with
/// - [`crate::ErrorKind::InvalidArgument`] when `out` is not `L` bytes long;
/// - [`crate::ErrorKind::Truncated`] when `encoded` is shorter than `E`;
/// - [`crate::ErrorKind::Corrupt`] when `E ≥ L` (an encoder would have stored
///   the tensor raw) or a padding bit is set.
///
/// On error the contents of `out` are unspecified.
pub fn decode_row(
    tables: &impl AsRef<ChunkTables>,
    encoded: &[u8],
    out: &mut [u8],
) -> Result<usize> {
    let t = tables.as_ref();
    if out.len() != t.row_bytes() {
        return Err(Error::invalid(format!(
            "output buffer has {} bytes; a decoded tensor has {}",
            out.len(),
            t.row_bytes()
        )));
    }
    check_participation(t, encoded)?;
    // Q: why decode first and check the length afterwards?
    // A: the decoder learns each chunk's width from its participation bit as
    // it goes, so one pass yields both the tensor and `K + P`; a separate
    // length pass would read the participation bits and tables twice. The
    // reader sees zeros past the end of `encoded`, so a damaged stream can
    // only produce wrong bytes in `out`, which the checks then reject.
    let total = decode_dispatch(t, encoded, out);
    check_stream(t, encoded, total)
}

/// Encoded length `E` of the encoded tensor at the start of `encoded`, read
/// from its participation bits, after the checks of [`decode_row`]: enough
/// bytes, `E < L`, zero padding.
pub fn stream_len(tables: &impl AsRef<ChunkTables>, encoded: &[u8]) -> Result<usize> {
    let t = tables.as_ref();
    check_participation(t, encoded)?;
    let total = t.chunks() as u64 + t.total_width() - saved_bits(t.entries(), encoded);
    check_stream(t, encoded, total)
}

/// `encoded` holds at least the `⌈K/8⌉` bytes of participation bits.
fn check_participation(t: &ChunkTables, encoded: &[u8]) -> Result<()> {
    let k = t.chunks();
    if encoded.len() < k.div_ceil(8) {
        return Err(Error::truncated(format!(
            "encoded tensor has {} bytes, fewer than its {} bytes of participation bits",
            encoded.len(),
            k.div_ceil(8)
        )));
    }
    Ok(())
}

/// The checks of a stream of `total = K + P` bits: `E < L`, `E` bytes
/// present, zero padding. Returns `E`.
fn check_stream(t: &ChunkTables, encoded: &[u8], total: u64) -> Result<usize> {
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
        return Err(Error::corrupt(
            "padding bits after the encoded tensor are not zero",
        ));
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
    #[cfg(target_arch = "x86_64")]
    if let Some(ops) = Bmi2::detect() {
        // SAFETY: `ops` exists only when the CPU has BMI2 (`Bmi2::detect`),
        // the one feature the `encode_bmi2` instances are compiled for.
        return unsafe { with_chunk!(t.chunk(), encode_bmi2(ops, t, row, out)) };
    }
    with_chunk!(t.chunk(), encode_portable(t, row, out))
}

/// Decode into `out` (`L` bytes) and return `K + P`, the stream's bit length.
fn decode_dispatch(t: &ChunkTables, encoded: &[u8], out: &mut [u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(ops) = Bmi2::detect() {
        // SAFETY: as in `encode_exact`.
        return unsafe { with_chunk!(t.chunk(), decode_bmi2(ops, t, encoded, out)) };
    }
    with_chunk!(t.chunk(), decode_portable(t, encoded, out))
}

/// How a coder gathers (`pext`) and scatters (`pdep`) a chunk's free bits.
trait BitOps: Copy {
    fn compress<const C: usize>(self, x: u64, e: &ChunkTable) -> u64;
    fn expand<const C: usize>(self, v: u64, e: &ChunkTable) -> u64;
}

/// Shift-and-select rounds with the codebook's move masks
/// ([`bits::compress`], [`bits::expand`]): the same arithmetic as the GPU.
#[derive(Clone, Copy)]
struct Portable;

impl BitOps for Portable {
    #[inline(always)]
    fn compress<const C: usize>(self, x: u64, e: &ChunkTable) -> u64 {
        bits::compress(x, e.free, &e.mv, const { bits::move_steps(C as u32) })
    }

    #[inline(always)]
    fn expand<const C: usize>(self, v: u64, e: &ChunkTable) -> u64 {
        bits::expand(v, e.free, &e.mv, const { bits::move_steps(C as u32) })
    }
}

/// The BMI2 `pext`/`pdep` instructions. A value is proof that the CPU has
/// them: the only constructor is [`Bmi2::detect`].
///
/// Q: why bother, when [`Portable`] gives the same bits?
/// A: one instruction replaces up to six shift-and-select rounds per chunk;
/// on CPUs with a fast BMI2 unit that speeds the codec up measurably (see
/// `cli/benches/codec.rs`). The tests compare both paths byte for byte.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Bmi2(());

#[cfg(target_arch = "x86_64")]
impl Bmi2 {
    /// `Some` when the CPU has BMI2 and runs it in hardware.
    ///
    /// Q: why not just `is_x86_feature_detected!("bmi2")`?
    /// A: AMD's Zen 1 and Zen 2 (family 17h, and Hygon's 18h) report BMI2
    /// but run `pdep`/`pext` in microcode, tens to hundreds of cycles each:
    /// far slower than the portable rounds. Zen 3 and later (19h+) and every
    /// Intel CPU with BMI2 run them in one to three cycles. The answer is
    /// cached: `cpuid` is slow, and traps to the hypervisor in a VM.
    #[inline(always)]
    fn detect() -> Option<Self> {
        static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let fast = *FAST.get_or_init(|| {
            if !std::arch::is_x86_feature_detected!("bmi2") {
                return false;
            }
            use std::arch::x86_64::__cpuid;
            let vendor = __cpuid(0);
            let amd_like = matches!(
                (vendor.ebx, vendor.edx, vendor.ecx),
                // "AuthenticAMD", "HygonGenuine" as little-endian registers.
                (0x6874_7541, 0x6974_6e65, 0x444d_4163) | (0x6f67_7948, 0x6e65_476e, 0x656e_6975)
            );
            let eax = __cpuid(1).eax;
            let family = ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff);
            !(amd_like && family < 0x19)
        });
        fast.then_some(Bmi2(()))
    }
}

#[cfg(target_arch = "x86_64")]
impl BitOps for Bmi2 {
    #[inline(always)]
    fn compress<const C: usize>(self, x: u64, e: &ChunkTable) -> u64 {
        // SAFETY: `self` proves the CPU has BMI2.
        unsafe { std::arch::x86_64::_pext_u64(x, e.free) }
    }

    #[inline(always)]
    fn expand<const C: usize>(self, v: u64, e: &ChunkTable) -> u64 {
        // SAFETY: `self` proves the CPU has BMI2.
        unsafe { std::arch::x86_64::_pdep_u64(v, e.free) }
    }
}

/// [`encode_c`] with the portable bit operations.
fn encode_portable<const C: usize>(t: &ChunkTables, row: &[u8], out: &mut [u8]) {
    encode_c::<C, Portable>(Portable, t, row, out)
}

/// [`decode_c`] with the portable bit operations.
fn decode_portable<const C: usize>(t: &ChunkTables, encoded: &[u8], out: &mut [u8]) -> u64 {
    decode_c::<C, Portable>(Portable, t, encoded, out)
}

/// [`encode_c`] compiled with BMI2 enabled, so `pext` inlines.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
fn encode_bmi2<const C: usize>(ops: Bmi2, t: &ChunkTables, row: &[u8], out: &mut [u8]) {
    encode_c::<C, Bmi2>(ops, t, row, out)
}

/// [`decode_c`] compiled with BMI2 enabled, so `pdep` inlines.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
fn decode_bmi2<const C: usize>(ops: Bmi2, t: &ChunkTables, encoded: &[u8], out: &mut [u8]) -> u64 {
    decode_c::<C, Bmi2>(ops, t, encoded, out)
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
    // Q: why `select_unpredictable` rather than `if`?
    // A: whether a chunk matches is data-dependent and in mixed data close to
    // random; a conditional move costs less than the branch mispredictions.
    // (A plain `bool as u64 * bits` is turned back into a branch by LLVM.)
    let mut saved: u64 = full
        .iter()
        .zip(entries)
        .map(|(x, e)| {
            let hit = load::<C>(x) & e.mask == e.bitval;
            select_unpredictable(hit, u64::from(8 * C as u32 - e.free_bits), 0)
        })
        .sum();
    if let Some(e) = entries.get(full.len()).filter(|_| !tail.is_empty()) {
        let hit = load_tail(tail) & e.mask == e.bitval;
        saved += select_unpredictable(hit, u64::from(e.width - e.free_bits), 0);
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
            es.iter()
                .enumerate()
                .map(|(i, e)| (pw >> i & 1) * u64::from(e.width - e.free_bits))
                .sum::<u64>()
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
/// Q: why store 8 bytes after every append?
/// A: a chunk's payload is up to 64 bits at an arbitrary bit offset. The
/// writer ORs it into an accumulator, stores the accumulator's low 8 bytes
/// unconditionally and then advances by the whole bytes it holds: a few
/// instructions per chunk and no branch on "is a word full", which in mixed
/// data would be mispredicted every few chunks. Bytes stored ahead of the
/// committed ones are simply overwritten by the next store.
struct BitWriter<'a> {
    out: &'a mut [u8],
    /// First byte not yet complete; `acc` starts at its bit 0.
    byte: usize,
    acc: u64,
    /// Bits pending in `acc` (< 8 between appends).
    n: u32,
}

impl<'a> BitWriter<'a> {
    /// A writer whose first bit lands at bit `bit` of `out`. The bits below it
    /// in that byte are written as zeros.
    fn new(out: &'a mut [u8], bit: usize) -> Self {
        Self {
            out,
            byte: bit / 8,
            acc: 0,
            n: (bit % 8) as u32,
        }
    }

    /// Append the low `width` bits of `v` (`v < 2^width`, `width ≤ 8C`).
    #[inline(always)]
    fn put<const C: usize>(&mut self, v: u64, width: u32) {
        // Q: why branch here, after avoiding branches everywhere else?
        // A: a matching chunk whose bits are all invariant adds nothing. In
        // sparse data (most chunks all-zero, fully invariant) nearly every
        // chunk is such a no-op, so the branch is predictable and skipping
        // the store halves the encode time; in dense data it is never taken.
        if width == 0 {
            return;
        }
        let n = self.n & 7;
        let end = n + width;
        let (low, rest) = if C <= 4 {
            // At most 7 + 32 bits: the u64 holds them all.
            let acc = self.acc | v << n;
            (acc, acc >> (end & !7))
        } else {
            // Up to 7 + 64 bits: carry the top through a u128.
            let acc = u128::from(self.acc) | u128::from(v) << n;
            (acc as u64, (acc >> (end & !7)) as u64)
        };
        self.store(low);
        self.byte += (end / 8) as usize;
        self.acc = rest;
        self.n = end & 7;
    }

    /// Store `w` at the current byte; near the end of `out` only the bytes
    /// that exist (the rest of `w` is zero padding past the stream).
    #[inline(always)]
    fn store(&mut self, w: u64) {
        let bytes = w.to_le_bytes();
        match self.out.get_mut(self.byte..self.byte + 8) {
            Some(dst) => dst.copy_from_slice(&bytes),
            None => {
                let dst = self.out.get_mut(self.byte..).unwrap_or_default();
                let k = dst.len().min(8);
                dst[..k].copy_from_slice(&bytes[..k]);
            }
        }
    }

    /// Write the last, partial byte.
    fn finish(mut self) {
        if self.n > 0 {
            self.store(self.acc);
        }
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

    /// The next `n ≤ 64` bits, through a 16-byte window.
    #[inline(always)]
    fn get64(&mut self, n: u32) -> u64 {
        let byte = self.pos / 8;
        let w = match self.bytes.get(byte..byte + 16) {
            Some(w) => u128::from_le_bytes(w.try_into().unwrap_or_default()),
            None => {
                let mut w = [0u8; 16];
                let rest = self.bytes.get(byte..).unwrap_or_default();
                let n = rest.len().min(16);
                w[..n].copy_from_slice(&rest[..n]);
                u128::from_le_bytes(w)
            }
        };
        let v = (w >> (self.pos % 8)) as u64 & bits::low_mask(n);
        self.pos += n as usize;
        v
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
#[inline(always)]
fn encode_c<const C: usize, B: BitOps>(ops: B, t: &ChunkTables, row: &[u8], out: &mut [u8]) {
    let k = t.chunks();
    let entries = t.entries();
    let (full, tail) = row.as_chunks::<C>();
    let mut w = BitWriter::new(out, k);
    let mut pw = 0u64;
    for (j, (x, e)) in full.iter().zip(entries).enumerate() {
        pw |= encode_chunk::<C, B>(ops, &mut w, load::<C>(x), 8 * C as u32, e) << (j % 64);
        if j % 64 == 63 {
            // A complete word of participation bits lies wholly before bit K,
            // below every payload byte.
            w.out[8 * (j / 64)..8 * (j / 64) + 8].copy_from_slice(&pw.to_le_bytes());
            pw = 0;
        }
    }
    if !tail.is_empty() {
        let e = &entries[k - 1];
        pw |= encode_chunk::<C, B>(ops, &mut w, load_tail(tail), e.width, e) << ((k - 1) % 64);
        if k.is_multiple_of(64) {
            // The tail chunk completed a word.
            w.out[8 * (k / 64 - 1)..8 * (k / 64)].copy_from_slice(&pw.to_le_bytes());
        }
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

/// Append one chunk's payload; return its participation bit. `width` is
/// `e.width`, passed as the constant `8C` for every chunk but the tail.
///
/// Q: why `select_unpredictable` rather than `if`?
/// A: whether a chunk matches is data-dependent and in mixed data close to
/// random; computing both payloads and selecting costs less than the branch
/// mispredictions.
#[inline(always)]
fn encode_chunk<const C: usize, B: BitOps>(
    ops: B,
    w: &mut BitWriter<'_>,
    x: u64,
    width: u32,
    e: &ChunkTable,
) -> u64 {
    let hit = x & e.mask == e.bitval;
    let v = select_unpredictable(hit, ops.compress::<C>(x, e), x);
    w.put::<C>(v, select_unpredictable(hit, e.free_bits, width));
    u64::from(hit)
}

/// Decode with the chunk size known and return `K + P`. Every read is in
/// bounds whatever `encoded` holds (past its end the reader sees zeros);
/// `encoded` must hold the `⌈K/8⌉` bytes of participation bits.
#[inline(always)]
fn decode_c<const C: usize, B: BitOps>(
    ops: B,
    t: &ChunkTables,
    encoded: &[u8],
    out: &mut [u8],
) -> u64 {
    let k = t.chunks();
    let entries = t.entries();
    let (full, tail) = out.as_chunks_mut::<C>();
    let mut r = BitReader::new(encoded, k);
    let mut pw = 0u64;
    for (j, (x, e)) in full.iter_mut().zip(entries).enumerate() {
        if j.is_multiple_of(64) {
            pw = participation_word(encoded, j / 64, (k - j).min(64));
        }
        let v = decode_chunk::<C, B>(ops, &mut r, pw >> (j % 64) & 1 == 1, 8 * C as u32, e);
        x.copy_from_slice(&v.to_le_bytes()[..C]);
    }
    if !tail.is_empty() {
        if (k - 1).is_multiple_of(64) {
            pw = participation_word(encoded, (k - 1) / 64, 1);
        }
        let e = &entries[k - 1];
        let v = decode_chunk::<C, B>(ops, &mut r, pw >> ((k - 1) % 64) & 1 == 1, e.width, e);
        let n = tail.len();
        tail.copy_from_slice(&v.to_le_bytes()[..n]);
    }
    r.pos as u64
}

/// Read one chunk's payload and rebuild the chunk (`width` as in
/// [`encode_chunk`]).
///
/// Q: why pass the width separately?
/// A: a select between two table loads is rewritten by LLVM into a load
/// through a selected pointer and then into a branch, mispredicted on mixed
/// data; with a constant for the full chunks it stays a conditional move.
#[inline(always)]
fn decode_chunk<const C: usize, B: BitOps>(
    ops: B,
    r: &mut BitReader<'_>,
    hit: bool,
    width: u32,
    e: &ChunkTable,
) -> u64 {
    let n = select_unpredictable(hit, e.free_bits, width);
    if n == 0 {
        // A matching chunk without free bits is its bit value (see
        // `BitWriter::put` for why this one branch pays).
        return e.bitval;
    }
    let v = r.get::<C>(n);
    select_unpredictable(hit, ops.expand::<C>(v, e) | e.bitval, v)
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
        let chunks: Vec<(usize, usize)> = (0..row.len().div_ceil(c))
            .map(|j| (j * c, ((j + 1) * c).min(row.len())))
            .collect();
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
            // 127, 253 and 505 bytes make exactly 64 chunks of 2, 4 and 8 bytes,
            // the last one a tail chunk.
            for l in [
                1usize, 2, 3, 5, 7, 8, 9, 15, 17, 63, 64, 65, 127, 130, 253, 505, 513, 520, 1021,
            ] {
                for case in 0..12 {
                    let mask: Vec<u8> = (0..l)
                        .map(|_| (xorshift(&mut s) | xorshift(&mut s)) as u8)
                        .collect();
                    let bitval: Vec<u8> = mask.iter().map(|m| m & xorshift(&mut s) as u8).collect();
                    let cb = Codebook::new(chunk, mask.clone(), bitval.clone()).unwrap();
                    // Rows that match the codebook except for a few flips.
                    let flips = case % 4;
                    let row: Vec<u8> = (0..l)
                        .map(|i| {
                            let free = !mask[i] & xorshift(&mut s) as u8;
                            let mut flip = 0u8;
                            for _ in 0..flips {
                                flip |= (xorshift(&mut s).is_multiple_of(40) as u8)
                                    << (xorshift(&mut s) % 8);
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
                            // The portable path gives the same bytes as the
                            // one dispatch picked (BMI2 where the CPU has it).
                            let (t, mut p) = (cb.tables(), vec![0u8; e]);
                            with_chunk!(chunk, encode_portable(t, &row, &mut p));
                            assert_eq!(p, want);
                            back.fill(0);
                            let total = with_chunk!(chunk, decode_portable(t, &p, &mut back));
                            assert_eq!((total.div_ceil(8), &back), (e as u64, &row));
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
            assert_eq!(
                decode_row(&cb, &enc[..cut], &mut out).unwrap_err().kind(),
                ErrorKind::Truncated
            );
        }
        let mut bad = enc.clone();
        bad[4] |= 0x80; // a padding bit
        assert_eq!(
            decode_row(&cb, &bad, &mut out).unwrap_err().kind(),
            ErrorKind::Corrupt
        );
        // All participation bits clear: 5 + 160 bits = 21 bytes ≥ L.
        let raw = vec![0u8; 40];
        assert_eq!(
            decode_row(&cb, &raw, &mut out).unwrap_err().kind(),
            ErrorKind::Corrupt
        );
        assert_eq!(
            decode_row(&cb, &enc, &mut out[..19]).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        // Trailing bytes are ignored; E is returned for the caller to check.
        let mut longer = enc.clone();
        longer.push(0xff);
        assert_eq!(decode_row(&cb, &longer, &mut out).unwrap(), 5);
    }

    #[test]
    fn encode_rejects_bad_buffers_and_leaves_raw_rows_alone() {
        let (cb, row, _) = sample();
        assert_eq!(
            encode_row(&cb, &row[..19], &mut [0u8; 20])
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            encode_row(&cb, &row, &mut [0u8; 4]).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let noisy = vec![0xffu8; 20];
        let mut out = vec![7u8; 20];
        assert_eq!(encode_row(&cb, &noisy, &mut out).unwrap(), None);
        assert_eq!(out, vec![7u8; 20]);
        assert_eq!(encoded_len(&cb, &noisy).unwrap(), 21);
        assert_eq!(stored_len(&cb, &noisy).unwrap(), 20);
        assert_eq!(encoded_bits(&cb, &noisy).unwrap(), 165);
        assert_eq!(
            encoded_len(cb.tables(), &row[..3]).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
}
