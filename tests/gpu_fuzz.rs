//! A seeded fuzzer for the GPU decoders (issue 38): random datasets and
//! mutated ones (flags, offsets, stored lengths, payload bits, cluster ids,
//! codebooks; truncated payloads; byte flips and truncations of whole
//! containers) through every decode path: the decoder's range and gather
//! (u32 and u64 indices, strided output) from pinned host memory
//! (zero-copy) and from device memory, the DMA range and gather, the
//! feature cache's gather, the KV store's gather, and the device API's
//! `decode_row` inside user kernels (the fused embedding-bag kernels of
//! `examples/fused-kernels`, and the outside crate's `user_row_sums` when
//! `user-kernels.ptx` is staged).
//!
//! The oracle is the CPU codec on the same (damaged) bytes, row by row:
//! every output row it decodes must come back from the GPU bit for bit;
//! every row it rejects must be zero-filled and reported through the
//! status (the right kind, the first failed output row); every index past
//! the rows likewise; and a dataset the CPU codec rejects as a whole must
//! be refused with a typed error. Outputs are poisoned first; odd cases
//! size them exactly (no slack, so a write past them is an out-of-bounds
//! write for `compute-sanitizer --tool memcheck`), even cases add poisoned
//! guard bytes that must stay untouched. Nothing on the host may panic: a
//! panic inside a case is recorded as a failure with the case's seed.
//!
//! Settings (environment):
//! - `IBP_FUZZ_CASES`: cases to run (default 200);
//! - `IBP_FUZZ_SEED`: the seed (decimal or 0x-hex; default fixed);
//! - `IBP_FUZZ_FIRST`: the first case number (to rerun one failing case:
//!   its number with `IBP_FUZZ_CASES=1`);
//! - `IBP_FUZZ_MAX_SECONDS`: stop starting cases after this long (the
//!   summary says how many ran; for runs under the sanitizer).
//!
//! The last line on stderr is the summary: cases, then for each path its
//! runs, how many decoded equal, how many reported corrupt rows as the
//! CPU did, how many ended in a typed error, and failures. Prints
//! `skipped: no CUDA device` without a GPU (a failure with
//! `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;
#[path = "../examples/fused_host/mod.rs"]
mod fused_host;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use common::{Rng, gpu_or_skip, notice};
use cust::memory::DeviceBuffer;
use cust::module::Module;
use cust::stream::{Stream, StreamFlags};
use fused_host::Kernels;
use fused_kernels::{BAD_INDEX, BagParams, CORRUPT, OK};
use ibp::cluster::{ClusterIds, compress_clustered_with_ids};
use ibp::codebook::{ChunkSize, Codebook};
use ibp::container::{GroupLayout, IbpFile};
use ibp::gpu::{
    CacheOptions, DecodeOptions, DecodeStatus, Decoder, DmaScratch, FeatureCache, Fetch, Gpu,
    GpuDataset, KvStore, KvStoreOptions, PageWrites, Residency, copy_to_host_blocking,
};
use ibp::io::{self, ParseOptions, SourceFormat};
use ibp::layout::{
    FixedStrideRef, Layout, LayoutOptions, PackedRef, compress_fixed, compress_packed,
    decompress_fixed_row, decompress_packed_row,
};
use ibp::pipeline::{Clustering, CompressOptions, compress_document};
use ibp::{ErrorKind, Rows};
use ibp_kernels::device::DatasetView;

const POISON: u8 = 0xA5;
const GUARD: usize = 128;

/// Tensor lengths the cases draw from: tiny and ragged ones, line sizes
/// and their neighbours, the real tables' (768, 1536, 5732), and lengths
/// past batch mode's 48 lines (streaming mode).
const LENGTHS: [usize; 34] = [
    1, 2, 3, 4, 5, 7, 8, 12, 16, 31, 33, 64, 100, 127, 128, 129, 255, 256, 384, 512, 768, 1000,
    1024, 1100, 1531, 1536, 2048, 4096, 4099, 5732, 6144, 6200, 8192, 9000,
];

// ---------------------------------------------------------------------------
// Settings and bookkeeping

/// An environment number, decimal or 0x-hex.
fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        }
        Err(_) => default,
    }
}

/// splitmix64: the case number and the seed to a case's own generator
/// (never 0, which xorshift cannot leave).
fn case_rng(seed: u64, case: u64) -> Rng {
    let mut z = seed ^ case.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    Rng((z ^ (z >> 31)) | 1)
}

fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.next() % n.max(1)
}

fn chance(rng: &mut Rng, one_in: u64) -> bool {
    below(rng, one_in) == 0
}

/// How one run of one path ended, when it ended as it should.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Every row the CPU decodes came back equal (bad indices, if any,
    /// reported), and no row was corrupt.
    Equal,
    /// Some rows were corrupt for the CPU, and the GPU reported and zeroed
    /// them (the rest equal).
    Corrupt,
    /// A typed error, where the CPU codec rejects the input too (or a
    /// path that cannot take it says so).
    Typed,
}

/// How a run failed.
enum Fail {
    /// The GPU disagreed with the CPU codec (the case goes on).
    Mismatch(String),
    /// A CUDA error: the context may be lost, the fuzzer stops.
    Fatal(String),
}

type Run = std::result::Result<Outcome, Fail>;

/// A CUDA error (from cust) as a fatal failure.
fn cu<T>(r: Result<T, cust::error::CudaError>, what: &str) -> Result<T, Fail> {
    r.map_err(|e| Fail::Fatal(format!("{what}: {e}")))
}

/// An ibp error from a call that must not fail here: fatal for CUDA
/// errors, a mismatch otherwise.
fn must<T>(r: ibp::Result<T>, what: &str) -> Result<T, Fail> {
    r.map_err(|e| {
        if e.kind() == ErrorKind::Cuda {
            Fail::Fatal(format!("{what}: {e}"))
        } else {
            Fail::Mismatch(format!("{what}: unexpected error: {e}"))
        }
    })
}

#[derive(Clone, Copy, Default)]
struct Counts {
    runs: u64,
    equal: u64,
    corrupt: u64,
    typed: u64,
    failed: u64,
}

// ---------------------------------------------------------------------------
// Cases: how rows are stored, and what the CPU codec makes of them

/// A case's stored rows, as the CPU codec and the uploads take them.
#[derive(Clone)]
enum Store {
    Packed {
        flags: Vec<u8>,
        offsets: Vec<u64>,
        payload: Vec<u8>,
    },
    Fixed {
        flags: Vec<u8>,
        slots: Vec<u8>,
        /// Uploaded with a length table (`with_length_table`).
        lengths: bool,
    },
    Clustered {
        books: Vec<Codebook>,
        ids: ClusterIds,
        flags: Vec<u8>,
        offsets: Vec<u64>,
        payload: Vec<u8>,
    },
}

struct Case {
    l: usize,
    n: usize,
    /// The codebook (clustered: unused; the books are in the store).
    cb: Codebook,
    store: Store,
    /// A container the case came from (uploaded with `upload_group`).
    container: Option<Vec<u8>>,
    what: String,
}

impl Case {
    fn packed_ref(&self) -> Option<PackedRef<'_>> {
        match &self.store {
            Store::Packed {
                flags,
                offsets,
                payload,
            }
            | Store::Clustered {
                flags,
                offsets,
                payload,
                ..
            } => PackedRef::new(self.l, self.n, flags, Cow::Borrowed(offsets), payload).ok(),
            Store::Fixed { .. } => None,
        }
    }

    fn fixed_ref(&self) -> Option<FixedStrideRef<'_>> {
        match &self.store {
            Store::Fixed { flags, slots, .. } => {
                FixedStrideRef::new(self.l, self.n, flags, slots).ok()
            }
            _ => None,
        }
    }

    fn clustered(&self) -> bool {
        matches!(self.store, Store::Clustered { .. })
    }

    /// Whether an upload must accept the case: what the CPU codec checks
    /// of the whole dataset before any row (packed: `validate`; clustered:
    /// also every id below `k`).
    fn valid(&self) -> bool {
        match &self.store {
            Store::Packed { .. } => self.packed_ref().is_some_and(|p| p.validate().is_ok()),
            Store::Fixed { .. } => self.fixed_ref().is_some(),
            Store::Clustered { books, ids, .. } => {
                ids.len() == self.n
                    && self.packed_ref().is_some_and(|p| p.validate().is_ok())
                    && (0..self.n).all(|i| ids.get(i).is_some_and(|c| (c as usize) < books.len()))
            }
        }
    }

    /// Every row as the CPU codec decodes it (`None`: it reports an
    /// error). Only for a valid case.
    fn cpu_rows(&self) -> Vec<Option<Vec<u8>>> {
        let mut out = vec![0u8; self.l];
        (0..self.n)
            .map(|t| {
                let r = match &self.store {
                    Store::Packed { .. } => {
                        decompress_packed_row(&self.cb, &self.packed_ref()?, t, &mut out)
                    }
                    Store::Fixed { .. } => {
                        decompress_fixed_row(&self.cb, &self.fixed_ref()?, t, &mut out)
                    }
                    Store::Clustered { books, ids, .. } => {
                        let cb = books.get(ids.get(t)? as usize)?;
                        decompress_packed_row(cb, &self.packed_ref()?, t, &mut out)
                    }
                };
                r.ok().map(|()| out.clone())
            })
            .collect()
    }

    /// The largest stored form (packed layouts).
    fn max_stored(&self) -> u64 {
        match &self.store {
            Store::Packed { offsets, .. } | Store::Clustered { offsets, .. } => offsets
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]))
                .max()
                .unwrap_or(0),
            Store::Fixed { .. } => self.l as u64,
        }
    }

    fn upload(&self, gpu: &Gpu, res: Residency) -> ibp::Result<GpuDataset> {
        if let Some(bytes) = &self.container {
            let file = IbpFile::from_bytes(bytes)?;
            let g = file
                .group(0)
                .ok_or_else(|| ibp::Error::invalid("the container has no group"))?;
            return GpuDataset::upload_group(gpu, &g, res);
        }
        let bad = || ibp::Error::invalid("the case's view does not build");
        match &self.store {
            Store::Packed { .. } => {
                GpuDataset::upload_packed(gpu, &self.cb, &self.packed_ref().ok_or_else(bad)?, res)
            }
            Store::Fixed { lengths, .. } => {
                let v = self.fixed_ref().ok_or_else(bad)?;
                let ds = GpuDataset::upload_fixed(gpu, &self.cb, &v, res)?;
                if *lengths {
                    ds.with_length_table(&self.cb, &v)
                } else {
                    Ok(ds)
                }
            }
            Store::Clustered { books, ids, .. } => GpuDataset::upload_clustered(
                gpu,
                books,
                ids,
                &self.packed_ref().ok_or_else(bad)?,
                res,
            ),
        }
    }
}

/// A random codebook for rows of `l` bytes: nothing invariant, everything,
/// about 75%, about 25%, or whole bytes here and there.
fn random_codebook(rng: &mut Rng, l: usize, chunk: ChunkSize) -> Codebook {
    let kind = below(rng, 5);
    let mask: Vec<u8> = (0..l)
        .map(|_| {
            let (a, b) = (rng.next() as u8, rng.next() as u8);
            match kind {
                0 => 0,
                1 => 0xff,
                2 => a | b,
                3 => a & b,
                _ => {
                    if a & 1 == 1 {
                        0xff
                    } else {
                        0
                    }
                }
            }
        })
        .collect();
    let bitval = mask.iter().map(|m| m & rng.next() as u8).collect();
    Codebook::new(chunk, mask, bitval).expect("a valid codebook")
}

/// A row drawn from `cb`: its invariant bits, random free bits, and now
/// and then a chunk off the book.
fn row_of(rng: &mut Rng, cb: &Codebook, out: &mut [u8]) {
    let (mask, bitval) = (cb.mask(), cb.bitval());
    for (j, b) in out.iter_mut().enumerate() {
        *b = (rng.next() as u8 & !mask[j]) | bitval[j];
    }
    if chance(rng, 3) {
        let j = below(rng, out.len() as u64) as usize;
        out[j] ^= mask[j];
    }
}

/// Rows of `l` bytes: from `books` (row `i` from `books[pick(i)]`) with
/// probability `p_match` in 1/8ths, random otherwise.
fn rows_from(
    rng: &mut Rng,
    l: usize,
    n: usize,
    books: &[Codebook],
    ids: &[u32],
    p_match: u64,
) -> Vec<u8> {
    let mut data = vec![0u8; n * l];
    for (i, row) in data.chunks_mut(l).enumerate() {
        if below(rng, 8) < p_match {
            row_of(rng, &books[ids[i] as usize], row);
        } else {
            row.iter_mut().for_each(|b| *b = rng.next() as u8);
        }
    }
    data
}

fn chunk_of(rng: &mut Rng) -> ChunkSize {
    ChunkSize::ALL[below(rng, 4) as usize]
}

/// A valid case: random length, rows, codebook (sometimes fitted), layout.
fn generate(rng: &mut Rng) -> Case {
    let l = LENGTHS[below(rng, LENGTHS.len() as u64) as usize];
    let n = 1 + below(rng, (400_000 / l as u64).clamp(1, 300)) as usize;
    let chunk = chunk_of(rng);
    let p_match = [0, 4, 7, 8][below(rng, 4) as usize];
    let layout = below(rng, 10);
    if layout >= 8 {
        // Clustered: k books of one chunk size.
        let k = 1 + below(rng, 5) as usize;
        let books: Vec<Codebook> = (0..k).map(|_| random_codebook(rng, l, chunk)).collect();
        let ids: Vec<u32> = (0..n).map(|_| below(rng, k as u64) as u32).collect();
        let data = rows_from(rng, l, n, &books, &ids, p_match);
        let c = compress_clustered_with_ids(&books, &ids, Rows::new(&data, l).unwrap())
            .expect("clustered compression");
        return Case {
            l,
            n,
            cb: books[0].clone(),
            what: format!("L={l} N={n} C={} clustered k={k}", chunk.bytes()),
            store: Store::Clustered {
                books,
                ids: c.ids,
                flags: c.packed.flags,
                offsets: c.packed.offsets,
                payload: c.packed.payload,
            },
            container: None,
        };
    }
    let book = random_codebook(rng, l, chunk);
    let data = rows_from(rng, l, n, std::slice::from_ref(&book), &vec![0; n], p_match);
    let rows = Rows::new(&data, l).unwrap();
    let (cb, fitted) = if chance(rng, 4) {
        let opts = ibp::fit::FitOptions::default().with_chunk(ibp::fit::ChunkChoice::Fixed(chunk));
        (ibp::fit::fit(rows, &opts).expect("fit").codebook, " fitted")
    } else {
        (book, "")
    };
    let name = format!("L={l} N={n} C={}{fitted}", chunk.bytes());
    if layout < 5 {
        let p = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
        Case {
            l,
            n,
            cb,
            what: format!("{name} packed"),
            store: Store::Packed {
                flags: p.flags,
                offsets: p.offsets,
                payload: p.payload,
            },
            container: None,
        }
    } else {
        let f = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
        let lengths = layout >= 7;
        Case {
            l,
            n,
            cb,
            what: format!("{name} fixed{}", if lengths { "+lengths" } else { "" }),
            store: Store::Fixed {
                flags: f.flags,
                slots: f.slots,
                lengths,
            },
            container: None,
        }
    }
}

/// Why a container gave no case.
enum NoCase {
    /// It did not open, or its group did not read (`true`: it was damaged,
    /// so a typed error is what should happen).
    Refused(bool, String),
    /// Its group is stored raw: nothing to decode.
    Raw(String),
}

/// A case from a container: compressible rows compressed by
/// `compress_document` (packed, fixed-stride or clustered), maybe damaged
/// (bytes flipped, or cut short).
fn from_container(rng: &mut Rng) -> Result<Case, NoCase> {
    let l = [64usize, 100, 256, 384, 768, 1536][below(rng, 6) as usize];
    let n = 64 + below(rng, 400) as usize;
    let chunk = chunk_of(rng);
    let k = 1 + below(rng, 3) as usize;
    let books: Vec<Codebook> = (0..k).map(|_| random_codebook(rng, l, chunk)).collect();
    let ids: Vec<u32> = (0..n).map(|_| below(rng, k as u64) as u32).collect();
    let data = rows_from(rng, l, n, &books, &ids, 7);
    let doc = io::parse(
        &data,
        SourceFormat::Raw,
        &ParseOptions::default().with_raw(io::DType::U8, Some(vec![n as u64, l as u64])),
    )
    .expect("a raw document");
    let form = below(rng, 3);
    let opts = match form {
        0 => CompressOptions::default().with_layout(GroupLayout::Coded(Layout::Packed)),
        1 => CompressOptions::default().with_layout(GroupLayout::Coded(Layout::FixedStride)),
        _ => CompressOptions::default().with_clusters(Clustering::Fixed(k.max(2))),
    };
    let (mut bytes, _) = compress_document(&doc, &opts, Vec::new())
        .map_err(|e| NoCase::Refused(false, format!("compress_document: {e}")))?;
    let mut what = format!("container L={l} N={n} form {form}");
    let damaged = chance(rng, 2);
    if damaged {
        if chance(rng, 3) {
            let cut = 1 + below(rng, bytes.len() as u64 - 1) as usize;
            bytes.truncate(cut);
            what += &format!(", cut to {cut} bytes");
        } else {
            for _ in 0..1 + below(rng, 3) {
                let at = below(rng, bytes.len() as u64) as usize;
                let bit = below(rng, 8);
                bytes[at] ^= 1 << bit;
                what += &format!(", bit {bit} of byte {at} flipped");
            }
        }
    }
    let refused = |m: String| NoCase::Refused(damaged, format!("{what}: {m}"));
    let file = IbpFile::from_bytes(&bytes).map_err(|e| refused(e.to_string()))?;
    let g = file.group(0).ok_or_else(|| refused("no group".into()))?;
    let (l, n) = (g.row_bytes() as usize, g.rows() as usize);
    let store = if let Some((books, ids)) = g.clusters() {
        let p = g
            .packed()
            .ok_or_else(|| refused("clustered, not packed".into()))?;
        Store::Clustered {
            books: books.to_vec(),
            ids: ids.clone(),
            flags: p.flags().to_vec(),
            offsets: p.offsets().to_vec(),
            payload: p.payload().to_vec(),
        }
    } else if let Some(p) = g.packed() {
        Store::Packed {
            flags: p.flags().to_vec(),
            offsets: p.offsets().to_vec(),
            payload: p.payload().to_vec(),
        }
    } else if let Some(f) = g.fixed() {
        Store::Fixed {
            flags: f.flags().to_vec(),
            slots: f.slots().to_vec(),
            lengths: false,
        }
    } else {
        return Err(NoCase::Raw(format!("{what}: stored raw")));
    };
    let cb = match &store {
        Store::Clustered { books, .. } => books[0].clone(),
        _ => g
            .codebook()
            .ok_or_else(|| refused("no codebook".into()))?
            .clone(),
    };
    drop(file);
    Ok(Case {
        l,
        n,
        cb,
        store,
        container: Some(bytes),
        what,
    })
}

/// Rows of the store whose flag says encoded.
fn encoded_rows(flags: &[u8], n: usize) -> Vec<usize> {
    (0..n)
        .filter(|&i| flags[i / 8] >> (i % 8) & 1 == 1)
        .collect()
}

/// A codebook like `cb` with some mask and value bits changed (same
/// length; same chunk size unless `rechunk`).
fn changed_codebook(rng: &mut Rng, cb: &Codebook, rechunk: bool) -> Codebook {
    let mut mask = cb.mask().to_vec();
    for _ in 0..1 + below(rng, 8) {
        let j = below(rng, mask.len() as u64) as usize;
        mask[j] ^= 1 << below(rng, 8);
    }
    let bitval = mask
        .iter()
        .zip(cb.bitval())
        .map(|(m, b)| (b ^ rng.next() as u8 & rng.next() as u8) & m)
        .collect();
    let chunk = if rechunk { chunk_of(rng) } else { cb.chunk() };
    Codebook::new(chunk, mask, bitval).expect("a valid codebook")
}

/// Damage the case one to three ways; each is named in `what`.
fn mutate(rng: &mut Rng, c: &mut Case) {
    for _ in 0..1 + below(rng, 3) {
        let (l, n) = (c.l, c.n);
        let k_bytes = l.div_ceil(c.cb.chunk().bytes() as usize).div_ceil(8);
        let what = match &mut c.store {
            Store::Packed {
                flags,
                offsets,
                payload,
            }
            | Store::Clustered {
                flags,
                offsets,
                payload,
                ..
            } => {
                let enc = encoded_rows(flags, n);
                // Damage that leaves the structure valid (bits of stored
                // forms, a moved boundary: corrupt rows for the decoders)
                // twice as often as damage the upload must refuse.
                let kind = below(rng, 12);
                match if kind >= 8 { kind - 8 } else { kind } {
                    0 if !payload.is_empty() => {
                        let at = below(rng, payload.len() as u64) as usize;
                        let bit = below(rng, 8);
                        payload[at] ^= 1 << bit;
                        format!("payload byte {at} bit {bit} flipped")
                    }
                    1 if !enc.is_empty() => {
                        // A participation bit: the length follows from them.
                        let t = enc[below(rng, enc.len() as u64) as usize];
                        let at = offsets[t] as usize + below(rng, k_bytes as u64) as usize;
                        let bit = below(rng, 8);
                        if at < payload.len() {
                            payload[at] ^= 1 << bit;
                        }
                        format!("participation byte {at} bit {bit} of tensor {t} flipped")
                    }
                    2 if !enc.is_empty() => {
                        // The top (padding) bit of a stored form's last byte.
                        let t = enc[below(rng, enc.len() as u64) as usize];
                        let end = offsets[t + 1] as usize;
                        if end > offsets[t] as usize && end <= payload.len() {
                            payload[end - 1] ^= 0x80;
                        }
                        format!("last byte of tensor {t} top bit flipped")
                    }
                    3 if n >= 2 => {
                        // Move the boundary between two tensors.
                        let t = 1 + below(rng, n as u64 - 1) as usize;
                        let d = 1 + below(rng, 8);
                        let o = &mut offsets[t];
                        *o = if chance(rng, 2) {
                            o.saturating_sub(d)
                        } else {
                            *o + d
                        };
                        format!("offset {t} moved by {d}")
                    }
                    4 => {
                        let cut = 1 + below(rng, 64.min(payload.len() as u64 + 1)) as usize;
                        payload.truncate(payload.len().saturating_sub(cut));
                        format!("payload cut by {cut} bytes")
                    }
                    5 => {
                        let t = below(rng, n as u64) as usize;
                        flags[t / 8] ^= 1 << (t % 8);
                        format!("flag of tensor {t} flipped")
                    }
                    6 if !payload.is_empty() => {
                        let at = below(rng, payload.len() as u64) as usize;
                        let len = (1 + below(rng, 16) as usize).min(payload.len() - at);
                        payload[at..at + len]
                            .iter_mut()
                            .for_each(|b| *b = rng.next() as u8);
                        format!("payload bytes {at}..{} overwritten", at + len)
                    }
                    7 => {
                        let last = offsets.len() - 1;
                        let d = 1 + below(rng, 4);
                        offsets[last] += d;
                        format!("last offset raised by {d}")
                    }
                    _ => "nothing changed (the mutation did not apply)".to_string(),
                }
            }
            Store::Fixed { flags, slots, .. } => {
                let enc = encoded_rows(flags, n);
                match below(rng, 6) {
                    0 => {
                        let at = below(rng, slots.len() as u64) as usize;
                        let bit = below(rng, 8);
                        slots[at] ^= 1 << bit;
                        format!("slot byte {at} bit {bit} flipped")
                    }
                    1 if !enc.is_empty() => {
                        let t = enc[below(rng, enc.len() as u64) as usize];
                        let at = t * l + below(rng, k_bytes.min(l) as u64) as usize;
                        let bit = below(rng, 8);
                        slots[at] ^= 1 << bit;
                        format!("participation byte {at} bit {bit} of tensor {t} flipped")
                    }
                    2 => {
                        let t = below(rng, n as u64) as usize;
                        flags[t / 8] ^= 1 << (t % 8);
                        format!("flag of tensor {t} flipped")
                    }
                    3 => {
                        // A slot's tail zeroed: a stored form cut short.
                        let t = below(rng, n as u64) as usize;
                        let from = below(rng, l as u64) as usize;
                        slots[t * l + from..(t + 1) * l].fill(0);
                        format!("slot {t} zeroed from byte {from}")
                    }
                    4 => {
                        let at = below(rng, slots.len() as u64) as usize;
                        let len = (1 + below(rng, 16) as usize).min(slots.len() - at);
                        slots[at..at + len]
                            .iter_mut()
                            .for_each(|b| *b = rng.next() as u8);
                        format!("slot bytes {at}..{} overwritten", at + len)
                    }
                    _ => "nothing changed (the mutation did not apply)".to_string(),
                }
            }
        };
        // Codebooks and cluster ids, now and then.
        let what = match (&mut c.store, below(rng, 8)) {
            (Store::Clustered { ids, books, .. }, 0) if ids.bits() > 0 => {
                let i = below(rng, ids.len() as u64) as usize;
                let b = below(rng, ids.bits() as u64) as usize;
                let p = i * ids.bits() as usize + b;
                let mut bytes = ids.as_bytes().to_vec();
                bytes[p / 8] ^= 1 << (p % 8);
                *ids = ClusterIds::from_bytes(ids.bits(), ids.len(), bytes)
                    .expect("an id bit inside the ids");
                format!(
                    "{what}; cluster id {i} now {:?} of k={}",
                    ids.get(i),
                    books.len()
                )
            }
            (Store::Clustered { books, .. }, 1) => {
                let j = below(rng, books.len() as u64) as usize;
                books[j] = changed_codebook(rng, &books[j], false);
                format!("{what}; codebook {j} changed")
            }
            (Store::Packed { .. } | Store::Fixed { .. }, 1) => {
                let rechunk = chance(rng, 2);
                c.cb = changed_codebook(rng, &c.cb, rechunk);
                format!(
                    "{what}; codebook changed (now {}-byte chunks)",
                    c.cb.chunk().bytes()
                )
            }
            _ => what,
        };
        c.what += &format!("; {what}");
    }
}

// ---------------------------------------------------------------------------
// The oracle

/// What the CPU codec makes of one output row.
#[derive(Clone, Copy)]
enum Want<'a> {
    Row(&'a [u8]),
    Corrupt,
    BadIndex,
}

fn wants<'a>(rows: &'a [Option<Vec<u8>>], index: &[u64]) -> Vec<Want<'a>> {
    index
        .iter()
        .map(
            |&t| match usize::try_from(t).ok().and_then(|t| rows.get(t)) {
                None => Want::BadIndex,
                Some(Some(r)) => Want::Row(r),
                Some(None) => Want::Corrupt,
            },
        )
        .collect()
}

/// Judge an output buffer (`want.len()` rows of `l` bytes, `stride` apart,
/// then guard bytes if any) and the status's verdict against the CPU.
fn judge(host: &[u8], l: usize, stride: usize, want: &[Want], verdict: ibp::Result<()>) -> Run {
    let count = want.len();
    for (i, w) in want.iter().enumerate() {
        let got = &host[i * stride..i * stride + l];
        match w {
            Want::Row(r) => {
                if got != *r {
                    let j = got.iter().zip(r.iter()).position(|(a, b)| a != b).unwrap();
                    return Err(Fail::Mismatch(format!(
                        "output row {i} differs from the CPU's at byte {j} ({:#04x}, CPU {:#04x}{})",
                        got[j],
                        r[j],
                        if got.iter().all(|&b| b == POISON) {
                            ", the row was never written"
                        } else if got.iter().all(|&b| b == 0) {
                            ", the row was zeroed"
                        } else {
                            ""
                        }
                    )));
                }
            }
            Want::Corrupt | Want::BadIndex => {
                if got.iter().any(|&b| b != 0) {
                    return Err(Fail::Mismatch(format!(
                        "output row {i} ({}) was not zero-filled",
                        if matches!(w, Want::Corrupt) {
                            "corrupt for the CPU"
                        } else {
                            "a bad index"
                        }
                    )));
                }
            }
        }
        let gap_end = if i + 1 < count {
            (i + 1) * stride
        } else {
            host.len()
        };
        if host[i * stride + l..gap_end].iter().any(|&b| b != POISON) {
            return Err(Fail::Mismatch(format!(
                "bytes after output row {i} were written (between rows or past the last)"
            )));
        }
    }
    let first = want
        .iter()
        .position(|w| !matches!(w, Want::Row(_)))
        .map(|i| i as u64);
    let bad = want.iter().any(|w| matches!(w, Want::BadIndex));
    let corrupt = want.iter().any(|w| matches!(w, Want::Corrupt));
    match (first, verdict) {
        (None, Ok(())) => Ok(Outcome::Equal),
        (None, Err(e)) => Err(if e.kind() == ErrorKind::Cuda {
            Fail::Fatal(format!("status: {e}"))
        } else {
            Fail::Mismatch(format!(
                "the status reports an error where the CPU decodes every row: {e}"
            ))
        }),
        (Some(r), Ok(())) => Err(Fail::Mismatch(format!(
            "the status reports nothing; output row {r} is {} for the CPU",
            if bad { "a bad index" } else { "corrupt" }
        ))),
        (Some(r), Err(e)) => {
            let kind = if bad {
                ErrorKind::InvalidArgument
            } else {
                ErrorKind::Corrupt
            };
            if e.kind() == ErrorKind::Cuda {
                return Err(Fail::Fatal(format!("status: {e}")));
            }
            if e.kind() != kind || !e.message().contains(&format!("output row {r} (")) {
                return Err(Fail::Mismatch(format!(
                    "the status says \"{e}\" ({:?}); the CPU expects {kind:?} first at output row {r}",
                    e.kind()
                )));
            }
            Ok(if corrupt {
                Outcome::Corrupt
            } else {
                Outcome::Equal
            })
        }
    }
}

// ---------------------------------------------------------------------------
// The runner

struct Fuzz<'g> {
    gpu: &'g Gpu,
    stream: Stream,
    bags: Kernels,
    /// The outside crate's kernels (`user_row_sums`), when staged.
    user: Option<Module>,
    stats: BTreeMap<&'static str, Counts>,
    failures: Vec<String>,
    /// The case being run (for failure lines).
    tag: String,
    /// This case's outputs are sized exactly (else guard bytes follow).
    exact: bool,
}

impl Fuzz<'_> {
    /// Count a run of `path`; a mismatch is recorded and the case goes on,
    /// a fatal error stops the fuzzer.
    fn record(&mut self, path: &'static str, r: Run) -> Result<(), Fail> {
        let c = self.stats.entry(path).or_default();
        c.runs += 1;
        match r {
            Ok(Outcome::Equal) => c.equal += 1,
            Ok(Outcome::Corrupt) => c.corrupt += 1,
            Ok(Outcome::Typed) => c.typed += 1,
            Err(Fail::Mismatch(m)) => {
                c.failed += 1;
                self.failures.push(format!("{path}: {}: {m}", self.tag));
            }
            Err(Fail::Fatal(m)) => {
                c.failed += 1;
                self.failures
                    .push(format!("{path}: {}: FATAL: {m}", self.tag));
                return Err(Fail::Fatal(m));
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), Fail> {
        cu(self.stream.synchronize(), "synchronising the stream")
    }

    /// Wait for everything the context has enqueued, the legacy stream's
    /// copies included, before a launch.
    ///
    /// Q: why, when every launch here is followed by a synchronisation?
    /// A: buffers made by `DeviceBuffer::from_slice` (outputs, indices,
    /// statuses, the uploads' tables) are filled by a synchronous copy
    /// from pageable memory, which may return before its DMA lands, on
    /// the legacy stream, which the non-blocking streams do not wait for.
    /// A fuzzer must not report the harness's own race.
    fn settle(&self) -> Result<(), Fail> {
        cu(
            cust::context::CurrentContext::synchronize(),
            "synchronising the context",
        )
    }

    /// A poisoned output of `len` bytes (plus guard bytes unless exact).
    fn output(&self, len: usize) -> Result<DeviceBuffer<u8>, Fail> {
        let extra = if self.exact { 0 } else { GUARD };
        cu(
            DeviceBuffer::from_slice(&vec![POISON; len + extra]),
            "allocating an output",
        )
    }

    fn case(&mut self, rng: &mut Rng) -> Result<(), Fail> {
        // One case in ten comes from a container, one in five also runs a
        // KV store.
        if chance(rng, 5) {
            let r = self.kv_case(rng);
            self.record("kv-gather", r)?;
        }
        let mut case = if chance(rng, 10) {
            match from_container(rng) {
                Ok(c) => c,
                // A damaged container refused at open: typed, as it should
                // be. An intact one always opens.
                Err(NoCase::Refused(damaged, what)) => {
                    self.tag = format!("{} {what}", self.tag);
                    let r = if damaged {
                        Ok(Outcome::Typed)
                    } else {
                        Err(Fail::Mismatch("an intact container did not open".into()))
                    };
                    return self.record("container-open", r);
                }
                Err(NoCase::Raw(what)) => {
                    self.tag = format!("{} {what}", self.tag);
                    return self.record("container-raw", Ok(Outcome::Typed));
                }
            }
        } else {
            generate(rng)
        };
        if case.container.is_some() {
            self.record("container-open", Ok(Outcome::Equal))?;
        } else if below(rng, 5) < 3 {
            mutate(rng, &mut case);
        }
        self.tag = format!("{} {}", self.tag, case.what);
        let valid = case.valid();
        let rows = if valid { case.cpu_rows() } else { Vec::new() };
        let opts = random_options(rng);
        for res in [Residency::Pinned, Residency::Device] {
            let path = match res {
                Residency::Pinned => "upload-pinned",
                Residency::Device => "upload-device",
            };
            let ds = match (case.upload(self.gpu, res), valid) {
                (Ok(ds), true) => {
                    self.record(path, Ok(Outcome::Equal))?;
                    ds
                }
                (Err(e), _) if e.kind() == ErrorKind::Cuda => {
                    return self.record(path, Err(Fail::Fatal(e.to_string())));
                }
                (Err(_), false) => {
                    self.record(path, Ok(Outcome::Typed))?;
                    continue;
                }
                (Ok(_), false) => {
                    self.record(
                        path,
                        Err(Fail::Mismatch(
                            "the upload accepted a dataset the CPU codec rejects".into(),
                        )),
                    )?;
                    continue;
                }
                (Err(e), true) => {
                    self.record(
                        path,
                        Err(Fail::Mismatch(format!(
                            "the upload refused a dataset the CPU codec accepts: {e}"
                        ))),
                    )?;
                    continue;
                }
            };
            self.decoder_paths(rng, &case, &ds, res, &rows, &opts)?;
            if !case.clustered() {
                self.device_api(rng, &case, &ds, res, &rows)?;
            }
            if res == Residency::Pinned
                && !case.clustered()
                && !matches!(case.store, Store::Fixed { lengths: false, .. })
            {
                let r = self.cache(rng, &case, &ds, &rows);
                self.record("cache-gather", r)?;
            }
        }
        Ok(())
    }

    /// Range and gather through a `Decoder`, and on pinned packed data the
    /// DMA range and gather.
    fn decoder_paths(
        &mut self,
        rng: &mut Rng,
        case: &Case,
        ds: &GpuDataset,
        res: Residency,
        rows: &[Option<Vec<u8>>],
        opts: &DecodeOptions,
    ) -> Result<(), Fail> {
        let (l, n) = (case.l, case.n as u64);
        let dec = match Decoder::new(self.gpu, ds, opts) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::Cuda => {
                return self.record("decoder-new", Err(Fail::Fatal(e.to_string())));
            }
            Err(e) => {
                // A geometry this GPU cannot take: typed, and named.
                notice(&format!("gpu_fuzz: {}: Decoder::new: {e}", self.tag));
                return self.record("decoder-new", Ok(Outcome::Typed));
            }
        };
        let pinned = res == Residency::Pinned;
        let (range_path, gather_path) = if pinned {
            ("zc-range", "zc-gather")
        } else {
            ("dev-range", "dev-gather")
        };
        // A range.
        let first = if chance(rng, 2) { 0 } else { below(rng, n) };
        let count = 1 + below(rng, n - first);
        let r = (|| {
            let mut out = self.output(count as usize * l)?;
            let mut status = must(DecodeStatus::new(), "a status")?;
            self.settle()?;
            must(
                dec.range(self.gpu, first, count, &mut out, &status, &self.stream),
                "range",
            )?;
            self.sync()?;
            let host = must(copy_to_host_blocking(&out), "copying back")?;
            let index: Vec<u64> = (first..first + count).collect();
            judge(&host, l, l, &wants(rows, &index), status.check_blocking())
        })();
        self.record(range_path, r)?;
        // A gather with repeats and some bad indices, u32 or u64, now and
        // then strided.
        let wide = chance(rng, 2);
        let index = random_index(rng, n, wide);
        let stride = if chance(rng, 4) {
            l + 1 + below(rng, 40) as usize
        } else {
            l
        };
        let r = (|| {
            let len = (index.len() - 1) * stride + l;
            let mut out = self.output(len)?;
            let mut status = must(DecodeStatus::new(), "a status")?;
            if wide {
                let d = cu(DeviceBuffer::from_slice(&index), "uploading the index")?;
                self.settle()?;
                must(
                    dec.gather_strided(self.gpu, &d, &mut out, stride, &status, &self.stream),
                    "gather",
                )?;
                self.sync()?;
            } else {
                let narrow: Vec<u32> = index.iter().map(|&t| t as u32).collect();
                let d = cu(DeviceBuffer::from_slice(&narrow), "uploading the index")?;
                self.settle()?;
                must(
                    dec.gather_strided(self.gpu, &d, &mut out, stride, &status, &self.stream),
                    "gather",
                )?;
                self.sync()?;
            }
            let host = must(copy_to_host_blocking(&out), "copying back")?;
            judge(
                &host,
                l,
                stride,
                &wants(rows, &index),
                status.check_blocking(),
            )
        })();
        self.record(gather_path, r)?;
        if !pinned || case.packed_ref().is_none() {
            return Ok(());
        }
        // The DMA paths: pieces large enough for every stored form (a
        // smaller piece is refused up front; gpu_decode tests that).
        let max = case.max_stored() as usize;
        let piece = max + 1024 + below(rng, 4 * max as u64 + 4096) as usize;
        let mut scratch = must(DmaScratch::new(piece), "DMA scratch")?;
        let r = (|| {
            let mut out = self.output(count as usize * l)?;
            let mut status = must(DecodeStatus::new(), "a status")?;
            self.settle()?;
            must(
                dec.range_dma(
                    self.gpu,
                    first,
                    count,
                    &mut out,
                    &status,
                    &mut scratch,
                    &self.stream,
                ),
                "range_dma",
            )?;
            self.sync()?;
            let host = must(copy_to_host_blocking(&out), "copying back")?;
            let index: Vec<u64> = (first..first + count).collect();
            judge(&host, l, l, &wants(rows, &index), status.check_blocking())
        })();
        self.record("dma-range", r)?;
        let r = (|| {
            let mut out = self.output(index.len() * l)?;
            let mut status = must(DecodeStatus::new(), "a status")?;
            self.settle()?;
            if wide {
                must(
                    dec.gather_dma_blocking(
                        self.gpu,
                        &index,
                        &mut out,
                        &status,
                        &mut scratch,
                        &self.stream,
                    ),
                    "gather_dma_blocking",
                )?;
            } else {
                let narrow: Vec<u32> = index.iter().map(|&t| t as u32).collect();
                must(
                    dec.gather_dma_blocking(
                        self.gpu,
                        &narrow,
                        &mut out,
                        &status,
                        &mut scratch,
                        &self.stream,
                    ),
                    "gather_dma_blocking",
                )?;
            }
            self.sync()?;
            let host = must(copy_to_host_blocking(&out), "copying back")?;
            judge(&host, l, l, &wants(rows, &index), status.check_blocking())
        })();
        self.record("dma-gather", r)
    }

    /// The feature cache over a pinned dataset: a random hot set and
    /// budget (at least the largest row, so the constructor accepts it),
    /// then a gather with bad ids.
    fn cache(
        &mut self,
        rng: &mut Rng,
        case: &Case,
        ds: &GpuDataset,
        rows: &[Option<Vec<u8>>],
    ) -> Run {
        let (l, n) = (case.l, case.n as u64);
        let hot: Vec<u64> = (0..below(rng, n + 1)).map(|_| below(rng, n)).collect();
        let total: u64 = match &case.store {
            Store::Packed { payload, .. } => payload.len() as u64,
            _ => n * l as u64,
        };
        let budget = case.max_stored() + below(rng, total + 1);
        let cache = must(
            FeatureCache::new(&[self.gpu], &[ds], &hot, &CacheOptions::new(budget)),
            "FeatureCache::new",
        )?;
        let wide = chance(rng, 2);
        let index = random_index(rng, n, wide);
        let mut out = self.output(index.len() * l)?;
        let mut status = must(DecodeStatus::new(), "a status")?;
        if wide {
            let d = cu(DeviceBuffer::from_slice(&index), "uploading ids")?;
            self.settle()?;
            must(
                cache.gather(self.gpu, ds, &d, &mut out, &status, &self.stream),
                "cache gather",
            )?;
            self.sync()?;
        } else {
            let narrow: Vec<u32> = index.iter().map(|&t| t as u32).collect();
            let d = cu(DeviceBuffer::from_slice(&narrow), "uploading ids")?;
            self.settle()?;
            must(
                cache.gather(self.gpu, ds, &d, &mut out, &status, &self.stream),
                "cache gather",
            )?;
            self.sync()?;
        }
        let host = must(copy_to_host_blocking(&out), "copying back")?;
        judge(&host, l, l, &wants(rows, &index), status.check_blocking())
    }

    /// The device API inside user kernels: one-row bags through the fused
    /// bag kernels (rows of f32 or bf16), and `user_row_sums`.
    fn device_api(
        &mut self,
        rng: &mut Rng,
        case: &Case,
        ds: &GpuDataset,
        res: Residency,
        rows: &[Option<Vec<u8>>],
    ) -> Result<(), Fail> {
        let view = must(ds.device_view(), "device_view")?;
        let l = case.l;
        // Rows as bf16 (up to 1024 bytes), f32 in registers (up to 1536
        // bytes) or f32 in shared memory (any length).
        let kernel = if l.is_multiple_of(2) && l <= 1024 && (!l.is_multiple_of(4) || chance(rng, 3))
        {
            Some(("bag_fused_bf16_s2", true, false))
        } else if l.is_multiple_of(4) && l <= 1536 && chance(rng, 2) {
            Some(("bag_fused_f32_s3", false, false))
        } else if l.is_multiple_of(4) {
            Some(("bag_fused_f32_smem", false, true))
        } else {
            None
        };
        if let Some((name, bf16, smem)) = kernel {
            let path = if res == Residency::Pinned {
                "api-bag-pinned"
            } else {
                "api-bag-device"
            };
            let r = self.bags(rng, view, name, bf16, smem, case.n as u64, rows);
            self.record(path, r)?;
        }
        if self.user.is_some() {
            let r = self.user_row_sums(view, case, rows);
            self.record("api-user-rows", r)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn bags(
        &self,
        rng: &mut Rng,
        view: DatasetView,
        name: &str,
        bf16: bool,
        smem: bool,
        n: u64,
        rows: &[Option<Vec<u8>>],
    ) -> Run {
        let l = view.row_bytes as u32;
        let dim = l / if bf16 { 2 } else { 4 };
        // One row a bag: bag b sums row ids[b] alone (bad ids included).
        let ids: Vec<u32> = random_index(rng, n, false)
            .iter()
            .map(|&t| t as u32)
            .collect();
        let bags = ids.len();
        let starts: Vec<u32> = (0..=bags as u32).collect();
        let d_ids = cu(DeviceBuffer::from_slice(&ids), "ids")?;
        let d_starts = cu(DeviceBuffer::from_slice(&starts), "bag starts")?;
        let out = cu(
            DeviceBuffer::from_slice(&vec![f32::from_bits(0xA5A5_A5A5); bags * dim as usize]),
            "sums",
        )?;
        let status = cu(
            DeviceBuffer::from_slice(&vec![0xA5A5_A5A5u32; bags]),
            "bag status",
        )?;
        let acc = if smem {
            (4 * dim).next_multiple_of(16)
        } else {
            0
        };
        let ws = view.workspace_bytes() + acc;
        let p = BagParams {
            view,
            plain: 0,
            ids: d_ids.as_device_ptr().as_raw(),
            bag_starts: d_starts.as_device_ptr().as_raw(),
            out: out.as_device_ptr().as_raw(),
            status: status.as_device_ptr().as_raw(),
            bags: bags as u32,
            dim,
            book_smem: view.book_bytes,
            ws_bytes: ws,
        };
        let block = match self
            .bags
            .block_for(name, view.book_bytes.next_multiple_of(16), ws)
        {
            Ok(b) => b,
            // The book and a workspace do not fit a block: the example's
            // limit, not the decoder's.
            Err(_) => return Ok(Outcome::Typed),
        };
        self.settle()?;
        // SAFETY: BagParams for a bag kernel; the view is a live dataset's,
        // ids and starts hold `bags` and `bags + 1` u32, out `bags × dim`
        // f32, status `bags` u32, all live until the synchronisation below;
        // the block gives the book and `ws` bytes a warp of shared memory
        // (`smem` kernels: the accumulator is part of `ws`).
        let launched = unsafe { self.bags.launch_block(name, block, &self.stream, p) };
        must(launched, "launching a bag kernel")?;
        self.sync()?;
        let sums = must(copy_to_host_blocking(&out), "copying sums")?;
        let st = must(copy_to_host_blocking(&status), "copying bag status")?;
        let mut corrupt = false;
        for (b, &t) in ids.iter().enumerate() {
            let want = match rows.get(t as usize) {
                None => BAD_INDEX,
                Some(None) => CORRUPT,
                Some(Some(_)) => OK,
            };
            if st[b] != want {
                return Err(Fail::Mismatch(format!(
                    "{name}: bag {b} (row {t}) has status {:#x}, the CPU says {want}",
                    st[b]
                )));
            }
            corrupt |= want == CORRUPT;
            if let Some(Some(row)) = rows.get(t as usize) {
                for e in 0..dim as usize {
                    let x = if bf16 {
                        f32::from_bits(
                            (u16::from_le_bytes([row[2 * e], row[2 * e + 1]]) as u32) << 16,
                        )
                    } else {
                        f32::from_le_bytes(row[4 * e..4 * e + 4].try_into().unwrap())
                    };
                    let cpu = 0.0f32 + x;
                    let gpu = sums[b * dim as usize + e];
                    if !same_sum(gpu, cpu) {
                        return Err(Fail::Mismatch(format!(
                            "{name}: bag {b} (row {t}) element {e}: {:#010x}, the CPU's {:#010x}",
                            gpu.to_bits(),
                            cpu.to_bits()
                        )));
                    }
                }
            }
        }
        Ok(if corrupt {
            Outcome::Corrupt
        } else {
            Outcome::Equal
        })
    }

    /// `user_row_sums`: one warp a row decodes it into the sum of its
    /// bytes, written only when the row decodes (`u32::MAX` stays for a
    /// corrupt one).
    fn user_row_sums(&self, mut view: DatasetView, case: &Case, rows: &[Option<Vec<u8>>]) -> Run {
        let module = self.user.as_ref().expect("the user module");
        let n = case.n;
        let shared = 8 * view.workspace_bytes();
        if shared > 48 * 1024 {
            // The test launches without the opt-in above 48 KiB.
            return Ok(Outcome::Typed);
        }
        let out = cu(DeviceBuffer::from_slice(&vec![u32::MAX; n]), "row sums")?;
        let mut o = out.as_device_ptr().as_raw();
        let f = cu(module.get_function("user_row_sums"), "user_row_sums")?;
        self.settle()?;
        let args = [
            &mut view as *mut _ as *mut c_void,
            &mut o as *mut u64 as *mut c_void,
        ];
        // SAFETY: user_row_sums takes (DatasetView, *mut u32): a live
        // dataset's view and `n` u32 (warps past the rows get BadIndex and
        // write nothing); eight warps a block, each with its workspace.
        let launched = unsafe {
            self.stream
                .launch(&f, n.div_ceil(8) as u32, 256, shared, &args)
        };
        cu(launched, "launching user_row_sums")?;
        self.sync()?;
        let got = must(copy_to_host_blocking(&out), "copying row sums")?;
        let mut corrupt = false;
        for (t, row) in rows.iter().enumerate() {
            let want = row
                .as_ref()
                .map_or(u32::MAX, |r| r.iter().map(|&b| b as u32).sum());
            corrupt |= row.is_none();
            if got[t] != want {
                return Err(Fail::Mismatch(format!(
                    "user_row_sums: row {t}: {:#x}, the CPU's {want:#x}",
                    got[t]
                )));
            }
        }
        Ok(if corrupt {
            Outcome::Corrupt
        } else {
            Outcome::Equal
        })
    }

    /// A KV store: rows of a random width appended in steps of random size
    /// (pages by the kernel or by DMA, some rows off the fitted codebook),
    /// maybe a refit, past the page budget now and then; every segment
    /// gathered with bad ids against the rows appended, and the pages
    /// against the CPU's fixed-stride compression.
    fn kv_case(&mut self, rng: &mut Rng) -> Run {
        let l = 4 * (1 + below(rng, 400) as usize);
        let chunk = chunk_of(rng);
        let book = random_codebook(rng, l, chunk);
        let p_match = [4, 7, 8][below(rng, 3) as usize];
        let make_rows = |rng: &mut Rng, rows: usize| {
            rows_from(
                rng,
                l,
                rows,
                std::slice::from_ref(&book),
                &vec![0; rows],
                p_match,
            )
        };
        let prefill = 1 + below(rng, 40) as usize;
        let steps: Vec<usize> = (0..1 + below(rng, 5))
            .map(|_| 1 + below(rng, 30) as usize)
            .collect();
        let page_rows = 1 + below(rng, 64);
        let need = (prefill + steps.iter().sum::<usize>() + 8) as u64;
        // Now and then too few pages: the appends past them must fail.
        let pages = (need.div_ceil(page_rows) - chance(rng, 4) as u64).max(1);
        let opts = KvStoreOptions::default()
            .with_page_rows(page_rows)
            .with_page_budget(pages)
            .with_step_rows(1 + below(rng, 48) as usize)
            .with_page_writes(if chance(rng, 2) {
                PageWrites::Kernel
            } else {
                PageWrites::Dma
            });
        self.tag = format!(
            "{} kv L={l} C={} prefill {prefill} steps {steps:?} pages {pages}x{page_rows}",
            self.tag,
            chunk.bytes()
        );
        let first = make_rows(rng, prefill);
        let d = cu(DeviceBuffer::from_slice(&first), "prefill")?;
        self.settle()?;
        let capacity = pages * page_rows;
        if prefill as u64 > capacity {
            return match KvStore::create(self.gpu, &d, l, &opts) {
                Err(e) if e.kind() == ErrorKind::InvalidArgument => Ok(Outcome::Typed),
                Err(e) => must(Err(e), "KvStore::create past its budget"),
                Ok(_) => Err(Fail::Mismatch("a prefill past the budget was taken".into())),
            };
        }
        // The steps' rows must outlive their appends' kernels: declared
        // before the store, they are dropped after it (its drop waits for
        // the context), on every return.
        let mut keep = Vec::new();
        let mut store = must(KvStore::create(self.gpu, &d, l, &opts), "KvStore::create")?;
        // Each segment's rows, in order.
        let mut segs: Vec<Vec<u8>> = vec![first];
        let mut typed = false;
        let refit_at = if chance(rng, 3) {
            below(rng, steps.len() as u64) as usize
        } else {
            usize::MAX
        };
        for (k, &rows) in steps.iter().enumerate() {
            let data = make_rows(rng, rows);
            let d = cu(DeviceBuffer::from_slice(&data), "a step's rows")?;
            self.settle()?;
            if k == refit_at {
                let next = store.rows();
                match store.refit_blocking(self.gpu, &d) {
                    Ok(s) => {
                        if s != segs.len()
                            || store.segments()[s].first_row != next.next_multiple_of(8)
                        {
                            return Err(Fail::Mismatch("a refit's segment is misplaced".into()));
                        }
                        segs.push(Vec::new());
                    }
                    Err(e)
                        if e.kind() == ErrorKind::InvalidArgument
                            && next.next_multiple_of(8) > capacity =>
                    {
                        typed = true;
                    }
                    Err(e) => return must(Err(e), "refit"),
                }
            }
            let next = store.rows();
            match store.append(self.gpu, &d, l, &self.stream) {
                Ok(r) if r == (next..next + rows as u64) => {
                    segs.last_mut().unwrap().extend_from_slice(&data);
                }
                Ok(r) => {
                    return Err(Fail::Mismatch(format!(
                        "append of {rows} rows at {next} took {r:?}"
                    )));
                }
                Err(e)
                    if e.kind() == ErrorKind::InvalidArgument && next + rows as u64 > capacity =>
                {
                    typed = true;
                    if store.rows() != next {
                        return Err(Fail::Mismatch("a refused append moved the store".into()));
                    }
                }
                Err(e) => return must(Err(e), "append"),
            }
            keep.push(d);
        }
        self.sync()?;
        let mut corrupt = false;
        for (s, data) in segs.iter().enumerate() {
            let have = (data.len() / l) as u64;
            let info = store.segments()[s];
            if info.rows != have {
                return Err(Fail::Mismatch(format!(
                    "segment {s} holds {} rows; {have} were appended",
                    info.rows
                )));
            }
            // The pages: the CPU's fixed-stride compression of the rows
            // under the segment's codebook.
            if have > 0 {
                let cb = store.codebook(s).unwrap().clone();
                let fixed =
                    compress_fixed(&cb, Rows::new(data, l).unwrap(), &Default::default()).unwrap();
                let at = info.first_row as usize * l;
                if store.pages_host()[at..at + data.len()] != fixed.slots[..] {
                    return Err(Fail::Mismatch(format!(
                        "segment {s}: the pages differ from the CPU's compression"
                    )));
                }
            }
            let rows: Vec<Option<Vec<u8>>> = data.chunks(l).map(|r| Some(r.to_vec())).collect();
            let wide = chance(rng, 2);
            let index = random_index(rng, have.max(1), wide);
            let mut out = self.output(index.len() * l)?;
            let mut status = must(DecodeStatus::new(), "a status")?;
            if wide {
                let d = cu(DeviceBuffer::from_slice(&index), "ids")?;
                self.settle()?;
                must(
                    store.gather(self.gpu, s, &d, &mut out, &status, &self.stream),
                    "kv gather",
                )?;
                self.sync()?;
            } else {
                let narrow: Vec<u32> = index.iter().map(|&t| t as u32).collect();
                let d = cu(DeviceBuffer::from_slice(&narrow), "ids")?;
                self.settle()?;
                must(
                    store.gather(self.gpu, s, &d, &mut out, &status, &self.stream),
                    "kv gather",
                )?;
                self.sync()?;
            }
            let host = must(copy_to_host_blocking(&out), "copying back")?;
            let verdict = status.check_blocking();
            corrupt |= judge(&host, l, l, &wants(&rows, &index), verdict)? == Outcome::Corrupt;
        }
        Ok(if corrupt {
            Outcome::Corrupt
        } else if typed {
            Outcome::Typed
        } else {
            Outcome::Equal
        })
    }
}

/// Whether a one-row bag's sum from the GPU matches the CPU's `0 + x`:
/// the same bits, or NaN on both sides (the GPU's adds return the
/// canonical NaN, x86's keep the payload).
fn same_sum(gpu: f32, cpu: f32) -> bool {
    gpu.to_bits() == cpu.to_bits() || (gpu.is_nan() && cpu.is_nan())
}

/// Random decode options: the defaults, a ring small enough for streaming
/// mode, fast paths off, fewer warps, a forced fetch, fewer SMs.
fn random_options(rng: &mut Rng) -> DecodeOptions {
    let mut o = DecodeOptions::default();
    if chance(rng, 2) {
        return o;
    }
    if chance(rng, 3) {
        o = o.with_ring_bytes([256, 512, 4096, 16384][below(rng, 4) as usize]);
    }
    if chance(rng, 3) {
        o = o.with_fast_paths(false);
    }
    if chance(rng, 3) {
        o = o.with_warps_per_block([1, 2, 4][below(rng, 3) as usize]);
    }
    if chance(rng, 3) {
        o = o.with_fetch(if chance(rng, 2) {
            Fetch::CpAsync
        } else {
            Fetch::LoadStore
        });
    }
    if chance(rng, 4) {
        o = o.with_max_sms(1 + below(rng, 4) as u32);
    }
    o
}

/// Indices for a gather over `n` rows: 1 to 700 of them, repeats, and one
/// in twelve out of range (past the rows, far past, the largest index).
fn random_index(rng: &mut Rng, n: u64, wide: bool) -> Vec<u64> {
    let len = 1 + below(rng, (2 * n + 8).min(700));
    let top = if wide { u64::MAX } else { u32::MAX as u64 };
    (0..len)
        .map(|_| {
            if chance(rng, 12) {
                match below(rng, 3) {
                    0 => n,
                    1 => n + 1 + below(rng, 1000),
                    _ => top,
                }
            } else {
                below(rng, n)
            }
        })
        .collect()
}

/// The outside crate's PTX (`user_row_sums`), as gpu_device_api finds it.
fn user_module() -> Option<Module> {
    let path = std::env::var_os("IBP_USER_PTX")
        .map(std::path::PathBuf::from)
        .or_else(|| common::data_file("user-kernels.ptx"))?;
    let ptx = std::fs::read_to_string(path).ok()?;
    Some(Module::from_ptx(&ptx, &[]).expect("user-kernels.ptx loads"))
}

#[test]
fn gpu_decoders_match_the_cpu_codec_on_random_and_damaged_datasets() {
    let name = "gpu_decoders_match_the_cpu_codec_on_random_and_damaged_datasets";
    let Some(gpu) = gpu_or_skip(name) else {
        return;
    };
    let cases = env_u64("IBP_FUZZ_CASES", 200);
    let seed = env_u64("IBP_FUZZ_SEED", 0x1b9_f022);
    let first = env_u64("IBP_FUZZ_FIRST", 0);
    let max_secs = std::env::var("IBP_FUZZ_MAX_SECONDS")
        .ok()
        .map(|v| v.parse::<f64>().expect("IBP_FUZZ_MAX_SECONDS is a number"));
    let user = user_module();
    if user.is_none() {
        assert!(
            !common::gpu_required(),
            "{name}: no user-kernels.ptx in IBP_DATA_DIR (scripts/stage-device.sh builds it)"
        );
        notice(&format!(
            "{name}: user_row_sums skipped: no user-kernels.ptx"
        ));
    }
    let mut fz = Fuzz {
        gpu: &gpu,
        stream: Stream::new(StreamFlags::NON_BLOCKING, None).expect("a stream"),
        bags: Kernels::load(&gpu).expect("the fused kernels load"),
        user,
        stats: BTreeMap::new(),
        failures: Vec::new(),
        tag: String::new(),
        exact: false,
    };
    let start = Instant::now();
    let mut ran = 0;
    let mut fatal = false;
    for c in first..first + cases {
        if max_secs.is_some_and(|s| start.elapsed().as_secs_f64() > s) {
            break;
        }
        let mut rng = case_rng(seed, c);
        fz.tag = format!("case {c} (IBP_FUZZ_SEED={seed:#x} IBP_FUZZ_FIRST={c} IBP_FUZZ_CASES=1)");
        fz.exact = c % 2 == 1;
        let r = catch_unwind(AssertUnwindSafe(|| fz.case(&mut rng)));
        ran += 1;
        match r {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                fatal = true;
                break;
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                fz.failures.push(format!("{}: PANIC: {msg}", fz.tag));
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    for f in fz.failures.iter().take(30) {
        notice(&format!("gpu_fuzz FAIL {f}"));
    }
    let paths: Vec<String> = fz
        .stats
        .iter()
        .map(|(p, c)| {
            format!(
                "{p} {} (equal {}, corrupt {}, typed {}, failed {})",
                c.runs, c.equal, c.corrupt, c.typed, c.failed
            )
        })
        .collect();
    notice(&format!(
        "gpu_fuzz summary: seed {seed:#x}, {ran} cases from {first} in {secs:.1} s on {}; {}; failures {}",
        gpu.info().name,
        paths.join("; "),
        fz.failures.len()
    ));
    assert!(!fatal, "gpu_fuzz stopped on a CUDA error (above)");
    assert!(
        fz.failures.is_empty(),
        "{} failures (the first ones above)",
        fz.failures.len()
    );
    assert!(ran > 0, "no case ran");
}

/// The generators and the CPU side of the oracle, without a GPU: cases
/// build, mutate and decode on the CPU without a panic; an undamaged case
/// is valid and decodes every row; the judge takes the CPU's own rows and
/// catches a changed byte and a stray write. Ignored by default (it takes
/// seconds in a debug build): `cargo test --features cli,cuda --test
/// gpu_fuzz -- --ignored`.
#[test]
#[ignore]
fn fuzz_cases_build_and_the_oracle_judges_on_the_host() {
    let cases = env_u64("IBP_FUZZ_CASES", 300);
    let seed = env_u64("IBP_FUZZ_SEED", 0x1b9_f022);
    let (mut containers, mut damaged, mut corrupt_rows) = (0, 0, 0);
    for c in 0..cases {
        let mut rng = case_rng(seed, c);
        let mut case = if chance(&mut rng, 10) {
            containers += 1;
            match from_container(&mut rng) {
                Ok(case) => case,
                Err(NoCase::Refused(true, _)) => continue,
                Err(NoCase::Refused(false, m)) => panic!("case {c}: {m}"),
                // A codebook with nothing invariant leaves nothing to code.
                Err(NoCase::Raw(_)) => continue,
            }
        } else {
            generate(&mut rng)
        };
        if case.container.is_none() {
            assert!(case.valid(), "case {c}: {}: not valid", case.what);
            assert!(
                case.cpu_rows().iter().all(Option::is_some),
                "case {c}: {}: the CPU rejects an undamaged row",
                case.what
            );
            mutate(&mut rng, &mut case);
        }
        if !case.valid() {
            damaged += 1;
            continue;
        }
        let rows = case.cpu_rows();
        corrupt_rows += rows.iter().filter(|r| r.is_none()).count();
        let wide = chance(&mut rng, 2);
        let index = random_index(&mut rng, case.n as u64, wide);
        let want = wants(&rows, &index);
        let l = case.l;
        let mut host = vec![POISON; index.len() * l + GUARD];
        for (i, w) in want.iter().enumerate() {
            let row = &mut host[i * l..(i + 1) * l];
            match w {
                Want::Row(r) => row.copy_from_slice(r),
                _ => row.fill(0),
            }
        }
        if want.iter().all(|w| matches!(w, Want::Row(_))) {
            assert!(matches!(
                judge(&host, l, l, &want, Ok(())),
                Ok(Outcome::Equal)
            ));
            host[index.len() * l] ^= 1;
            assert!(matches!(
                judge(&host, l, l, &want, Ok(())),
                Err(Fail::Mismatch(_))
            ));
            host[index.len() * l] ^= 1;
            host[0] ^= 0x10;
            assert!(matches!(
                judge(&host, l, l, &want, Ok(())),
                Err(Fail::Mismatch(_))
            ));
        } else {
            assert!(matches!(
                judge(&host, l, l, &want, Ok(())),
                Err(Fail::Mismatch(_))
            ));
        }
    }
    println!(
        "{cases} cases: {containers} from containers, {damaged} refused as a whole, {corrupt_rows} corrupt rows"
    );
    assert!(corrupt_rows > 0 && damaged > 0);
}
