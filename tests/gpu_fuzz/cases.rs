//! Cases: how rows are stored, and what the CPU codec makes of them;
//! random valid cases and cases from containers.

use super::*;

/// A case's stored rows, as the CPU codec and the uploads take them.
#[derive(Clone)]
pub(crate) enum Store {
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

pub(crate) struct Case {
    pub(crate) l: usize,
    pub(crate) n: usize,
    /// The codebook (clustered: unused; the books are in the store).
    pub(crate) cb: Codebook,
    pub(crate) store: Store,
    /// A container the case came from (uploaded with `upload_group`).
    pub(crate) container: Option<Vec<u8>>,
    pub(crate) what: String,
}

impl Case {
    pub(crate) fn packed_ref(&self) -> Option<PackedRef<'_>> {
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

    pub(crate) fn fixed_ref(&self) -> Option<FixedStrideRef<'_>> {
        match &self.store {
            Store::Fixed { flags, slots, .. } => {
                FixedStrideRef::new(self.l, self.n, flags, slots).ok()
            }
            _ => None,
        }
    }

    pub(crate) fn clustered(&self) -> bool {
        matches!(self.store, Store::Clustered { .. })
    }

    /// Whether an upload must accept the case: what the CPU codec checks
    /// of the whole dataset before any row (packed: `validate`; clustered:
    /// also every id below `k`).
    pub(crate) fn valid(&self) -> bool {
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
    pub(crate) fn cpu_rows(&self) -> Vec<Option<Vec<u8>>> {
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
    pub(crate) fn max_stored(&self) -> u64 {
        match &self.store {
            Store::Packed { offsets, .. } | Store::Clustered { offsets, .. } => offsets
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]))
                .max()
                .unwrap_or(0),
            Store::Fixed { .. } => self.l as u64,
        }
    }

    pub(crate) fn upload(&self, gpu: &Gpu, res: Residency) -> ibp::Result<GpuDataset> {
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
pub(crate) fn random_codebook(rng: &mut Rng, l: usize, chunk: ChunkSize) -> Codebook {
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
pub(crate) fn row_of(rng: &mut Rng, cb: &Codebook, out: &mut [u8]) {
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
pub(crate) fn rows_from(
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

pub(crate) fn chunk_of(rng: &mut Rng) -> ChunkSize {
    ChunkSize::ALL[below(rng, 4) as usize]
}

/// A valid case: random length, rows, codebook (sometimes fitted), layout.
pub(crate) fn generate(rng: &mut Rng) -> Case {
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
pub(crate) enum NoCase {
    /// It did not open, or its group did not read (`true`: it was damaged,
    /// so a typed error is what should happen).
    Refused(bool, String),
    /// Its group is stored raw: nothing to decode.
    Raw(String),
}

/// A case from a container: compressible rows compressed by
/// `compress_document` (packed, fixed-stride or clustered), maybe damaged
/// (bytes flipped, or cut short).
pub(crate) fn from_container(rng: &mut Rng) -> Result<Case, NoCase> {
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
