//! The codebook (`docs/FORMAT.md` §1, §4): which bits of a tensor are
//! invariant (`Mask`) and what value they hold (`Bitval`), plus the chunk size
//! that groups them, and the per-chunk tables the encoder and decoders run on.
//!
//! A [`Codebook`] is chosen once per dataset by [`crate::fit`] and is all a
//! decoder needs besides the stored tensors. [`ChunkTables`] is derived from
//! it once: per chunk position the mask, bit value, free bits, width and the
//! compress/expand move masks, so that no hot loop recomputes them.
#![forbid(unsafe_code)]

use std::fmt;
use std::str::FromStr;

use ibp_kernels::detail::bits;

use crate::error::{Error, Result};

/// Bytes per chunk (`C` in the format): the unit that either matches the
/// codebook as a whole or is stored verbatim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChunkSize {
    /// 1-byte chunks.
    One = 1,
    /// 2-byte chunks.
    Two = 2,
    /// 4-byte chunks.
    Four = 4,
    /// 8-byte chunks.
    Eight = 8,
}

impl ChunkSize {
    /// Every chunk size, smallest first.
    pub const ALL: [ChunkSize; 4] = [
        ChunkSize::One,
        ChunkSize::Two,
        ChunkSize::Four,
        ChunkSize::Eight,
    ];

    /// Bytes per chunk: 1, 2, 4 or 8.
    pub const fn bytes(self) -> u32 {
        self as u32
    }

    /// Bits per (full) chunk: 8, 16, 32 or 64.
    pub const fn bits(self) -> u32 {
        8 * self as u32
    }

    /// Rounds of [`bits::compress`]/[`bits::expand`] for this chunk size.
    pub const fn steps(self) -> u32 {
        bits::move_steps(self as u32)
    }
}

impl TryFrom<u32> for ChunkSize {
    type Error = Error;

    fn try_from(bytes: u32) -> Result<Self> {
        match bytes {
            1 => Ok(ChunkSize::One),
            2 => Ok(ChunkSize::Two),
            4 => Ok(ChunkSize::Four),
            8 => Ok(ChunkSize::Eight),
            _ => Err(Error::invalid(format!(
                "chunk size {bytes} bytes is not supported; use 1, 2, 4 or 8"
            ))),
        }
    }
}

impl fmt::Display for ChunkSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// An invariance threshold `t` held exactly, in basis points
/// (`T = round(10000 t)`, `5000 ≤ T ≤ 10000`).
///
/// Q: why basis points and not an `f64`?
/// A: the fit must choose the same codebook on every executor; the spec's
/// integer rule (`10000·count > T·N`) has no rounding to disagree about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Threshold(u16);

impl Threshold {
    /// Smallest threshold: 0.5 (a bit is invariant unless exactly half of the
    /// tensors have it set).
    pub const MIN: Threshold = Threshold(5000);
    /// Largest threshold: 1.0. The rule's inequalities are strict, so at 1.0
    /// no bit is invariant and nothing compresses.
    pub const MAX: Threshold = Threshold(10000);

    /// The threshold of `bp` basis points. Errors with
    /// [`crate::ErrorKind::InvalidArgument`] outside `5000..=10000`.
    pub fn from_basis_points(bp: u16) -> Result<Self> {
        if (Self::MIN.0..=Self::MAX.0).contains(&bp) {
            Ok(Threshold(bp))
        } else {
            Err(Error::invalid(format!(
                "threshold {bp} basis points is out of range; use 5000 to 10000 (0.5 to 1.0)"
            )))
        }
    }

    /// The threshold `round(10000 t)` basis points. Errors with
    /// [`crate::ErrorKind::InvalidArgument`] unless `0.5 ≤ t ≤ 1` (after
    /// rounding) and `t` is finite.
    pub fn from_fraction(t: f64) -> Result<Self> {
        let bp = (t * 10000.0).round();
        if !bp.is_finite() || !(5000.0..=10000.0).contains(&bp) {
            return Err(Error::invalid(format!(
                "threshold {t} is out of range; use 0.5 to 1.0"
            )));
        }
        Ok(Threshold(bp as u16))
    }

    /// The threshold in basis points (`T`).
    pub const fn basis_points(self) -> u16 {
        self.0
    }

    /// The threshold as a fraction (`T / 10000`), for display only.
    pub fn fraction(self) -> f64 {
        f64::from(self.0) / 10000.0
    }

    /// The spec's default sweep: `T = 7000, 7500, …, 9500`.
    pub const fn default_sweep() -> [Threshold; 6] {
        [
            Threshold(7000),
            Threshold(7500),
            Threshold(8000),
            Threshold(8500),
            Threshold(9000),
            Threshold(9500),
        ]
    }
}

impl fmt::Display for Threshold {
    /// Exact decimal, trailing zeros dropped: `0.85`, `0.7`, `0.8525`, `1.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let frac = format!("{:04}", self.0 % 10000);
        let frac = frac.trim_end_matches('0');
        write!(
            f,
            "{}.{}",
            self.0 / 10000,
            if frac.is_empty() { "0" } else { frac }
        )
    }
}

impl FromStr for Threshold {
    type Err = Error;

    /// Parses a fraction such as `0.85`.
    fn from_str(s: &str) -> Result<Self> {
        let t: f64 = s.trim().parse().map_err(|_| {
            Error::invalid(format!("threshold {s:?} is not a number; write e.g. 0.85"))
        })?;
        Threshold::from_fraction(t)
    }
}

/// Which bits of a tensor of `row_bytes()` bytes are invariant and their
/// values, with the chunk size that groups them (`docs/FORMAT.md` §1).
///
/// Invariants (checked on construction): `mask` and `bitval` have the same
/// length `L ≥ 1`, and `bitval & !mask == 0`.
///
/// The per-chunk tables ([`Codebook::tables`]) are built on first use, not
/// by the constructor.
///
/// Q: why lazily? A: they take 80 bytes per chunk position, 40 times the
/// mask and bit values they come from when chunks are one byte. Opening a
/// container (`inspect`, listing, reading one raw group) needs none of them,
/// so it costs about the file's size; a decoder asks for them through
/// [`Codebook::try_tables`], which reports memory it cannot have as
/// [`crate::ErrorKind::OutOfMemory`] instead of aborting.
#[derive(Clone, Debug)]
pub struct Codebook {
    chunk: ChunkSize,
    mask: Vec<u8>,
    bitval: Vec<u8>,
    tables: std::sync::OnceLock<ChunkTables>,
    /// Held while [`Codebook::try_tables`] builds the tables.
    building: BuildLock,
}

/// A lock that one thread holds while it builds a codebook's tables.
///
/// Q: why, when `OnceLock` already runs one initialiser? A: its fallible
/// form (`get_or_try_init`) is not stable, and without a lock every thread
/// of a parallel decode that asks first would build its own copy, as much
/// memory as the tables a thread.
#[derive(Debug, Default)]
struct BuildLock(std::sync::Mutex<()>);

impl Clone for BuildLock {
    fn clone(&self) -> Self {
        BuildLock::default()
    }
}

/// Two codebooks are equal when their chunk size, mask and bit values are:
/// the tables follow from those, built or not.
impl PartialEq for Codebook {
    fn eq(&self, other: &Self) -> bool {
        self.chunk == other.chunk && self.mask == other.mask && self.bitval == other.bitval
    }
}

impl Eq for Codebook {}

impl Codebook {
    /// A codebook from its parts. Errors with
    /// [`crate::ErrorKind::InvalidArgument`] when the lengths differ or are 0,
    /// or when `bitval` has a bit set outside `mask`.
    pub fn new(chunk: ChunkSize, mask: Vec<u8>, bitval: Vec<u8>) -> Result<Self> {
        if mask.is_empty() {
            return Err(Error::invalid(
                "codebook mask is empty; tensors need at least one byte",
            ));
        }
        if mask.len() != bitval.len() {
            return Err(Error::invalid(format!(
                "codebook mask has {} bytes but bitval has {}; both must be the tensor length",
                mask.len(),
                bitval.len()
            )));
        }
        if let Some(i) = mask.iter().zip(&bitval).position(|(m, b)| b & !m != 0) {
            return Err(Error::invalid(format!(
                "codebook bitval byte {i} ({:#04x}) has bits outside the mask ({:#04x})",
                bitval[i], mask[i]
            )));
        }
        Ok(Self {
            chunk,
            mask,
            bitval,
            tables: std::sync::OnceLock::new(),
            building: BuildLock::default(),
        })
    }

    /// The codebook of threshold `t` for bit counts `counts` (`8 L` entries,
    /// entry `8 i + b` for bit `b` of byte `i`) over `rows` tensors: the exact
    /// integer rule of `docs/FORMAT.md` §4.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] when `counts` is
    /// empty or not a multiple of 8 long, or a count exceeds `rows` (the
    /// counts then do not come from `rows` tensors).
    pub fn from_counts(counts: &[u64], rows: u64, t: Threshold, chunk: ChunkSize) -> Result<Self> {
        if counts.is_empty() || !counts.len().is_multiple_of(8) {
            return Err(Error::invalid(format!(
                "{} bit counts do not describe whole bytes; pass 8 counts per byte of the tensor",
                counts.len()
            )));
        }
        if let Some(p) = counts.iter().position(|&c| c > rows) {
            return Err(Error::invalid(format!(
                "bit {p} is counted {} times but only {rows} tensors were counted",
                counts[p]
            )));
        }
        let (mask, bitval) = mask_and_bitval(counts, rows, t);
        Self::new(chunk, mask, bitval)
    }

    /// The same mask and bit values grouped into chunks of `chunk` bytes.
    pub fn with_chunk(&self, chunk: ChunkSize) -> Self {
        Self {
            chunk,
            mask: self.mask.clone(),
            bitval: self.bitval.clone(),
            tables: std::sync::OnceLock::new(),
            building: BuildLock::default(),
        }
    }

    /// Tensor length in bytes (`L`).
    pub fn row_bytes(&self) -> usize {
        self.mask.len()
    }

    /// Chunk size (`C`).
    pub fn chunk(&self) -> ChunkSize {
        self.chunk
    }

    /// Number of chunks per tensor (`K = ⌈L / C⌉`).
    pub fn chunks(&self) -> usize {
        self.mask.len().div_ceil(self.chunk.bytes() as usize)
    }

    /// `Mask`: 1 for every invariant bit.
    pub fn mask(&self) -> &[u8] {
        &self.mask
    }

    /// `Bitval`: the value of every invariant bit (0 outside the mask).
    pub fn bitval(&self) -> &[u8] {
        &self.bitval
    }

    /// Number of invariant bits (`popcount(Mask)`).
    pub fn invariant_bits(&self) -> u64 {
        self.mask.iter().map(|m| u64::from(m.count_ones())).sum()
    }

    /// The per-chunk tables the encoder and decoders run on, built on the
    /// first call ([`ChunkTables::bytes_for`] bytes). Where the codebook
    /// came from input that may be large or hostile, call
    /// [`Codebook::try_tables`] first: this one aborts the process, as any
    /// failed allocation does, if the memory is not there.
    pub fn tables(&self) -> &ChunkTables {
        self.tables
            .get_or_init(|| ChunkTables::build(self.chunk, &self.mask, &self.bitval))
    }

    /// [`Codebook::tables`], or [`crate::ErrorKind::OutOfMemory`] when the
    /// memory for them cannot be allocated.
    pub fn try_tables(&self) -> Result<&ChunkTables> {
        if let Some(t) = self.tables.get() {
            return Ok(t);
        }
        let _building = self
            .building
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = self.tables.get() {
            // Built by the thread that held the lock before.
            return Ok(t);
        }
        let built = ChunkTables::try_build(self.chunk, &self.mask, &self.bitval)?;
        Ok(self.tables.get_or_init(|| built))
    }
}

impl AsRef<ChunkTables> for Codebook {
    fn as_ref(&self) -> &ChunkTables {
        self.tables()
    }
}

/// Everything a coder needs about one chunk position `j`, precomputed from
/// the codebook. `#[repr(C)]`, 80 bytes, no padding, so a GPU decoder can
/// upload a `&[ChunkTable]` as is (see [`ChunkTables::as_bytes`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ChunkTable {
    /// `m_j`: the invariant bits of the chunk.
    pub mask: u64,
    /// `b_j`: their values (`bitval & !mask == 0`).
    pub bitval: u64,
    /// `f_j = !m_j & (2^w_j − 1)`: the bits a matching chunk stores.
    pub free: u64,
    /// `w_j`: the chunk's width in bits (`8C`, less for a tail chunk).
    pub width: u32,
    /// `popcount(f_j)`: payload bits of a matching chunk.
    pub free_bits: u32,
    /// Move masks of `free` for [`bits::compress`]/[`bits::expand`]; entries
    /// past [`ChunkSize::steps`] are zero.
    pub mv: [u64; 6],
}

/// The [`ChunkTable`] of every chunk position of a codebook, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkTables {
    row_bytes: usize,
    chunk: ChunkSize,
    entries: Vec<ChunkTable>,
    /// `Σ_j w_j = 8 L`: payload bits when no chunk matches.
    total_width: u64,
}

impl ChunkTables {
    /// Bytes the tables of a codebook of `row_bytes`-byte rows and `chunk`
    /// take: one 80-byte [`ChunkTable`] per chunk position.
    pub const fn bytes_for(row_bytes: usize, chunk: ChunkSize) -> usize {
        row_bytes
            .div_ceil(chunk.bytes() as usize)
            .saturating_mul(size_of::<ChunkTable>())
    }

    fn build(chunk: ChunkSize, mask: &[u8], bitval: &[u8]) -> Self {
        let mut entries = Vec::with_capacity(mask.len().div_ceil(chunk.bytes() as usize));
        Self::fill(chunk, mask, bitval, &mut entries)
    }

    /// [`ChunkTables::build`] with a fallible allocation.
    fn try_build(chunk: ChunkSize, mask: &[u8], bitval: &[u8]) -> Result<Self> {
        let k = mask.len().div_ceil(chunk.bytes() as usize);
        let mut entries = Vec::new();
        entries.try_reserve_exact(k).map_err(|_| {
            Error::out_of_memory(
                Self::bytes_for(mask.len(), chunk),
                &format!(
                    "the codebook tables of {}-byte rows in {chunk}-byte chunks",
                    mask.len()
                ),
            )
        })?;
        Ok(Self::fill(chunk, mask, bitval, &mut entries))
    }

    fn fill(chunk: ChunkSize, mask: &[u8], bitval: &[u8], entries: &mut Vec<ChunkTable>) -> Self {
        let c = chunk.bytes() as usize;
        let steps = chunk.steps();
        entries.extend(mask.chunks(c).zip(bitval.chunks(c)).map(|(m, b)| {
            let width = 8 * m.len() as u32;
            let (mask, bitval) = (le_u64(m), le_u64(b));
            let free = !mask & bits::low_mask(width);
            ChunkTable {
                mask,
                bitval,
                free,
                width,
                free_bits: free.count_ones(),
                mv: bits::move_masks(free, steps),
            }
        }));
        Self {
            row_bytes: mask.len(),
            chunk,
            entries: std::mem::take(entries),
            total_width: 8 * mask.len() as u64,
        }
    }

    /// Tensor length in bytes (`L`).
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Chunk size (`C`).
    pub fn chunk(&self) -> ChunkSize {
        self.chunk
    }

    /// Number of chunks (`K`).
    pub fn chunks(&self) -> usize {
        self.entries.len()
    }

    /// `8 L`: the payload bits of a tensor in which no chunk matches.
    pub fn total_width(&self) -> u64 {
        self.total_width
    }

    /// One entry per chunk position.
    pub fn entries(&self) -> &[ChunkTable] {
        &self.entries
    }

    /// The entries as bytes (native endianness), for uploading to a device.
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.entries)
    }
}

impl AsRef<ChunkTables> for ChunkTables {
    fn as_ref(&self) -> &ChunkTables {
        self
    }
}

/// `(Mask, Bitval)` of threshold `t` for bit counts over `rows` tensors
/// (`docs/FORMAT.md` §4), without the checks of [`Codebook::from_counts`].
pub(crate) fn mask_and_bitval(counts: &[u64], rows: u64, t: Threshold) -> (Vec<u8>, Vec<u8>) {
    let l = counts.len().div_ceil(8);
    let (mut mask, mut bitval) = (vec![0u8; l], vec![0u8; l]);
    // The rule compares 10000 · count with T · N and (10000 − T) · N, in
    // u128 (both overflow u64 once N passes ~1.8e15; the rule must be exact
    // at every N for every executor to agree).
    //
    // Q: why compare each count with two precomputed bounds instead?
    // A: for an integer count c, 10000c > X exactly when c > ⌊X / 10000⌋,
    // and 10000c < Y exactly when c < ⌈Y / 10000⌉, so the same rule is two
    // u64 compares a bit; the u128 products per bit made this the GPU fit's
    // largest host cost (about 2 ms of CPU a fit of 5732-byte rows).
    let (one_above, zero_below) = threshold_bounds(rows, t);
    let byte = |c: &[u64]| {
        let (mut mi, mut bi) = (0u8, 0u8);
        for (k, &c) in c.iter().enumerate() {
            let one = u8::from(c > one_above);
            let zero = u8::from(c < zero_below);
            mi |= (one | zero) << k;
            bi |= one << k;
        }
        (mi, bi)
    };
    let (whole, rest) = counts.as_chunks::<8>();
    for ((m, b), c) in mask.iter_mut().zip(bitval.iter_mut()).zip(whole) {
        (*m, *b) = byte(c);
    }
    if !rest.is_empty() {
        (mask[l - 1], bitval[l - 1]) = byte(rest);
    }
    (mask, bitval)
}

/// The bounds of threshold `t` over `rows` tensors: a bit whose count is
/// above the first is an invariant 1, below the second an invariant 0
/// (see [`mask_and_bitval`] for why they are exact).
pub(crate) fn threshold_bounds(rows: u64, t: Threshold) -> (u64, u64) {
    let tp = u128::from(t.basis_points());
    let n = u128::from(rows);
    let one_above = u64::try_from(tp * n / 10000).unwrap_or(u64::MAX);
    let zero_below = u64::try_from(((10000 - tp) * n).div_ceil(10000)).unwrap_or(u64::MAX);
    (one_above, zero_below)
}

/// Little-endian value of up to 8 bytes.
fn le_u64(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |acc, &x| acc << 8 | u64::from(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn chunk_size_round_trips_and_rejects_others() {
        for c in ChunkSize::ALL {
            assert_eq!(ChunkSize::try_from(c.bytes()).unwrap(), c);
        }
        for bad in [0, 3, 5, 16] {
            let err = ChunkSize::try_from(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
            assert!(err.message().contains("1, 2, 4 or 8"), "{err}");
        }
        assert_eq!(ChunkSize::Eight.steps(), 6);
        assert_eq!(ChunkSize::One.steps(), 3);
    }

    #[test]
    fn threshold_rounds_to_basis_points_and_prints_exactly() {
        assert_eq!(Threshold::from_fraction(0.85).unwrap().basis_points(), 8500);
        assert_eq!(
            Threshold::from_fraction(0.85004).unwrap().basis_points(),
            8500
        );
        assert_eq!(
            Threshold::from_fraction(0.49996).unwrap().basis_points(),
            5000
        );
        assert_eq!("0.7".parse::<Threshold>().unwrap().basis_points(), 7000);
        for bad in [0.4, 1.01, f64::NAN, f64::INFINITY, -0.9] {
            assert_eq!(
                Threshold::from_fraction(bad).unwrap_err().kind(),
                ErrorKind::InvalidArgument
            );
        }
        assert!("x".parse::<Threshold>().is_err());
        assert!(Threshold::from_basis_points(4999).is_err());
        assert!(Threshold::from_basis_points(10001).is_err());
        let shown: Vec<String> = [8500, 7000, 8525, 10000, 5001]
            .map(|bp| Threshold(bp).to_string())
            .into();
        assert_eq!(shown, ["0.85", "0.7", "0.8525", "1.0", "0.5001"]);
        let sweep: Vec<u16> = Threshold::default_sweep()
            .iter()
            .map(|t| t.basis_points())
            .collect();
        assert_eq!(sweep, [7000, 7500, 8000, 8500, 9000, 9500]);
    }

    #[test]
    fn codebook_new_validates() {
        assert!(Codebook::new(ChunkSize::One, vec![], vec![]).is_err());
        assert!(Codebook::new(ChunkSize::One, vec![0xff], vec![0, 0]).is_err());
        let err = Codebook::new(ChunkSize::One, vec![0x0f, 0xf0], vec![0x01, 0x01]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("byte 1"), "{err}");
        assert!(Codebook::new(ChunkSize::Two, vec![0x0f, 0xf0], vec![0x01, 0x10]).is_ok());
    }

    #[test]
    fn from_counts_uses_strict_integer_inequalities() {
        // 20 tensors, T = 8500: invariant-1 when 10000 c > 170000 (c ≥ 18),
        // invariant-0 when 10000 c < 30000 (c ≤ 2). c = 17 and c = 3 sit
        // exactly on the boundaries and are not invariant.
        let counts = [18, 17, 3, 2, 0, 20, 10, 19];
        let t = Threshold::from_basis_points(8500).unwrap();
        let cb = Codebook::from_counts(&counts, 20, t, ChunkSize::One).unwrap();
        assert_eq!(cb.mask(), &[0b1011_1001]);
        assert_eq!(cb.bitval(), &[0b1010_0001]);
        assert_eq!(cb.invariant_bits(), 5);
        // T = 10000: both inequalities are strict, so nothing is invariant,
        // not even bits that are always or never set.
        let cb = Codebook::from_counts(&counts, 20, Threshold::MAX, ChunkSize::One).unwrap();
        assert_eq!((cb.mask(), cb.bitval()), (&[0][..], &[0][..]));
        // T = 5000: everything but an exact tie (c = 10).
        let cb = Codebook::from_counts(&counts, 20, Threshold::MIN, ChunkSize::One).unwrap();
        assert_eq!(
            (cb.mask(), cb.bitval()),
            (&[0b1011_1111][..], &[0b1010_0011][..])
        );
        // Counts that cannot come from 20 tensors, or not whole bytes.
        assert!(Codebook::from_counts(&[21, 0, 0, 0, 0, 0, 0, 0], 20, t, ChunkSize::One).is_err());
        assert!(Codebook::from_counts(&[0; 7], 20, t, ChunkSize::One).is_err());
        // Zero tensors: nothing is invariant, and nothing panics.
        let cb = Codebook::from_counts(&[0; 16], 0, t, ChunkSize::Two).unwrap();
        assert_eq!(cb.mask(), &[0, 0]);
    }

    #[test]
    fn from_counts_does_not_overflow_at_huge_counts() {
        let n = u64::MAX;
        let counts = [n, 0, n - 1, 1, n / 2, n, 0, n];
        let cb = Codebook::from_counts(
            &counts,
            n,
            Threshold::from_basis_points(9999).unwrap(),
            ChunkSize::One,
        )
        .unwrap();
        // n - 1 of n is above 0.9999; n / 2 is not invariant.
        assert_eq!(cb.mask(), &[0b1110_1111]);
        assert_eq!(cb.bitval(), &[0b1010_0101]);
    }

    #[test]
    fn the_precomputed_bounds_are_the_u128_rule() {
        // The rule as FORMAT.md §4 states it, one bit at a time.
        let direct = |c: u64, n: u64, t: u16| {
            let (c, n, t) = (10000 * u128::from(c), u128::from(n), u128::from(t));
            (c > t * n || c < (10000 - t) * n, c > t * n)
        };
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for t in [5000u16, 5001, 7000, 7500, 8333, 9500, 9999, 10000] {
            let th = Threshold::from_basis_points(t).unwrap();
            // Every count of small n (the boundaries included), and random
            // counts with the exact boundaries of large n.
            let mut cases: Vec<(u64, Vec<u64>)> =
                (0..=41u64).map(|n| (n, (0..=n).collect())).collect();
            for n in [10_000u64, 123_457, 1 << 40, u64::MAX / 3, u64::MAX] {
                let tn = u128::from(t) * u128::from(n);
                let un = u128::from(10000 - t) * u128::from(n);
                let mut counts: Vec<u64> = [
                    tn / 10000,
                    tn.div_ceil(10000),
                    un / 10000,
                    un.div_ceil(10000),
                ]
                .iter()
                .flat_map(|&b| [b.saturating_sub(1), b, b + 1])
                .map(|b| u64::try_from(b).unwrap_or(u64::MAX).min(n))
                .collect();
                counts.extend((0..29).map(|_| next() % (n.saturating_add(1)).max(1)));
                cases.push((n, counts));
            }
            for (n, mut counts) in cases {
                counts.resize(counts.len().next_multiple_of(8), 0);
                let (mask, bitval) = mask_and_bitval(&counts, n, th);
                for (p, &c) in counts.iter().enumerate() {
                    let got = (
                        mask[p / 8] >> (p % 8) & 1 == 1,
                        bitval[p / 8] >> (p % 8) & 1 == 1,
                    );
                    assert_eq!(got, direct(c, n, t), "count {c} of {n}, T = {t}");
                }
            }
        }
    }

    #[test]
    fn tables_cover_ragged_tails() {
        let mask = vec![0xff, 0x0f, 0x00, 0xf0, 0x01, 0x80];
        let bitval = vec![0x12, 0x01, 0x00, 0x10, 0x01, 0x00];
        let cb = Codebook::new(ChunkSize::Four, mask, bitval).unwrap();
        let t = cb.tables();
        assert_eq!(cb.chunks(), 2);
        assert_eq!(t.total_width(), 48);
        let e = t.entries();
        assert_eq!(
            (e[0].mask, e[0].bitval, e[0].width),
            (0xf000_0fff, 0x1000_0112, 32)
        );
        assert_eq!((e[0].free, e[0].free_bits), (0x0fff_f000, 16));
        assert_eq!((e[1].mask, e[1].bitval, e[1].width), (0x8001, 0x0001, 16));
        assert_eq!((e[1].free, e[1].free_bits), (0x7ffe, 14));
        assert_eq!(e[1].mv, bits::move_masks(0x7ffe, 5));
        assert_eq!(t.as_bytes().len(), 2 * 80);
        let other = cb.with_chunk(ChunkSize::One);
        assert_eq!((other.mask(), other.chunks()), (cb.mask(), 6));
        assert_eq!(other.tables().entries()[1].free, 0xf0);
    }
}
