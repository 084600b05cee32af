//! The runner: one case through every upload and decoder path.

use super::*;

pub(crate) struct Fuzz<'g> {
    pub(crate) gpu: &'g Gpu,
    pub(crate) stream: Stream,
    pub(crate) bags: Kernels,
    /// The tutorial crate's kernels (`row_sums`), when staged.
    pub(crate) user: Option<Module>,
    pub(crate) stats: BTreeMap<&'static str, Counts>,
    pub(crate) failures: Vec<String>,
    /// The case being run (for failure lines).
    pub(crate) tag: String,
    /// This case's outputs are sized exactly (else guard bytes follow).
    pub(crate) exact: bool,
}

impl Fuzz<'_> {
    /// Count a run of `path`; a mismatch is recorded and the case goes on,
    /// a fatal error stops the fuzzer.
    pub(crate) fn record(&mut self, path: &'static str, r: Run) -> Result<(), Fail> {
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

    pub(crate) fn sync(&self) -> Result<(), Fail> {
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
    pub(crate) fn settle(&self) -> Result<(), Fail> {
        cu(
            cust::context::CurrentContext::synchronize(),
            "synchronising the context",
        )
    }

    /// A poisoned output of `len` bytes (plus guard bytes unless exact).
    pub(crate) fn output(&self, len: usize) -> Result<DeviceBuffer<u8>, Fail> {
        let extra = if self.exact { 0 } else { GUARD };
        cu(
            DeviceBuffer::from_slice(&vec![POISON; len + extra]),
            "allocating an output",
        )
    }

    pub(crate) fn case(&mut self, rng: &mut Rng) -> Result<(), Fail> {
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

    /// Runs `launch` into a poisoned output of `len` bytes with a new
    /// status, copies the output back and judges it (rows of `l` bytes,
    /// `stride` apart) and the status against the CPU's `want`.
    pub(crate) fn judged(
        &self,
        len: usize,
        (l, stride): (usize, usize),
        want: &[Want],
        launch: impl FnOnce(&mut DeviceBuffer<u8>, &DecodeStatus) -> Result<(), Fail>,
    ) -> Run {
        let mut out = self.output(len)?;
        let mut status = must(DecodeStatus::new(), "a status")?;
        launch(&mut out, &status)?;
        let host = must(copy_to_host_blocking(&out), "copying back")?;
        judge(&host, l, stride, want, status.check_blocking())
    }

    /// Range and gather through a `Decoder`, and on pinned packed data the
    /// DMA range and gather.
    pub(crate) fn decoder_paths(
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
        let range: Vec<u64> = (first..first + count).collect();
        let r = self.judged(
            count as usize * l,
            (l, l),
            &wants(rows, &range),
            |out, status| {
                self.settle()?;
                must(
                    dec.range(self.gpu, first, count, out, status, &self.stream),
                    "range",
                )?;
                self.sync()
            },
        );
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
        let len = (index.len() - 1) * stride + l;
        let r = self.judged(len, (l, stride), &wants(rows, &index), |out, status| {
            with_ids!(self, index, wide, "uploading the index", |d| must(
                dec.gather_strided(self.gpu, &d, out, stride, status, &self.stream),
                "gather",
            )?);
            Ok(())
        });
        self.record(gather_path, r)?;
        if !pinned || case.packed_ref().is_none() {
            return Ok(());
        }
        self.dma_paths(rng, case, &dec, rows, &range, (&index, wide))
    }

    /// The DMA range (of the rows `range`, consecutive) and gather (of
    /// `index`, as u64 ids when `wide`), with pieces large enough for every
    /// stored form (a smaller piece is refused up front; gpu_decode tests
    /// that).
    fn dma_paths(
        &mut self,
        rng: &mut Rng,
        case: &Case,
        dec: &Decoder<'_>,
        rows: &[Option<Vec<u8>>],
        range: &[u64],
        (index, wide): (&[u64], bool),
    ) -> Result<(), Fail> {
        let l = case.l;
        let max = case.max_stored() as usize;
        let piece = max + 1024 + below(rng, 4 * max as u64 + 4096) as usize;
        let mut scratch = must(DmaScratch::new(piece), "DMA scratch")?;
        let (first, count) = (range[0], range.len() as u64);
        let r = self.judged(
            range.len() * l,
            (l, l),
            &wants(rows, range),
            |out, status| {
                self.settle()?;
                must(
                    dec.range_dma(
                        self.gpu,
                        first,
                        count,
                        out,
                        status,
                        &mut scratch,
                        &self.stream,
                    ),
                    "range_dma",
                )?;
                self.sync()
            },
        );
        self.record("dma-range", r)?;
        let r = self.judged(
            index.len() * l,
            (l, l),
            &wants(rows, index),
            |out, status| {
                self.settle()?;
                let (gpu, stream) = (self.gpu, &self.stream);
                let done = if wide {
                    dec.gather_dma_blocking(gpu, index, out, status, &mut scratch, stream)
                } else {
                    let narrow: Vec<u32> = index.iter().map(|&t| t as u32).collect();
                    dec.gather_dma_blocking(gpu, &narrow, out, status, &mut scratch, stream)
                };
                must(done, "gather_dma_blocking")?;
                self.sync()
            },
        );
        self.record("dma-gather", r)
    }

    /// The feature cache over a pinned dataset: a random hot set and
    /// budget (at least the largest row, so the constructor accepts it),
    /// then a gather with bad ids.
    pub(crate) fn cache(
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
        self.judged(
            index.len() * l,
            (l, l),
            &wants(rows, &index),
            |out, status| {
                with_ids!(self, index, wide, "uploading ids", |d| must(
                    cache.gather(self.gpu, ds, &d, out, status, &self.stream),
                    "cache gather",
                )?);
                Ok(())
            },
        )
    }
}
