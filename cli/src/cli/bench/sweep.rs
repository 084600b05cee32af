//! `ibp bench --section device`'s row-length sweep (issue 33):
//! device-resident range decode of synthetic tables over row lengths, chunk
//! sizes and savings, each cell set against the device copy of the same run
//! and against its target (moved / copy ≥ 0.85, or ≥ 0.70 for 1-byte
//! chunks and rows under 256 B).
//!
//! The cells' plan (which cells, their targets, their sizes) is plain data
//! and tested on the CPU; the measurement needs the `cuda` feature.

use std::fmt::Write as _;

use ibp_testdata::{Columns, synthetic_savings_with};

use super::Args;

/// Row lengths of the full sweep, in bytes.
pub(super) const ROWS: [usize; 10] = [64, 128, 256, 512, 768, 1024, 2048, 4096, 8192, 16384];
/// Chunk sizes of the full sweep, in bytes.
pub(super) const CHUNKS: [u32; 4] = [1, 2, 4, 8];
/// Target savings of the full sweep, in percent.
pub(super) const SAVINGS: [f64; 5] = [12.5, 25.0, 50.0, 75.0, 90.0];

/// Bytes of distinct rows a cell generates and compresses; the cell's
/// table repeats them up to its size ([`ibp_testdata::repeat_packed`]).
///
/// Q: why repeat rows rather than generate every one?
/// A: 200 cells of 128 MiB each would spend minutes generating and
/// compressing on the host. Every synthetic row has the same structure
/// (every chunk matches the codebook, so every stored row has the same
/// length and the decoder the same work); only the random free bits
/// differ, and the device reads every repeat from its own addresses, so
/// no cache sees the repetition.
const DISTINCT_BYTES: usize = 4 << 20;

/// Which cells to run (`--sweep-rows`, `--sweep-chunks`, `--sweep-savings`,
/// `--sweep-mib`).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Spec {
    pub rows: Vec<usize>,
    pub chunks: Vec<u32>,
    /// Percent.
    pub savings: Vec<f64>,
    /// Decoded bytes per cell (about: whole repeats of the distinct rows).
    pub out_bytes: usize,
    /// Rows per cell at least ([`MIN_ROWS_PER_SM`] times the GPU's SMs;
    /// 0 where no GPU is asked).
    pub min_rows: usize,
    /// How the invariant bits lie across columns (`--sweep-columns`).
    pub columns: Columns,
}

/// Rows a cell holds at least, per SM of the GPU.
///
/// Q: why a floor on rows, not only on bytes?
/// A: a warp decodes a whole row, so 64 MiB of 16 KB rows (4,096 of them)
/// gave the 2,112–3,168 warps of an H200 one or two rows each: such a cell
/// timed a launch's last wave as much as the decoder (the same binary ran
/// the same rows up to 1.6× faster in cells of 512 MiB, 2026-11-29). 512
/// rows an SM is 21 or more rows a warp.
pub(super) const MIN_ROWS_PER_SM: usize = 512;

impl Spec {
    /// The sweep the arguments ask for (the full one by default).
    pub fn from_args(args: &Args) -> Spec {
        Spec {
            rows: args.sweep_rows.clone().unwrap_or_else(|| ROWS.to_vec()),
            chunks: args.sweep_chunks.clone().unwrap_or_else(|| CHUNKS.to_vec()),
            savings: args
                .sweep_savings
                .clone()
                .unwrap_or_else(|| SAVINGS.to_vec()),
            out_bytes: args.sweep_mib.max(1) << 20,
            min_rows: 0,
            columns: match args.sweep_columns.as_str() {
                "alike" => Columns::Alike,
                "bytes" => Columns::Bytes,
                "halves" => Columns::Halves,
                _ => Columns::Random,
            },
        }
    }

    /// The options that make this sweep, for the results file's command
    /// line (empty for the full sweep at the default size).
    pub fn flags(&self) -> String {
        let list = |v: Vec<String>| v.join(",");
        let mut f = String::new();
        if self.rows != ROWS {
            let _ = write!(
                f,
                " --sweep-rows {}",
                list(self.rows.iter().map(ToString::to_string).collect())
            );
        }
        if self.chunks != CHUNKS {
            let _ = write!(
                f,
                " --sweep-chunks {}",
                list(self.chunks.iter().map(ToString::to_string).collect())
            );
        }
        if self.savings != SAVINGS {
            let _ = write!(
                f,
                " --sweep-savings {}",
                list(self.savings.iter().map(ToString::to_string).collect())
            );
        }
        match self.columns {
            Columns::Random => {}
            Columns::Alike => f.push_str(" --sweep-columns alike"),
            Columns::Bytes => f.push_str(" --sweep-columns bytes"),
            Columns::Halves => f.push_str(" --sweep-columns halves"),
        }
        if self.out_bytes != 128 << 20 {
            let _ = write!(f, " --sweep-mib {}", self.out_bytes >> 20);
        }
        f
    }
}

/// One cell to measure.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Cell {
    pub row_bytes: usize,
    pub chunk: u32,
    /// Percent, as asked.
    pub target_savings: f64,
    /// The fraction the generator makes (whole bits per chunk).
    pub made_savings: f64,
    /// The moved / copy the cell must reach.
    pub target: f64,
    /// Distinct rows generated (a multiple of 8) and how many times the
    /// table repeats them.
    pub distinct_rows: usize,
    pub repeats: usize,
}

impl Cell {
    /// The first two columns of the cell's row, which
    /// `scripts/bench-compare.py` matches runs by.
    pub fn key(&self) -> (String, String) {
        (
            format!("{} B, {} B chunks", self.row_bytes, self.chunk),
            format!("{}%", self.target_savings),
        )
    }
}

/// A combination the sweep leaves out, and why.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Skipped {
    pub row_bytes: usize,
    pub chunk: u32,
    pub target_savings: f64,
    pub why: String,
}

/// The moved / copy target of issue 33: 0.85 for 2-, 4- and 8-byte chunks
/// on rows of 256 B and more, 0.70 for 1-byte chunks and shorter rows.
pub(super) fn target(row_bytes: usize, chunk: u32) -> f64 {
    if chunk == 1 || row_bytes < 256 {
        0.70
    } else {
        0.85
    }
}

/// The cells of `spec`, rows outermost, then chunks, then savings; the
/// combinations the generator cannot make are returned apart.
pub(super) fn plan(spec: &Spec) -> (Vec<Cell>, Vec<Skipped>) {
    let mut cells = Vec::new();
    let mut skipped = Vec::new();
    for &row_bytes in &spec.rows {
        for &chunk in &spec.chunks {
            for &pct in &spec.savings {
                let skip = |why: String| Skipped {
                    row_bytes,
                    chunk,
                    target_savings: pct,
                    why,
                };
                let made = match synthetic_savings_with(chunk, pct / 100.0, spec.columns) {
                    Ok((_, made)) => made,
                    Err(e) => {
                        skipped.push(skip(e.message().to_string()));
                        continue;
                    }
                };
                if row_bytes == 0 || !row_bytes.is_multiple_of(chunk as usize) {
                    skipped.push(skip(format!("not whole {chunk}-byte chunks")));
                    continue;
                }
                let distinct_rows = (DISTINCT_BYTES / row_bytes).max(8) / 8 * 8;
                let repeats = spec
                    .out_bytes
                    .div_ceil(distinct_rows * row_bytes)
                    .max(spec.min_rows.div_ceil(distinct_rows))
                    .max(1);
                cells.push(Cell {
                    row_bytes,
                    chunk,
                    target_savings: pct,
                    made_savings: made,
                    target: target(row_bytes, chunk),
                    distinct_rows,
                    repeats,
                });
            }
        }
    }
    (cells, skipped)
}

/// The sweep's heading and table header (bench-compare.py's section and
/// columns: it compares the columns whose header says GB/s).
pub(super) fn table_head(copy_rate: f64, spec: &Spec) -> String {
    format!(
        "\n## Row-length sweep: device-resident range decode\n\nSynthetic tables (`ibp_testdata::synthetic_dataset`: every chunk's top bits invariant, {}, the rest random) of about {} MiB and at least {} rows decoded each ({} an SM: a warp decodes a whole row, and a cell of a row or two a warp times the launch's last wave), in device memory, decoded whole; rate the median of 9 calls after 2 warm-ups, output checked first. *moved / copy*: (stored bytes read + decoded bytes written) per second ÷ this run's device copy ({:.0} GB/s, read plus written). *target*: issue 33's moved / copy, 0.85 for 2-, 4- and 8-byte chunks on rows of 256 B or more, 0.70 for 1-byte chunks and shorter rows. *savings*: what the generator makes (whole bits per chunk: 90% is 87.5% with 1- and 2-byte chunks).\n\n| cell | target savings | savings | ratio | range GB/s | moved GB/s | moved / copy | target | meets |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        match spec.columns {
            Columns::Alike =>
                "one value in every column (`--sweep-columns alike`: every step of the decode book uniform)",
            Columns::Bytes =>
                "rather the bits below each byte's top bit, one value in every byte of every column (`--sweep-columns bytes`: as an fp8 table's exponent bits; the periodic kernel for 2- and 4-byte chunks, the general step for 8)",
            Columns::Halves =>
                "rather the bits below each 16-bit half's top bit, one value in every half of every column (`--sweep-columns halves`: as an f16 table's exponent bits; the periodic kernel by the half for 4-byte chunks, the uniform kernels for 2, the general step for 8; no 1-byte cells)",
            Columns::Random => "each column's a value of its own",
        },
        spec.out_bytes >> 20,
        spec.min_rows,
        MIN_ROWS_PER_SM,
        copy_rate / 1e9
    )
}

/// One measured cell's row.
pub(super) fn table_row(
    c: &Cell,
    savings: f64,
    decoded: f64,
    moved: f64,
    copy_rate: f64,
) -> String {
    let (a, b) = c.key();
    let of_copy = moved / copy_rate;
    format!(
        "| {a} | {b} | {:.1}% | {:.2} | {:.0} | {:.0} | {of_copy:.2} | {:.2} | {} |",
        100.0 * savings,
        1.0 / (1.0 - savings).max(1e-9),
        decoded / 1e9,
        moved / 1e9,
        c.target,
        if of_copy >= c.target { "yes" } else { "no" }
    )
}

/// The lines after the table: cells meeting their target, the worst
/// moved / copy per chunk size, and what was left out.
pub(super) fn summary(results: &[(Cell, f64)], skipped: &[Skipped]) -> String {
    let mut s = String::new();
    let met = results.iter().filter(|(c, r)| *r >= c.target).count();
    let _ = writeln!(
        s,
        "\nCells meeting their target: {met} of {}.",
        results.len()
    );
    for chunk in CHUNKS {
        let worst = results
            .iter()
            .filter(|(c, _)| c.chunk == chunk)
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((c, r)) = worst {
            let _ = writeln!(
                s,
                "- {chunk}-byte chunks: lowest moved / copy {r:.2} ({} B rows at {}%)",
                c.row_bytes, c.target_savings
            );
        }
    }
    for k in skipped {
        let _ = writeln!(
            s,
            "- skipped: {} B rows, {} B chunks, {}%: {}",
            k.row_bytes, k.chunk, k.target_savings, k.why
        );
    }
    s
}

/// Measures every cell of the sweep the arguments ask for and appends its
/// table to `md`; progress on stderr.
#[cfg(feature = "cuda")]
pub(super) fn run(
    b: &super::decode::Bench,
    args: &Args,
    copy_rate: f64,
    md: &mut String,
) -> ibp::Result<()> {
    use ibp::gpu::{GpuDataset, Residency};
    use ibp::layout::{LayoutOptions, compress_packed};
    use ibp_cli::measure::measure_dataset;

    let mut spec = Spec::from_args(args);
    spec.min_rows = MIN_ROWS_PER_SM * b.gpu.info().sm_count as usize;
    let (cells, skipped) = plan(&spec);
    md.push_str(&table_head(copy_rate, &spec));
    md.push('\n');
    eprintln!(
        "row-length sweep: {} cells of about {} MiB ({} skipped)...",
        cells.len(),
        spec.out_bytes >> 20,
        skipped.len()
    );
    let started = std::time::Instant::now();
    let mut results = Vec::new();
    let mut refused = skipped;
    for (k, c) in cells.iter().enumerate() {
        let seed = 11 + c.row_bytes as u64 * 8 + u64::from(c.chunk);
        let (data, cb) = ibp_testdata::synthetic_dataset_with(
            c.distinct_rows,
            c.row_bytes,
            c.chunk,
            c.target_savings / 100.0,
            seed,
            spec.columns,
        )?;
        let one = compress_packed(
            &cb,
            ibp::Rows::new(&data, c.row_bytes)?,
            &LayoutOptions::default(),
        )?;
        let packed = ibp_testdata::repeat_packed(&one, c.repeats)?;
        drop(one);
        let expect = data.repeat(c.repeats);
        drop(data);
        // Q: why is an unsupported shape a skipped cell and not an error?
        // A: the decoder refuses (Unsupported) what it cannot size on this
        // GPU; the sweep says so and goes on with the other cells.
        let measured = GpuDataset::upload_packed(b.gpu, &cb, &packed.view(), Residency::Device)
            .and_then(|ds| measure_dataset(b.gpu, b.stream, &ds, &expect, false, b.opts));
        let m = match measured {
            Ok(m) => m,
            Err(e) if e.kind() == ibp::ErrorKind::Unsupported => {
                eprintln!(
                    "  [{}/{}] {} B × {} B at {}%: skipped ({})",
                    k + 1,
                    cells.len(),
                    c.row_bytes,
                    c.chunk,
                    c.target_savings,
                    e.message()
                );
                refused.push(Skipped {
                    row_bytes: c.row_bytes,
                    chunk: c.chunk,
                    target_savings: c.target_savings,
                    why: e.message().to_string(),
                });
                continue;
            }
            Err(e) => return Err(e),
        };
        let saved = 1.0 - m.stored_bytes as f64 / m.decoded_bytes as f64;
        let of_copy = m.moved_rate() / copy_rate;
        let _ = writeln!(
            md,
            "{}",
            table_row(c, saved, m.decoded_rate(), m.moved_rate(), copy_rate)
        );
        eprintln!(
            "  [{}/{}] {} B × {} B at {}%: {:.0} GB/s, moved / copy {of_copy:.2} (target {:.2}){}",
            k + 1,
            cells.len(),
            c.row_bytes,
            c.chunk,
            c.target_savings,
            m.decoded_rate() / 1e9,
            c.target,
            if of_copy >= c.target { "" } else { ", below" }
        );
        results.push((c.clone(), of_copy));
    }
    md.push_str(&summary(&results, &refused));
    eprintln!(
        "row-length sweep done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Spec {
        Spec {
            rows: ROWS.to_vec(),
            chunks: CHUNKS.to_vec(),
            savings: SAVINGS.to_vec(),
            out_bytes: 128 << 20,
            min_rows: 0,
            columns: Columns::Random,
        }
    }

    #[test]
    fn the_full_sweep_has_every_combination_with_issue_33s_targets() {
        let (cells, skipped) = plan(&full());
        assert_eq!(cells.len(), 10 * 4 * 5);
        assert!(skipped.is_empty());
        // Rows outermost, then chunks, then savings.
        assert_eq!(cells[0].key(), ("64 B, 1 B chunks".into(), "12.5%".into()));
        assert_eq!(cells[6].key(), ("64 B, 2 B chunks".into(), "25%".into()));
        assert_eq!(
            cells[199].key(),
            ("16384 B, 8 B chunks".into(), "90%".into())
        );
        for c in &cells {
            let want = if c.chunk == 1 || c.row_bytes < 256 {
                0.70
            } else {
                0.85
            };
            assert_eq!(c.target, want, "{:?}", c.key());
            // Whole flag bytes to repeat, and about the asked size.
            assert!(c.distinct_rows >= 8 && c.distinct_rows.is_multiple_of(8));
            let bytes = c.distinct_rows * c.repeats * c.row_bytes;
            assert!(
                ((128 << 20)..(132 << 20) + 16384 * 8).contains(&bytes),
                "{:?}: {bytes} B",
                c.key()
            );
            assert!((c.made_savings - c.target_savings / 100.0).abs() <= 0.025 + 1e-9);
        }
        let keys: std::collections::HashSet<_> = cells.iter().map(Cell::key).collect();
        assert_eq!(keys.len(), cells.len(), "bench-compare needs unique keys");
        assert_eq!(target(255, 8), 0.70);
        assert_eq!(target(256, 2), 0.85);
        assert_eq!(target(16384, 1), 0.70);
    }

    #[test]
    fn combinations_the_generator_cannot_make_are_skipped_and_said() {
        let spec = Spec {
            rows: vec![100, 256],
            chunks: vec![8, 3],
            savings: vec![50.0, 100.0],
            out_bytes: 1 << 20,
            min_rows: 0,
            columns: Columns::Random,
        };
        let (cells, skipped) = plan(&spec);
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].key(), ("256 B, 8 B chunks".into(), "50%".into()));
        // 100 B rows of 8 B chunks; chunks of 3 B; 100% savings.
        assert_eq!(skipped.len(), 7);
        assert!(
            skipped
                .iter()
                .any(|s| s.row_bytes == 100 && s.chunk == 8 && s.why.contains("whole 8-byte"))
        );
        let s = summary(&[(cells[0].clone(), 0.9)], &skipped);
        assert!(s.contains("meeting their target: 1 of 1"));
        assert_eq!(s.matches("- skipped:").count(), 7);
    }

    #[test]
    fn a_row_reads_like_the_table_and_meets_by_its_target() {
        let (cells, _) = plan(&full());
        let c = cells
            .iter()
            .find(|c| c.row_bytes == 4096 && c.chunk == 4)
            .unwrap();
        let head = table_head(3.0e12, &full());
        let cols = head.lines().rev().nth(1).unwrap().matches('|').count();
        let row = table_row(c, 0.125, 1.2e12, 2.5e12, 3.0e12);
        assert_eq!(row.matches('|').count(), cols);
        assert!(row.starts_with(
            "| 4096 B, 4 B chunks | 12.5% | 12.5% | 1.14 | 1200 | 2500 | 0.83 | 0.85 | no |"
        ));
        assert!(table_row(c, 0.125, 1.2e12, 2.6e12, 3.0e12).ends_with("| yes |"));
        assert_eq!(full().flags(), "");
        let small = Spec {
            rows: vec![256],
            out_bytes: 64 << 20,
            ..full()
        };
        assert_eq!(small.flags(), " --sweep-rows 256 --sweep-mib 64");
        let alike = Spec {
            columns: Columns::Alike,
            ..small.clone()
        };
        assert_eq!(
            alike.flags(),
            " --sweep-rows 256 --sweep-columns alike --sweep-mib 64"
        );
        let bytes = Spec {
            columns: Columns::Bytes,
            ..small
        };
        assert_eq!(
            bytes.flags(),
            " --sweep-rows 256 --sweep-columns bytes --sweep-mib 64"
        );
        assert!(table_head(3.0e12, &bytes).contains("each byte's top bit"));
        // Bytes' savings come a whole bit a byte: 1-byte chunks at 90% are
        // 75% (the top bit stays free).
        let (cells, _) = plan(&Spec {
            chunks: vec![1, 4],
            savings: vec![90.0],
            ..bytes
        });
        assert_eq!(cells[0].made_savings, 0.75);
        assert_eq!(cells[1].made_savings, 27.0 / 32.0);
        // Halves: no 1-byte cells; 4-byte chunks at 25% fix 5 bits a half
        // (9 of 32 bits asked for, rounded a half: 9 bits saved).
        let halves = Spec {
            columns: Columns::Halves,
            chunks: vec![1, 4],
            savings: vec![25.0],
            ..full()
        };
        assert!(halves.flags().contains(" --sweep-columns halves"));
        assert!(table_head(3.0e12, &halves).contains("16-bit half"));
        let (cells, skipped) = plan(&Spec {
            rows: vec![600],
            ..halves
        });
        assert_eq!((cells.len(), skipped.len()), (1, 1));
        assert_eq!((cells[0].chunk, skipped[0].chunk), (4, 1));
        assert_eq!(cells[0].made_savings, 9.0 / 32.0);
    }
}
