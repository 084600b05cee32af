//! The picture of `ibp bench`'s decode results: decoded GB/s against savings
//! per tensor size (packed layout, from pinned memory), each size's ideal
//! dashed, the run's link ceilings, and the real tables as labelled points.
//!
//! `ibp bench` fills a [`BenchPlot`] as it measures and writes the SVG beside
//! its results file; `ibp plot RESULTS.md` reads the same numbers back from
//! the Markdown tables of a results file ([`BenchPlot::parse`]).

use std::path::{Path, PathBuf};

use ibp::{Error, Result};

use super::super::plot::{self, Chart, HLine, Labelled, Series};

/// Arguments of `ibp plot`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A results file written by `ibp bench` (e.g.
    /// docs/results/nvidia-h200.md), with its "Figure 7 grid" or "Real
    /// data" table.
    results: PathBuf,
    /// Where to write the SVG. Default: beside RESULTS, with `.svg`.
    #[arg(short, long, value_name = "FILE.svg")]
    out: Option<PathBuf>,
}

/// `ibp plot`: draw a results file's decode tables.
pub fn run(args: Args) -> Result<()> {
    let md = super::super::input::read_text(&args.results, MAX_RESULTS_BYTES, "a results file")?;
    let p = BenchPlot::parse(&md).map_err(|e| {
        Error::new(
            e.kind(),
            format!("{}: {}", args.results.display(), e.message()),
        )
    })?;
    let out = args.out.unwrap_or_else(|| svg_path(&args.results));
    plot::write(&out, &[p.chart()])?;
    println!("{}", out.display());
    Ok(())
}

/// The largest results file `ibp plot` reads. `ibp bench` writes tens of
/// kilobytes; the bound keeps `plot /dev/stdin` or a huge file from
/// filling memory.
const MAX_RESULTS_BYTES: u64 = 4 << 20;

/// The most points a table may give the picture ([`BenchPlot::parse`]
/// refuses more): a bench run writes 15 grid points and a few real tables,
/// and the bound keeps the SVG to a few megabytes whatever the input.
const MAX_POINTS: usize = 500;

/// The largest rate (GB/s) or row length (bytes) a table may hold: well
/// past any link or GPU, and small enough that the axes and their ticks
/// stay finite numbers (a rate of 1.7e308 made the tick loop spin).
const MAX_RATE: f64 = 1e6;
const MAX_ROW_BYTES: u64 = 1 << 40;

/// `docs/results/x.md` → `docs/results/x.svg`.
pub fn svg_path(results: &Path) -> PathBuf {
    results.with_extension("svg")
}

/// One point of the Figure 7 grid.
#[derive(Debug, Clone, PartialEq)]
pub struct GridPoint {
    pub row_bytes: u64,
    /// Measured savings, 0..1.
    pub savings: f64,
    /// Decoded GB/s of the packed layout, zero-copy from pinned memory.
    pub packed: f64,
    /// The ideal of the packed layout (reading exactly the compressed bytes).
    pub ideal: f64,
}

/// One real table.
#[derive(Debug, Clone, PartialEq)]
pub struct RealPoint {
    pub name: String,
    pub savings: f64,
    /// Decoded GB/s from pinned memory, zero-copy.
    pub pinned: f64,
}

/// What the decode picture shows; GB/s are 10^9 bytes per second.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BenchPlot {
    /// The GPU's name (the title).
    pub gpu: String,
    /// Pinned host-to-device DMA copy, measured in the same run.
    pub dma_copy: Option<f64>,
    /// Zero-copy kernel read of pinned memory, measured in the same run.
    pub zero_copy: Option<f64>,
    pub grid: Vec<GridPoint>,
    pub real: Vec<RealPoint>,
}

impl BenchPlot {
    /// Read the numbers back from a results file of `ibp bench`: the title,
    /// the PCIe line of the header, the "Figure 7 grid" and "Real data"
    /// tables. A file with neither table is an invalid argument; a table
    /// cell that is not a number is corrupt data.
    pub fn parse(md: &str) -> Result<Self> {
        let mut p = BenchPlot {
            gpu: md
                .lines()
                .find_map(|l| l.strip_prefix("# ibp GPU benchmarks: "))
                .unwrap_or("GPU")
                .trim()
                .to_string(),
            ..Default::default()
        };
        let header: Vec<&str> = md.lines().take_while(|l| !l.starts_with("## ")).collect();
        let header = header.join("\n");
        p.dma_copy = rate_after(&header, "pinned host-to-device copy ");
        p.zero_copy = rate_after(&header, "zero-copy kernel read ");
        if let Some(t) = table(md, "## Figure 7 grid") {
            let [size, sav, packed, ideal] =
                t.columns(["tensor", "savings", "packed GB/s", "ideal (packed) GB/s"])?;
            too_many(t.rows.len())?;
            for r in &t.rows {
                p.grid.push(GridPoint {
                    row_bytes: bytes(&r.cells[size])
                        .filter(|&b| b <= MAX_ROW_BYTES)
                        .ok_or_else(|| r.bad(size))?,
                    savings: r.savings(sav)?,
                    packed: r.rate(packed)?,
                    ideal: r.rate(ideal)?,
                });
            }
        }
        if let Some(t) = table(md, "## Real data") {
            let [name, sav, pinned] = t.columns(["data", "savings", "pinned GB/s"])?;
            too_many(t.rows.len())?;
            for r in &t.rows {
                p.real.push(RealPoint {
                    name: strip_replicas(&r.cells[name]).chars().take(80).collect(),
                    savings: r.savings(sav)?,
                    pinned: r.rate(pinned)?,
                });
            }
        }
        if p.grid.is_empty() && p.real.is_empty() {
            return Err(Error::invalid(
                "no \"Figure 7 grid\" or \"Real data\" table to plot: give a results file of `ibp bench --section all` or `--section decode`",
            ));
        }
        Ok(p)
    }

    /// The chart: x savings (%), y decoded GB/s.
    pub fn chart(&self) -> Chart {
        let mut c = Chart::new(
            format!(
                "{}: decoded GB/s from pinned host memory against savings",
                self.gpu
            ),
            "space savings",
            "decoded GB/s",
        );
        c.x_format = plot::percent;
        c.x_range = Some((0.0, 100.0));
        let mut sizes: Vec<u64> = self.grid.iter().map(|g| g.row_bytes).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for (i, &size) in sizes.iter().enumerate() {
            let mut pts: Vec<&GridPoint> =
                self.grid.iter().filter(|g| g.row_bytes == size).collect();
            pts.sort_by(|a, b| a.savings.total_cmp(&b.savings));
            let name = size_name(size);
            c.series.push(Series {
                name: format!("{name} tensors, packed"),
                points: pts.iter().map(|g| (100.0 * g.savings, g.packed)).collect(),
                color: i,
                dots: true,
                ..Default::default()
            });
            c.series.push(Series {
                name: format!("{name} ideal"),
                points: pts.iter().map(|g| (100.0 * g.savings, g.ideal)).collect(),
                color: i,
                dashed: true,
                ..Default::default()
            });
        }
        for (name, rate) in [
            ("pinned DMA copy", self.dma_copy),
            ("zero-copy kernel read", self.zero_copy),
        ] {
            if let Some(y) = rate {
                c.hlines.push(HLine {
                    name: format!("{name} {y:.1} GB/s"),
                    y,
                });
            }
        }
        c.labelled = self
            .real
            .iter()
            .map(|r| Labelled {
                label: format!("{} {:.0}", r.name, r.pinned),
                x: 100.0 * r.savings,
                y: r.pinned,
            })
            .collect();
        if !c.labelled.is_empty() {
            c.labelled_name = Some("real tables (zero-copy)".into());
        }
        c
    }
}

fn size_name(b: u64) -> String {
    if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KB", b / 1024)
    } else {
        format!("{b} B")
    }
}

/// "Cora features f32 (×70)" → "Cora features f32".
fn strip_replicas(name: &str) -> String {
    match name.rfind(" (×") {
        Some(i) if name.ends_with(')') => name[..i].to_string(),
        _ => name.to_string(),
    }
}

/// The number before " GB/s" right after `label`.
fn rate_after(text: &str, label: &str) -> Option<f64> {
    let rest = &text[text.find(label)? + label.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// A table of more rows than [`MAX_POINTS`] is refused.
fn too_many(rows: usize) -> Result<()> {
    if rows > MAX_POINTS {
        return Err(Error::invalid(format!(
            "a table of {rows} rows; `ibp bench` writes a few dozen, and ibp plot draws at most {MAX_POINTS}"
        )));
    }
    Ok(())
}

/// "256 B" → 256.
fn bytes(cell: &str) -> Option<u64> {
    cell.strip_suffix(" B")?.trim().parse().ok()
}

/// "12.5%" → 0.125.
fn fraction(cell: &str) -> Option<f64> {
    cell.strip_suffix('%')?
        .trim()
        .parse::<f64>()
        .ok()
        .map(|v| v / 100.0)
}

/// A Markdown table: the header's cells and each row's, with line numbers.
struct Table {
    heading: String,
    header: Vec<String>,
    rows: Vec<Row>,
}

struct Row {
    line: usize,
    cells: Vec<String>,
}

impl Row {
    fn bad(&self, col: usize) -> Error {
        Error::corrupt(format!(
            "line {}: {:?} is not a value this table can hold",
            self.line, self.cells[col]
        ))
    }

    /// A rate in GB/s: a finite number from 0 to [`MAX_RATE`].
    fn rate(&self, col: usize) -> Result<f64> {
        self.cells[col]
            .parse::<f64>()
            .ok()
            .filter(|v| (0.0..=MAX_RATE).contains(v))
            .ok_or_else(|| self.bad(col))
    }

    /// Savings as a fraction: at most 100%, and no lower than -1000% (a
    /// container ten times its input; nothing ibp writes comes close).
    fn savings(&self, col: usize) -> Result<f64> {
        fraction(&self.cells[col])
            .filter(|v| (-10.0..=1.0).contains(v))
            .ok_or_else(|| self.bad(col))
    }
}

impl Table {
    /// The indices of the named columns.
    fn columns<const N: usize>(&self, names: [&str; N]) -> Result<[usize; N]> {
        let mut out = [0; N];
        for (o, n) in out.iter_mut().zip(names) {
            *o = self.header.iter().position(|h| h == n).ok_or_else(|| {
                Error::corrupt(format!(
                    "the \"{}\" table has no \"{n}\" column",
                    self.heading
                ))
            })?;
        }
        Ok(out)
    }
}

fn cells(line: &str) -> Vec<String> {
    let t = line.trim().trim_start_matches('|').trim_end_matches('|');
    t.split('|').map(|c| c.trim().to_string()).collect()
}

/// The first table after the heading that starts with `heading`, up to the
/// next heading. Rows with a different number of cells are dropped.
fn table(md: &str, heading: &str) -> Option<Table> {
    let mut lines = md
        .lines()
        .enumerate()
        .skip_while(|(_, l)| !l.starts_with(heading));
    let (_, title) = lines.next()?;
    let mut body = lines
        .take_while(|(_, l)| !l.starts_with("#"))
        .filter(|(_, l)| l.trim_start().starts_with('|'));
    let header = cells(body.next()?.1);
    let rows = body
        .map(|(i, l)| Row {
            line: i + 1,
            cells: cells(l),
        })
        .filter(|r| r.cells.len() == header.len() && !r.cells[0].starts_with("---"))
        .collect();
    Some(Table {
        heading: title.trim_start_matches('#').trim().to_string(),
        header,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frozen copy of the H200 results at e732fa5: the figures below are
    /// that run's, so a new run of `ibp bench` does not move them.
    const H200: &str = include_str!("../../../../tests/data/nvidia-h200-e732fa5.md");

    /// The results file the README cites, whatever run wrote it last.
    const CURRENT: &str = include_str!("../../../../docs/results/nvidia-h200.md");

    #[test]
    fn reads_the_current_results_file() {
        let p = BenchPlot::parse(CURRENT).unwrap();
        assert_eq!(p.gpu, "NVIDIA H200");
        assert!(p.dma_copy.is_some() && p.zero_copy.is_some());
        assert_eq!(p.grid.len(), 15);
        assert_eq!(p.real.len(), 3);
        assert!(p.grid.iter().all(|g| g.packed > 0.0 && g.ideal > 0.0));
        assert!(plot::svg(&[p.chart()]).is_ok());
    }

    #[test]
    fn reads_the_h200_results() {
        let p = BenchPlot::parse(H200).unwrap();
        assert_eq!(p.gpu, "NVIDIA H200");
        assert_eq!(p.dma_copy, Some(55.4));
        assert_eq!(p.zero_copy, Some(51.3));
        assert_eq!(p.grid.len(), 15);
        assert_eq!(
            p.grid[0],
            GridPoint {
                row_bytes: 256,
                savings: 0.125,
                packed: 54.5,
                ideal: 54.9
            }
        );
        let last = p.grid.last().unwrap();
        assert_eq!(
            (last.row_bytes, last.packed, last.ideal),
            (4096, 494.7, 527.6)
        );
        assert!((last.savings - 0.906).abs() < 1e-12);
        assert_eq!(p.grid[9].packed, 396.5);
        assert_eq!(p.real.len(), 3);
        assert_eq!(p.real[0].name, "Cora features f32");
        assert_eq!(p.real[0].pinned, 874.0);
        assert!((p.real[0].savings - 0.961).abs() < 1e-12);
        assert_eq!(p.real[2].name, "MiniLM word embeddings bf16");
        assert_eq!(p.real[2].pinned, 62.0);
    }

    #[test]
    fn draws_a_line_and_an_ideal_per_size_the_ceilings_and_the_tables() {
        let s = plot::svg(&[BenchPlot::parse(H200).unwrap().chart()]).unwrap();
        let texts = plot::texts(&s);
        for t in [
            "256 B tensors, packed",
            "1 KB tensors, packed",
            "4 KB tensors, packed",
            "256 B ideal",
            "4 KB ideal",
            "pinned DMA copy 55.4 GB/s",
            "zero-copy kernel read 51.3 GB/s",
            "Cora features f32 874",
            "MiniLM word embeddings bf16 62",
            "real tables (zero-copy)",
        ] {
            assert!(texts.contains(&t), "{t} missing: {texts:?}");
        }
        assert!(texts[0].starts_with("NVIDIA H200: decoded GB/s"));
        // Each size: one solid line through its 5 points, and many dashes.
        for color in ["#1F77B4", "#D62728", "#2CA02C"] {
            let five = s
                .lines()
                .filter(|l| l.contains(&format!(r#"stroke="{color}" stroke-width="2""#)))
                .filter(|l| l.matches(',').count() == 5)
                .count();
            assert_eq!(five, 1, "{color}");
            assert!(plot::lines_of(&s, color) > 10, "{color}");
        }
    }

    #[test]
    fn a_file_without_the_tables_is_an_invalid_argument() {
        let e = BenchPlot::parse("# ibp GPU benchmarks: X\n\n## Uncompressed gather\n\n| row | GB/s |\n| --- | --- |\n| 128 B | 50.1 |\n").unwrap_err();
        assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
        assert_eq!(
            BenchPlot::parse("").unwrap_err().kind(),
            ibp::ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn a_bad_cell_or_column_is_corrupt() {
        let bad = H200.replace("| 494.7 |", "| fast |");
        let e = BenchPlot::parse(&bad).unwrap_err();
        assert_eq!(e.kind(), ibp::ErrorKind::Corrupt);
        assert!(e.message().contains("\"fast\""), "{}", e.message());
        let bad = H200.replace("| ideal (packed) GB/s |", "| ideal |");
        let e = BenchPlot::parse(&bad).unwrap_err();
        assert_eq!(e.kind(), ibp::ErrorKind::Corrupt);
        // Every truncation parses or fails with an error, never a panic.
        for n in (0..H200.len()).step_by(97) {
            if H200.is_char_boundary(n) {
                let _ = BenchPlot::parse(&H200[..n]);
            }
        }
    }
}
