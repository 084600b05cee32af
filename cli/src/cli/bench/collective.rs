//! `ibp bench --section collective` (feature `nccl`): the compressed
//! collectives of `ibp::gpu::collective` against the same collectives on
//! raw rows, on every GPU present (at most `--gpus`): all-gather of Cora's
//! rows, of Cora scaled up to `--real-bytes`, and of MiniLM's bf16 word
//! embeddings; broadcast of MiniLM's bf16 weights from rank 0; with two
//! GPUs or more, the all-to-all of a GNN mini-batch over scaled Cora.
//!
//! Rates are nccl-tests' "algorithm bandwidth": the decoded bytes each
//! rank ends with (all rows, `N · L`) per second. The link rate is the raw
//! all-gather's "bus bandwidth" (`(n − 1)/n` of it: what crossed each
//! rank's links). Timing: host clock around `--reps` collectives enqueued
//! back to back and one `finish_blocking`, median of 7 trials after 2
//! warm-ups; every configuration's output is compared with the original
//! rows on every rank first.

use std::fmt::Write as _;
use std::time::Instant;

use ibp::gpu::collective::{
    CollectiveOptions, Communicator, GatherPath, Partition, PathRates, RawRows, ShardedRows,
    predict_paths,
};
use ibp::layout::{LayoutOptions, Packed, compress_packed};
use ibp::{Error, Result, Rows};

/// One table of rows to move: its name, raw rows, row length, packed form.
struct Table {
    name: String,
    data: Vec<u8>,
    l: usize,
    cb: ibp::codebook::Codebook,
    packed: Packed,
}

fn table(name: &str, data: Vec<u8>, l: usize) -> Result<Table> {
    let rows = Rows::new(&data, l)?;
    let fitted = ibp::fit::fit(rows, &Default::default())?;
    let packed = compress_packed(&fitted.codebook, rows, &LayoutOptions::default())?;
    Ok(Table {
        name: name.into(),
        data,
        l,
        cb: fitted.codebook,
        packed,
    })
}

/// `t` repeated to at least `bytes` bytes (a multiple of 8 rows first, so
/// the packed form repeats whole flag bytes).
fn scaled(t: &Table, bytes: usize) -> Result<Table> {
    let base = table(&t.name, t.data.repeat(2), t.l)?;
    let times = bytes.div_ceil(base.data.len()).max(1);
    if base.packed.rows % 8 != 0 {
        return Err(Error::invalid("scaling needs a multiple of 8 rows"));
    }
    Ok(Table {
        name: format!("{} ×{}", t.name, 2 * times),
        data: base.data.repeat(times),
        l: t.l,
        packed: ibp_testdata::repeat_packed(&base.packed, times)?,
        cb: base.cb,
    })
}

/// The median of `f`'s seconds over 7 trials after 2 warm-ups.
fn median(mut f: impl FnMut() -> Result<f64>) -> Result<f64> {
    for _ in 0..2 {
        f()?;
    }
    let mut t = (0..7).map(|_| f()).collect::<Result<Vec<f64>>>()?;
    t.sort_by(f64::total_cmp);
    Ok(t[3])
}

/// Seconds per collective: `reps` of `one` back to back, then one wait.
fn time_reps(
    comm: &mut Communicator,
    reps: u32,
    mut one: impl FnMut(&mut Communicator) -> Result<()>,
) -> Result<f64> {
    median(|| {
        comm.finish_blocking()?;
        let t0 = Instant::now();
        for _ in 0..reps {
            one(comm)?;
        }
        comm.finish_blocking()?;
        Ok(t0.elapsed().as_secs_f64() / reps as f64)
    })
}

/// One line on stderr before each collective call the section makes (the
/// check and the timed runs), so that a run cut by a time limit on the
/// device shows which call hung.
fn start(what: &str, kind: &str, t: &str, ranks: usize) {
    eprintln!("collective: {what} {kind}, {ranks} ranks, {t}, start");
}

/// Measured compressed and raw seconds of one collective.
struct Row {
    name: String,
    what: &'static str,
    /// Decoded bytes each rank ends with.
    raw_bytes: u64,
    /// Raw bytes / compressed bytes of what crossed the links.
    ratio: f64,
    /// Raw bytes that crossed each rank's links (on average).
    link_bytes: f64,
    meta: u64,
    comp_s: f64,
    raw_s: f64,
    /// All-gathers and broadcasts: the raw way of the compressed rows
    /// (each owner decodes its own, NCCL moves the decoded rows), the
    /// automatic way with the way it took, the measured rates and the
    /// prediction (compressed, raw seconds).
    ways: Option<Ways>,
}

/// The raw and automatic ways of one all-gather or broadcast.
struct Ways {
    decoded_raw_s: f64,
    auto_s: f64,
    took: GatherPath,
    rates: PathRates,
    predicted: (f64, f64),
}

fn measure(
    comm: &mut Communicator,
    t: &Table,
    part: Partition,
    what: &'static str,
    opts: &CollectiveOptions,
) -> Result<Row> {
    let rows = ShardedRows::upload(comm, &t.cb, &t.packed.view(), part.clone())?;
    let raw = RawRows::upload(comm, &t.data, t.l, part)?;
    let mut out = comm.alloc_outputs(t.data.len() as u64)?;
    let n = comm.ranks();
    // The rates the automatic way weighs, measured once (synchronises).
    start(what, "calibration", &t.name, n);
    let rates = comm.calibrate_blocking(&rows, &mut out, opts)?;
    let predicted = predict_paths(&comm.path_sizes(&rows, opts), &rates);
    let comp = opts.clone().with_path(GatherPath::Compressed);
    let decoded_raw = opts.clone().with_path(GatherPath::Raw);
    let auto = opts.clone().with_path(GatherPath::Auto);
    // Every way checked on every rank before timing.
    let mut took = GatherPath::Auto;
    for (kind, o) in [
        ("compressed (check)", &comp),
        ("decoded raw (check)", &decoded_raw),
        ("auto (check)", &auto),
    ] {
        start(what, kind, &t.name, n);
        // Fresh zeroed outputs: each way must write every row itself.
        out = comm.alloc_outputs(t.data.len() as u64)?;
        let p = comm.all_gather(&rows, &mut out, o)?;
        comm.finish_blocking()?;
        if o.path == GatherPath::Auto {
            took = p;
        }
        for (r, buf) in out.iter().enumerate() {
            comm.gpu(r).make_current()?;
            if ibp::gpu::copy_to_host_blocking(buf)? != t.data {
                return Err(Error::corrupt(format!(
                    "{}: rank {r} did not receive the rows ({kind})",
                    t.name
                )));
            }
        }
    }
    start(what, "raw (check)", &t.name, n);
    comm.all_gather_raw(&raw, opts)?;
    comm.finish_blocking()?;
    for r in 0..n {
        comm.gpu(r).make_current()?;
        if ibp::gpu::copy_to_host_blocking(raw.buffer(r))? != t.data {
            return Err(Error::corrupt(format!(
                "{}: rank {r} did not receive the raw rows",
                t.name
            )));
        }
    }
    // Q: why more repetitions for small tables? A: a collective of a few
    // MB takes tens of microseconds; the host's wait would dominate one.
    let reps = (256 << 20) / t.data.len().max(1);
    let reps = reps.clamp(1, 64) as u32;
    start(what, "compressed (timed)", &t.name, n);
    let comp_s = time_reps(comm, reps, |c| {
        c.all_gather(&rows, &mut out, &comp).map(drop)
    })?;
    start(what, "raw (timed)", &t.name, n);
    let raw_s = time_reps(comm, reps, |c| c.all_gather_raw(&raw, opts))?;
    start(what, "decoded raw (timed)", &t.name, n);
    let decoded_raw_s = time_reps(comm, reps, |c| {
        c.all_gather(&rows, &mut out, &decoded_raw).map(drop)
    })?;
    start(what, "auto (timed)", &t.name, n);
    let auto_s = time_reps(comm, reps, |c| {
        c.all_gather(&rows, &mut out, &auto).map(drop)
    })?;
    let n = comm.ranks() as f64;
    let raw_bytes = t.data.len() as u64;
    Ok(Row {
        name: t.name.clone(),
        what,
        raw_bytes,
        ratio: raw_bytes as f64 / rows.payload_bytes().max(1) as f64,
        link_bytes: match what {
            "all-gather" => (n - 1.0) / n * raw_bytes as f64,
            _ if n > 1.0 => raw_bytes as f64,
            _ => 0.0,
        },
        meta: rows.metadata_bytes(),
        comp_s,
        raw_s,
        ways: Some(Ways {
            decoded_raw_s,
            auto_s,
            took,
            rates,
            predicted,
        }),
    })
}

/// A GNN mini-batch exchange: each rank asks for `batch` random rows of
/// `t` (seeded), owned by an even partition; runs merged over gaps of up
/// to `gap` rows. Checked on every rank, then timed against the raw
/// all-to-all (rows moved into place, no gather).
fn measure_all_to_all(
    comm: &mut Communicator,
    t: &Table,
    batch: usize,
    gap: u64,
    opts: &CollectiveOptions,
) -> Result<Row> {
    let n = t.packed.rows as u64;
    let part = Partition::even(n, comm.ranks())?;
    let rows = ShardedRows::upload(comm, &t.cb, &t.packed.view(), part.clone())?;
    let raw = RawRows::upload(comm, &t.data, t.l, part)?;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let requests: Vec<Vec<u64>> = (0..comm.ranks())
        .map(|_| {
            (0..batch)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % n
                })
                .collect()
        })
        .collect();
    let req: Vec<&[u64]> = requests.iter().map(|v| v.as_slice()).collect();
    let ex = ibp::gpu::collective::Exchange::new_blocking(comm, &rows, &req, gap)?;
    let mut out = comm.alloc_outputs((batch * t.l) as u64)?;
    let ranks = comm.ranks();
    eprintln!(
        "collective: all_to_all plan: {} runs, {} sends, {} remote rows",
        ex.runs(),
        ex.sends(),
        ex.remote_rows()
    );
    start("all_to_all", "compressed (check)", &t.name, ranks);
    comm.all_to_all(&rows, &ex, &mut out, opts)?;
    comm.finish_blocking()?;
    start("all_to_all", "raw (check)", &t.name, ranks);
    comm.all_to_all_raw(&raw, &ex)?;
    comm.finish_blocking()?;
    for (r, q) in requests.iter().enumerate() {
        comm.gpu(r).make_current()?;
        let got = ibp::gpu::copy_to_host_blocking(&out[r])?;
        let got_raw = ibp::gpu::copy_to_host_blocking(raw.buffer(r))?;
        for (i, &id) in q.iter().enumerate() {
            let at = id as usize * t.l;
            let want = &t.data[at..at + t.l];
            if &got[i * t.l..(i + 1) * t.l] != want || &got_raw[at..at + t.l] != want {
                return Err(Error::corrupt(format!(
                    "{}: rank {r} did not receive row {id} of its mini-batch",
                    t.name
                )));
            }
        }
    }
    start("all_to_all", "compressed (timed)", &t.name, ranks);
    let comp_s = time_reps(comm, 8, |c| c.all_to_all(&rows, &ex, &mut out, opts))?;
    start("all_to_all", "raw (timed)", &t.name, ranks);
    let raw_s = time_reps(comm, 8, |c| c.all_to_all_raw(&raw, &ex))?;
    let moved_raw = ex.remote_rows() as f64 * t.l as f64;
    Ok(Row {
        name: format!(
            "{}, {batch} random rows a rank, gaps ≤ {gap} rows, {} runs in {} sends",
            t.name,
            ex.runs(),
            ex.sends()
        ),
        what: "all-to-all",
        raw_bytes: (batch * t.l) as u64,
        ratio: moved_raw / ex.remote_bytes().max(1) as f64,
        link_bytes: moved_raw / comm.ranks() as f64,
        meta: rows.metadata_bytes(),
        comp_s,
        raw_s,
        ways: None,
    })
}

/// MiniLM's bf16 layer weights (the staged sample of every encoder
/// layer's matrices, `minilm-layers-bf16.safetensors`), when found.
fn layer_weights() -> Option<(Vec<u8>, usize)> {
    let dir = std::env::var_os("IBP_DATA_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| ".tools/data".into());
    let f = ibp::io::InputFile::open(&dir.join("minilm-layers-bf16.safetensors")).ok()?;
    let doc = ibp::io::parse(
        f.bytes(),
        ibp::io::SourceFormat::Safetensors,
        &Default::default(),
    )
    .ok()?;
    let g = doc.groups.first()?;
    Some((g.data.to_vec(), g.row_shape(None).ok()?.row_bytes as usize))
}

/// The section: tables, measurements and the markdown.
pub(super) fn section(max_gpus: usize, real_bytes: usize, md: &mut String) -> Result<()> {
    if std::env::var("NCCL_NVLS_ENABLE").as_deref() != Ok("0") {
        return Err(Error::invalid(
            "set NCCL_NVLS_ENABLE=0: NVLink multicast stays off on the shared machines (scripts/device-collective.sh sets it)",
        ));
    }
    let version = Communicator::nccl_version()?;
    let n = ibp::gpu::Gpu::count().min(max_gpus.max(1) as u32).max(1);
    let mut comm = Communicator::new(&(0..n).collect::<Vec<_>>())?;
    let ranks = comm.ranks();
    // IBP_COLLECTIVE_CHUNK_MIB: the pipeline's step (an experiment knob).
    let mut opts = CollectiveOptions::default();
    if let Some(mib) = std::env::var("IBP_COLLECTIVE_CHUNK_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        opts = opts.with_chunk_bytes(mib << 20);
    }
    let real = super::real_tables()?;
    let mut gather = Vec::new();
    let (name, data, l) = &real[0];
    let cora = table(name, data.clone(), *l)?;
    gather.push(scaled(&cora, real_bytes)?);
    gather.insert(0, cora);
    let bf16 = real.iter().find(|t| t.0.contains("bf16"));
    if let Some((name, data, l)) = bf16 {
        gather.push(table(name, data.clone(), *l)?);
    }
    let mut rows = Vec::new();
    for t in &gather {
        let part = Partition::even(t.packed.rows as u64, ranks)?;
        rows.push(measure(&mut comm, t, part, "all-gather", &opts)?);
    }
    // The mini-batch exchange of a distributed GNN, over scaled Cora.
    if ranks > 1 {
        rows.push(measure_all_to_all(&mut comm, &gather[1], 16_384, 8, &opts)?);
    }
    // The broadcast: the word embeddings and the layer sample, each a
    // weight group of its own (its own codebook), from rank 0.
    let mut weights = Vec::new();
    if let Some((name, data, l)) = bf16 {
        weights.push(table(&format!("{name} (weights)"), data.clone(), *l)?);
    }
    if let Some((data, l)) = layer_weights() {
        weights.push(table("MiniLM layer weights bf16 (sample)", data, l)?);
    }
    for t in &weights {
        let part = Partition::on_one(t.packed.rows as u64, ranks, 0)?;
        rows.push(measure(&mut comm, t, part, "broadcast", &opts)?);
    }
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "unset".into());
    let _ = writeln!(
        md,
        "## Compressed collectives through NCCL ({ranks} GPU{})\n\n\
         - NCCL {}.{}.{}; NCCL_P2P_DISABLE={}, NCCL_SHM_DISABLE={}, NCCL_NVLS_ENABLE={}\n\
         - pipeline steps of {} MiB of each owner's compressed rows; decode on arrival (ibp's decoder, device-resident)\n\
         - GB/s: decoded bytes each rank ends with per second (all-gather and broadcast: all N·L; all-to-all: its mini-batch, decoded in request order); raw link: the raw collective's bytes that crossed each rank's links ((n−1)/n of an all-gather, all of a broadcast, a rank's share of an all-to-all's runs) per second\n\
         - ratio: raw bytes / compressed bytes of what crossed the links (metadata replicated once at set-up, not moved per call, in its own column)\n\
         - ways of an all-gather or broadcast (`ibp::gpu::collective::GatherPath`): *compressed* (forced: compressed pieces move, each rank decodes on arrival; one NCCL group a step, with sends and receives between every pair of ranks when a step has several owners, else a broadcast), *decoded raw* (forced: each owner decodes its own rows, then NCCL moves the decoded rows: `ncclAllGather` in place when ranks own as many rows, else pipelined broadcasts), *auto* (the default: the way `ibp::gpu::collective::choose_path` predicts faster from the sizes and the rates measured once by `Communicator::calibrate_blocking`; *auto took* names the way it took, and *predicted* gives its two predictions in µs); *speed-up* is compressed against the raw baseline, *auto ×* the automatic way against it\n\
         - measured rates (per communicator, then per table): link GB/s into a rank, µs a step, decode GB/s of a rank's own rows\n\
         - baselines: the raw all-gather is NCCL's own in-place ncclAllGather where every rank owns as many rows (else the same pipelined broadcasts as the compressed one); the raw broadcast is the same pipelined ncclBroadcasts; the raw all-to-all moves the same runs into place and gathers nothing, while the compressed one also decodes the batch into request order\n",
        if ranks == 1 { "" } else { "s" },
        version / 10000,
        version / 100 % 100,
        version % 100,
        env("NCCL_P2P_DISABLE"),
        env("NCCL_SHM_DISABLE"),
        env("NCCL_NVLS_ENABLE"),
        opts.chunk_bytes >> 20,
    );
    let _ = writeln!(
        md,
        "| collective | rows | raw MB | ratio | metadata KB | compressed GB/s | raw GB/s | speed-up | decoded raw GB/s | auto GB/s | auto took | auto × | predicted µs (compressed / raw) | measured: link GB/s, step µs, decode GB/s | raw link GB/s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|---:|"
    );
    for r in &rows {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {:.2}× | {} | {} |",
            r.what,
            r.name,
            r.raw_bytes as f64 / 1e6,
            r.ratio,
            r.meta as f64 / 1e3,
            r.raw_bytes as f64 / r.comp_s / 1e9,
            r.raw_bytes as f64 / r.raw_s / 1e9,
            r.raw_s / r.comp_s,
            ways_cells(r),
            if r.link_bytes > 0.0 {
                format!("{:.1}", r.link_bytes / r.raw_s / 1e9)
            } else {
                "none (one GPU)".into()
            },
        );
    }
    let _ = writeln!(md);
    Ok(())
}

/// The cells of the raw and automatic ways (dashes for the all-to-all).
fn ways_cells(r: &Row) -> String {
    let Some(w) = &r.ways else {
        return "— | — | — | — | — | —".into();
    };
    let gbs = |s: f64| r.raw_bytes as f64 / s / 1e9;
    let took = match w.took {
        GatherPath::Raw => "raw",
        _ => "compressed",
    };
    let finite = |x: f64, scale: f64| {
        if x.is_finite() {
            format!("{:.1}", x * scale)
        } else {
            "∞".into()
        }
    };
    format!(
        "{:.1} | {:.1} | {took} | {:.2}× | {} / {} | {}, {}, {}",
        gbs(w.decoded_raw_s),
        gbs(w.auto_s),
        r.raw_s / w.auto_s,
        finite(w.predicted.0, 1e6),
        finite(w.predicted.1, 1e6),
        finite(w.rates.link, 1e-9),
        finite(w.rates.step_s, 1e6),
        finite(w.rates.decode, 1e-9),
    )
}
