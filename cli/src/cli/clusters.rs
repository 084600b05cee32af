//! `ibp analyze --clusters`: net savings against the number of clusters
//! (the IBP paper's Figure 15), as a table and optionally (`--plot`) an SVG
//! line chart.

use std::fmt::Write as _;
use std::path::Path;

use ibp::cluster::{ClusterOptions, ClusterPoint, sweep_clusters_with};
use ibp::fit::FitOptions;
use ibp::io::Document;
use ibp::{Result, Rows};
use serde::Serialize;

use super::input::FitArgs;
use super::plot::{self, Chart, Series};
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
    plot_to: Option<&Path>,
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
    if let Some(path) = plot_to {
        plot::write(path, &[chart(&curves)])?;
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
    if let Some(p) = plot_to {
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

/// Net savings (%) against k (log scale: x is log2 k), one line per curve,
/// the chosen k marked.
fn chart(curves: &[Curve]) -> Chart {
    let mut c = Chart::new(
        "Net space savings against number of clusters",
        "clusters k (log scale)",
        "net savings",
    );
    c.x_format = |v| format!("{}", 2f64.powf(v).round());
    c.y_format = plot::percent;
    let kmax = curves
        .iter()
        .flat_map(|c| &c.points)
        .map(|p| p.requested_k)
        .max()
        .unwrap_or(2)
        .max(2);
    c.x_range = Some((0.0, (kmax as f64).log2()));
    let xy = |p: &PointReport| ((p.requested_k as f64).log2(), 100.0 * p.net_savings);
    for (i, curve) in curves.iter().enumerate() {
        c.series.push(Series {
            name: curve.name.clone(),
            points: curve.points.iter().map(xy).collect(),
            color: i,
            dots: true,
            marked: curve
                .points
                .iter()
                .filter(|p| p.k == curve.chosen_k)
                .map(xy)
                .collect(),
            ..Default::default()
        });
    }
    c
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
        let s = plot::svg(&[chart(&[
            curve("a<b", &[0.1, 0.2, -0.3]),
            curve("c", &[0.5, 0.4]),
        ])])
        .unwrap();
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        // A line per curve and its legend entry, with its name.
        assert_eq!(plot::lines_of(&s, "#1F77B4"), 2);
        assert_eq!(plot::lines_of(&s, "#D62728"), 2);
        let t = plot::texts(&s);
        assert!(t.contains(&"a&lt;b") && t.contains(&"c"), "{t:?}");
        // A dot per point (3 + 2) and a large one per chosen k.
        assert_eq!(s.matches(r#"r="3""#).count(), 5);
        assert_eq!(s.matches(r#"r="6""#).count(), 2);
        assert!(!s.contains("NaN") && !s.contains("inf"));
        // One curve of one point (k = 1 only) still draws.
        let one = plot::svg(&[chart(&[curve("x", &[0.0])])]).unwrap();
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
}
