//! `ibp bench FILE`: the README's GPU measurements on the user's own
//! tensors. The tensors are chosen and read (any format `ibp compress`
//! takes), fitted and compressed, then decoded on the GPU every way the
//! README measures the built-in tables, each output checked bit for bit
//! first, beside the ceilings of this machine measured in the same run.
//!
//! `--json` prints the schema documented in the README ("`ibp bench FILE
//! --json`"), `ibp-bench-file/1`; new fields may be added, none renamed or
//! removed without a new version.

use std::fmt::Write as _;

use ibp::io::Document;
use ibp::{Error, Result};
use serde::Serialize;

use super::super::input::Source;
use super::super::table::human;
use super::Args;

/// The `schema` value of `--json`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const SCHEMA: &str = "ibp-bench-file/1";

/// The tensors measured: rows of one length, concatenated.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct Selection {
    names: Vec<String>,
    skipped: Vec<Skipped>,
    row_bytes: usize,
    /// The selection's bytes (all of it, or its first rows up to the size
    /// measured).
    data: Vec<u8>,
    /// Bytes of the whole selection.
    selected_bytes: u64,
    /// Bytes per element and whether the elements are floats (of the first
    /// tensor chosen), for the peers' typed codecs.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    elem: (usize, bool),
    /// The first tensor's type where ibp's float coding applies to it.
    float_type: Option<ibp::float_code::FloatType>,
}

/// A tensor left out, and why.
#[derive(Serialize, Debug)]
struct Skipped {
    name: String,
    reason: String,
}

/// Choose the tensors: those named by `--tensor` (all of one row length),
/// or else every tensor of the row length holding the most bytes; read at
/// most `cap` bytes of them.
fn select(doc: &Document<'_>, named: bool, cap: usize) -> Result<Selection> {
    // (group, row length, bytes): a deferred npz member's data is not read
    // yet, so its size comes from its shape.
    let mut usable: Vec<(usize, u64, u64)> = Vec::new();
    let mut skipped = Vec::new();
    for (i, g) in doc.groups.iter().enumerate() {
        let shape = g.row_shape(None)?;
        let reason = if shape.rows == 0 || shape.row_bytes == 0 {
            Some("empty".to_string())
        } else if g.shape.len() < 2 {
            Some(format!("{}-D (one row)", g.shape.len()))
        } else if shape.rows < 2 {
            Some("one row".to_string())
        } else {
            None
        };
        match reason {
            Some(reason) if named => {
                return Err(Error::invalid(format!(
                    "tensor {:?} cannot be benchmarked: {reason}; ibp measures tables of rows",
                    g.name
                )));
            }
            Some(reason) => skipped.push(Skipped {
                name: g.name.clone(),
                reason,
            }),
            None => usable.push((i, shape.row_bytes, shape.rows * shape.row_bytes)),
        }
    }
    // The row length with the most bytes (the first such on a tie).
    let mut by_len: Vec<(u64, u64)> = Vec::new();
    for &(_, l, bytes) in &usable {
        match by_len.iter_mut().find(|(len, _)| *len == l) {
            Some((_, b)) => *b += bytes,
            None => by_len.push((l, bytes)),
        }
    }
    let Some(&(row_bytes, _)) = by_len.iter().rev().max_by_key(|(_, b)| *b) else {
        return Err(Error::invalid(
            "no tensor with rows to measure (all are empty or 1-D); name a 2-D one with --tensor",
        ));
    };
    if named && by_len.len() > 1 {
        let lens: Vec<String> = usable
            .iter()
            .map(|&(i, l, _)| format!("{} ({l} B)", doc.groups[i].name))
            .collect();
        return Err(Error::invalid(format!(
            "the tensors named have rows of different lengths: {}; name tensors of one row length",
            lens.join(", ")
        )));
    }
    let mut names = Vec::new();
    let mut data = Vec::new();
    let mut selected_bytes = 0;
    let mut elem = None;
    let mut float_type = None;
    let l = row_bytes as usize;
    let cap = cap.max(l) / l * l;
    for &(i, len, _) in &usable {
        let name = doc.groups[i].name.clone();
        if len != row_bytes {
            skipped.push(Skipped {
                name,
                reason: format!("rows of {len} B, not {row_bytes} B"),
            });
            continue;
        }
        let g = doc.group_with_data(i)?;
        if elem.is_none() {
            float_type = ibp::float_code::FloatType::of_dtype(&g.dtype);
        }
        elem.get_or_insert_with(|| {
            use ibp::io::DType;
            let float = matches!(g.dtype, DType::F64 | DType::F32 | DType::F16 | DType::BF16);
            (g.dtype.size() as usize, float)
        });
        selected_bytes += g.data.len() as u64;
        let take = g.data.len().min(cap - data.len());
        data.extend_from_slice(&g.data[..take]);
        names.push(name);
    }
    Ok(Selection {
        names,
        skipped,
        row_bytes: l,
        data,
        selected_bytes,
        elem: elem.unwrap_or((1, false)),
        float_type,
    })
}

/// Everything `--json` prints.
#[derive(Serialize, Debug)]
struct Report {
    schema: &'static str,
    file: String,
    format: &'static str,
    tensors: Vec<String>,
    skipped: Vec<Skipped>,
    row_bytes: usize,
    /// Rows measured (after replication or truncation).
    rows: u64,
    /// Bytes measured.
    bytes: u64,
    /// Bytes of the chosen tensors in the file.
    selected_bytes: u64,
    /// How the measured bytes relate to the selection: `whole`,
    /// `replicated ×K` or `first N rows`.
    sample: String,
    codebook: CodebookReport,
    gpu: GpuReport,
    ceilings: Ceilings,
    /// The path `Decoder::range_auto` takes for this table, as its first
    /// call measured: `dma` or `zero_copy`.
    range_auto: &'static str,
    /// How `range_auto` chose, against this run's measurements.
    range_auto_calibration: RangeAutoReport,
    measurements: Vec<Measurement>,
    /// With `--peers`: the comparison table (Markdown, as `ibp bench
    /// --peers` prints it) of the peers and ibp on the same bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    peers_markdown: Option<String>,
}

/// `range_auto`'s calibration (its first call timing both paths on a
/// sample) and how its choice compares with this run's measurements.
#[derive(Serialize, Debug, Default)]
struct RangeAutoReport {
    /// The path the rule `Decoder::prefers_dma` gives before calibrating.
    prior: &'static str,
    /// Rows of the sample both paths decoded.
    sample_rows: u64,
    /// Seconds of each path on the sample (the better of two runs).
    zero_copy_seconds: Option<f64>,
    dma_seconds: Option<f64>,
    /// The faster of `range_pinned_zero_copy` and `range_pinned_dma`.
    faster_in_this_run: &'static str,
    /// The chosen path's rate over the faster one's (issue 33: ≥ 0.97).
    chosen_of_faster: Option<f64>,
}

#[derive(Serialize, Debug)]
struct CodebookReport {
    chunk_bytes: u32,
    threshold: f64,
    /// `1 - packed payload / input` of the measured bytes.
    savings: f64,
    /// Input bytes per stored byte.
    ratio: f64,
}

#[derive(Serialize, Debug)]
struct GpuReport {
    name: String,
    sm_count: u32,
    compute_capability: String,
    driver_cuda: String,
}

/// This machine's ceilings, measured in the same run (GB/s, 10^9 B/s).
#[derive(Serialize, Debug, Clone, Copy)]
struct Ceilings {
    /// Pinned host-to-device DMA copy, 1 GiB.
    h2d_dma_copy_gb_per_s: f64,
    /// Zero-copy read of pinned host memory by a kernel, 1 GiB.
    zero_copy_read_gb_per_s: f64,
    /// Device-to-device copy of 1 GiB, bytes read plus written.
    device_copy_gb_per_s: f64,
}

/// One measurement. Rates in GB/s (10^9 B/s).
#[derive(Serialize, Debug)]
struct Measurement {
    /// Stable identifier (`range_pinned_zero_copy`, ...).
    id: &'static str,
    what: String,
    /// Decoded bytes per second (decode), input bytes per second
    /// (compression); `null` when the check failed.
    gb_per_s: Option<f64>,
    /// Bytes per second through the path the ceiling bounds: stored bytes
    /// read from the host (host decode), input bytes read from the host
    /// (host compression), bytes read plus written (device).
    through_gb_per_s: Option<f64>,
    /// Which of `ceilings` bounds it.
    ceiling: &'static str,
    ceiling_gb_per_s: f64,
    /// `through_gb_per_s / ceiling_gb_per_s`.
    of_ceiling: Option<f64>,
    /// Every output was compared bit for bit (decodes with the original
    /// bytes, compression with the CPU encoder and fit) and matched.
    bit_exact: bool,
    /// The mismatch, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub fn run(args: &Args) -> Result<()> {
    // The file first: an unreadable file or an unknown tensor is said
    // before the GPU is looked for.
    let source = Source::open(&args.input)?;
    let doc = source.parse(&args.input)?;
    if let Some(why) = no_gpu() {
        // Q: why not an error, as before? A: the user asked how ibp does on
        // their file; the CPU's numbers answer most of that, and the report
        // says plainly that the GPU part was skipped and why.
        return super::cpu::run(args, &source.display(), &doc, &why);
    }
    let sel = select(&doc, !args.input.tensors.is_empty(), args.real_bytes)?;
    measure(args, &source.display(), doc.format.name(), sel)
}

/// Why the GPU measurements cannot run here, if they cannot.
#[cfg(feature = "cuda")]
fn no_gpu() -> Option<String> {
    ibp::gpu::Gpu::first()
        .err()
        .map(|e| format!("no usable GPU: {}", e.message()))
}

#[cfg(not(feature = "cuda"))]
fn no_gpu() -> Option<String> {
    Some("this ibp was built without the `cuda` feature (rebuild with --features cuda)".into())
}

/// `--peers` for `bench FILE`: loaded before the GPU is looked for, so a
/// missing library is the first error.
#[cfg(feature = "cuda")]
fn load_peers(args: &Args) -> Result<Option<super::peers::Peers>> {
    if args.section != "all" {
        return Err(Error::invalid(
            "--section selects the built-in benchmarks; `ibp bench FILE` measures everything on the file",
        ));
    }
    super::peers::Peers::load(&args.peers)
}

#[cfg(not(feature = "cuda"))]
fn measure(_: &Args, _: &str, _: &'static str, _: Selection) -> Result<()> {
    // `run` measures on the CPU instead in a build without `cuda`.
    Err(Error::unsupported(
        "ibp bench measures on a GPU: this ibp was built without the `cuda` feature; rebuild with --features cuda",
    ))
}

#[cfg(feature = "cuda")]
fn measure(args: &Args, file: &str, format: &'static str, sel: Selection) -> Result<()> {
    let (gpu, stream) = open_gpu()?;
    let peers = load_peers(args)?;
    let opts = super::decode_options(args)?;
    let b = super::decode::Bench {
        gpu: &gpu,
        stream: &stream,
        opts: &opts,
        dma_piece: super::dma_piece_bytes(args),
    };
    let l = sel.row_bytes;
    let (data, sample) = sample(sel.data, sel.selected_bytes, l, args.real_bytes);
    let rows = (data.len() / l) as u64;
    eprintln!(
        "bench: {} ({} rows of {l} B, {})...",
        sel.names.join(", "),
        rows,
        human(data.len() as u64)
    );
    let ceilings = measure_ceilings(&b)?;

    let fit = ibp::fit::fit(ibp::Rows::new(&data, l)?, &Default::default())?;
    let cb = &fit.codebook;
    let ratio = packed_ratio(&data, l, cb)?;
    let mut out = Measurements {
        rows: Vec::new(),
        ceilings,
    };
    decode_rows(&b, &data, l, cb, &mut out)?;
    let (range_auto, range_auto_calibration) = range_auto_rows(&b, &data, l, cb, &mut out)?;
    let savings = 1.0 - 1.0 / ratio;
    compress_rows(&gpu, &data, l, savings, &mut out)?;
    // Peers (nvCOMP) on the same bytes, beside ibp: a Markdown table after
    // ibp's (text), or `peers_markdown` (JSON).
    let peers_markdown = match &peers {
        Some(p) => {
            let name = sel.names.join(", ");
            let t = super::peers::Table {
                name: &name,
                data: &data,
                row_bytes: l,
                elem_bytes: sel.elem.0,
                float: sel.elem.1,
                float_type: sel.float_type,
                codebook: cb,
            };
            Some(super::peers::table_markdown(&gpu, &stream, p, &t, &opts)?)
        }
        None => None,
    };

    let report = Report {
        schema: SCHEMA,
        file: file.to_string(),
        format,
        tensors: sel.names,
        skipped: sel.skipped,
        row_bytes: l,
        rows,
        bytes: data.len() as u64,
        selected_bytes: sel.selected_bytes,
        sample,
        codebook: CodebookReport {
            chunk_bytes: cb.chunk().bytes(),
            threshold: fit.threshold.fraction(),
            savings,
            ratio,
        },
        gpu: GpuReport::of(gpu.info()),
        ceilings,
        range_auto,
        range_auto_calibration,
        measurements: out.rows,
        peers_markdown,
    };
    emit(args, &report)
}

/// The first GPU and a stream on it; no GPU is an error that names the
/// CPU's benchmarks.
#[cfg(feature = "cuda")]
fn open_gpu() -> Result<(ibp::gpu::Gpu, ibp::gpu::cust::stream::Stream)> {
    let gpu = ibp::gpu::Gpu::first().map_err(|e| {
        Error::new(
            e.kind(),
            format!(
                "ibp bench measures on a GPU, and none is usable ({}); `ibp compress --device cpu` and `cargo bench -p ibp-cli --bench codec` measure the CPU",
                e.message()
            ),
        )
    })?;
    let stream = ibp::gpu::cust::stream::Stream::new(
        ibp::gpu::cust::stream::StreamFlags::NON_BLOCKING,
        None,
    )
    .map_err(|e| Error::cuda(e.to_string()))?;
    Ok((gpu, stream))
}

/// The bytes measured, from the selection's `data` (of `selected` bytes in
/// all): replicated up to `real_bytes`, or as read. The second value says
/// which (the report's `sample`).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn sample(data: Vec<u8>, selected: u64, row_bytes: usize, real_bytes: usize) -> (Vec<u8>, String) {
    if data.len() < real_bytes {
        let k = real_bytes.div_ceil(data.len());
        (data.repeat(k), format!("replicated ×{k}"))
    } else if (data.len() as u64) < selected {
        let n = data.len() / row_bytes;
        (data, format!("first {n} rows"))
    } else {
        (data, "whole".to_string())
    }
}

/// This machine's ceilings: a pinned host-to-device copy, a zero-copy
/// read and a device-to-device copy, of 1 GiB each.
#[cfg(feature = "cuda")]
fn measure_ceilings(b: &super::decode::Bench) -> Result<Ceilings> {
    use ibp_cli::measure::{measure_device_copy, measure_h2d_copy, measure_zero_copy_read};
    let link = 1usize << 30;
    let h2d = link as f64 / measure_h2d_copy(b.stream, link)?;
    let zc = (link / 1536 * 1536) as f64 / measure_zero_copy_read(b.gpu, b.stream, link)?;
    let copy = 2.0 * link as f64 / measure_device_copy(b.stream, link)?;
    Ok(Ceilings {
        h2d_dma_copy_gb_per_s: h2d / 1e9,
        zero_copy_read_gb_per_s: zc / 1e9,
        device_copy_gb_per_s: copy / 1e9,
    })
}

/// The packed layout's ratio: input bytes per payload byte.
#[cfg(feature = "cuda")]
fn packed_ratio(data: &[u8], l: usize, cb: &ibp::codebook::Codebook) -> Result<f64> {
    let packed = ibp::layout::compress_packed(
        cb,
        ibp::Rows::new(data, l)?,
        &ibp::layout::LayoutOptions::default(),
    )?;
    Ok(data.len() as f64 / packed.payload.len().max(1) as f64)
}

/// `Decoder::range_auto` on the table: its row (`range_pinned_auto`), the
/// path its first call chose (`dma` or `zero_copy`), and how it chose,
/// against the zero-copy and DMA rows measured before it.
#[cfg(feature = "cuda")]
fn range_auto_rows(
    b: &super::decode::Bench,
    data: &[u8],
    l: usize,
    cb: &ibp::codebook::Codebook,
    out: &mut Measurements,
) -> Result<(&'static str, RangeAutoReport)> {
    use ibp::gpu::RangePath;
    use ibp_cli::measure::measure_range_auto;
    let name = |dma: bool| if dma { "dma" } else { "zero_copy" };
    let rate = |id: &str| {
        out.rows
            .iter()
            .find(|m| m.id == id)
            .and_then(|m| m.gb_per_s)
    };
    let (zc, dma) = (rate("range_pinned_zero_copy"), rate("range_pinned_dma"));
    // Both rates, when both paths gave the data back bit for bit.
    let both = zc.zip(dma);
    let faster = both.map_or("", |(z, d)| name(d > z));
    let a = measure_range_auto(b.gpu, b.stream, data, l, cb, 8 << 20, b.opts);
    let report = match &a {
        Ok(a) => {
            let c = &a.calibration;
            let chosen = match c.path {
                RangePath::Dma => dma,
                RangePath::ZeroCopy => zc,
            };
            RangeAutoReport {
                prior: name(a.prior_dma),
                sample_rows: c.sample_rows,
                zero_copy_seconds: c.zero_copy_seconds,
                dma_seconds: c.dma_seconds,
                faster_in_this_run: faster,
                chosen_of_faster: chosen.zip(both).map(|(c, (z, d))| c / z.max(d)),
            }
        }
        Err(_) => RangeAutoReport {
            faster_in_this_run: faster,
            ..Default::default()
        },
    };
    let path = match &a {
        Ok(a) => name(a.calibration.path == RangePath::Dma),
        Err(_) => "",
    };
    out.decode(
        "range_pinned_auto",
        "range decode from pinned host memory by the path Decoder::range_auto chose on its first call (it times both once)".into(),
        "zero_copy_read",
        false,
        a.map(|a| a.auto),
    )?;
    Ok((path, report))
}

/// The measurement rows gathered so far, and the ceilings they are set
/// against.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct Measurements {
    rows: Vec<Measurement>,
    ceilings: Ceilings,
}

#[cfg(feature = "cuda")]
impl Measurements {
    /// Adds a decode row: `m` against the device copy (`device`, bytes
    /// read plus written) or against `ceiling`'s host path (stored bytes
    /// read per second).
    fn decode(
        &mut self,
        id: &'static str,
        what: String,
        ceiling: &'static str,
        device: bool,
        m: Result<ibp_cli::measure::DecodeMeasurement>,
    ) -> Result<()> {
        let c = &self.ceilings;
        let (ceiling_gbs, through) = match &m {
            Ok(m) if device => (c.device_copy_gb_per_s, Some(m.moved_rate() / 1e9)),
            Ok(m) => (
                if ceiling == "h2d_dma_copy" {
                    c.h2d_dma_copy_gb_per_s
                } else {
                    c.zero_copy_read_gb_per_s
                },
                Some(m.stored_bytes as f64 / m.seconds / 1e9),
            ),
            Err(_) => (0.0, None),
        };
        self.rows.push(row(
            id,
            what,
            ceiling,
            ceiling_gbs,
            m.map(|m| (m.decoded_rate() / 1e9, through)),
        )?);
        Ok(())
    }
}

/// The decode rows: range decodes (zero-copy, DMA, device-resident) and
/// gathers of 4096 and 65536 random rows (pinned and device-resident).
#[cfg(feature = "cuda")]
fn decode_rows(
    b: &super::decode::Bench,
    data: &[u8],
    l: usize,
    cb: &ibp::codebook::Codebook,
    out: &mut Measurements,
) -> Result<()> {
    use ibp::gpu::Residency;
    use ibp_cli::measure::measure_decode_dma;
    let rows = data.len() / l;
    out.decode(
        "range_pinned_zero_copy",
        "range decode of every row from pinned host memory, read zero-copy (Decoder::range)".into(),
        "zero_copy_read",
        false,
        b.packed(data, l, cb, Residency::Pinned),
    )?;
    out.decode(
        "range_pinned_dma",
        "range decode from pinned host memory, copied by DMA in 8 MB pieces overlapped with decoding (Decoder::range_dma)".into(),
        "h2d_dma_copy",
        false,
        measure_decode_dma(b.gpu, b.stream, data, l, cb, 8 << 20),
    )?;
    for batch in [4096usize, 65536] {
        let batch = batch.min(rows);
        let (id, dev_id) = if batch <= 4096 {
            ("gather_pinned_4096", "gather_device_4096")
        } else {
            ("gather_pinned_65536", "gather_device_65536")
        };
        out.decode(
            id,
            format!(
                "{batch} random rows gathered from pinned host memory, zero-copy (Decoder::gather)"
            ),
            "zero_copy_read",
            false,
            b.gather(data, l, cb, Residency::Pinned, batch),
        )?;
        out.decode(
            dev_id,
            format!("{batch} random rows gathered from device memory"),
            "device_copy",
            true,
            b.gather(data, l, cb, Residency::Device, batch),
        )?;
        if batch == rows {
            break;
        }
    }
    out.decode(
        "range_device",
        "range decode of every row from device memory".into(),
        "device_copy",
        true,
        b.packed(data, l, cb, Residency::Device),
    )
}

/// Compression: the GPU fit of every row plus compression, from pinned
/// host memory and from device memory, checked against the CPU.
#[cfg(feature = "cuda")]
fn compress_rows(
    gpu: &ibp::gpu::Gpu,
    data: &[u8],
    l: usize,
    savings: f64,
    out: &mut Measurements,
) -> Result<()> {
    let n = data.len() as f64;
    let c = out.ceilings;
    match super::compress::measure(gpu, data, l) {
        Ok(t) => {
            let host = n / t.h_total_all / 1e9;
            let dev = n / t.d_total_all / 1e9;
            out.rows.push(row(
                "compress_host",
                "GPU fit of every row plus packed compression, rows in pinned host memory (Gpu::fit_blocking, HostCompressor)".into(),
                "h2d_dma_copy",
                c.h2d_dma_copy_gb_per_s,
                Ok((host, Some(host))),
            )?);
            out.rows.push(row(
                "compress_device",
                "GPU fit of every row plus packed compression, rows in device memory (Gpu::fit_blocking, Gpu::compress_into_blocking)".into(),
                "device_copy",
                c.device_copy_gb_per_s,
                Ok((dev, Some(dev * (2.0 - savings)))),
            )?);
        }
        Err(e) if e.kind() == ibp::ErrorKind::Corrupt => {
            for id in ["compress_host", "compress_device"] {
                out.rows.push(row(
                    id,
                    "GPU fit plus compression".into(),
                    "",
                    0.0,
                    Err(Error::corrupt(e.message())),
                )?);
            }
        }
        Err(e) => return Err(e),
    }
    Ok(())
}

#[cfg(feature = "cuda")]
impl GpuReport {
    fn of(info: &ibp::gpu::DeviceInfo) -> GpuReport {
        GpuReport {
            name: info.name.clone(),
            sm_count: info.sm_count,
            compute_capability: format!(
                "{}.{}",
                info.compute_capability.0, info.compute_capability.1
            ),
            driver_cuda: format!(
                "{}.{}",
                info.driver_version / 1000,
                (info.driver_version % 1000) / 10
            ),
        }
    }
}

/// Prints the report (JSON or text); a measurement that did not give the
/// data back bit for bit is then an error.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn emit(args: &Args, report: &Report) -> Result<()> {
    let text = if args.json {
        super::super::table::json(report)?
    } else {
        text(report)
    };
    super::super::table::emit(&text)?;
    let bad = report.measurements.iter().filter(|m| !m.bit_exact).count();
    if bad > 0 {
        return Err(Error::corrupt(format!(
            "{bad} measurement{} did not give back the data bit for bit (see the table); this is an ibp bug, please report it",
            if bad == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// A measurement row from a rate and the rate through its ceiling's path,
/// or from a failed bit-exact check (kept, to be reported); other errors
/// stop the run.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn row(
    id: &'static str,
    what: String,
    ceiling: &'static str,
    ceiling_gb_per_s: f64,
    m: Result<(f64, Option<f64>)>,
) -> Result<Measurement> {
    Ok(match m {
        Ok((rate, through)) => Measurement {
            id,
            what,
            gb_per_s: Some(rate),
            through_gb_per_s: through,
            ceiling,
            ceiling_gb_per_s,
            of_ceiling: through.map(|t| t / ceiling_gb_per_s),
            bit_exact: true,
            error: None,
        },
        Err(e) if e.kind() == ibp::ErrorKind::Corrupt => Measurement {
            id,
            what,
            gb_per_s: None,
            through_gb_per_s: None,
            ceiling,
            ceiling_gb_per_s,
            of_ceiling: None,
            bit_exact: false,
            error: Some(e.message().to_string()),
        },
        Err(e) => return Err(e),
    })
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn text(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "file:     {} ({})", r.file, r.format);
    let _ = writeln!(s, "tensors:  {}", r.tensors.join(", "));
    for k in &r.skipped {
        let _ = writeln!(s, "skipped:  {} ({})", k.name, k.reason);
    }
    let _ = writeln!(
        s,
        "measured: {} rows of {} B, {} ({} of {})",
        r.rows,
        r.row_bytes,
        human(r.bytes),
        r.sample,
        human(r.selected_bytes)
    );
    let _ = writeln!(
        s,
        "codebook: {} B chunks, threshold {:.2}, {:.1}% saved ({:.2}:1)",
        r.codebook.chunk_bytes,
        r.codebook.threshold,
        100.0 * r.codebook.savings,
        r.codebook.ratio
    );
    let _ = writeln!(
        s,
        "GPU:      {} ({} SMs, compute {}, CUDA {})",
        r.gpu.name, r.gpu.sm_count, r.gpu.compute_capability, r.gpu.driver_cuda
    );
    let c = &r.ceilings;
    let _ = writeln!(
        s,
        "ceilings: pinned DMA copy {:.1} GB/s, zero-copy read {:.1} GB/s, device copy {:.0} GB/s (read + written)",
        c.h2d_dma_copy_gb_per_s, c.zero_copy_read_gb_per_s, c.device_copy_gb_per_s
    );
    let a = &r.range_auto_calibration;
    let ms = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.3} ms", s * 1e3));
    let _ = writeln!(
        s,
        "range_auto: takes {} (prior rule: {}; timed on {} rows: zero-copy {}, DMA {}); faster in this run: {}, chosen / faster {}\n",
        r.range_auto,
        a.prior,
        a.sample_rows,
        ms(a.zero_copy_seconds),
        ms(a.dma_seconds),
        a.faster_in_this_run,
        a.chosen_of_faster
            .map_or("-".to_string(), |v| format!("{v:.3}"))
    );
    let mut t = super::super::table::Table::new([
        "measurement",
        "GB/s",
        "through GB/s",
        "ceiling",
        "of ceiling",
        "bit-exact",
    ]);
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for m in &r.measurements {
        t.push(vec![
            m.id.to_string(),
            f(m.gb_per_s),
            f(m.through_gb_per_s),
            format!("{} {:.1}", m.ceiling, m.ceiling_gb_per_s),
            m.of_ceiling.map_or("-".into(), |v| format!("{v:.2}")),
            if m.bit_exact {
                "yes".into()
            } else {
                "NO".into()
            },
        ]);
    }
    s.push_str(&t.render());
    s.push_str("\nGB/s: decoded bytes (decode) or input bytes (compression) per second. through: the bytes on the ceiling's path per second (stored bytes read from the host; on the device, bytes read plus written).\n");
    if let Some(p) = &r.peers_markdown {
        s.push_str(p);
    }
    s
}
