//! `ibp analyze --clusters`: net savings against the number of clusters
//! (the IBP paper's Figure 15), as a table and optionally an SVG line chart.

use std::fmt::Write as _;
use std::path::PathBuf;

use ibp::fit::{ClusterOptions, ClusterPoint, FitOptions, sweep_clusters_with};
use ibp::io::Document;
use ibp::{Result, Rows};
use serde::Serialize;

use super::input::FitArgs;
use super::table::{Table, emit, human, json, percent};

/// Options of the cluster sweep (with `--clusters`).
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterArgs {
    /// Sweep the number of clusters k = 1, 2, 4, … (k-means on bit
    /// patterns, one codebook per cluster) and print net savings against k.
    #[arg(long)]
    pub clusters: bool,
    /// With --clusters: largest k of the sweep.
    #[arg(long, default_value_t = 4096)]
    pub max_clusters: usize,
    /// With --clusters: tensors k-means and the codebooks are fitted on.
    #[arg(long, default_value_t = 4096)]
    pub cluster_fit_rows: u64,
    /// With --clusters: tensors the payload is measured on.
    #[arg(long, default_value_t = 16384)]
    pub cluster_eval_rows: u64,
    /// With --clusters: stack the rows of every tensor of the same row
    /// length into one dataset (e.g. all weight matrices of a model with
    /// --row-len 384).
    #[arg(long)]
    pub stack: bool,
    /// With --clusters: also write the curve as an SVG line chart here.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

#[derive(Serialize, Debug)]
struct Curve {
    name: String,
    rows: u64,
    row_bytes: u64,
    fit_rows: u64,
    eval_rows: u64,
    chosen_k: usize,
    points: Vec<PointReport>,
}

#[derive(Serialize, Debug)]
struct PointReport {
    requested_k: usize,
    k: usize,
    chunk_bytes: u32,
    payload_bytes: u64,
    codebook_bytes: u64,
    id_bytes: u64,
    raw_bytes: u64,
    savings: f64,
    net_savings: f64,
    seconds: f64,
}

impl From<&ClusterPoint> for PointReport {
    fn from(p: &ClusterPoint) -> Self {
        Self {
            requested_k: p.requested,
            k: p.k,
            chunk_bytes: p.chunk.bytes(),
            payload_bytes: p.payload_bytes,
            codebook_bytes: p.codebook_bytes,
            id_bytes: p.id_bytes,
            raw_bytes: p.raw_bytes,
            savings: p.savings(),
            net_savings: p.net_savings(),
            seconds: p.seconds,
        }
    }
}

/// Run the sweep over the document's tensors (or their stack) and print.
pub fn run(
    input: &str,
    doc: &Document<'_>,
    fit_args: &FitArgs,
    fit: FitOptions,
    args: &ClusterArgs,
    as_json: bool,
) -> Result<()> {
    let opts = ClusterOptions::default()
        .with_fit(fit)
        .with_max_clusters(args.max_clusters)
        .with_fit_rows(args.cluster_fit_rows)
        .with_eval_rows(args.cluster_eval_rows);
    let mut curves = Vec::new();
    let mut skipped = Vec::new();
    // The stack: rows of every tensor with the first usable tensor's row
    // length, back to back.
    let mut stack: Option<(u64, Vec<u8>, usize)> = None;
    for i in 0..doc.groups.len() {
        let g = doc.group_with_data(i)?;
        let shape = match g.row_shape(fit_args.row_len) {
            Ok(s) if s.rows >= 2 && s.row_bytes > 0 => s,
            _ => {
                skipped.push(g.name.clone());
                continue;
            }
        };
        if args.stack {
            let (l, bytes, n) = stack.get_or_insert((shape.row_bytes, Vec::new(), 0));
            if *l == shape.row_bytes {
                bytes.extend_from_slice(&g.data);
                *n += 1;
            } else {
                skipped.push(g.name.clone());
            }
            continue;
        }
        let rows = Rows::new(&g.data, shape.row_bytes as usize)?;
        curves.push(sweep(&g.name, rows, &opts)?);
    }
    if let Some((l, bytes, n)) = &stack {
        let rows = Rows::new(bytes, *l as usize)?;
        curves.push(sweep(&format!("{n} tensors stacked"), rows, &opts)?);
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, svg(&curves))
            .map_err(|e| ibp::Error::io(format!("writing {}", path.display()), e))?;
    }
    if as_json {
        return emit(&json(&serde_json::json!({
            "input": input,
            "curves": curves,
            "skipped": skipped,
        }))?);
    }
    let mut s = String::new();
    let _ = writeln!(s, "input: {input}");
    for c in &curves {
        s.push('\n');
        s.push_str(&curve_text(c));
    }
    if !skipped.is_empty() {
        let _ = writeln!(
            s,
            "\n{} tensors skipped (fewer than 2 rows{}); --json lists them",
            skipped.len(),
            if args.stack {
                ", or another row length"
            } else {
                ""
            }
        );
    }
    if let Some(p) = &args.plot {
        let _ = writeln!(s, "plot: {}", p.display());
    }
    emit(&s)
}

fn sweep(name: &str, rows: Rows<'_>, opts: &ClusterOptions) -> Result<Curve> {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_message(format!("{name}: clustering"));
    let s = sweep_clusters_with(rows, opts, |p| {
        bar.set_message(format!("{name}: k = {} done", p.requested));
        bar.tick();
    })?;
    bar.finish_and_clear();
    Ok(Curve {
        name: name.to_string(),
        rows: rows.rows() as u64,
        row_bytes: rows.row_bytes() as u64,
        fit_rows: s.fit_rows,
        eval_rows: s.eval_rows,
        chosen_k: s.chosen().k,
        points: s.points.iter().map(PointReport::from).collect(),
    })
}

fn curve_text(c: &Curve) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} × {} B, fitted on {} tensors, measured on {}",
        c.name, c.rows, c.row_bytes, c.fit_rows, c.eval_rows
    );
    let mut t = Table::new([
        "",
        "k",
        "chunk",
        "payload",
        "codebooks",
        "ids",
        "savings",
        "net",
        "seconds",
    ]);
    let best = c.points.iter().position(|p| p.k == c.chosen_k);
    for (i, p) in c.points.iter().enumerate() {
        t.push(vec![
            if Some(i) == best {
                "*".into()
            } else {
                "".into()
            },
            if p.k == p.requested_k {
                p.k.to_string()
            } else {
                format!("{} (of {})", p.k, p.requested_k)
            },
            format!("{} B", p.chunk_bytes),
            human(p.payload_bytes),
            human(p.codebook_bytes),
            human(p.id_bytes),
            percent(p.savings),
            percent(p.net_savings),
            format!("{:.2}", p.seconds),
        ]);
    }
    s.push_str(&t.render());
    if let (Some(one), Some(b)) = (c.points.first(), best.map(|b| &c.points[b])) {
        let _ = writeln!(
            s,
            "one codebook: {} net; chosen: k = {}, {} net ({:+.2} points){}",
            percent(one.net_savings),
            b.k,
            percent(b.net_savings),
            100.0 * (b.net_savings - one.net_savings),
            if b.k == 1 {
                " (no clustering pays for its metadata)"
            } else {
                ""
            }
        );
    }
    s
}

/// A line chart of net savings (%) against k (log scale), one line per
/// curve.
fn svg(curves: &[Curve]) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 70.0, 20.0, 40.0, 60.0);
    let pts = curves.iter().flat_map(|c| &c.points);
    let kmax = pts.clone().map(|p| p.requested_k).max().unwrap_or(2).max(2) as f64;
    let ys: Vec<f64> = pts.map(|p| 100.0 * p.net_savings).collect();
    let mut ylo = ys.iter().copied().fold(f64::INFINITY, f64::min).min(0.0);
    let mut yhi = ys
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max)
        .max(0.0);
    if !(ylo.is_finite() && yhi.is_finite()) || yhi - ylo < 1.0 {
        (ylo, yhi) = (ylo.min(0.0).min(yhi - 1.0), yhi.max(ylo + 1.0));
    }
    let step = nice_step((yhi - ylo) / 6.0);
    let (ylo, yhi) = ((ylo / step).floor() * step, (yhi / step).ceil() * step);
    let x = |k: f64| left + (w - left - right) * k.log2() / kmax.log2();
    let y = |v: f64| top + (h - top - bottom) * (yhi - v) / (yhi - ylo);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">Net space savings against number of clusters</text>"#,
        w / 2.0
    );
    let mut v = ylo;
    while v <= yhi + step / 2.0 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}%</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0
        );
        v += step;
    }
    let mut k = 1.0;
    while k <= kmax {
        let xx = x(k);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{top}" x2="{xx:.1}" y2="{:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{k}</text>"##,
            h - bottom,
            h - bottom + 16.0
        );
        k *= if kmax > 64.0 { 4.0 } else { 2.0 };
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">clusters k (log scale)</text>"#,
        (left + w - right) / 2.0,
        h - 18.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(16 {}) rotate(-90)" text-anchor="middle">net savings</text>"#,
        (top + h - bottom) / 2.0
    );
    const COLORS: [&str; 6] = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
    ];
    for (i, c) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let line: Vec<String> = c
            .points
            .iter()
            .map(|p| {
                format!(
                    "{:.1},{:.1}",
                    x(p.requested_k as f64),
                    y(100.0 * p.net_savings)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            line.join(" ")
        );
        for p in &c.points {
            let r = if p.k == c.chosen_k { 5.0 } else { 2.5 };
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{color}"/>"#,
                x(p.requested_k as f64),
                y(100.0 * p.net_savings)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" fill="{color}">{}</text>"#,
            left + 10.0,
            h - bottom - 10.0 - 16.0 * (curves.len() - 1 - i) as f64,
            xml_escape(&c.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-9).log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(name: &str, nets: &[f64]) -> Curve {
        Curve {
            name: name.into(),
            rows: 100,
            row_bytes: 10,
            fit_rows: 100,
            eval_rows: 100,
            chosen_k: 2,
            points: nets
                .iter()
                .enumerate()
                .map(|(i, &n)| PointReport {
                    requested_k: 1 << i,
                    k: 1 << i,
                    chunk_bytes: 1,
                    payload_bytes: 500,
                    codebook_bytes: 20 << i,
                    id_bytes: (100 * i as u64).div_ceil(8),
                    raw_bytes: 1000,
                    savings: 0.5,
                    net_savings: n,
                    seconds: 0.0,
                })
                .collect(),
        }
    }

    #[test]
    fn svg_has_a_line_per_curve_and_marks_the_chosen_point() {
        let s = svg(&[curve("a<b", &[0.1, 0.2, -0.3]), curve("c", &[0.5, 0.4])]);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(s.matches("<circle").count(), 5);
        assert_eq!(s.matches(r#"r="5""#).count(), 2);
        assert!(s.contains("a&lt;b"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
        // One curve of one point (k = 1 only) still draws.
        let one = svg(&[curve("x", &[0.0])]);
        assert!(!one.contains("NaN") && !one.contains("inf"));
    }

    #[test]
    fn table_marks_the_chosen_k_and_compares_with_one_codebook() {
        let t = curve_text(&curve("m", &[0.10, 0.125, 0.05]));
        let star: Vec<&str> = t.lines().filter(|l| l.starts_with('*')).collect();
        assert_eq!(star.len(), 1);
        assert!(star[0].contains("12.5%"), "{t}");
        assert!(t.contains("chosen: k = 2, 12.5% net (+2.50 points)"), "{t}");
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(13.0), 20.0);
        assert_eq!(nice_step(30.0), 50.0);
    }
}
