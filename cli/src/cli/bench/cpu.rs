//! `ibp bench FILE` where no GPU is usable (or in a build without `cuda`):
//! the CPU's numbers on the user's tensors, one row per tensor (fit,
//! compress and decompress rates, the ratio), each decompression checked
//! bit for bit, and a line saying that the GPU part was skipped and why.
//!
//! `--json` prints the schema `ibp-bench-file-cpu/1`; new fields may be
//! added, none renamed or removed without a new version.

use std::fmt::Write as _;
use std::time::Instant;

use ibp::io::Document;
use ibp::layout::{LayoutOptions, compress_packed, decompress_packed};
use ibp::{Error, Result, Rows};
use serde::Serialize;

use super::super::table::{Table, human};
use super::Args;

/// The `schema` value of `--json`.
const SCHEMA: &str = "ibp-bench-file-cpu/1";

/// Everything `--json` prints.
#[derive(Serialize, Debug)]
struct Report {
    schema: &'static str,
    file: String,
    format: &'static str,
    /// Why the GPU measurements were skipped.
    gpu_skipped: String,
    /// The CPU, as `CPU, N threads`.
    cpu: String,
    tensors: Vec<TensorRow>,
    /// Tensors not measured, and why.
    skipped: Vec<Skipped>,
    totals: Totals,
}

/// One tensor's measurements. Rates in MB/s (10^6 bytes of the tensor per
/// second).
#[derive(Serialize, Debug)]
struct TensorRow {
    name: String,
    dtype: String,
    rows: u64,
    row_bytes: u64,
    bytes: u64,
    /// The packed layout's bytes: payload, flag bitmap and offsets, and the
    /// codebook.
    stored_bytes: u64,
    /// `bytes / stored_bytes`.
    ratio: f64,
    /// `1 - stored_bytes / bytes`.
    savings: f64,
    chunk_bytes: u32,
    threshold: f64,
    fit_mb_per_s: f64,
    compress_mb_per_s: f64,
    decompress_mb_per_s: f64,
    /// The decompressed bytes equal the tensor's.
    bit_exact: bool,
}

#[derive(Serialize, Debug)]
struct Skipped {
    name: String,
    reason: String,
}

/// Sums over the measured tensors; rates are total bytes over total time.
#[derive(Serialize, Debug)]
struct Totals {
    bytes: u64,
    stored_bytes: u64,
    ratio: f64,
    savings: f64,
    fit_mb_per_s: f64,
    compress_mb_per_s: f64,
    decompress_mb_per_s: f64,
}

/// Measure every tensor of `doc` with rows (those `--tensor` names, when
/// given), up to `--real-bytes` in all, on the CPU.
pub fn run(args: &Args, file: &str, doc: &Document<'_>, why: &str) -> Result<()> {
    if !args.peers.peers.is_empty() && !args.json {
        eprintln!("ibp: --peers skipped: the peers decode on the GPU, and {why}");
    }
    let mut tensors = Vec::new();
    let mut skipped = Vec::new();
    let mut budget = args.real_bytes as u64;
    let (mut fit_s, mut comp_s, mut dec_s) = (0.0, 0.0, 0.0);
    for i in 0..doc.groups.len() {
        let name = doc.groups[i].name.clone();
        let shape = doc.groups[i].row_shape(None)?;
        let bytes = shape.rows * shape.row_bytes;
        let reason = if bytes == 0 {
            Some("empty".to_string())
        } else if doc.groups[i].shape.len() < 2 || shape.rows < 2 {
            Some("one row: nothing is invariant across one tensor".to_string())
        } else if bytes > budget {
            Some(format!(
                "past --real-bytes ({} measured already)",
                human(args.real_bytes as u64 - budget)
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            skipped.push(Skipped { name, reason });
            continue;
        }
        budget -= bytes;
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            // A fit of a large tensor takes a while on a CPU; say which.
            eprintln!("bench: {name} ({}) on the CPU...", human(bytes));
        }
        let g = doc.group_with_data(i)?;
        let rows = Rows::new(&g.data, shape.row_bytes as usize)?;
        let t = Instant::now();
        let fit = ibp::fit::fit(rows, &Default::default())?;
        let t_fit = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let packed = compress_packed(&fit.codebook, rows, &LayoutOptions::default())?;
        let t_comp = t.elapsed().as_secs_f64();
        let mut out = vec![0u8; g.data.len()];
        let t = Instant::now();
        decompress_packed(&fit.codebook, &packed.view(), &mut out)?;
        let t_dec = t.elapsed().as_secs_f64();
        let bit_exact = out == *g.data;
        // The codebook (a mask and a value, L bytes each) counted too.
        let stored = (packed.payload.len() + packed.flags.len() + 8 * packed.offsets.len()) as u64
            + 2 * shape.row_bytes;
        let rate = |s: f64| bytes as f64 / s.max(1e-9) / 1e6;
        tensors.push(TensorRow {
            name,
            dtype: g.dtype.to_string(),
            rows: shape.rows,
            row_bytes: shape.row_bytes,
            bytes,
            stored_bytes: stored,
            ratio: bytes as f64 / stored.max(1) as f64,
            savings: 1.0 - stored as f64 / bytes as f64,
            chunk_bytes: fit.codebook.chunk().bytes(),
            threshold: fit.threshold.fraction(),
            fit_mb_per_s: rate(t_fit),
            compress_mb_per_s: rate(t_comp),
            decompress_mb_per_s: rate(t_dec),
            bit_exact,
        });
        fit_s += t_fit;
        comp_s += t_comp;
        dec_s += t_dec;
    }
    if tensors.is_empty() {
        return Err(Error::invalid(
            "no tensor with rows to measure (all are empty or 1-D); name a 2-D one with --tensor",
        ));
    }
    let bytes: u64 = tensors.iter().map(|t| t.bytes).sum();
    let stored: u64 = tensors.iter().map(|t| t.stored_bytes).sum();
    let rate = |s: f64| bytes as f64 / f64::max(s, 1e-9) / 1e6;
    let report = Report {
        schema: SCHEMA,
        file: file.to_string(),
        format: doc.format.name(),
        gpu_skipped: why.to_string(),
        cpu: format!("CPU, {} threads", rayon::current_num_threads()),
        totals: Totals {
            bytes,
            stored_bytes: stored,
            ratio: bytes as f64 / stored.max(1) as f64,
            savings: 1.0 - stored as f64 / bytes.max(1) as f64,
            fit_mb_per_s: rate(fit_s),
            compress_mb_per_s: rate(comp_s),
            decompress_mb_per_s: rate(dec_s),
        },
        tensors,
        skipped,
    };
    let out = if args.json {
        super::super::table::json(&report)?
    } else {
        text(&report)
    };
    super::super::table::emit(&out)?;
    let bad = report.tensors.iter().filter(|t| !t.bit_exact).count();
    if bad > 0 {
        return Err(Error::corrupt(format!(
            "{bad} tensor{} did not decompress bit for bit (see the table); this is an ibp bug, please report it",
            if bad == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

fn text(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "file:     {} ({})", r.file, r.format);
    let _ = writeln!(
        s,
        "GPU:      skipped, {}; these are the CPU's numbers ({})",
        r.gpu_skipped,
        r.cpu.trim_start_matches("CPU, ")
    );
    s.push('\n');
    let mut t = Table::new([
        "tensor",
        "dtype",
        "rows × row",
        "size",
        "ratio",
        "savings",
        "fit MB/s",
        "compress MB/s",
        "decompress MB/s",
        "bit-exact",
    ]);
    let row = |t: &mut Table, name: String, dtype: String, shape: String, x: [f64; 5], size, ok| {
        t.push(vec![
            name,
            dtype,
            shape,
            human(size),
            format!("{:.2}", x[0]),
            format!("{:.1}%", 100.0 * x[1]),
            format!("{:.1}", x[2]),
            format!("{:.1}", x[3]),
            format!("{:.1}", x[4]),
            if ok { "yes" } else { "NO" }.to_string(),
        ]);
    };
    for m in &r.tensors {
        row(
            &mut t,
            m.name.clone(),
            m.dtype.clone(),
            format!("{} × {} B", m.rows, m.row_bytes),
            [
                m.ratio,
                m.savings,
                m.fit_mb_per_s,
                m.compress_mb_per_s,
                m.decompress_mb_per_s,
            ],
            m.bytes,
            m.bit_exact,
        );
    }
    if r.tensors.len() > 1 {
        let x = &r.totals;
        row(
            &mut t,
            "all".into(),
            String::new(),
            String::new(),
            [
                x.ratio,
                x.savings,
                x.fit_mb_per_s,
                x.compress_mb_per_s,
                x.decompress_mb_per_s,
            ],
            x.bytes,
            r.tensors.iter().all(|t| t.bit_exact),
        );
    }
    s.push_str(&t.render());
    for k in &r.skipped {
        let _ = writeln!(s, "skipped:  {} ({})", k.name, k.reason);
    }
    s.push_str("\nMB/s: the tensor's bytes (10^6) per second on the CPU. fit: choosing the codebook; compress: the packed layout; decompress: back to the tensor's bytes, then compared bit for bit. ratio and savings count the codebook and the packed layout's flags and offsets.\n");
    s
}
