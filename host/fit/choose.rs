//! Choosing the codebook (`docs/FORMAT.md` §4): for every candidate
//! threshold and chunk size, the total stored size of a sample of the
//! dataset, all in one pass over the sample; the smallest total wins.
#![forbid(unsafe_code)]

use rayon::prelude::*;

use super::count::count_bits_into;
use crate::codebook::{ChunkSize, Codebook, Threshold, mask_and_bitval};
use crate::dataset::Rows;
use crate::error::{Error, Result, try_vec};

/// Which chunk sizes the fit considers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChunkChoice {
    /// All four; the fit picks one.
    #[default]
    Auto,
    /// Only this one.
    Fixed(ChunkSize),
}

/// Which tensors the fit looks at. The sample of `S` of `N` tensors is
/// tensors `⌊i · N / S⌋`, `i = 0 … S − 1` (evenly spaced, deterministic).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Sample {
    /// Every tensor.
    #[default]
    All,
    /// `S = ⌈f · N⌉` tensors (at least one), `0 < f ≤ 1`.
    Fraction(f64),
    /// `S = min(c, N)` tensors, `c ≥ 1`.
    Count(u64),
}

/// The sample of `len()` of `n` tensors chosen by a [`Sample`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplePlan {
    n: u64,
    s: u64,
}

impl SamplePlan {
    /// The plan of `sample` over `n` tensors. Errors with
    /// [`crate::ErrorKind::InvalidArgument`] when `n` is 0 or the sample
    /// parameter is out of range.
    pub fn new(n: u64, sample: Sample) -> Result<Self> {
        if n == 0 {
            return Err(Error::invalid(
                "the dataset has no tensors; a fit needs at least one",
            ));
        }
        let s = match sample {
            Sample::All => n,
            Sample::Fraction(f) if f > 0.0 && f <= 1.0 => {
                ((f * n as f64).ceil() as u64).clamp(1, n)
            }
            Sample::Fraction(f) => {
                return Err(Error::invalid(format!(
                    "sample fraction {f} is out of range; use 0 < f ≤ 1"
                )));
            }
            Sample::Count(0) => {
                return Err(Error::invalid("sample of 0 tensors; sample at least one"));
            }
            Sample::Count(c) => c.min(n),
        };
        Ok(Self { n, s })
    }

    /// Number of sampled tensors `S`.
    pub fn len(&self) -> u64 {
        self.s
    }

    /// Never true: a plan has at least one tensor.
    pub fn is_empty(&self) -> bool {
        self.s == 0
    }

    /// Index of the `i`-th sampled tensor, `⌊i · N / S⌋`.
    pub fn index(&self, i: u64) -> u64 {
        (u128::from(i) * u128::from(self.n) / u128::from(self.s)) as u64
    }

    /// Does the sample cover every tensor?
    pub fn is_all(&self) -> bool {
        self.s == self.n
    }
}

/// Options of [`fit`]. The default is the spec's: thresholds 0.70, 0.75, …,
/// 0.95, every chunk size, every tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct FitOptions {
    /// Candidate thresholds (at least one; duplicates are ignored).
    pub thresholds: Vec<Threshold>,
    /// Candidate chunk sizes.
    pub chunk: ChunkChoice,
    /// Tensors to count and to evaluate candidates on.
    pub sample: Sample,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            thresholds: Threshold::default_sweep().to_vec(),
            chunk: ChunkChoice::Auto,
            sample: Sample::All,
        }
    }
}

impl FitOptions {
    /// Sweep these thresholds.
    pub fn with_thresholds(mut self, thresholds: impl IntoIterator<Item = Threshold>) -> Self {
        self.thresholds = thresholds.into_iter().collect();
        self
    }

    /// Use this one threshold.
    pub fn with_threshold(self, t: Threshold) -> Self {
        self.with_thresholds([t])
    }

    /// Consider these chunk sizes.
    pub fn with_chunk(mut self, chunk: ChunkChoice) -> Self {
        self.chunk = chunk;
        self
    }

    /// Count and evaluate on this sample.
    pub fn with_sample(mut self, sample: Sample) -> Self {
        self.sample = sample;
        self
    }
}

/// One evaluated `(threshold, chunk size)` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The threshold.
    pub threshold: Threshold,
    /// The chunk size.
    pub chunk: ChunkSize,
    /// Total stored size of the sample, `Σ min(E, L)`.
    pub stored_bytes: u64,
    /// Sampled tensors that would be stored encoded (`E < L`).
    pub encoded_rows: u64,
}

/// The result of a fit: the chosen codebook and what was weighed.
#[derive(Clone, Debug)]
pub struct Fit {
    /// The chosen codebook.
    pub codebook: Codebook,
    /// The chosen threshold.
    pub threshold: Threshold,
    /// The chosen candidate (its threshold and chunk size are the
    /// codebook's).
    pub chosen: Candidate,
    /// Every evaluated candidate, by threshold then chunk size, ascending.
    pub candidates: Vec<Candidate>,
    /// Tensors in the sample (`S`).
    pub sample_rows: u64,
    /// Raw size of the sample, `S · L`.
    pub sample_bytes: u64,
}

impl Fit {
    /// The chosen candidate's space savings on the sample: `1 − stored /
    /// raw` (0 for an empty sample). Metadata (flags, offsets, codebook) is
    /// not counted.
    pub fn savings(&self) -> f64 {
        if self.sample_bytes == 0 {
            0.0
        } else {
            1.0 - self.chosen.stored_bytes as f64 / self.sample_bytes as f64
        }
    }
}

/// Count the bits of a sample of `rows` and choose the codebook: the
/// candidate with the smallest total stored size of the sample, ties to the
/// larger threshold, then to the larger chunk size.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] for a dataset without
/// tensors, no thresholds, or a sample parameter out of range.
pub fn fit(rows: Rows<'_>, opts: &FitOptions) -> Result<Fit> {
    let plan = SamplePlan::new(rows.rows() as u64, opts.sample)?;
    let l = rows.row_bytes();
    if l > COLUMN_BLOCK_BYTES {
        return fit_in_column_blocks(rows, plan, opts);
    }
    fit_whole_rows(rows, plan, opts)
}

/// [`fit`] for rows of at most [`COLUMN_BLOCK_BYTES`]: all counters at once.
fn fit_whole_rows(rows: Rows<'_>, plan: SamplePlan, opts: &FitOptions) -> Result<Fit> {
    let l = rows.row_bytes();
    let mut counts = vec![0u64; 8 * l];
    if plan.is_all() {
        count_bits_into(rows, &mut counts)?;
    } else {
        // Q: why gather the sample in batches?
        // A: the counter wants contiguous rows; a bounded buffer keeps memory
        // flat for any sample size.
        let batch = (COUNT_BATCH_BYTES / l).max(1) as u64;
        let mut buf = Vec::with_capacity(batch as usize * l);
        for start in (0..plan.len()).step_by(batch as usize) {
            buf.clear();
            for i in start..(start + batch).min(plan.len()) {
                buf.extend_from_slice(rows.row(plan.index(i) as usize));
            }
            count_bits_into(Rows::new(&buf, l)?, &mut counts)?;
        }
    }
    choose(&counts, plan.len(), rows, plan, opts)
}

/// Bytes of sampled rows gathered per counting batch.
const COUNT_BATCH_BYTES: usize = 16 << 20;

/// Choose the codebook from bit counts computed elsewhere (e.g. on a GPU):
/// `counts` (`8 L` entries) over `counted_rows` tensors, normally the sample
/// that `opts.sample` picks from `rows`. Candidates are evaluated on that
/// sample of `rows`, exactly as [`fit`] does.
///
/// Errors with [`crate::ErrorKind::InvalidArgument`] when `counts` does not
/// have `8 L` entries, `counted_rows` is 0 or smaller than a count, or as
/// [`fit`].
pub fn fit_from_counts(
    counts: &[u64],
    counted_rows: u64,
    rows: Rows<'_>,
    opts: &FitOptions,
) -> Result<Fit> {
    let plan = SamplePlan::new(rows.rows() as u64, opts.sample)?;
    if counts.len() != 8 * rows.row_bytes() {
        return Err(Error::invalid(format!(
            "{} bit counts for {}-byte tensors; pass 8 counts per byte",
            counts.len(),
            rows.row_bytes()
        )));
    }
    if counted_rows == 0 {
        return Err(Error::invalid("counts over 0 tensors; count at least one"));
    }
    if let Some(&c) = counts.iter().find(|&&c| c > counted_rows) {
        return Err(Error::invalid(format!(
            "a bit is counted {c} times in only {counted_rows} tensors"
        )));
    }
    choose(counts, counted_rows, rows, plan, opts)
}

fn choose(
    counts: &[u64],
    counted: u64,
    rows: Rows<'_>,
    plan: SamplePlan,
    opts: &FitOptions,
) -> Result<Fit> {
    choose_with(counts, counted, plan, rows.row_bytes(), opts, |books| {
        Ok(evaluate(rows, plan, books))
    })
}

/// The choice itself, with the evaluation of the candidates' codebooks on
/// the sample left to `evaluate` (the CPU pass here, or the GPU's): given
/// each threshold's `(mask, bitval)`, thresholds ascending, it returns their
/// [`Totals`] in the same order.
pub(crate) fn choose_with(
    counts: &[u64],
    counted: u64,
    plan: SamplePlan,
    row_bytes: usize,
    opts: &FitOptions,
    evaluate: impl FnOnce(&[(Vec<u8>, Vec<u8>)]) -> Result<Vec<Totals>>,
) -> Result<Fit> {
    choose_evaluated(plan, row_bytes, opts, |thresholds| {
        let books: Vec<(Vec<u8>, Vec<u8>)> = thresholds
            .iter()
            .map(|&t| mask_and_bitval(counts, counted, t))
            .collect();
        Ok((evaluate(&books)?, books))
    })
}

/// [`choose_with`] with the candidates' codebooks built by `evaluate` too
/// (the GPU's, from counts it keeps): given the thresholds ascending, it
/// returns their [`Totals`] and each one's `(mask, bitval)`, in that order.
pub(crate) fn choose_evaluated(
    plan: SamplePlan,
    row_bytes: usize,
    opts: &FitOptions,
    evaluate: impl FnOnce(&[Threshold]) -> Result<(Vec<Totals>, Vec<(Vec<u8>, Vec<u8>)>)>,
) -> Result<Fit> {
    let (thresholds, chunks) = sweep(opts)?;
    let (totals, books) = evaluate(&thresholds)?;
    if books.len() != thresholds.len() {
        return Err(Error::invalid(
            "candidate evaluation returned the wrong number of codebooks",
        ));
    }
    let (best, candidates, ti) = pick(&thresholds, &chunks, &totals)?;
    let (mask, bitval) = books.into_iter().nth(ti).unwrap_or_default();
    Ok(Fit {
        codebook: Codebook::new(best.chunk, mask, bitval)?,
        threshold: best.threshold,
        chosen: best,
        candidates,
        sample_rows: plan.len(),
        sample_bytes: plan.len() * row_bytes as u64,
    })
}

/// The candidate thresholds (ascending, without duplicates) and chunk sizes
/// of `opts`.
fn sweep(opts: &FitOptions) -> Result<(Vec<Threshold>, Vec<ChunkSize>)> {
    let mut thresholds = opts.thresholds.clone();
    thresholds.sort();
    thresholds.dedup();
    if thresholds.is_empty() {
        return Err(Error::invalid("no candidate thresholds; give at least one"));
    }
    let chunks: Vec<ChunkSize> = match opts.chunk {
        ChunkChoice::Auto => ChunkSize::ALL.to_vec(),
        ChunkChoice::Fixed(c) => vec![c],
    };
    Ok((thresholds, chunks))
}

/// Every candidate with its totals, the best of them (smallest total; ties
/// to the larger threshold, then the larger chunk), and the best one's
/// index in `thresholds`.
fn pick(
    thresholds: &[Threshold],
    chunks: &[ChunkSize],
    totals: &[Totals],
) -> Result<(Candidate, Vec<Candidate>, usize)> {
    if totals.len() != thresholds.len() {
        return Err(Error::invalid(
            "candidate evaluation returned the wrong number of totals",
        ));
    }
    let mut candidates = Vec::with_capacity(thresholds.len() * chunks.len());
    for (&t, total) in thresholds.iter().zip(totals) {
        for &c in chunks {
            let ci = c.bytes().trailing_zeros() as usize;
            candidates.push(Candidate {
                threshold: t,
                chunk: c,
                stored_bytes: total.stored[ci],
                encoded_rows: total.encoded[ci],
            });
        }
    }
    let best = *candidates
        .iter()
        .min_by(|a, b| {
            a.stored_bytes
                .cmp(&b.stored_bytes)
                .then(b.threshold.cmp(&a.threshold))
                .then(b.chunk.cmp(&a.chunk))
        })
        .ok_or_else(|| Error::invalid("no candidates to choose from"))?;
    let ti = thresholds
        .iter()
        .position(|&t| t == best.threshold)
        .unwrap_or(0);
    Ok((best, candidates, ti))
}

/// Rows longer than this many bytes are fitted a block of this many
/// columns at a time (a multiple of 8, so that every chunk size's chunks
/// stay inside one block).
pub(crate) const COLUMN_BLOCK_BYTES: usize = 16 << 10;

/// [`fit`] for rows longer than [`COLUMN_BLOCK_BYTES`], in memory that does
/// not grow with the row length: bit counters and candidate codebooks exist
/// for one block of columns at a time, each sampled row keeps four running
/// sums per threshold, and the chosen codebook is counted again, block by
/// block, at the end.
///
/// Q: why is this the same fit? A: a codebook bit depends only on its own
/// count (`docs/FORMAT.md` §4), and the bits a row saves are a sum over
/// 8-byte words; blocks are whole words, so the per-block sums add up to
/// exactly the totals of the whole-row pass, and the same candidate wins.
/// `fit_in_column_blocks_equals_the_whole_row_fit` checks it.
fn fit_in_column_blocks(rows: Rows<'_>, plan: SamplePlan, opts: &FitOptions) -> Result<Fit> {
    let (thresholds, chunks) = sweep(opts)?;
    let l = rows.row_bytes();
    let s = usize::try_from(plan.len())
        .map_err(|_| Error::invalid("the sample has more tensors than fit in memory"))?;
    let sample = |i: usize| rows.row(plan.index(i as u64) as usize);
    let nt = thresholds.len();
    let mut counts = vec![0u64; 8 * COLUMN_BLOCK_BYTES];
    let mut count_block = |c0: usize, c1: usize| {
        let counts = &mut counts[..8 * (c1 - c0)];
        counts.fill(0);
        super::count::count_columns_into(s, &sample, c0..c1, counts);
        mask_and_bitval_all(counts, plan.len(), &thresholds)
    };
    // saved[i * nt + t]: bits row i of the sample saves under threshold t,
    // for chunk sizes 1, 2, 4, 8.
    let mut saved = try_vec(s.saturating_mul(nt), [0u64; 4], "the fit's per-tensor sums")?;
    for c0 in (0..l).step_by(COLUMN_BLOCK_BYTES) {
        let c1 = (c0 + COLUMN_BLOCK_BYTES).min(l);
        let books: Vec<Vec<BookWord>> = count_block(c0, c1)
            .iter()
            .map(|(m, b)| book_words(m, b))
            .collect();
        saved.par_chunks_mut(nt).enumerate().for_each(|(i, sv)| {
            let part = &sample(i)[c0..c1];
            for (x, book) in sv.iter_mut().zip(&books) {
                let add = row_saved_bits(part, book);
                x.iter_mut().zip(add).for_each(|(x, a)| *x += a);
            }
        });
    }
    let raw_bits = 8 * l as u64;
    let chunk_counts = ChunkSize::ALL.map(|c| l.div_ceil(c.bytes() as usize) as u64);
    let mut totals = vec![Totals::default(); nt];
    for sv in saved.chunks(nt) {
        for (t, x) in totals.iter_mut().zip(sv) {
            t.add_row(x, raw_bits, chunk_counts, l as u64);
        }
    }
    drop(saved);
    let (best, candidates, _) = pick(&thresholds, &chunks, &totals)?;
    let (mut mask, mut bitval) = (Vec::with_capacity(l), Vec::with_capacity(l));
    for c0 in (0..l).step_by(COLUMN_BLOCK_BYTES) {
        let c1 = (c0 + COLUMN_BLOCK_BYTES).min(l);
        let counts = &mut counts[..8 * (c1 - c0)];
        counts.fill(0);
        super::count::count_columns_into(s, &sample, c0..c1, counts);
        let (m, b) = mask_and_bitval(counts, plan.len(), best.threshold);
        mask.extend(m);
        bitval.extend(b);
    }
    Ok(Fit {
        codebook: Codebook::new(best.chunk, mask, bitval)?,
        threshold: best.threshold,
        chosen: best,
        candidates,
        sample_rows: plan.len(),
        sample_bytes: plan.len() * l as u64,
    })
}

/// `(Mask, Bitval)` of each of `thresholds` for one set of counts.
fn mask_and_bitval_all(
    counts: &[u64],
    counted: u64,
    thresholds: &[Threshold],
) -> Vec<(Vec<u8>, Vec<u8>)> {
    thresholds
        .iter()
        .map(|&t| mask_and_bitval(counts, counted, t))
        .collect()
}

/// Totals of one threshold for chunk sizes 1, 2, 4, 8 (index `log2 C`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Totals {
    /// Total stored bytes of the sample.
    pub stored: [u64; 4],
    /// Tensors of the sample stored encoded.
    pub encoded: [u64; 4],
}

impl Totals {
    /// Add one row that saves `saved[c]` bits with chunk size `2^c`: it is
    /// stored in `min(E, L)` bytes, encoded when `E < L`.
    #[inline(always)]
    fn add_row(&mut self, saved: &[u64; 4], raw_bits: u64, chunk_counts: [u64; 4], l: u64) {
        for c in 0..4 {
            let e = (chunk_counts[c] + raw_bits - saved[c]).div_ceil(8);
            self.stored[c] += e.min(l);
            self.encoded[c] += u64::from(e < l);
        }
    }
}

/// One codebook as [`BookWord`]s, one per 8-byte word of `mask`.
fn book_words(mask: &[u8], bitval: &[u8]) -> Vec<BookWord> {
    (0..mask.len().div_ceil(8))
        .map(|q| {
            let (m, b) = (le_word(mask, q), le_word(bitval, q));
            let byte_bits = u64::from_le_bytes(m.to_le_bytes().map(|x| x.count_ones() as u8));
            BookWord {
                mask: m,
                bitval: b,
                byte_bits,
            }
        })
        .collect()
}

/// Sample rows per parallel task.
const EVAL_ROWS_PER_TASK: usize = 64;

/// Total stored size of the sample for every codebook in `books` and every
/// chunk size, in one pass over the sample.
fn evaluate(rows: Rows<'_>, plan: SamplePlan, books: &[(Vec<u8>, Vec<u8>)]) -> Vec<Totals> {
    let l = rows.row_bytes();
    let nt = books.len();
    let book: Vec<Vec<BookWord>> = books.iter().map(|(m, b)| book_words(m, b)).collect();
    let raw_bits = 8 * l as u64;
    let chunk_counts = ChunkSize::ALL.map(|c| l.div_ceil(c.bytes() as usize) as u64);
    (0..plan.len() as usize)
        .into_par_iter()
        .with_min_len(EVAL_ROWS_PER_TASK)
        .fold(
            || vec![Totals::default(); nt],
            |mut totals, i| {
                let row = rows.row(plan.index(i as u64) as usize);
                // Q: why one codebook at a time over the row, not one word
                // at a time over the codebooks?
                // A: the four running sums then stay in registers; the row
                // (a few KiB) stays in L1 for the next codebook.
                for (t, b) in totals.iter_mut().zip(&book) {
                    t.add_row(&row_saved_bits(row, b), raw_bits, chunk_counts, l as u64);
                }
                totals
            },
        )
        .reduce(
            || vec![Totals::default(); nt],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(&b) {
                    for c in 0..4 {
                        x.stored[c] += y.stored[c];
                        x.encoded[c] += y.encoded[c];
                    }
                }
                a
            },
        )
}

/// One 8-byte word of one codebook.
#[derive(Clone, Copy, Debug, Default)]
struct BookWord {
    mask: u64,
    bitval: u64,
    /// `popcount` of each byte of `mask`, one per byte (0 to 8).
    byte_bits: u64,
}

/// Little-endian word `q` of `bytes`, zero-padded past the end.
pub(crate) fn le_word(bytes: &[u8], q: usize) -> u64 {
    let mut w = [0u8; 8];
    let part = &bytes[8 * q..(8 * q + 8).min(bytes.len())];
    w[..part.len()].copy_from_slice(part);
    u64::from_le_bytes(w)
}

const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HI1: u64 = 0x8080_8080_8080_8080;
const EVEN8: u64 = 0x00ff_00ff_00ff_00ff;
const EVEN16: u64 = 0x0000_ffff_0000_ffff;

/// Sum of the 8 bytes of `x` (each ≤ 8, so the sum fits a byte): the
/// multiply adds every byte into the top one.
#[inline(always)]
fn byte_sum(x: u64) -> u64 {
    x.wrapping_mul(0x0101_0101_0101_0101) >> 56
}

/// Invariant bits dropped by the matching chunks of `row` under one
/// codebook (`book`, one entry per 8-byte word), for chunk sizes 1, 2, 4, 8
/// at once (index `log2 C`).
///
/// Q: how does one pass serve four chunk sizes?
/// A: chunks of every size are aligned inside 8-byte words. Per word, the
/// mismatch `(w ^ bitval) & mask` is reduced to a byte mask of mismatching
/// bytes; OR-ing neighbouring bytes (then neighbouring pairs) widens it to 2-
/// and 4-byte chunks, and the word as a whole is the 8-byte chunk. The bits a
/// size saves in this word are the mask bits outside its mismatching chunks:
/// a sum of per-byte mask popcounts, precomputed, added up with one multiply
/// (as fast as `popcount`, which x86-64's baseline lacks, on the machines we
/// measured). The zero padding past `L` has an empty mask, so a tail chunk
/// matches exactly when its real bytes do.
#[inline(always)]
fn row_saved_bits(row: &[u8], book: &[BookWord]) -> [u64; 4] {
    let (full, tail) = row.as_chunks::<8>();
    let mut s = [0u64; 4];
    let mut word = |w: u64, b: &BookWord| {
        let m = (w ^ b.bitval) & b.mask;
        if m == 0 {
            // The whole word matches, so every chunk size saves all its mask
            // bits: the common case in data that compresses, and a cheap one.
            let all = byte_sum(b.byte_bits);
            s.iter_mut().for_each(|x| *x += all);
            return;
        }
        // 0xff in every byte with a mismatching bit.
        let bad1 = (((((m & LO7) + LO7) | m) & HI1) >> 7) * 0xff;
        let bad2 = bad1 | ((bad1 >> 8) & EVEN8) | ((bad1 << 8) & !EVEN8);
        let bad4 = bad2 | ((bad2 >> 16) & EVEN16) | ((bad2 << 16) & !EVEN16);
        s[0] += byte_sum(b.byte_bits & !bad1);
        s[1] += byte_sum(b.byte_bits & !bad2);
        s[2] += byte_sum(b.byte_bits & !bad4);
        // The 8-byte chunk (the whole word) does not match: it saves nothing.
    };
    for (w, b) in full.iter().zip(book) {
        word(u64::from_le_bytes(*w), b);
    }
    if let Some(b) = book.get(full.len()).filter(|_| !tail.is_empty()) {
        let mut w = [0u8; 8];
        w[..tail.len()].copy_from_slice(tail);
        word(u64::from_le_bytes(w), b);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use crate::encode::stored_len;
    use crate::fit::count_bits;

    #[test]
    fn sample_plan_spaces_evenly_and_validates() {
        let p = SamplePlan::new(10, Sample::Count(4)).unwrap();
        assert_eq!((0..4).map(|i| p.index(i)).collect::<Vec<_>>(), [0, 2, 5, 7]);
        assert_eq!(
            SamplePlan::new(10, Sample::Fraction(0.25)).unwrap().len(),
            3
        );
        assert_eq!(
            SamplePlan::new(10, Sample::Fraction(1e-9)).unwrap().len(),
            1
        );
        assert_eq!(SamplePlan::new(10, Sample::Count(99)).unwrap().len(), 10);
        assert!(SamplePlan::new(10, Sample::All).unwrap().is_all());
        for bad in [
            Sample::Fraction(0.0),
            Sample::Fraction(1.5),
            Sample::Fraction(f64::NAN),
            Sample::Count(0),
        ] {
            assert_eq!(
                SamplePlan::new(10, bad).unwrap_err().kind(),
                ErrorKind::InvalidArgument
            );
        }
        assert_eq!(
            SamplePlan::new(0, Sample::All).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let big = SamplePlan::new(u64::MAX, Sample::Count(3)).unwrap();
        assert_eq!(big.index(2), u64::MAX / 3 * 2);
    }

    /// Per-candidate evaluation the slow way: a codebook per candidate and
    /// `stored_len` per row.
    fn naive(rows: Rows<'_>, counts: &[u64], n: u64, t: Threshold, c: ChunkSize) -> (u64, u64) {
        let cb = Codebook::from_counts(counts, n, t, c).unwrap();
        rows.iter().fold((0, 0), |(s, e), row| {
            let len = stored_len(&cb, row).unwrap() as u64;
            (s + len, e + u64::from(len < rows.row_bytes() as u64))
        })
    }

    #[test]
    fn fit_in_column_blocks_equals_the_whole_row_fit() {
        // Rows of two full blocks and a ragged tail, with columns of every
        // kind: constant, mostly constant, noise.
        let l = 2 * COLUMN_BLOCK_BYTES + 20;
        let n = 24;
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let bytes: Vec<u8> = (0..n * l)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                match (i % l) % 5 {
                    0 => 0x3f,
                    1 if !s.is_multiple_of(16) => 0x80,
                    2 => (s & 0x0f) as u8,
                    _ => s as u8,
                }
            })
            .collect();
        let rows = Rows::new(&bytes, l).unwrap();
        for opts in [
            FitOptions::default(),
            FitOptions::default().with_sample(Sample::Count(7)),
            FitOptions::default().with_chunk(ChunkChoice::Fixed(ChunkSize::Two)),
        ] {
            let plan = SamplePlan::new(n as u64, opts.sample).unwrap();
            let whole = fit_whole_rows(rows, plan, &opts).unwrap();
            let blocked = fit(rows, &opts).unwrap();
            assert_eq!(blocked.codebook, whole.codebook);
            assert_eq!(blocked.chosen, whole.chosen);
            assert_eq!(blocked.candidates, whole.candidates);
            assert_eq!(blocked.sample_rows, whole.sample_rows);
        }
    }

    #[test]
    fn one_pass_equals_per_candidate_evaluation() {
        let mut s = 0x1234_5678u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for l in [1usize, 3, 7, 8, 13, 16, 29, 64] {
            let base: Vec<u8> = (0..l).map(|_| next() as u8).collect();
            let data: Vec<u8> = (0..40 * l)
                .map(|i| {
                    let r = next();
                    // Mostly the base pattern, some bytes noisy, some bits flipped.
                    match r % 10 {
                        0 => r as u8 >> 3,
                        1 | 2 => base[i % l] ^ (1 << ((r >> 8) % 8)),
                        _ => base[i % l],
                    }
                })
                .collect();
            let rows = Rows::new(&data, l).unwrap();
            let fit = fit(rows, &FitOptions::default()).unwrap();
            let counts = count_bits(rows);
            assert_eq!(fit.candidates.len(), 24);
            for cand in &fit.candidates {
                let (stored, enc) = naive(rows, &counts, 40, cand.threshold, cand.chunk);
                assert_eq!(
                    (cand.stored_bytes, cand.encoded_rows),
                    (stored, enc),
                    "L={l} {cand:?}"
                );
            }
            let best = fit.candidates.iter().map(|c| c.stored_bytes).min().unwrap();
            assert_eq!(fit.chosen.stored_bytes, best);
            let want =
                Codebook::from_counts(&counts, 40, fit.threshold, fit.codebook.chunk()).unwrap();
            assert_eq!(fit.codebook, want);
        }
    }

    #[test]
    fn ties_go_to_the_larger_threshold_then_the_larger_chunk() {
        // One-byte rows: every candidate has one chunk and stores every row
        // raw (E = 1 is not < L = 1), so all 24 tie.
        let data = vec![0u8; 8];
        let f = fit(Rows::new(&data, 1).unwrap(), &FitOptions::default()).unwrap();
        assert!(
            f.candidates
                .iter()
                .all(|c| c.stored_bytes == 8 && c.encoded_rows == 0)
        );
        assert_eq!(
            (f.threshold.basis_points(), f.codebook.chunk()),
            (9500, ChunkSize::Eight)
        );
        // Zero rows of 16 bytes: thresholds tie, fewer participation bits win.
        let data = vec![0u8; 8 * 16];
        let opts = FitOptions::default()
            .with_thresholds([7000, 8000].map(|t| Threshold::from_basis_points(t).unwrap()));
        let f = fit(Rows::new(&data, 16).unwrap(), &opts).unwrap();
        let by_chunk: Vec<u64> = f.candidates[..4].iter().map(|c| c.stored_bytes).collect();
        assert_eq!(by_chunk, [16, 8, 8, 8]);
        assert_eq!(
            (f.threshold.basis_points(), f.codebook.chunk()),
            (8000, ChunkSize::Eight)
        );
    }

    #[test]
    fn options_restrict_candidates_and_bad_input_is_rejected() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 7 % 5) as u8).collect();
        let rows = Rows::new(&data, 10).unwrap();
        let t = Threshold::from_fraction(0.9).unwrap();
        let opts = FitOptions::default()
            .with_threshold(t)
            .with_chunk(ChunkChoice::Fixed(ChunkSize::Two))
            .with_sample(Sample::Count(5));
        let f = fit(rows, &opts).unwrap();
        assert_eq!(f.candidates.len(), 1);
        assert_eq!(
            (
                f.threshold,
                f.codebook.chunk(),
                f.sample_rows,
                f.sample_bytes
            ),
            (t, ChunkSize::Two, 5, 50)
        );
        // The sample is rows 0, 4, 8, 12, 16: counts and evaluation use them.
        let sample: Vec<u8> = [0, 4, 8, 12, 16]
            .iter()
            .flat_map(|&i| rows.row(i).to_vec())
            .collect();
        let srows = Rows::new(&sample, 10).unwrap();
        let counts = count_bits(srows);
        assert_eq!(
            f.codebook,
            Codebook::from_counts(&counts, 5, t, ChunkSize::Two).unwrap()
        );
        assert_eq!(
            f.candidates[0].stored_bytes,
            naive(srows, &counts, 5, t, ChunkSize::Two).0
        );
        // fit_from_counts with the same counts agrees.
        let g = fit_from_counts(&counts, 5, rows, &opts).unwrap();
        assert_eq!((g.codebook, g.candidates), (f.codebook, f.candidates));

        let empty = Rows::new(&[], 10).unwrap();
        assert_eq!(
            fit(empty, &FitOptions::default()).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let none = FitOptions::default().with_thresholds([]);
        assert_eq!(
            fit(rows, &none).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        let opts = FitOptions::default();
        assert!(fit_from_counts(&counts[1..], 5, rows, &opts).is_err());
        assert!(fit_from_counts(&counts, 0, rows, &opts).is_err());
        assert!(fit_from_counts(&vec![9; 80], 5, rows, &opts).is_err());
    }

    #[test]
    fn savings_is_one_minus_stored_over_raw_of_the_chosen_candidate() {
        // 64 rows of 8 bytes, every byte constant but the first: 7 of 8
        // bytes are invariant.
        let data: Vec<u8> = (0..64u32)
            .flat_map(|i| [i as u8, 1, 2, 3, 4, 5, 6, 7])
            .collect();
        let f = fit(Rows::new(&data, 8).unwrap(), &FitOptions::default()).unwrap();
        let want = 1.0 - f.chosen.stored_bytes as f64 / (64.0 * 8.0);
        assert!((f.savings() - want).abs() < 1e-12);
        assert!(f.savings() > 0.5, "savings {}", f.savings());
    }
}
