//! `ibp bench --peers nvcomp`: other GPU decompressors measured on the same
//! bytes as ibp, in the same run, side by side.
//!
//! The peer is NVIDIA's nvCOMP, loaded at run time ([`nvcomp`]): ANS (on
//! bytes, and with its float type where the table holds floats), Bitcomp,
//! Cascaded and LZ4. Each is timed on the paths a user of it would take
//! ([`measure`]); ibp's row comes from `ibp_cli::measure`, the code behind
//! the rest of `ibp bench`. Every output is compared with the original
//! bytes before it is timed.
//!
//! The entry point for one table is [`compare`]: the bytes of its rows, the
//! row length, the element width and ibp's codebook, so any table `ibp
//! bench` measures can have peer rows.

use std::path::PathBuf;

#[cfg(feature = "cuda")]
pub mod measure;
#[cfg(feature = "cuda")]
pub mod nvcomp;

/// The peers `--peers` can name.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// NVIDIA nvCOMP 6 (ANS, Bitcomp, Cascaded, LZ4), loaded at run time.
    Nvcomp,
}

/// The options of `ibp bench` that choose peers.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PeerArgs {
    /// Also measure other GPU decompressors on the same real tables, side
    /// by side with ibp: `nvcomp` (NVIDIA's nvCOMP, loaded at run time from
    /// --nvcomp or IBP_NVCOMP).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "PEER")]
    pub peers: Vec<Peer>,
    /// nvCOMP's library: libnvcomp.so.6, or a folder holding it (default:
    /// $IBP_NVCOMP, then .tools/nvcomp).
    #[arg(long, value_name = "PATH")]
    pub nvcomp: Option<PathBuf>,
    /// Seconds the peers may take per table: a codec that would start after
    /// them is skipped (and listed as skipped in the table). Progress and
    /// an estimate of the time left are printed after each codec.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub peers_budget: u64,
}

/// The peers of one run, loaded.
#[cfg(feature = "cuda")]
pub struct Peers {
    nvcomp: nvcomp::Nvcomp,
    /// `--peers-budget`.
    budget: std::time::Duration,
}

#[cfg(feature = "cuda")]
impl Peers {
    /// "nvCOMP a.b.c (CUDA runtime x.y)", for the tables' headings.
    fn label(&self) -> String {
        let (a, b, c) = self.nvcomp.version();
        let rt = self.nvcomp.cudart_version();
        format!(
            "nvCOMP {a}.{b}.{c} (CUDA runtime {}.{})",
            rt / 1000,
            (rt % 1000) / 10
        )
    }

    /// Load what `args` names, before any GPU work, so that a missing
    /// library is reported first. `None` when no peer is asked for.
    pub fn load(args: &PeerArgs) -> ibp::Result<Option<Self>> {
        if args.peers.is_empty() {
            return match &args.nvcomp {
                Some(_) => Err(ibp::Error::invalid(
                    "--nvcomp names the library for --peers nvcomp; add --peers nvcomp",
                )),
                None => Ok(None),
            };
        }
        let nv = nvcomp::Nvcomp::find(args.nvcomp.as_deref())?;
        let (a, b, c) = nv.version();
        eprintln!("nvCOMP {a}.{b}.{c} from {}", nv.path().display());
        Ok(Some(Self {
            nvcomp: nv,
            budget: std::time::Duration::from_secs(args.peers_budget),
        }))
    }
}

/// One table to compare on.
#[cfg(feature = "cuda")]
pub struct Table<'a> {
    /// Its name in the results.
    pub name: &'a str,
    /// The bytes of its rows, as ibp's benchmark measures them.
    pub data: &'a [u8],
    /// Bytes per row.
    pub row_bytes: usize,
    /// Bytes per element (4: f32, 2: f16/bf16, 1: anything else).
    pub elem_bytes: usize,
    /// Whether the elements are floats (ANS then also runs with its float
    /// type).
    pub float: bool,
    /// The float type, where ibp's float coding (`ibp::float_code`) applies:
    /// its row ("ibp float code") is measured beside IBP's.
    pub float_type: Option<ibp::float_code::FloatType>,
    /// ibp's codebook for it.
    pub codebook: &'a ibp::codebook::Codebook,
}

/// ibp's row and one row per peer configuration for `t`, ibp first.
#[cfg(feature = "cuda")]
pub fn compare(
    gpu: &ibp::gpu::Gpu,
    stream: &ibp::gpu::cust::stream::Stream,
    peers: &Peers,
    t: &Table,
    opts: &ibp::gpu::DecodeOptions,
) -> ibp::Result<Vec<measure::Row>> {
    use ibp::gpu::Residency;
    use ibp_cli::measure::{BenchStorage, measure_decode, measure_decode_dma, measure_gather};
    use measure::{GATHER_BATCHES, GatherRates, Row};

    let (data, row, cb) = (t.data, t.row_bytes, t.codebook);
    eprintln!("  {}: ibp...", t.name);
    let m = |r| {
        measure_decode(
            gpu,
            stream,
            data,
            row,
            cb,
            BenchStorage::PACKED,
            r,
            false,
            opts,
        )
    };
    let pinned = m(Residency::Pinned)?;
    let device = m(Residency::Device)?;
    let dma = measure_decode_dma(gpu, stream, data, row, cb, 8 << 20)?;
    let gb = |x: &ibp_cli::measure::DecodeMeasurement| Some(x.decoded_rate() / 1e9);
    let ratio = pinned.decoded_bytes as f64 / pinned.stored_bytes as f64;
    let mut ibp_row = Row {
        codec: "ibp".into(),
        ratio,
        row_ratio: ratio,
        copy_decode: None,
        overlapped: gb(&dma),
        zero_copy: gb(&pinned),
        device: gb(&device),
        gathers: Vec::new(),
        failures: Vec::new(),
    };
    for batch in GATHER_BATCHES {
        let g = |r| measure_gather(gpu, stream, data, row, cb, r, batch, opts);
        ibp_row.gathers.push(GatherRates {
            batch,
            zero_copy: gb(&g(Residency::Pinned)?),
            copy: None,
            device: gb(&g(Residency::Device)?),
        });
    }
    eprintln!(
        "  {}: ibp pinned {:.1} GB/s, device {:.0} GB/s",
        t.name,
        pinned.decoded_rate() / 1e9,
        device.decoded_rate() / 1e9
    );
    let mut rows = vec![ibp_row];
    if let Some(ft) = t.float_type {
        rows.push(float_row(gpu, stream, t, ft));
    }
    let elem = if row.is_multiple_of(t.elem_bytes) {
        t.elem_bytes
    } else {
        1
    };
    let codecs = nvcomp::Codec::for_elements(elem, t.float);
    let n = codecs.len();
    eprintln!(
        "  {}: {n} nvCOMP codecs on {:.1} MB, each compressed twice and decoded 4 ways and by {} gathers; at most {} s (--peers-budget)",
        t.name,
        data.len() as f64 / 1e6,
        2 * GATHER_BATCHES.len(),
        peers.budget.as_secs()
    );
    // Q: why a budget? A: on a 49 MB table the peers ran past 150 s with
    // nothing printed; the run must end in a time the user can plan on.
    let started = std::time::Instant::now();
    for (i, codec) in codecs.into_iter().enumerate() {
        let spent = started.elapsed();
        if !may_start(i, spent, peers.budget) {
            rows.push(measure::Row {
                codec: codec.name(),
                failures: vec![format!(
                    "skipped: the peers had taken {:.0} s of the {} s of --peers-budget",
                    spent.as_secs_f64(),
                    peers.budget.as_secs()
                )],
                ..Default::default()
            });
            eprintln!(
                "  [{}/{n}] {}: skipped (--peers-budget spent)",
                i + 1,
                codec.name()
            );
            continue;
        }
        eprintln!("  [{}/{n}] {}...", i + 1, codec.name());
        let r = measure::measure_codec(gpu, &peers.nvcomp, stream, codec, data, row)?;
        let spent = started.elapsed();
        eprintln!(
            "  [{}/{n}] {}: ratio {:.3}, device {:.0} GB/s; {:.0} s so far, about {:.0} s left",
            i + 1,
            r.codec,
            r.ratio,
            r.device.unwrap_or(0.0),
            spent.as_secs_f64(),
            time_left(i + 1, n, spent, peers.budget).as_secs_f64()
        );
        for f in &r.failures {
            eprintln!("  {}: {} failed: {f}", t.name, r.codec);
        }
        rows.push(r);
    }
    Ok(rows)
}

/// ibp's float coding of `t` as elements of `ft`: a row of the comparison
/// (what fails is noted in the row, as a peer's failures are).
#[cfg(feature = "cuda")]
fn float_row(
    gpu: &ibp::gpu::Gpu,
    stream: &ibp::gpu::cust::stream::Stream,
    t: &Table,
    ft: ibp::float_code::FloatType,
) -> measure::Row {
    use ibp_cli::measure::float::measure_float;
    eprintln!("  {}: ibp float code ({ft})...", t.name);
    let mut row = measure::Row {
        codec: FLOAT_CODEC.into(),
        ..Default::default()
    };
    match measure_float(
        gpu,
        stream,
        t.data,
        t.row_bytes,
        ft,
        &measure::GATHER_BATCHES,
    ) {
        Ok(r) => {
            eprintln!(
                "  {}: ibp float code ratio {:.3} ({} of {} rows coded), pinned {:.1} GB/s (overlapped), device {:.0} GB/s",
                t.name, r.ratio, r.coded_rows, r.rows, r.overlapped, r.device
            );
            row.ratio = r.ratio;
            row.row_ratio = r.ratio;
            row.overlapped = Some(r.overlapped);
            row.zero_copy = Some(r.zero_copy);
            row.device = Some(r.device);
            row.gathers = r
                .gathers
                .iter()
                .map(|g| measure::GatherRates {
                    batch: g.batch,
                    zero_copy: Some(g.zero_copy),
                    copy: None,
                    device: Some(g.device),
                })
                .collect();
        }
        Err(e) => {
            eprintln!("  {}: ibp float code failed: {e}", t.name);
            row.failures.push(e.to_string());
        }
    }
    row
}

/// The float coding's name in the comparison.
#[cfg(feature = "cuda")]
const FLOAT_CODEC: &str = "ibp float code";

/// Whether a row of the comparison is one of ibp's codings.
#[cfg(feature = "cuda")]
fn is_ours(codec: &str) -> bool {
    codec == "ibp" || codec == FLOAT_CODEC
}

/// Whether codec number `i` (from 0) may start when the codecs before it
/// took `spent` of `budget`: the first always does, so every table has one
/// peer row.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn may_start(i: usize, spent: std::time::Duration, budget: std::time::Duration) -> bool {
    i == 0 || spent < budget
}

/// The time the remaining codecs will take, at the average of the `done`
/// of `n` so far, within what is left of `budget`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn time_left(
    done: usize,
    n: usize,
    spent: std::time::Duration,
    budget: std::time::Duration,
) -> std::time::Duration {
    let per_codec = spent / done.max(1) as u32;
    let rest = per_codec * n.saturating_sub(done) as u32;
    rest.min(budget.saturating_sub(spent))
}

/// Element width and whether floats, from a real table's name ("... f32",
/// "... bf16").
#[cfg(feature = "cuda")]
fn element_of(name: &str) -> (usize, Option<ibp::float_code::FloatType>) {
    use ibp::float_code::FloatType;
    let t = [
        ("bf16", FloatType::Bf16),
        ("f16", FloatType::F16),
        ("f32", FloatType::F32),
        ("fp8 e4m3", FloatType::E4M3),
        ("fp8 e5m2", FloatType::E5M2),
    ]
    .into_iter()
    .find(|(suffix, _)| name.ends_with(suffix))
    .map(|(_, t)| t);
    (t.map_or(1, FloatType::bytes), t)
}

/// The peers section of `ibp bench`: every real table (as the "Real data"
/// section builds them: codebook fitted on the table, rows replicated to
/// `real_bytes`), ibp and each peer, then ibp ÷ the best peer.
#[cfg(feature = "cuda")]
pub fn section(
    gpu: &ibp::gpu::Gpu,
    stream: &ibp::gpu::cust::stream::Stream,
    peers: &Peers,
    real_bytes: usize,
    opts: &ibp::gpu::DecodeOptions,
    only: Option<&str>,
    md: &mut String,
) -> ibp::Result<()> {
    eprintln!("peers on the real tables...");
    let label = peers.label();
    let mut results = Vec::new();
    let mut tables = with_casts(super::real_tables()?);
    if let Some(kv) = super::kv::real_table()? {
        tables.push(kv);
    }
    for (name, data, row) in tables {
        if only.is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let fit = ibp::fit::fit(ibp::Rows::new(&data, row)?, &Default::default())?;
        let reps = real_bytes.div_ceil(data.len()).max(1);
        let big = data.repeat(reps);
        let (elem_bytes, float_type) = element_of(&name);
        let table = format!("{name} (×{reps})");
        let t = Table {
            name: &table,
            data: &big,
            row_bytes: row,
            elem_bytes,
            // FP8 is a float to ibp's coding, bytes to ANS (no FP8 type).
            float: float_type.is_some_and(|t| t.bytes() > 1),
            float_type,
            codebook: &fit.codebook,
        };
        let rows = compare(gpu, stream, peers, &t, opts)?;
        // Each table's rows in the log as soon as they are measured (a run
        // cut short still leaves them).
        let done = [(table.clone(), rows)];
        eprint!("{}", markdown(&label, &done));
        let [entry] = done;
        results.push(entry);
    }
    md.push_str(&markdown(&label, &results));
    Ok(())
}

/// The real tables and, when MiniLM's f32 embeddings are among them, their
/// f16 cast (round to nearest even: a model stored in half precision) and
/// FP8 casts (E4M3 and E5M2, round to nearest even, saturating: a model
/// quantised to FP8, for the float coding's comparison).
#[cfg(feature = "cuda")]
fn with_casts(mut tables: Vec<(String, Vec<u8>, usize)>) -> Vec<(String, Vec<u8>, usize)> {
    let casts: Vec<_> = tables
        .iter()
        .filter(|(name, _, _)| name.starts_with("MiniLM") && name.ends_with("f32"))
        .flat_map(|(name, data, row)| {
            let base = name.trim_end_matches("f32");
            let values = || {
                data.as_chunks::<4>()
                    .0
                    .iter()
                    .map(|b| f32::from_le_bytes(*b))
            };
            let f16 = values()
                .flat_map(|x| half::f16::from_f32(x).to_le_bytes())
                .collect();
            let fp8 = [
                (ibp_testdata::fp8::E4M3, "fp8 e4m3"),
                (ibp_testdata::fp8::E5M2, "fp8 e5m2"),
            ]
            .map(|(f, suffix)| {
                let bytes = values().map(|x| f.from_f32(x)).collect();
                (format!("{base}{suffix}"), bytes, row / 4)
            });
            std::iter::once((format!("{base}f16"), f16, row / 2)).chain(fp8)
        })
        .collect();
    tables.extend(casts);
    tables
}

/// One table (e.g. `ibp bench FILE`'s) compared with the peers, as
/// Markdown: ibp's row and each peer's, then ibp ÷ the best peer.
#[cfg(feature = "cuda")]
pub fn table_markdown(
    gpu: &ibp::gpu::Gpu,
    stream: &ibp::gpu::cust::stream::Stream,
    peers: &Peers,
    t: &Table,
    opts: &ibp::gpu::DecodeOptions,
) -> ibp::Result<String> {
    let rows = compare(gpu, stream, peers, t, opts)?;
    Ok(markdown(&peers.label(), &[(t.name.to_string(), rows)]))
}

/// The comparison as Markdown: all rows, then ibp ÷ best peer per table.
#[cfg(feature = "cuda")]
fn markdown(peer: &str, results: &[(String, Vec<RowView>)]) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let batches: Vec<usize> = results
        .first()
        .and_then(|(_, rows)| rows.first())
        .map(|r| r.gathers.iter().map(|g| g.batch).collect())
        .unwrap_or_default();
    let _ = writeln!(
        md,
        "\n## Peers: {peer}, same tables, same run\n\nDecoded GB/s; every output checked byte for byte first. *ratio*: original ÷ stored bytes with 64 KiB chunks (ibp: its packed layout); *per row*: one chunk per row, what a gather reads. Bulk paths from pinned host memory: *copy then decode* (one DMA of the compressed chunks, then one batched decode), *overlapped* (8 MiB pieces, copy of piece k+1 beside the decode of piece k on two streams; ibp: its DMA path), *zero-copy* (the decoder reads pinned memory). *device*: compressed data already in device memory. Gathers: the random row ids of ibp's gather benchmark, one chunk per row, from pinned memory (*zc*: zero-copy; *copy*: chunks gathered on the host into pinned staging, one DMA, one decode, host time included) or device memory (*dev*).\n"
    );
    let mut head = String::from(
        "| data | codec | ratio | per row | copy then decode | overlapped | zero-copy | device |",
    );
    let mut rule = String::from("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for b in &batches {
        let _ = write!(head, " gather {b} zc | gather {b} copy | gather {b} dev |");
        rule.push_str(" --- | --- | --- |");
    }
    let _ = writeln!(md, "{head}\n{rule}");
    let cell = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    for (table, rows) in results {
        for r in rows {
            let _ = write!(
                md,
                "| {table} | {} | {:.3} | {:.3} | {} | {} | {} | {} |",
                r.codec,
                r.ratio,
                r.row_ratio,
                cell(r.copy_decode),
                cell(r.overlapped),
                cell(r.zero_copy),
                cell(r.device)
            );
            for g in &r.gathers {
                let _ = write!(
                    md,
                    " {} | {} | {} |",
                    cell(g.zero_copy),
                    cell(g.copy),
                    cell(g.device)
                );
            }
            md.push('\n');
        }
    }
    for (table, rows) in results {
        for r in rows {
            for f in &r.failures {
                let _ = writeln!(md, "\n- failed: {table}, {}: {f}", r.codec);
            }
        }
    }
    let _ = writeln!(
        md,
        "\n### ibp ÷ best peer\n\nEach cell: ibp's value ÷ the best {peer} configuration's (named), over the paths of that column (*pinned*: the best of a row's paths from pinned memory). Above 1: ibp ahead. One line a coding of ibp's: IBP, and on float tables the float code (`ibp::float_code`, its ratio counting the payload, the row index and the code table).\n"
    );
    let mut head = String::from("| data | ratio | bulk pinned | bulk device |");
    let mut rule = String::from("| --- | --- | --- | --- |");
    for b in &batches {
        let _ = write!(head, " gather {b} pinned | gather {b} device |");
        rule.push_str(" --- | --- |");
    }
    let _ = writeln!(md, "{head}\n{rule}");
    for (table, rows) in results {
        let (ours, peers): (Vec<&RowView>, Vec<&RowView>) =
            rows.iter().partition(|r| is_ours(&r.codec));
        for ibp in ours {
            summary_line(&mut md, table, ibp, &peers, batches.len());
        }
    }
    md
}

/// One line of the summary: `ibp` (one of ibp's codings) ÷ the best of
/// `peers`, column by column.
#[cfg(feature = "cuda")]
fn summary_line(md: &mut String, table: &str, ibp: &RowView, peers: &[&RowView], batches: usize) {
    use std::fmt::Write as _;
    {
        if ibp.codec == "ibp" {
            let _ = write!(md, "| {table} |");
        } else {
            let _ = write!(md, "| {table}, {} |", ibp.codec);
        }
        let mut col = |f: &dyn Fn(&RowView) -> Option<f64>| {
            let best = peers
                .iter()
                .filter_map(|p| f(p).map(|v| (v, &p.codec)))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let cell = match (f(ibp), best) {
                (Some(x), Some((y, name))) if y > 0.0 => format!(" {:.2} ({name}) |", x / y),
                _ => " - |".into(),
            };
            md.push_str(&cell);
        };
        col(&|r| Some(r.ratio));
        col(&|r| best_of(&[r.copy_decode, r.overlapped, r.zero_copy]));
        col(&|r| r.device);
        for i in 0..batches {
            col(&|r| {
                r.gathers
                    .get(i)
                    .and_then(|g| best_of(&[g.zero_copy, g.copy]))
            });
            col(&|r| r.gathers.get(i).and_then(|g| g.device));
        }
        md.push('\n');
    }
}

/// The largest of the values present.
#[cfg(feature = "cuda")]
fn best_of(v: &[Option<f64>]) -> Option<f64> {
    v.iter().flatten().copied().max_by(f64::total_cmp)
}

#[cfg(feature = "cuda")]
type RowView = measure::Row;

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::measure::{GatherRates, Row};
    use super::*;

    fn row(codec: &str, ratio: f64, zc: f64, dev: f64, g: (f64, Option<f64>)) -> Row {
        Row {
            codec: codec.into(),
            ratio,
            row_ratio: ratio,
            zero_copy: Some(zc),
            device: Some(dev),
            gathers: vec![GatherRates {
                batch: 4096,
                zero_copy: Some(g.0),
                copy: g.1,
                device: Some(dev / 2.0),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn ibp_over_best_peer_takes_the_best_path_of_each_column() {
        let ibp = row("ibp", 25.0, 800.0, 1600.0, (600.0, None));
        let mut lz4 = row("LZ4", 5.0, 20.0, 400.0, (10.0, Some(40.0)));
        lz4.overlapped = Some(50.0); // its best pinned path
        let mut ans = row("ANS float32", 10.0, 30.0, 800.0, (15.0, Some(20.0)));
        ans.failures.push("zero-copy: status 12".into());
        let md = markdown("nvCOMP 6.0.0", &[("Cora".into(), vec![ibp, lz4, ans])]);
        let line = md
            .lines()
            .rev()
            .find(|l| l.starts_with("| Cora |"))
            .expect("the summary row");
        assert_eq!(
            line,
            "| Cora | 2.50 (ANS float32) | 16.00 (LZ4) | 2.00 (ANS float32) | 15.00 (LZ4) | 2.00 (ANS float32) |"
        );
        // Paths a codec does not have are "-", failures are listed.
        assert!(
            md.contains(
                "| Cora | ibp | 25.000 | 25.000 | - | - | 800.0 | 1600.0 | 600.0 | - | 800.0 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("- failed: Cora, ANS float32: zero-copy: status 12"),
            "{md}"
        );
    }

    #[test]
    fn each_of_ibps_codings_is_compared_with_the_peers_only() {
        let ibp = row("ibp", 1.3, 60.0, 700.0, (50.0, None));
        let float = row(FLOAT_CODEC, 1.5, 80.0, 500.0, (40.0, None));
        let ans = row("ANS float16", 1.45, 20.0, 1700.0, (3.0, Some(2.0)));
        let md = markdown("nvCOMP 6.0.0", &[("bf16".into(), vec![ibp, float, ans])]);
        let summary: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.starts_with("### ibp"))
            .filter(|l| l.starts_with("| bf16"))
            .collect();
        // One line a coding of ibp's, each over ANS (the only peer): the
        // float code's 1.5 against ANS's 1.45, not against IBP's 1.3.
        assert_eq!(summary.len(), 2, "{md}");
        assert!(
            summary[0].starts_with("| bf16 | 0.90 (ANS float16) |"),
            "{md}"
        );
        assert!(
            summary[1].starts_with("| bf16, ibp float code | 1.03 (ANS float16) |"),
            "{md}"
        );
    }

    #[test]
    fn codecs_follow_the_element_type() {
        let names = |e, f| {
            nvcomp::Codec::for_elements(e, f)
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(4, true),
            ["ANS", "ANS float32", "Bitcomp u32", "Cascaded u32", "LZ4"]
        );
        assert_eq!(
            names(2, true),
            ["ANS", "ANS float16", "Bitcomp u16", "Cascaded u16", "LZ4"]
        );
        assert_eq!(names(1, false), ["ANS", "Bitcomp", "Cascaded", "LZ4"]);
        use ibp::float_code::FloatType;
        assert_eq!(
            element_of("MiniLM word embeddings bf16"),
            (2, Some(FloatType::Bf16))
        );
        assert_eq!(element_of("Cora features f32"), (4, Some(FloatType::F32)));
        assert_eq!(
            element_of("MiniLM word embeddings fp8 e4m3"),
            (1, Some(FloatType::E4M3))
        );
        assert_eq!(element_of("a table"), (1, None));
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use std::time::Duration;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_budget_bounds_what_starts_and_the_estimate() {
        // The first codec always runs; later ones only within the budget.
        assert!(may_start(0, S(1000), S(300)));
        assert!(may_start(3, S(299), S(300)));
        assert!(!may_start(3, S(300), S(300)));
        // Two of six took 40 s: four more take about 80 s...
        assert_eq!(time_left(2, 6, S(40), S(300)), S(80));
        // ...unless the budget ends sooner.
        assert_eq!(time_left(2, 6, S(250), S(300)), S(50));
        assert_eq!(time_left(6, 6, S(40), S(300)), S(0));
        assert_eq!(time_left(1, 6, S(400), S(300)), S(0));
    }
}
