//! A KV store case: appends, refits and gathers against the CPU.

use super::*;

/// A KV case's shape, drawn at random: the row width and codebook, the
/// prefill and the steps, and the store's options.
struct KvPlan {
    l: usize,
    chunk: ChunkSize,
    book: Codebook,
    /// Rows match `book` with this probability in 1/8ths.
    p_match: u64,
    prefill: usize,
    steps: Vec<usize>,
    page_rows: u64,
    pages: u64,
    opts: KvStoreOptions,
}

impl KvPlan {
    fn draw(rng: &mut Rng) -> KvPlan {
        let l = 4 * (1 + below(rng, 400) as usize);
        let chunk = chunk_of(rng);
        let book = random_codebook(rng, l, chunk);
        let p_match = [4, 7, 8][below(rng, 3) as usize];
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
        KvPlan {
            l,
            chunk,
            book,
            p_match,
            prefill,
            steps,
            page_rows,
            pages,
            opts,
        }
    }

    /// `rows` rows from the plan's codebook.
    fn rows(&self, rng: &mut Rng, rows: usize) -> Vec<u8> {
        rows_from(
            rng,
            self.l,
            rows,
            std::slice::from_ref(&self.book),
            &vec![0; rows],
            self.p_match,
        )
    }

    fn capacity(&self) -> u64 {
        self.pages * self.page_rows
    }
}

impl Fuzz<'_> {
    /// A KV store: rows of a random width appended in steps of random size
    /// (pages by the kernel or by DMA, some rows off the fitted codebook),
    /// maybe a refit, past the page budget now and then; every segment
    /// gathered with bad ids against the rows appended, and the pages
    /// against the CPU's fixed-stride compression.
    pub(crate) fn kv_case(&mut self, rng: &mut Rng) -> Run {
        let plan = KvPlan::draw(rng);
        let (l, prefill, steps) = (plan.l, plan.prefill, &plan.steps);
        self.tag = format!(
            "{} kv L={l} C={} prefill {prefill} steps {steps:?} pages {}x{}",
            self.tag,
            plan.chunk.bytes(),
            plan.pages,
            plan.page_rows
        );
        let first = plan.rows(rng, prefill);
        let d = cu(DeviceBuffer::from_slice(&first), "prefill")?;
        self.settle()?;
        if prefill as u64 > plan.capacity() {
            return match KvStore::create(self.gpu, &d, l, &plan.opts) {
                Err(e) if e.kind() == ErrorKind::InvalidArgument => Ok(Outcome::Typed),
                Err(e) => must(Err(e), "KvStore::create past its budget"),
                Ok(_) => Err(Fail::Mismatch("a prefill past the budget was taken".into())),
            };
        }
        // The steps' rows must outlive their appends' kernels: declared
        // before the store, they are dropped after it (its drop waits for
        // the context), on every return.
        let mut keep = Vec::new();
        let mut store = must(
            KvStore::create(self.gpu, &d, l, &plan.opts),
            "KvStore::create",
        )?;
        // Each segment's rows, in order.
        let mut segs: Vec<Vec<u8>> = vec![first];
        let mut typed = false;
        let refit_at = if chance(rng, 3) {
            below(rng, steps.len() as u64) as usize
        } else {
            usize::MAX
        };
        for (k, &rows) in steps.iter().enumerate() {
            let data = plan.rows(rng, rows);
            let d = cu(DeviceBuffer::from_slice(&data), "a step's rows")?;
            self.settle()?;
            if k == refit_at {
                typed |= self.kv_refit(&mut store, &d, &mut segs, plan.capacity())?;
            }
            typed |= self.kv_append(&mut store, &d, &data, l, &mut segs, plan.capacity())?;
            keep.push(d);
        }
        self.sync()?;
        let mut corrupt = false;
        for (s, data) in segs.iter().enumerate() {
            corrupt |= self.kv_segment(rng, &store, s, data, l)? == Outcome::Corrupt;
        }
        Ok(if corrupt {
            Outcome::Corrupt
        } else if typed {
            Outcome::Typed
        } else {
            Outcome::Equal
        })
    }

    /// A refit of `store` on the rows `d`: a new segment, at the next
    /// multiple of 8, or refused past the pages (`capacity` rows). Whether
    /// it was refused (typed).
    fn kv_refit(
        &self,
        store: &mut KvStore,
        d: &DeviceBuffer<u8>,
        segs: &mut Vec<Vec<u8>>,
        capacity: u64,
    ) -> Result<bool, Fail> {
        let next = store.rows();
        match store.refit_blocking(self.gpu, d) {
            Ok(s) => {
                if s != segs.len() || store.segments()[s].first_row != next.next_multiple_of(8) {
                    return Err(Fail::Mismatch("a refit's segment is misplaced".into()));
                }
                segs.push(Vec::new());
                Ok(false)
            }
            Err(e)
                if e.kind() == ErrorKind::InvalidArgument
                    && next.next_multiple_of(8) > capacity =>
            {
                Ok(true)
            }
            Err(e) => must(Err(e), "refit"),
        }
    }

    /// An append of `data` (on the device: `d`) to `store`, taken at its
    /// end and kept in the last segment's rows, or refused past the pages
    /// (`capacity` rows) without moving the store. Whether it was refused
    /// (typed).
    fn kv_append(
        &self,
        store: &mut KvStore,
        d: &DeviceBuffer<u8>,
        data: &[u8],
        l: usize,
        segs: &mut [Vec<u8>],
        capacity: u64,
    ) -> Result<bool, Fail> {
        let rows = (data.len() / l) as u64;
        let next = store.rows();
        match store.append(self.gpu, d, l, &self.stream) {
            Ok(r) if r == (next..next + rows) => {
                segs.last_mut().unwrap().extend_from_slice(data);
                Ok(false)
            }
            Ok(r) => Err(Fail::Mismatch(format!(
                "append of {rows} rows at {next} took {r:?}"
            ))),
            Err(e) if e.kind() == ErrorKind::InvalidArgument && next + rows > capacity => {
                if store.rows() != next {
                    return Err(Fail::Mismatch("a refused append moved the store".into()));
                }
                Ok(true)
            }
            Err(e) => must(Err(e), "append"),
        }
    }

    /// Segment `s` of `store`, which was given the rows `data`: its row
    /// count, its pages against the CPU's fixed-stride compression, and a
    /// gather with bad ids judged against the rows.
    fn kv_segment(&self, rng: &mut Rng, store: &KvStore, s: usize, data: &[u8], l: usize) -> Run {
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
        self.judged(
            index.len() * l,
            (l, l),
            &wants(&rows, &index),
            |out, status| {
                with_ids!(self, index, wide, "ids", |d| must(
                    store.gather(self.gpu, s, &d, out, status, &self.stream),
                    "kv gather",
                )?);
                Ok(())
            },
        )
    }
}
