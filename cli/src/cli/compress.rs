//! `ibp compress`: a tensor file (safetensors, npy, npz, raw) into an `.ibp`
//! container that restores it byte for byte.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;

use ibp::container::{IbpFile, RestoreOptions};
use ibp::io::{Fingerprint, SourceFormat};
use ibp::layout::Layout;
use ibp::pipeline::{
    Clustering, Coding, CompressOptions, CompressReport, DEFAULT_BATCH_BYTES, DeviceSeconds,
    compress_document,
};
use ibp::{Error, ErrorKind, Result};
use serde::Serialize;

use super::device::{Device, DeviceArg};
use super::input::{FitArgs, InputArgs, Source, is_stdin};
use super::output::{ByteProgress, Contents, OutputFile, Unreadable, check_output};
use super::table::{GroupSummary, Totals, emit, group_summary, human, json, percent, savings};

/// Arguments of `ibp compress`.
#[derive(clap::Args, Debug)]
// Analyze falls back to the embedded Cora features; compressing them by
// accident would only confuse, so here the file is required.
#[command(mut_arg("file", |a| a.required(true).help(
    "Input file: .safetensors, .npy, .npz, or raw bytes with --dtype and --shape; `-` reads standard input (then give -o)"
)))]
pub struct Args {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    fit: FitArgs,
    /// The container to write; `-` writes it to standard output (the
    /// report then goes to stderr). Default: FILE with `.ibp` appended
    /// (`model.safetensors` → `model.safetensors.ibp`), never overwritten
    /// without --force; needed when FILE is `-`.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
    /// Layout of compressed tensors: packed (smallest) or fixed (every
    /// tensor in a slot of its full size, for random access by index; never
    /// smaller than the input).
    #[arg(long, value_enum, default_value_t = LayoutArg::Packed)]
    layout: LayoutArg,
    /// Clustered codebooks (packed layout): `off` (one codebook per
    /// tensor, readable by every ibp), `auto` (sweep k per tensor and keep
    /// clusters only when the file gets smaller; slower), or a number of
    /// clusters K (at most K; 1 is off).
    ///
    /// Q: why `off` by default and not `auto`? A: `auto` never makes a file
    /// larger, but its sweep costs up to seconds per tensor, and on the
    /// data we measured it gains at most about one point of savings
    /// (docs/results/clusters-cpu.md); clustered files also need an ibp
    /// that reads them (FORMAT.md §6.8).
    #[arg(long, value_name = "auto|off|K", default_value = "off")]
    clusters: String,
    /// How tensors are coded: `auto` (per tensor, whichever of IBP and
    /// float coding makes the smaller file; IBP on a tie and for dtypes
    /// other than bf16, f16, f32 and FP8), `ibp` (IBP only: files every
    /// ibp reads) or `float` (float coding for every float tensor). The
    /// report's layout column says which each tensor got, and the other's
    /// size. Float-coded files need an ibp that reads them (FORMAT.md
    /// §6.9). With `--layout fixed`, and for tensors over 64 MiB (the
    /// float coder holds a tensor's coded form), `auto` keeps IBP.
    #[arg(long, value_name = "auto|ibp|float", default_value = "auto")]
    coding: String,
    /// Where to fit and compress: `auto` (the GPU when this ibp was built
    /// with `cuda` and one is usable, else the CPU), `cpu` or `gpu` (an
    /// error without a usable GPU). The container is byte for byte the same
    /// on either; the report says which was used and how fast it went.
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    device: DeviceArg,
    /// Overwrite OUT if it exists.
    #[arg(long)]
    force: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// List every tensor and every reason a tensor was stored raw (by
    /// default a file of more than ten tensors shows its ten largest and
    /// one line for the rest).
    #[arg(short, long)]
    verbose: bool,
    /// Memory for one batch of rows, in bytes: tensors are compressed,
    /// checked and written one batch at a time. Hidden: the default suits
    /// every input, and the output is the same whatever the batch; tests
    /// use small batches to check the memory bound on small inputs.
    #[arg(long, hide = true, default_value_t = DEFAULT_BATCH_BYTES as u64, value_parser = clap::value_parser!(u64).range(1..))]
    batch_bytes: u64,
}

/// What `--json` prints.
#[derive(Serialize, Debug)]
struct Report {
    input: String,
    input_format: &'static str,
    input_bytes: u64,
    output: String,
    output_bytes: u64,
    /// `1 - output_bytes / input_bytes`: negative when the container is
    /// larger (an npz whose tensors were already deflated).
    file_savings: f64,
    layout: &'static str,
    /// `--clusters` as given.
    clusters: String,
    /// `--coding` as given.
    coding: &'static str,
    groups: Vec<GroupSummary>,
    totals: Totals,
    notes: Vec<String>,
    device: DeviceReport,
}

/// Where the work was done, and how fast (`--json`'s `device`).
#[derive(Serialize, Debug)]
struct DeviceReport {
    /// `--device` as given: `auto`, `cpu` or `gpu`.
    requested: &'static str,
    /// What was used: `gpu` or `cpu`.
    used: &'static str,
    /// The GPU's name, or the CPU's thread count.
    name: String,
    /// Why `auto` used the CPU (no usable GPU, a build without `cuda`).
    #[serde(skip_serializing_if = "Option::is_none")]
    fallback_reason: Option<String>,
    /// Tensor groups fitted and compressed on the GPU (the others were
    /// stored raw, or were too large for its free memory, or clustered:
    /// those the CPU does).
    groups_on_gpu: usize,
    /// Seconds spent fitting, compressing and writing (not the final
    /// read-back check).
    compress_seconds: f64,
    /// Input bytes per second over `compress_seconds`, in GB/s (10^9).
    compress_gb_per_s: f64,
}

pub fn run(args: Args) -> Result<()> {
    let started_process = std::time::Instant::now();
    // Everything that can be refused cheaply is refused before the input is
    // read.
    let fit = args.fit.options()?;
    let clusters = clusters(&args)?;
    // Refused before the input is read too: `--device gpu` without a GPU.
    let device = Device::pick(args.device)?;
    let input =
        args.input.file.clone().ok_or_else(|| {
            Error::invalid("give the file to compress: ibp compress FILE -o OUT.ibp")
        })?;
    let output = match &args.output {
        Some(o) => o.clone(),
        None => default_output(&input)?,
    };
    let target = check_output(
        &output,
        args.force,
        Some(input.as_path()).filter(|p| !is_stdin(p)),
    )?;

    let source = Source::open(&args.input)?;
    let doc = source.parse(&args.input)?;
    let opts = options(&args, &doc, fit, clusters)?;

    let total = doc.group_bytes() + doc.raw_bytes();
    let bar = ByteProgress::new(total, "compressing");
    // A file still being written (a checkpoint being saved) can change
    // under ibp. Whatever fails then, say so rather than blame the data.
    let input_changed = || Fingerprint::of(source.bytes()) != doc.original;
    let changed = |e: Error| {
        if !input_changed() {
            return e;
        }
        Error::new(
            ErrorKind::Io,
            format!(
                "{} changed while ibp read it ({}); nothing was written to {}; run again once the file is complete",
                source.display(),
                e.message(),
                output.display()
            ),
        )
    };
    let mut out = OutputFile::create(&target, args.force, Unreadable::Spool)?;
    let started = std::time::Instant::now();
    let progress = |done, _| bar.update(done);
    let opts = opts.with_progress(&progress);
    let report = compress_on(&device, &doc, &opts, out.writer()).map_err(changed)?;
    let written = out.finish()?;
    let compress_seconds = started.elapsed().as_secs_f64();
    bar.clear();
    if std::env::var_os("IBP_TIMINGS").is_some_and(|v| v == "1") {
        eprintln!("{}", timings_line(&report, compress_seconds));
    }

    // Read the container back before it takes OUT's name: open checks every
    // checksum and structure, and the table then shows what the file holds.
    let bug = not_read_back;
    let file = match written.contents() {
        Contents::File(p) => IbpFile::open(p).map_err(bug)?,
        Contents::Gone => return Err(bug(Error::invalid("nothing to read back"))),
    };
    // Q: why restore the whole file once more, when every group was checked
    // as it was compressed? A: the groups were checked against the input as
    // it was then; if it changed meanwhile, only restoring what the
    // container holds and comparing with the hash taken when the input was
    // first read shows whether the container gives back that file.
    let check = ByteProgress::new(doc.original.len, "verifying");
    let checked = |done, _| check.update(done);
    let restore = RestoreOptions::default()
        .with_block_bytes(args.batch_bytes)
        .with_progress(&checked);
    file.restore(&mut std::io::sink(), &restore)
        .map_err(|e| {
            // A changed input is the likely cause, and no bug: say only that.
            if input_changed() {
                return changed(e);
            }
            Error::new(
                e.kind(),
                format!(
                    "the container just written does not restore the input ({}); nothing was written to {}; this is an ibp bug, please report it",
                    e.message(),
                    output.display()
                ),
            )
        })?;
    check.clear();
    let groups = summaries(&file, &report);
    let output_bytes = file.bytes().len() as u64;
    drop(file);
    written.commit()?;

    let r = Report {
        input: input.display().to_string(),
        input_format: doc.format.name(),
        input_bytes: report.input_bytes,
        output: output.display().to_string(),
        output_bytes,
        file_savings: savings(report.input_bytes, output_bytes),
        layout: args.layout.layout().name(),
        clusters: args.clusters.clone(),
        coding: Coding::parse(&args.coding)?.name(),
        totals: Totals::of(&groups),
        groups,
        notes: notes(&report),
        device: DeviceReport::new(args.device, &device, &report, compress_seconds),
    };
    let report = if args.json {
        json(&r)?
    } else {
        text(&r, doc.format, args.verbose, started_process)
    };
    print_report(&report, target.is_stdout())
}

/// Print the report, to stderr when the container went to stdout (the
/// report must not mix with it).
fn print_report(report: &str, container_on_stdout: bool) -> Result<()> {
    if container_on_stdout {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
        Ok(())
    } else {
        emit(report)
    }
}

impl DeviceReport {
    /// Where `report`'s groups were compressed, in `seconds`.
    fn new(requested: DeviceArg, device: &Device, report: &CompressReport, seconds: f64) -> Self {
        DeviceReport {
            requested: requested.name(),
            used: device.kind(),
            name: device.name(),
            fallback_reason: device.why().map(str::to_string),
            groups_on_gpu: report.groups.iter().filter(|g| g.on_device).count(),
            compress_seconds: seconds,
            // The input file's bytes, as the end-to-end rate counts them
            // (an npz's tensors inflate to more).
            compress_gb_per_s: report.input_bytes as f64 / seconds.max(1e-9) / 1e9,
        }
    }
}

/// `--clusters`, checked against `--layout`.
fn clusters(args: &Args) -> Result<Clustering> {
    let clusters = Clustering::parse(&args.clusters)?;
    if clusters != Clustering::Off && args.layout.layout() != Layout::Packed {
        return Err(Error::invalid(format!(
            "--clusters {} needs the packed layout; drop --layout {} or use --clusters off",
            args.clusters,
            args.layout.layout().name()
        )));
    }
    Ok(clusters)
}

/// The pipeline's options for `doc` (without progress), `--row-len`
/// checked against every tensor it applies to.
fn options(
    args: &Args,
    doc: &ibp::io::Document<'_>,
    fit: ibp::fit::FitOptions,
    clusters: Clustering,
) -> Result<CompressOptions<'static>> {
    let mut opts = CompressOptions::default()
        .with_fit(fit)
        .with_layout(args.layout.layout().into())
        .with_clusters(clusters)
        .with_coding(Coding::parse(&args.coding)?)
        .with_batch_bytes(usize::try_from(args.batch_bytes).unwrap_or(usize::MAX));
    if let Some(n) = args.fit.row_len {
        for g in &doc.groups {
            g.row_shape(Some(n)).map_err(|e| {
                Error::invalid(format!(
                    "--row-len {n} does not fit tensor {:?}: {}; pick the tensors it fits with --tensor",
                    g.name,
                    e.message()
                ))
            })?;
            opts = opts.with_row_len(g.name.clone(), n);
        }
    }
    Ok(opts)
}

/// Compress `doc` into `out` on `device`.
fn compress_on<W: std::io::Write>(
    device: &Device,
    doc: &ibp::io::Document<'_>,
    opts: &CompressOptions<'_>,
    out: W,
) -> Result<CompressReport> {
    let (_, report) = match device {
        Device::Cpu { .. } => compress_document(doc, opts, out)?,
        #[cfg(feature = "cuda")]
        Device::Gpu(gpu) => {
            let mut groups = ibp::gpu::GpuGroups::new(gpu)?;
            ibp::pipeline::compress_document_on(doc, opts, out, &mut groups)?
        }
    };
    Ok(report)
}

/// The error when the container just written does not open.
fn not_read_back(e: Error) -> Error {
    Error::new(
        e.kind(),
        format!(
            "the container just written does not read back ({}); this is an ibp bug, please report it",
            e.message()
        ),
    )
}

/// The table's rows: what `file` holds, with the reasons `report` gives
/// for the groups stored raw.
fn summaries(file: &IbpFile, report: &CompressReport) -> Vec<GroupSummary> {
    let reasons: HashMap<&str, &str> = report
        .groups
        .iter()
        .filter_map(|g| Some((g.name.as_str(), g.raw_reason.as_deref()?)))
        .collect();
    let sizes: HashMap<&str, (Option<u64>, Option<u64>)> = report
        .groups
        .iter()
        .map(|g| (g.name.as_str(), (g.ibp_bytes, g.float_bytes)))
        .collect();
    let mut groups = GroupSummary::all(file);
    for g in &mut groups {
        g.raw_reason = reasons.get(g.name.as_str()).map(|r| r.to_string());
        if let Some(&(ibp, float)) = sizes.get(g.name.as_str()) {
            // Both sizes when both were worked out; the table shows the
            // one not chosen beside the layout.
            g.ibp_bytes = ibp.filter(|_| float.is_some());
            g.float_bytes = float;
        }
    }
    groups
}

/// The report's notes: the document's, the tensors kept verbatim, and
/// each group's.
fn notes(report: &CompressReport) -> Vec<String> {
    let mut notes = report.notes.clone();
    if report.verbatim_tensors > 0 {
        notes.push(format!(
            "{} tensors under {} bytes ({} bytes in all) kept verbatim, not compressed: too small to pay for a codebook",
            report.verbatim_tensors,
            ibp::pipeline::TINY_TENSOR_BYTES,
            report.verbatim_bytes
        ));
    }
    notes.extend(
        report
            .groups
            .iter()
            .filter_map(|g| Some(format!("tensor {}: {}", g.name, g.note.as_deref()?))),
    );
    notes
}

/// Where `ibp compress FILE` writes without `-o`: `FILE.ibp`, beside FILE
/// (as `zstd FILE` writes `FILE.zst`).
fn default_output(input: &std::path::Path) -> Result<PathBuf> {
    if is_stdin(input) {
        return Err(Error::invalid(
            "the input is standard input, so there is no name to add .ibp to; give -o OUT.ibp (or -o - for standard output)",
        ));
    }
    let mut name = input.as_os_str().to_os_string();
    name.push(".ibp");
    Ok(PathBuf::from(name))
}

/// The human-readable report: the group table (a summary unless
/// `verbose`), then totals, tensors stored raw, notes and the device line.
fn text(r: &Report, format: SourceFormat, verbose: bool, started: std::time::Instant) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "input:  {} ({}, {})",
        r.input,
        r.input_format,
        human(r.input_bytes)
    );
    let clustered: Vec<String> = r
        .groups
        .iter()
        .filter_map(|g| Some(format!("{} k = {}", g.name, g.clusters?)))
        .collect();
    let clusters = if clustered.is_empty() {
        String::new()
    } else {
        format!("; clustered: {}", clustered.join(", "))
    };
    let floats = r.groups.iter().filter(|g| g.layout == "float").count();
    let _ = writeln!(
        s,
        "output: {} ({} layout{clusters}; coding {}: {floats} of {} tensors float-coded)",
        r.output,
        r.layout,
        r.coding,
        r.groups.len()
    );
    s.push('\n');
    s.push_str(&group_summary(&r.groups, verbose));
    s.push('\n');
    let _ = writeln!(s, "{}", r.totals.line());
    let change = if r.output_bytes <= r.input_bytes {
        format!("{} smaller than the input", percent(r.file_savings))
    } else {
        format!(
            "{:.2}× the input's size",
            r.output_bytes as f64 / r.input_bytes.max(1) as f64
        )
    };
    let _ = writeln!(
        s,
        "file:   {} -> {} ({} bytes -> {} bytes, {change})",
        human(r.input_bytes),
        human(r.output_bytes),
        r.input_bytes,
        r.output_bytes
    );
    if format == SourceFormat::Npz && r.output_bytes > r.input_bytes {
        s.push_str(
            "note: the npz's tensors were already deflated; the .ibp keeps them in a form the GPU decompresses at link speed, and re-creates the deflate stream on restore\n",
        );
    }
    s.push_str(&raw_lines(&r.groups, verbose));
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let _ = writeln!(
        s,
        "{}",
        device_line(&r.device, r.input_bytes, started.elapsed().as_secs_f64())
    );
    if let Some(why) = &r.device.fallback_reason {
        let _ = writeln!(
            s,
            "note: --device {} used the CPU: {why}",
            r.device.requested
        );
    }
    s
}

/// The tensors stored raw, each named. With `verbose`, a line per tensor
/// with its own reason; otherwise a line per kind of reason (a model has
/// dozens of 1-D biases and norms), naming up to five tensors.
fn raw_lines(groups: &[GroupSummary], verbose: bool) -> String {
    let mut s = String::new();
    let raw: Vec<(&str, &str)> = groups
        .iter()
        .filter_map(|g| Some((g.name.as_str(), g.raw_reason.as_deref()?)))
        .collect();
    if verbose {
        for (name, reason) in raw {
            let _ = writeln!(s, "stored raw: {name}: {reason}");
        }
        return s;
    }
    // Q: why a kind and not the reason itself? A: "compressed form (5342
    // bytes) is not smaller" differs in its number from tensor to tensor,
    // and each made a line of its own that named no tensor.
    let kind = |reason: &str| -> String {
        if reason.starts_with("compressed form") && reason.ends_with("is not smaller") {
            "its compressed form is not smaller".into()
        } else {
            reason.to_string()
        }
    };
    let mut by_kind: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (name, reason) in raw {
        by_kind.entry(kind(reason)).or_default().push(name);
    }
    for (kind, names) in by_kind {
        const SHOWN: usize = 5;
        let more = names.len().saturating_sub(SHOWN);
        let _ = writeln!(
            s,
            "stored raw, {kind}: {}{}",
            names[..names.len().min(SHOWN)].join(", "),
            if more > 0 {
                format!(" and {more} more (--verbose lists them)")
            } else {
                String::new()
            }
        );
    }
    s
}

/// `IBP_TIMINGS=1`'s line: the device's phases summed over its groups, and
/// the rest of the `total` seconds (the CPU's groups, raw groups, the
/// container's head and tail).
fn timings_line(r: &CompressReport, total: f64) -> String {
    let t = r
        .groups
        .iter()
        .filter_map(|g| g.device_seconds)
        .fold(DeviceSeconds::default(), |a, b| a + b);
    let rest = total - (t.load + t.fit + t.compress + t.read + t.verify);
    format!(
        "timings: load {:.3} s, fit {:.3} s, compress {:.3} s, read {:.3} s, verify {:.3} s, other {:.3} s, total {total:.3} s",
        t.load, t.fit, t.compress, t.read, t.verify, rest
    )
}

/// `device: GPU (NVIDIA H200, 3 groups): compressed 1.1 GB at 5234.1 MB/s
/// (fit, compress and write, 0.21 s); 0.35 s end to end`.
///
/// Q: why two times? A: the first is the work the device did (the rate
/// `--json` reports as `compress_gb_per_s`); the second is the whole run
/// from the process's start, read-back check included, which is what a
/// stopwatch around the command (as scripts/demo.sh holds) measures. Both
/// are labelled so they are not taken for one another.
fn device_line(d: &DeviceReport, input_bytes: u64, end_to_end: f64) -> String {
    let used = if d.used == "gpu" {
        format!(
            "GPU ({}, {} group{})",
            d.name,
            d.groups_on_gpu,
            if d.groups_on_gpu == 1 { "" } else { "s" }
        )
    } else {
        format!("CPU ({})", d.name.trim_start_matches("CPU, "))
    };
    format!(
        "device: {used}: compressed {} at {:.2} MB/s (fit, compress and write: {:.2} s); {:.2} s end to end, {:.2} MB/s, with reading and the final check",
        human(input_bytes),
        d.compress_gb_per_s * 1e3,
        d.compress_seconds,
        end_to_end,
        input_bytes as f64 / end_to_end.max(1e-9) / 1e6
    )
}

/// `--layout`: the library's [`Layout`] as clap parses it.
///
/// Q: why not derive `clap::ValueEnum` on `ibp::layout::Layout` itself?
/// A: that put clap in the library's dependencies (behind a feature); the
/// command line owns its parsing, so the library builds without clap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LayoutArg {
    /// Stored forms back to back, with an offsets table (§3.2): the
    /// smallest, and the one random access needs offsets for.
    Packed,
    /// Each stored form at the start of its tensor's `L`-byte slot, zeros
    /// after it (§3.1): no offsets, tensor `i` at byte `i·L`.
    #[value(name = "fixed", alias = "fixed-stride")]
    FixedStride,
}

impl LayoutArg {
    /// The library's layout of this name.
    fn layout(self) -> Layout {
        match self {
            LayoutArg::Packed => Layout::Packed,
            LayoutArg::FixedStride => Layout::FixedStride,
        }
    }
}
