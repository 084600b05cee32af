//! `ibp analyze`: bit-invariance analysis per tensor, fitted on the GPU when
//! one is usable and on the CPU otherwise (the same codebooks either way).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use ibp::fit::{self, Fit, FitOptions, Sample};
use ibp::io::{DType, TensorGroup};
use ibp::{Result, Rows};
use serde::Serialize;

use super::clusters::ClusterArgs;
use super::input::{FitArgs, InputArgs, Source};
use super::plot::{self, Chart, Series};
use super::table::{emit, human, json, pad};

/// Arguments of `ibp analyze`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    fit: FitArgs,
    /// Where to fit: auto (GPU if usable), gpu, or cpu.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Round f32 tensors to this type first (bf16 or f16), to see what a
    /// lower-precision copy would save.
    #[arg(long)]
    cast: Option<String>,
    /// Also list every (threshold, chunk size) candidate, the chosen one
    /// marked.
    #[arg(long)]
    candidates: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw an SVG here: first the savings of every tensor weighted by
    /// its bytes (a bar per tensor, largest first, as wide as its bytes),
    /// then savings per (threshold, chunk) candidate, one line per chunk
    /// size and the chosen candidate marked, a panel for each of the 16
    /// largest fitted tensors; with --clusters, net savings against the
    /// number of clusters.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    #[command(flatten)]
    clusters: ClusterArgs,
}

/// One tensor's analysis.
#[derive(Serialize, Debug)]
struct Report {
    name: String,
    dtype: String,
    shape: Vec<u64>,
    rows: u64,
    row_bytes: u64,
    /// "fitted", or why the tensor is left raw.
    status: String,
    counted_on: String,
    count_seconds: f64,
    invariant_bits: u64,
    invariant_fraction: f64,
    threshold: Option<f64>,
    chunk_bytes: Option<u32>,
    raw_bytes: u64,
    /// Stored tensors only (payload + raw tensors), as the IBP paper counts.
    stored_bytes: u64,
    savings: f64,
    /// Including the codebook, flag bitmap and offsets table of the packed
    /// layout.
    stored_with_metadata: u64,
    savings_with_metadata: f64,
    encoded_rows: u64,
    /// Bytes of the float-coded form (table, index and payload: all of
    /// its metadata), for bf16, f16, f32 and FP8 tensors; what `compress
    /// --coding float` stores.
    float_bytes: Option<u64>,
    /// The coding `compress --coding auto` is predicted to pick: "float"
    /// when `float_bytes` is below `stored_with_metadata`, else "ibp".
    coding: &'static str,
    candidates: Vec<CandidateReport>,
}

#[derive(Serialize, Debug)]
struct CandidateReport {
    threshold: f64,
    chunk_bytes: u32,
    stored_bytes: u64,
    savings: f64,
    /// The candidate the fit chose (the codebook's threshold and chunk).
    chosen: bool,
}

/// The GPU a [`Counter`] counts on, owned by the caller (the counter's
/// fitter borrows it); always empty without the `cuda` feature.
#[cfg(feature = "cuda")]
type GpuSlot = Option<ibp::gpu::Gpu>;
#[cfg(not(feature = "cuda"))]
type GpuSlot = Option<std::convert::Infallible>;

/// Where bits get counted.
enum Counter<'g> {
    Cpu,
    /// One fitter for every tensor: its device buffers stay warm.
    #[cfg(feature = "cuda")]
    Gpu(ibp::gpu::Fitter<'g>),
    #[cfg(not(feature = "cuda"))]
    #[allow(dead_code)]
    Never(std::marker::PhantomData<&'g ()>),
}

impl<'g> Counter<'g> {
    /// The counter for `--device`; a GPU it opens goes into `slot`.
    fn pick(device: &str, slot: &'g mut GpuSlot) -> Result<Self> {
        match device {
            "cpu" => Ok(Counter::Cpu),
            "gpu" => Self::gpu(true, slot),
            "auto" => Self::gpu(false, slot),
            other => Err(ibp::Error::invalid(format!(
                "--device {other}: use auto, gpu or cpu"
            ))),
        }
    }

    #[cfg(feature = "cuda")]
    fn gpu(required: bool, slot: &'g mut GpuSlot) -> Result<Self> {
        match ibp::gpu::Gpu::first() {
            Ok(g) => Ok(Counter::Gpu(ibp::gpu::Fitter::new(slot.insert(g)))),
            Err(e) if !required => {
                // One level of parentheses: the driver's message has its own.
                eprintln!("ibp: counting on the CPU: no usable GPU: {}", e.message());
                Ok(Counter::Cpu)
            }
            Err(e) => Err(e),
        }
    }

    #[cfg(not(feature = "cuda"))]
    fn gpu(required: bool, _slot: &'g mut GpuSlot) -> Result<Self> {
        if required {
            return Err(ibp::Error::unsupported(
                "this ibp was built without the `cuda` feature; rebuild with --features cuda or use --device cpu",
            ));
        }
        Ok(Counter::Cpu)
    }

    fn name(&self) -> String {
        match self {
            Counter::Cpu => format!("CPU ({} threads)", rayon::current_num_threads()),
            #[cfg(feature = "cuda")]
            Counter::Gpu(f) => f.gpu().info().name.clone(),
            // Never built (the variant only carries the lifetime).
            #[cfg(not(feature = "cuda"))]
            Counter::Never(_) => format!("CPU ({} threads)", rayon::current_num_threads()),
        }
    }

    /// Fit `rows`, counting on this device.
    fn fit(&self, rows: Rows<'_>, opts: &FitOptions) -> Result<Fit> {
        match self {
            Counter::Cpu => fit::fit(rows, opts),
            #[cfg(feature = "cuda")]
            Counter::Gpu(f) => {
                // The whole fit on the GPU (count, weigh every candidate,
                // sample included), reading the rows where they are:
                // registered in place, or a pinned copy when the memory
                // cannot be registered.
                let l = rows.row_bytes();
                if rows.rows() == 0 {
                    return fit::fit(rows, opts);
                }
                match ibp::gpu::Registered::new(rows.bytes()) {
                    Ok(r) => f.fit_blocking(&r, l, opts),
                    Err(_) => {
                        f.fit_blocking(&ibp::gpu::PinnedBuffer::from_slice(rows.bytes())?, l, opts)
                    }
                }
            }
            // Never built (the variant only carries the lifetime).
            #[cfg(not(feature = "cuda"))]
            Counter::Never(_) => fit::fit(rows, opts),
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let source = Source::open(&args.input)?;
    let doc = source.parse(&args.input)?;
    let opts = args.fit.options()?;
    if args.clusters.clusters {
        return super::clusters::run(
            &source.display(),
            &doc,
            &args.fit,
            opts,
            &args.clusters,
            args.plot.as_deref(),
            args.json,
        );
    }
    let mut gpu = GpuSlot::default();
    let counter = Counter::pick(&args.device, &mut gpu)?;
    let cast = args.cast.as_deref().map(DType::parse).transpose()?;
    if let Some(c) = &cast
        && *c != DType::BF16
        && *c != DType::F16
    {
        return Err(ibp::Error::invalid(format!("--cast {c}: use bf16 or f16")));
    }
    let bar = progress(doc.groups.len() as u64);
    let mut reports = Vec::new();
    for i in 0..doc.groups.len() {
        // A deferred npz member is inflated here and dropped after its
        // analysis: one member in memory at a time.
        let group = doc.group_with_data(i)?;
        bar.set_message(group.name.clone());
        let group = match &cast {
            Some(to) => cast_group(&group, to),
            None => Cow::Borrowed(&group),
        };
        reports.push(analyze_group(&group, &args.fit, &opts, &counter)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(path) = &args.plot {
        let mut charts = vec![savings_chart(&source.display(), &reports)];
        charts.extend(candidate_charts(&reports));
        plot::write(path, &charts)?;
    }
    let cast_note = cast.as_ref().map(cast_note);
    if args.json {
        let mut out = serde_json::json!({
            "input": source.display(),
            "format": doc.format.name(),
            "counted_on": counter.name(),
            "tensors": reports,
        });
        if let Some(note) = &cast_note {
            out["cast_note"] = serde_json::json!(note);
        }
        emit(&json(&out)?)
    } else {
        let mut t = table_text(
            &source.display(),
            &counter.name(),
            &reports,
            args.candidates,
        );
        if let Some(note) = &cast_note {
            let _ = writeln!(t, "note: {note}");
        }
        emit(&t)
    }
}

/// What `--cast` figures are: a prediction for a file ibp does not make.
fn cast_note(to: &DType) -> String {
    format!(
        "--cast {to}: the savings above are for a {to} copy of the f32 tensors, which no ibp command writes (compress keeps the input's dtype); make the {to} file yourself to get them"
    )
}

fn progress(n: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(n);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} analyzing [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    if n < 2 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}

/// Round an f32 tensor to bf16 or f16 (round to nearest even); other types
/// pass through.
fn cast_group<'a>(g: &'a TensorGroup<'a>, to: &DType) -> Cow<'a, TensorGroup<'a>> {
    if g.dtype != DType::F32 {
        return Cow::Borrowed(g);
    }
    let data: Vec<u8> = g
        .data
        .as_chunks::<4>()
        .0
        .iter()
        .flat_map(|b| {
            let x = f32::from_le_bytes(*b);
            if *to == DType::BF16 {
                half::bf16::from_f32(x).to_le_bytes()
            } else {
                half::f16::from_f32(x).to_le_bytes()
            }
        })
        .collect();
    Cow::Owned(TensorGroup {
        name: g.name.clone(),
        dtype: to.clone(),
        shape: g.shape.clone(),
        data: Cow::Owned(data),
    })
}

fn analyze_group(
    g: &TensorGroup<'_>,
    fit_args: &FitArgs,
    opts: &FitOptions,
    counter: &Counter<'_>,
) -> Result<Report> {
    let shape = g.row_shape(fit_args.row_len)?;
    let raw_bytes = shape.total_bytes();
    let mut r = Report {
        name: g.name.clone(),
        dtype: g.dtype.to_string(),
        shape: g.shape.clone(),
        rows: shape.rows,
        row_bytes: shape.row_bytes,
        status: String::new(),
        counted_on: counter.name(),
        count_seconds: 0.0,
        invariant_bits: 0,
        invariant_fraction: 0.0,
        threshold: None,
        chunk_bytes: None,
        raw_bytes,
        stored_bytes: raw_bytes,
        savings: 0.0,
        stored_with_metadata: raw_bytes,
        savings_with_metadata: 0.0,
        encoded_rows: 0,
        float_bytes: None,
        coding: "ibp",
        candidates: Vec::new(),
    };
    if shape.rows < 2 || shape.row_bytes == 0 {
        r.status = "raw (fewer than 2 rows: nothing is invariant across one tensor)".into();
        return Ok(r);
    }
    let rows = Rows::new(&g.data, shape.row_bytes as usize)?;
    let t0 = Instant::now();
    let f = counter.fit(rows, opts)?;
    r.count_seconds = t0.elapsed().as_secs_f64();
    let (stored, encoded) = if opts.sample == Sample::All {
        (f.chosen.stored_bytes, f.chosen.encoded_rows)
    } else {
        let q = ibp::layout::size_query(&f.codebook, rows)?;
        (q.total_stored, q.encoded_rows)
    };
    let l = shape.row_bytes;
    let metadata = 2 * l + shape.rows.div_ceil(8) + 8 * (shape.rows + 1);
    r.status = "fitted".into();
    r.invariant_bits = f.codebook.invariant_bits();
    r.invariant_fraction = r.invariant_bits as f64 / (8 * l) as f64;
    r.threshold = Some(f.threshold.fraction());
    r.chunk_bytes = Some(f.codebook.chunk().bytes());
    r.stored_bytes = stored;
    r.savings = 1.0 - stored as f64 / raw_bytes as f64;
    r.stored_with_metadata = stored + metadata;
    r.savings_with_metadata = 1.0 - r.stored_with_metadata as f64 / raw_bytes as f64;
    r.encoded_rows = encoded;
    if let Some(t) = ibp::float_code::FloatType::of_dtype(&g.dtype) {
        let table = ibp::float_code::fit(t, rows, &ibp::float_code::FitOptions::default())?;
        let coded = ibp::float_code::compress(&table, rows)?;
        r.float_bytes = Some(coded.stored_bytes());
        if coded.stored_bytes() < r.stored_with_metadata {
            r.coding = "float";
        }
    }
    r.candidates = f
        .candidates
        .iter()
        .map(|c| CandidateReport {
            threshold: c.threshold.fraction(),
            chunk_bytes: c.chunk.bytes(),
            stored_bytes: c.stored_bytes,
            savings: 1.0 - c.stored_bytes as f64 / f.sample_bytes as f64,
            chosen: *c == f.chosen,
        })
        .collect();
    Ok(r)
}

/// Most panels `--plot` draws (one per fitted tensor).
const MAX_PANELS: usize = 16;

/// Most bars of [`savings_chart`]; smaller tensors share one last bar.
const MAX_BARS: usize = 100;

/// Savings per tensor weighted by its bytes: a bar per tensor, largest
/// first, as wide as its raw bytes (MB) and as high as its savings with
/// metadata (%), so that a bar's area is the bytes it saves; a dashed line
/// at the savings of all tensors together.
fn savings_chart(input: &str, reports: &[Report]) -> Chart {
    let mut c = Chart::new(
        format!(
            "{input}: savings per tensor, largest first (bar width: its MB; area: bytes saved)"
        ),
        "MB of tensors, largest first",
        "savings",
    );
    c.y_format = plot::percent;
    let mut order: Vec<&Report> = reports.iter().collect();
    order.sort_by_key(|r| std::cmp::Reverse(r.raw_bytes));
    let mut x = 0.0;
    let mut bar = |label: String, raw: u64, stored: u64| {
        let w = raw as f64 / 1e6;
        let y = if raw == 0 {
            0.0
        } else {
            100.0 * (1.0 - stored as f64 / raw as f64)
        };
        c.bars.push(plot::Bar {
            label: label.chars().take(32).collect(),
            x0: x,
            x1: x + w,
            y,
        });
        x += w;
    };
    for r in order.iter().take(MAX_BARS) {
        bar(r.name.clone(), r.raw_bytes, r.stored_with_metadata);
    }
    let rest = order.get(MAX_BARS..).unwrap_or_default();
    if !rest.is_empty() {
        bar(
            format!("{} smaller tensors", rest.len()),
            rest.iter().map(|r| r.raw_bytes).sum(),
            rest.iter().map(|r| r.stored_with_metadata).sum(),
        );
    }
    let raw: u64 = reports.iter().map(|r| r.raw_bytes).sum();
    let stored: u64 = reports.iter().map(|r| r.stored_with_metadata).sum();
    if raw > 0 {
        let all = 100.0 * (1.0 - stored as f64 / raw as f64);
        c.hlines.push(plot::HLine {
            name: format!("all tensors: {all:.1}% saved"),
            y: all,
        });
    }
    // Headroom above the bars for their labels, written upwards.
    let hi = c.bars.iter().map(|b| b.y).fold(0.0, f64::max).max(1.0);
    let lo = c.bars.iter().map(|b| b.y).fold(0.0, f64::min);
    c.y_range = Some((lo, hi * 1.8));
    c.x_range = Some((0.0, x.max(1e-6)));
    c
}

/// Savings (%) against threshold, one line per chunk size, the chosen
/// candidate marked; a chart per fitted tensor, for the [`MAX_PANELS`]
/// tensors that hold the most bytes (largest first).
fn candidate_charts(reports: &[Report]) -> Vec<Chart> {
    let mut fitted: Vec<&Report> = reports
        .iter()
        .filter(|r| !r.candidates.is_empty())
        .collect();
    // Q: why by bytes? A: in name order the first panel of a model was an
    // 864-byte tensor; the tensors that hold the bytes decide the savings.
    fitted.sort_by_key(|r| std::cmp::Reverse(r.raw_bytes));
    let mut charts = Vec::new();
    for r in fitted.iter().take(MAX_PANELS) {
        let mut c = Chart::new(
            format!("{}: savings per (threshold, chunk)", r.name),
            "threshold",
            "savings",
        );
        c.y_format = plot::percent;
        c.legend_lower_right = true;
        // Q: why not from 0? A: the candidates usually lie within a few
        // points of each other; from 0 they would be one flat line. The
        // headroom above is for the chosen candidate's label, the room below
        // for the legend.
        let ys = r.candidates.iter().map(|c| 100.0 * c.savings);
        let lo = ys.clone().fold(f64::INFINITY, f64::min);
        let hi = ys.fold(f64::NEG_INFINITY, f64::max);
        let pad = (hi - lo).max(1.0);
        c.y_range = Some((lo - 0.4 * pad, hi + 0.3 * pad));
        let mut chunks: Vec<u32> = r.candidates.iter().map(|c| c.chunk_bytes).collect();
        chunks.sort_unstable();
        chunks.dedup();
        for (i, &chunk) in chunks.iter().enumerate() {
            let mut pts: Vec<&CandidateReport> = r
                .candidates
                .iter()
                .filter(|c| c.chunk_bytes == chunk)
                .collect();
            pts.sort_by(|a, b| a.threshold.total_cmp(&b.threshold));
            let xy = |c: &&CandidateReport| (c.threshold, 100.0 * c.savings);
            c.series.push(Series {
                name: format!("chunk {chunk} B"),
                points: pts.iter().map(xy).collect(),
                color: i,
                dots: true,
                marked: pts.iter().filter(|c| c.chosen).map(xy).collect(),
                ..Default::default()
            });
        }
        if let Some(best) = r.candidates.iter().find(|c| c.chosen) {
            c.labelled.push(plot::Labelled {
                label: format!(
                    "chosen: t = {:.2}, chunk {} B, {:.1}%",
                    best.threshold,
                    best.chunk_bytes,
                    100.0 * best.savings
                ),
                x: best.threshold,
                y: 100.0 * best.savings,
            });
        }
        charts.push(c);
    }
    if charts.is_empty() {
        charts.push(Chart::new(
            "no tensor was fitted (each has fewer than 2 rows)",
            "threshold",
            "savings",
        ));
    }
    if fitted.len() > MAX_PANELS {
        eprintln!(
            "ibp: --plot draws the candidates of the {MAX_PANELS} largest of {} fitted tensors",
            fitted.len()
        );
    }
    charts
}

fn table_text(input: &str, counted_on: &str, reports: &[Report], candidates: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "input: {input}");
    let _ = writeln!(s, "fitted on: {counted_on}");
    s.push('\n');
    let header = [
        "tensor",
        "dtype",
        "rows × row",
        "invariant",
        "threshold",
        "chunk",
        "raw",
        "stored",
        "savings",
        "+metadata",
        "encoded",
        "float",
        "coding",
    ];
    let rows: Vec<[String; 13]> = reports
        .iter()
        .filter(|r| r.threshold.is_some() || reports.len() == 1)
        .map(|r| {
            let fitted = r.threshold.is_some();
            [
                r.name.clone(),
                r.dtype.clone(),
                format!("{} × {} B", r.rows, r.row_bytes),
                if fitted {
                    format!("{:.1}%", 100.0 * r.invariant_fraction)
                } else {
                    "-".into()
                },
                r.threshold.map_or("-".into(), |t| format!("{t:.2}")),
                r.chunk_bytes.map_or("-".into(), |c| format!("{c} B")),
                human(r.raw_bytes),
                human(r.stored_bytes),
                format!("{:.1}%", 100.0 * r.savings),
                format!("{:.1}%", 100.0 * r.savings_with_metadata),
                if fitted {
                    format!("{:.1}%", 100.0 * r.encoded_rows as f64 / r.rows as f64)
                } else {
                    "raw".into()
                },
                r.float_bytes.map_or("-".into(), |b| {
                    format!(
                        "{} ({:.1}%)",
                        human(b),
                        100.0 * (1.0 - b as f64 / r.raw_bytes.max(1) as f64)
                    )
                }),
                if fitted { r.coding.into() } else { "-".into() },
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut line = |cells: &[String]| {
        let parts: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| pad(c, *w)).collect();
        s.push_str(parts.join("  ").trim_end());
        s.push('\n');
    };
    line(&header.map(String::from));
    for r in &rows {
        line(r);
    }
    let raw: u64 = reports.iter().map(|r| r.raw_bytes).sum();
    let stored: u64 = reports.iter().map(|r| r.stored_bytes).sum();
    if reports.len() > 1 && raw > 0 {
        s.push('\n');
        let _ = writeln!(
            s,
            "total: {} -> {} ({:.1}% saved)",
            human(raw),
            human(stored),
            100.0 * (1.0 - stored as f64 / raw as f64)
        );
    }
    let best: u64 = reports
        .iter()
        .map(|r| {
            let ibp = if r.threshold.is_some() {
                r.stored_with_metadata
            } else {
                r.raw_bytes
            };
            r.float_bytes.map_or(ibp, |f| f.min(ibp))
        })
        .sum();
    if raw > 0 && reports.iter().any(|r| r.float_bytes.is_some()) {
        let with_meta: u64 = reports.iter().map(|r| r.stored_with_metadata).sum();
        let floats = reports.iter().filter(|r| r.coding == "float").count();
        let _ = writeln!(
            s,
            "with metadata: ibp {} ({:.1}% saved); --coding auto {} ({:.1}% saved, {floats} tensors float-coded)",
            human(with_meta),
            100.0 * (1.0 - with_meta as f64 / raw as f64),
            human(best),
            100.0 * (1.0 - best as f64 / raw as f64)
        );
    }
    if candidates {
        for r in reports.iter().filter(|r| !r.candidates.is_empty()) {
            s.push('\n');
            let _ = writeln!(s, "{}: savings per (threshold, chunk), * = chosen", r.name);
            for c in &r.candidates {
                let _ = writeln!(
                    s,
                    "{} t={:.2}  chunk={} B  {:>6.2}%{}",
                    if c.chosen { "*" } else { " " },
                    c.threshold,
                    c.chunk_bytes,
                    100.0 * c.savings,
                    if c.chosen { "  <- chosen" } else { "" }
                );
            }
        }
    }
    let raw: Vec<&Report> = reports.iter().filter(|r| r.threshold.is_none()).collect();
    if let [only] = raw.as_slice() {
        let _ = writeln!(s, "{}: {}", only.name, only.status);
    } else if !raw.is_empty() {
        s.push('\n');
        let _ = writeln!(
            s,
            "{} tensors stay raw (fewer than 2 rows, e.g. 1-D biases and norms: nothing is invariant across one tensor); --json lists them",
            raw.len()
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, chosen: (f64, u32)) -> Report {
        let mut candidates = Vec::new();
        for chunk in [1, 2, 4] {
            for t in [0.9, 0.95, 1.0] {
                candidates.push(CandidateReport {
                    threshold: t,
                    chunk_bytes: chunk,
                    stored_bytes: 0,
                    savings: t / f64::from(chunk),
                    chosen: (t, chunk) == chosen,
                });
            }
        }
        Report {
            name: name.into(),
            dtype: "f32".into(),
            shape: vec![2, 2],
            rows: 2,
            row_bytes: 8,
            status: "fitted".into(),
            counted_on: "CPU".into(),
            count_seconds: 0.0,
            invariant_bits: 0,
            invariant_fraction: 0.0,
            threshold: Some(chosen.0),
            chunk_bytes: Some(chosen.1),
            raw_bytes: 16,
            stored_bytes: 8,
            savings: 0.5,
            stored_with_metadata: 8,
            savings_with_metadata: 0.5,
            encoded_rows: 2,
            float_bytes: None,
            coding: "ibp",
            candidates,
        }
    }

    #[test]
    fn candidate_plot_has_a_line_per_chunk_and_marks_the_chosen_one() {
        let charts = candidate_charts(&[report("w", (0.95, 2)), report("v", (1.0, 1))]);
        assert_eq!(charts.len(), 2);
        let c = &charts[0];
        let names: Vec<&str> = c.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["chunk 1 B", "chunk 2 B", "chunk 4 B"]);
        assert_eq!(c.series[1].marked, [(0.95, 47.5)]);
        assert!(c.series[0].marked.is_empty() && c.series[2].marked.is_empty());
        let s = plot::svg(&charts).unwrap();
        let t = plot::texts(&s);
        for want in [
            "w: savings per (threshold, chunk)",
            "chosen: t = 0.95, chunk 2 B, 47.5%",
            "chosen: t = 1.00, chunk 1 B, 100.0%",
            "chunk 4 B",
        ] {
            assert!(t.contains(&want), "{want}: {t:?}");
        }
        assert_eq!(s.matches(r#"r="6""#).count(), 2);
    }

    #[test]
    fn candidate_plot_without_fitted_tensors_says_so() {
        let mut r = report("b", (1.0, 1));
        r.candidates.clear();
        let charts = candidate_charts(&[r]);
        assert_eq!(charts.len(), 1);
        assert!(charts[0].title.starts_with("no tensor was fitted"));
    }
}
