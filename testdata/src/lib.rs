//! Test data for ibp's tests, its command line (`ibp kv-data`, `ibp bench`)
//! and its benches. No part of the `ibp` library: a host app that depends on
//! ibp compiles none of it.
//!
//! - [`kv`]: real KV-cache rows, from all-MiniLM-L6-v2 run over real text by
//!   a tokenizer and BERT forward pass of our own;
//! - [`real_tables`]: Cora's features and MiniLM's word embeddings (f32 and
//!   bf16), the tables the GPU tests and `ibp bench` share;
//! - [`figure7_dataset`] and [`raw_packed`]: synthetic datasets of a chosen
//!   space saving, and the uncompressed baseline in the packed layout;
//! - [`fp8`]: FP8 (E4M3, E5M2) casts of f32 values, rounded to nearest even
//!   and saturating;
//! - [`data_file`]: where the data files `scripts/setup.sh` fetches are.

pub mod fp8;
pub mod kv;

use std::path::{Path, PathBuf};

use ibp::codebook::{ChunkSize, Codebook};
use ibp::io::{InputFile, ParseOptions, SourceFormat};
use ibp::layout::Packed;
use ibp::{Error, Result, Rows};

/// A test data file: `$IBP_DATA_DIR/name`, then `.tools/data/name` of the
/// repository, then `data/name` and `.device/data/name` relative to the
/// working directory (test binaries run on another machine, the GPU host,
/// from a copy of the repository), then the repository's `data/` and
/// `../shared/data/`.
pub fn data_file(name: &str) -> Option<PathBuf> {
    // This package is the repository's `testdata/` folder.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("IBP_DATA_DIR") {
        candidates.push(PathBuf::from(d).join(name));
    }
    candidates.push(root.join(".tools/data").join(name));
    candidates.push(PathBuf::from("data").join(name));
    candidates.push(PathBuf::from(".device/data").join(name));
    candidates.push(root.join("data").join(name));
    candidates.push(root.join("../shared/data").join(name));
    candidates.into_iter().find(|p| p.is_file())
}

/// One real table: its name, its rows back to back, and the row length in
/// bytes.
pub type RealTable = (String, Vec<u8>, usize);

/// The real tables: Cora's features from `cora_npz` (the `.npz` bytes; the
/// repository's `data/cora-features.npz`), then, when `model` (a MiniLM
/// `model.safetensors`) is given, its word embeddings in f32 and rounded to
/// bf16.
pub fn real_tables(cora_npz: &[u8], model: Option<&Path>) -> Result<Vec<RealTable>> {
    let mut out = Vec::new();
    let doc = ibp::io::parse(cora_npz, SourceFormat::Npz, &Default::default())?;
    let g = doc
        .groups
        .first()
        .ok_or_else(|| Error::invalid("the Cora file holds no tensor"))?;
    out.push((
        "Cora features f32".into(),
        g.data.to_vec(),
        g.row_shape(None)?.row_bytes as usize,
    ));
    if let Some(path) = model {
        let f = InputFile::open(path)?;
        let opts = ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
        let doc = ibp::io::parse(f.bytes(), SourceFormat::Safetensors, &opts)?;
        let g = doc
            .groups
            .first()
            .ok_or_else(|| Error::invalid("model.safetensors holds no word embeddings"))?;
        let row = g.row_shape(None)?.row_bytes as usize;
        let bf16: Vec<u8> = g
            .data
            .as_chunks::<4>()
            .0
            .iter()
            .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
            .collect();
        out.push(("MiniLM word embeddings f32".into(), g.data.to_vec(), row));
        out.push(("MiniLM word embeddings bf16".into(), bf16, row / 2));
    }
    Ok(out)
}

/// A synthetic dataset in the style of the paper's Figure 7: `rows` tensors
/// of `row_bytes`, 4-byte chunks, and a codebook whose mask has enough bits
/// per chunk that every tensor saves `savings` of its size (rounded to whole
/// bits per chunk). Free bits are random, so nothing else compresses.
/// [`synthetic_dataset`] with 4-byte chunks.
pub fn figure7_dataset(
    rows: usize,
    row_bytes: usize,
    savings: f64,
    seed: u64,
) -> Result<(Vec<u8>, Codebook)> {
    if !row_bytes.is_multiple_of(4) {
        return Err(Error::invalid("figure-7 datasets use whole 4-byte chunks"));
    }
    synthetic_dataset(rows, row_bytes, 4, savings, seed)
}

/// How a synthetic table's invariant bits lie across its columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Columns {
    /// Each chunk's top bits invariant, each column's with a value of its
    /// own.
    Random,
    /// The same bits, one value for every column (a dense float table's
    /// exponent bits: every step of its decode book uniform).
    Alike,
    /// The bits just below each byte's top bit invariant, in every byte
    /// and with one value (as in an fp8 table, whose exponent's high bits
    /// repeat in every byte: MiniLM cast to e4m3 keeps two in each). A
    /// chunk's free bits then form two runs in every byte, so chunks of 2
    /// bytes and more decode by the general step.
    Bytes,
    /// The bits just below each 16-bit half's top bit invariant, in every
    /// half and with one value (as in an f16 table, whose sign is free and
    /// whose exponent's high bits repeat in every value). Chunks of 2 bytes
    /// and more only; a 4-byte chunk's free bits then repeat a 16-bit
    /// pattern of two runs.
    Halves,
}

/// Invariant bits per chunk of `chunk_bytes` for a target `savings`, and
/// the savings they give: a chunk of `8c` bits with `m` invariant bits
/// stores `8c − m` free bits and one participation bit, saving `m − 1`
/// bits; `m = round(8c · savings) + 1`, at most `8c`. Errors for a chunk
/// size ibp does not have or a savings outside 0..1.
pub fn synthetic_savings(chunk_bytes: u32, savings: f64) -> Result<(u32, f64)> {
    ChunkSize::try_from(chunk_bytes)?;
    if !(0.0..1.0).contains(&savings) {
        return Err(Error::invalid(format!(
            "savings of {savings}: a fraction from 0 up to (not including) 1"
        )));
    }
    let bits = 8 * chunk_bytes;
    let m = ((f64::from(bits) * savings).round() as u32 + 1).min(bits);
    Ok((m, f64::from(m - 1) / f64::from(bits)))
}

/// [`synthetic_savings`] for columns laid out as `columns` says: with
/// [`Columns::Bytes`] the invariant bits come a whole number a byte, from 1
/// to 7 (each byte's top bit stays free), with [`Columns::Halves`] a whole
/// number a 16-bit half, from 1 to 15, the nearest to the target. Halves
/// need chunks of 2 bytes or more.
pub fn synthetic_savings_with(
    chunk_bytes: u32,
    savings: f64,
    columns: Columns,
) -> Result<(u32, f64)> {
    let (m, made) = synthetic_savings(chunk_bytes, savings)?;
    let (pieces, most) = match columns {
        Columns::Random | Columns::Alike => return Ok((m, made)),
        Columns::Bytes => (chunk_bytes, 7.0),
        Columns::Halves if chunk_bytes < 2 => {
            return Err(Error::invalid(
                "16-bit halves need chunks of 2 bytes or more".to_string(),
            ));
        }
        Columns::Halves => (chunk_bytes / 2, 15.0),
    };
    let per_piece = (f64::from(m) / f64::from(pieces)).round().clamp(1.0, most) as u32;
    let m = per_piece * pieces;
    Ok((m, f64::from(m - 1) / f64::from(8 * chunk_bytes)))
}

/// [`figure7_dataset`] for any chunk size: `rows` tensors of `row_bytes`
/// (a multiple of `chunk_bytes`), each chunk's top [`synthetic_savings`]
/// bits invariant (the high bits of a little-endian word, as in a float's
/// sign and exponent), every other bit random. With 4-byte chunks the
/// bytes are [`figure7_dataset`]'s, seed for seed.
pub fn synthetic_dataset(
    rows: usize,
    row_bytes: usize,
    chunk_bytes: u32,
    savings: f64,
    seed: u64,
) -> Result<(Vec<u8>, Codebook)> {
    synthetic_dataset_with(rows, row_bytes, chunk_bytes, savings, seed, Columns::Random)
}

/// [`synthetic_dataset`] with the invariant bits laid out across columns
/// as `columns` says ([`Columns::Random`] is [`synthetic_dataset`]).
pub fn synthetic_dataset_with(
    rows: usize,
    row_bytes: usize,
    chunk_bytes: u32,
    savings: f64,
    seed: u64,
    columns: Columns,
) -> Result<(Vec<u8>, Codebook)> {
    let (m, _) = synthetic_savings_with(chunk_bytes, savings, columns)?;
    let c = chunk_bytes as usize;
    if !row_bytes.is_multiple_of(c) {
        return Err(Error::invalid(format!(
            "rows of {row_bytes} bytes are not whole {c}-byte chunks"
        )));
    }
    let bits = 8 * chunk_bytes;
    let low = |n: u32| u64::MAX.checked_shr(64 - n).unwrap_or(0);
    let chunk_mask = if columns == Columns::Bytes {
        // The m / c bits below each byte's top bit, in every byte.
        let k = m / chunk_bytes;
        let byte = low(k) << (7 - k);
        (0..c).fold(0u64, |w, i| w | byte << (8 * i))
    } else if columns == Columns::Halves {
        // The m / (c/2) bits below each half's top bit, in every half.
        let k = m / (chunk_bytes / 2);
        let half = low(k) << (15 - k);
        (0..c / 2).fold(0u64, |w, i| w | half << (16 * i))
    } else {
        // The top m of the chunk's bits, as a little-endian word of 8c bits.
        low(bits) & !low(bits - m)
    };
    let alike = columns != Columns::Random;
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mask: Vec<u8> = (0..row_bytes / c)
        .flat_map(|_| chunk_mask.to_le_bytes().into_iter().take(c))
        .collect();
    let bitval: Vec<u8> = if columns == Columns::Bytes {
        // One value, in every byte of every column.
        let one = next() as u8;
        mask.iter().map(|&b| b & one).collect()
    } else if columns == Columns::Halves {
        // One value, in every half of every column.
        let one = next().to_le_bytes();
        mask.iter()
            .enumerate()
            .map(|(i, &b)| b & one[i % 2])
            .collect()
    } else if alike {
        let one = next().to_le_bytes();
        mask.iter()
            .enumerate()
            .map(|(i, &b)| b & one[i % c])
            .collect()
    } else {
        mask.iter().map(|&b| b & (next() as u8)).collect()
    };
    let mut data = vec![0u8; rows * row_bytes];
    for w in data.chunks_mut(8) {
        let r = next().to_le_bytes();
        w.copy_from_slice(&r[..w.len()]);
    }
    for row in data.chunks_mut(row_bytes) {
        for ((b, m), v) in row.iter_mut().zip(&mask).zip(&bitval) {
            *b = (*b & !m) | v;
        }
    }
    let cb = Codebook::new(ChunkSize::try_from(chunk_bytes)?, mask, bitval)?;
    Ok((data, cb))
}

/// `packed` (of `rows` a multiple of 8) repeated `times` over: the packed
/// layout of its rows repeated `times` over, built without compressing
/// them again (offsets shifted, flag bytes and payload repeated).
pub fn repeat_packed(packed: &Packed, times: usize) -> Result<Packed> {
    if !packed.rows.is_multiple_of(8) {
        return Err(Error::invalid(
            "repeating a packed dataset needs whole flag bytes: a multiple of 8 rows",
        ));
    }
    let len = packed.payload.len() as u64;
    let mut offsets = Vec::with_capacity(packed.rows * times + 1);
    for t in 0..times as u64 {
        offsets.extend(packed.offsets[..packed.rows].iter().map(|o| o + t * len));
    }
    offsets.push(times as u64 * len);
    Ok(Packed {
        row_bytes: packed.row_bytes,
        rows: packed.rows * times,
        flags: packed.flags.repeat(times),
        offsets,
        payload: packed.payload.repeat(times),
    })
}

/// Every row of `data` stored raw, in the packed layout: the uncompressed
/// baseline of the feature cache benchmarks, decoded by the same kernels
/// (its flag bitmap says "raw" for every row). Takes the bytes (no copy).
pub fn raw_packed(data: Vec<u8>, row_bytes: usize) -> Result<Packed> {
    let rows = Rows::new(&data, row_bytes)?.rows();
    Ok(Packed {
        row_bytes,
        rows,
        flags: vec![0; rows.div_ceil(8)],
        offsets: (0..=rows as u64).map(|i| i * row_bytes as u64).collect(),
        payload: data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ibp::layout::{LayoutOptions, compress_packed};

    #[test]
    fn alike_columns_share_one_bit_value_and_random_ones_do_not() {
        for chunk in [1u32, 2, 4, 8] {
            let c = chunk as usize;
            for columns in [
                Columns::Alike,
                Columns::Random,
                Columns::Bytes,
                Columns::Halves,
            ] {
                if columns == Columns::Halves && chunk == 1 {
                    assert!(synthetic_dataset_with(16, 256, chunk, 0.5, 7, columns).is_err());
                    continue;
                }
                let (data, cb) = synthetic_dataset_with(16, 256, chunk, 0.5, 7, columns).unwrap();
                assert_eq!(data.len(), 16 * 256);
                let cols: Vec<&[u8]> = cb.bitval().chunks(c).collect();
                let same = cols.iter().all(|x| x == &cols[0]);
                let alike = columns != Columns::Random;
                assert_eq!(same, alike, "C={chunk} {columns:?}");
                if columns == Columns::Bytes {
                    // Every byte alike: the bits below its top bit, as many
                    // as the savings ask (50% of 8 bits, plus the
                    // participation bit's, rounded a byte).
                    let (m, made) = synthetic_savings_with(chunk, 0.5, columns).unwrap();
                    assert_eq!(m % chunk, 0);
                    assert!((made - 0.5).abs() <= 1.0 / 8.0, "{made}");
                    let k = m / chunk;
                    let byte = (((1u16 << k) - 1) << (7 - k)) as u8;
                    assert!(cb.mask().iter().all(|&b| b == byte), "C={chunk}");
                    assert!(cb.bitval().iter().all(|&b| b == cb.bitval()[0]));
                } else if columns == Columns::Halves {
                    // Every half alike: the bits below its top bit.
                    let (m, made) = synthetic_savings_with(chunk, 0.5, columns).unwrap();
                    assert!((made - 0.5).abs() <= 1.0 / 16.0, "{made}");
                    let k = m / (chunk / 2);
                    let half = (((1u32 << k) - 1) << (15 - k)) as u16;
                    let halves = |v: &[u8]| -> Vec<u16> {
                        v.chunks(2)
                            .map(|h| u16::from_le_bytes([h[0], h[1]]))
                            .collect()
                    };
                    assert!(halves(cb.mask()).iter().all(|&h| h == half), "C={chunk}");
                    let vals = halves(cb.bitval());
                    assert!(vals.iter().all(|&h| h == vals[0]));
                } else {
                    // The chunk's top bits.
                    let top = cb.mask()[c - 1];
                    assert_eq!(top & 0x80, 0x80, "C={chunk} {columns:?}");
                }
                // Every row matches the codebook (the savings are exact).
                for row in data.chunks(256) {
                    for ((b, m), v) in row.iter().zip(cb.mask()).zip(cb.bitval()) {
                        assert_eq!(b & m, *v);
                    }
                }
            }
        }
    }

    /// The figure-7 generator as it was before it took a chunk size (the
    /// bytes `ibp bench --point` of older commits measures), kept as the
    /// reference that 4-byte chunks must reproduce.
    fn figure7_as_before(rows: usize, l: usize, savings: f64, seed: u64) -> (Vec<u8>, Vec<u8>) {
        let m = ((32.0 * savings).round() as u32 + 1).min(32);
        let chunk_mask: u32 = if m == 32 {
            u32::MAX
        } else {
            ((1u32 << m) - 1) << (32 - m)
        };
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mask: Vec<u8> = (0..l / 4).flat_map(|_| chunk_mask.to_le_bytes()).collect();
        let bitval: Vec<u8> = mask.iter().map(|&b| b & (next() as u8)).collect();
        let mut data = vec![0u8; rows * l];
        for w in data.chunks_mut(8) {
            let r = next().to_le_bytes();
            w.copy_from_slice(&r[..w.len()]);
        }
        for row in data.chunks_mut(l) {
            for ((b, m), v) in row.iter_mut().zip(&mask).zip(&bitval) {
                *b = (*b & !m) | v;
            }
        }
        (data, mask)
    }

    #[test]
    fn four_byte_chunks_give_the_figure7_bytes_of_before() {
        for (rows, l, s, seed) in [(100, 256, 0.5, 11), (37, 1028, 0.9, 5), (10, 4, 0.125, 7)] {
            let (want, mask) = figure7_as_before(rows, l, s, seed);
            let (got, cb) = synthetic_dataset(rows, l, 4, s, seed).unwrap();
            assert!(got == want, "{l} B at {s}");
            assert_eq!(cb.mask(), &mask[..]);
            assert!(figure7_dataset(rows, l, s, seed).unwrap().0 == want);
        }
    }

    #[test]
    fn every_chunk_size_saves_what_synthetic_savings_says() {
        for chunk in [1u32, 2, 4, 8] {
            for s in [0.125, 0.25, 0.5, 0.75, 0.9] {
                let (m, saved) = synthetic_savings(chunk, s).unwrap();
                assert!(m >= 2 && m <= 8 * chunk, "{chunk} B at {s}: m = {m}");
                assert!((saved - s).abs() <= 0.5 / f64::from(8 * chunk) + 0.025);
                let l = 512;
                let (data, cb) = synthetic_dataset(64, l, chunk, s, 3).unwrap();
                assert_eq!(cb.chunk().bytes(), chunk);
                let p = compress_packed(&cb, Rows::new(&data, l).unwrap(), &Default::default())
                    .unwrap();
                let got = 1.0 - p.payload.len() as f64 / data.len() as f64;
                assert!(
                    (got - saved).abs() < 1.0 / l as f64,
                    "{chunk} B at {s}: saved {got}, predicted {saved}"
                );
            }
        }
        // 90% of a 1- or 2-byte chunk is the nearest whole bit: 87.5%.
        assert_eq!(synthetic_savings(1, 0.9).unwrap(), (8, 0.875));
        assert_eq!(synthetic_savings(2, 0.9).unwrap(), (15, 0.875));
        assert!(synthetic_savings(3, 0.5).is_err());
        assert!(synthetic_savings(4, 1.0).is_err());
        assert!(synthetic_dataset(4, 12, 8, 0.5, 1).is_err());
    }

    #[test]
    fn a_repeated_packed_dataset_is_the_packed_layout_of_the_repeated_rows() {
        let (data, cb) = synthetic_dataset(40, 96, 2, 0.25, 9).unwrap();
        let opts = LayoutOptions::default();
        let one = compress_packed(&cb, Rows::new(&data, 96).unwrap(), &opts).unwrap();
        let three = repeat_packed(&one, 3).unwrap();
        let want = compress_packed(&cb, Rows::new(&data.repeat(3), 96).unwrap(), &opts).unwrap();
        assert_eq!(
            (three.rows, &three.flags, &three.offsets, &three.payload),
            (want.rows, &want.flags, &want.offsets, &want.payload)
        );
        let odd = compress_packed(&cb, Rows::new(&data[..96 * 5], 96).unwrap(), &opts).unwrap();
        assert!(repeat_packed(&odd, 2).is_err());
    }
}
