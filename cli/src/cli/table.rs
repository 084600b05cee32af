//! What `compress` and `inspect` show: aligned text tables, sizes for
//! people, and one summary per group of a container.
//!
//! Both commands build their group rows from an opened [`IbpFile`], so the
//! numbers `compress` prints are the numbers `inspect` will print for the
//! same file, read back from what was written rather than from the
//! compressor's bookkeeping.

use std::io::Write;

use ibp::container::{GroupLayout, GroupView, IbpFile};
use ibp::{Error, Result};
use serde::Serialize;

/// A plain-text table in the style of `ibp analyze`: left-aligned columns
/// two spaces apart, trailing spaces trimmed.
///
/// Q: why keep the cells in one string? A: a container may hold hundreds of
/// thousands of groups and sections; a `String` per cell costs about 50
/// bytes before its text, which made `inspect` of a crafted file take many
/// times the file's size. Here a cell costs its text and one offset, and
/// [`Table::write_to`] streams the lines out.
pub struct Table {
    header: Vec<String>,
    /// Every cell's text, back to back.
    text: String,
    /// End of each cell in `text`, `header.len()` per row.
    ends: Vec<usize>,
    /// Widest cell (in characters) per column so far.
    widths: Vec<usize>,
}

impl Table {
    /// An empty table with these column titles.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        let header: Vec<String> = header.into_iter().map(Into::into).collect();
        let widths = header.iter().map(|h| h.chars().count()).collect();
        Table {
            header,
            text: String::new(),
            ends: Vec::new(),
            widths,
        }
    }

    /// Add a row; missing cells are left blank and extra cells dropped.
    pub fn push(&mut self, cells: Vec<String>) {
        for i in 0..self.header.len() {
            let c = cells.get(i).map_or("", String::as_str);
            self.widths[i] = self.widths[i].max(c.chars().count());
            self.text.push_str(c);
            self.ends.push(self.text.len());
        }
    }

    /// Write the table as lines of text, each ending in a newline.
    pub fn write_to(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let cols = self.header.len();
        let mut line = String::new();
        let mut put = |cells: &mut dyn Iterator<Item = &str>| {
            line.clear();
            for (i, c) in cells.enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                pad_into(&mut line, c, self.widths[i]);
            }
            out.write_all(line.trim_end().as_bytes())?;
            out.write_all(b"\n")
        };
        put(&mut self.header.iter().map(String::as_str))?;
        let mut start = 0;
        for row in self.ends.chunks(cols) {
            let mut cells = row.iter().map(|&end| {
                let c = &self.text[start..end];
                start = end;
                c
            });
            put(&mut cells)?;
        }
        Ok(())
    }

    /// The table as lines of text, each ending in a newline.
    pub fn render(&self) -> String {
        let mut v = Vec::new();
        // Writing to a vector cannot fail, and the cells are UTF-8.
        let _ = self.write_to(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }
}

/// Append `cell` to `line`, padded with spaces to `width` characters.
fn pad_into(line: &mut String, cell: &str, width: usize) {
    line.push_str(cell);
    line.extend(std::iter::repeat_n(
        ' ',
        width.saturating_sub(cell.chars().count()),
    ));
}

/// `cell` padded with spaces to `width` characters.
///
/// Q: why not `format!("{cell:<width$}")`? A: a width given as an argument
/// must fit in a u16, and a tensor name can be longer than 65,535
/// characters; the formatter panics on such a width.
pub fn pad(cell: &str, width: usize) -> String {
    let mut s = String::new();
    pad_into(&mut s, cell, width);
    s
}

/// `bytes` in decimal units, as `ibp analyze` prints them: "46.88 MB".
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// A fraction as a percentage with one decimal: "12.8%".
pub fn percent(fraction: f64) -> String {
    format!("{:.1}%", 100.0 * fraction)
}

/// `1 - stored / raw`, and 0 for an empty group (rather than NaN, which
/// JSON cannot carry).
pub fn savings(raw: u64, stored: u64) -> f64 {
    if raw == 0 {
        0.0
    } else {
        1.0 - stored as f64 / raw as f64
    }
}

/// A 64-bit hash as the manifest writes it: 16 lowercase hex digits.
pub fn hex(x: u64) -> String {
    format!("{x:016x}")
}

/// One group of a container, for tables and `--json`.
#[derive(Serialize, Debug, Clone)]
pub struct GroupSummary {
    /// Tensor name.
    pub name: String,
    /// Element type, as the manifest names it.
    pub dtype: String,
    /// Shape in storage order.
    pub shape: Vec<u64>,
    /// Rows (`N`): the tensors the codec saw.
    pub rows: u64,
    /// Bytes per row (`L`).
    pub row_bytes: u64,
    /// "packed", "fixed", "clustered", "float" or "raw".
    pub layout: &'static str,
    /// A float-coded group's table: element type, symbol bits and
    /// sub-streams per row (float groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub float_code: Option<String>,
    /// Bytes IBP's form took, when the float form was chosen over it (only
    /// known while compressing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ibp_bytes: Option<u64>,
    /// Bytes the float-coded form took, when it was tried (only known
    /// while compressing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub float_bytes: Option<u64>,
    /// Number of clusters `k` (clustered groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clusters: Option<u32>,
    /// Bits per cluster id, `⌈log2 k⌉` (clustered groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id_bits: Option<u32>,
    /// Chunk size of the codebook (compressed groups).
    pub chunk_bytes: Option<u32>,
    /// The threshold the codebook was fitted at (compressed groups).
    pub threshold: Option<f64>,
    /// Bit positions of a row the codebook stores once (compressed groups).
    pub invariant_bits: Option<u64>,
    /// `invariant_bits / (8 L)`.
    pub invariant_fraction: Option<f64>,
    /// Uncompressed bytes, `N · L`.
    pub raw_bytes: u64,
    /// Bytes of the group's sections: codebook, flags, offsets and payload
    /// (or slots, or the raw bytes). Unlike `ibp analyze`'s `stored_bytes`
    /// this includes the metadata: it is what the file spends on the group.
    pub stored_bytes: u64,
    /// `1 - stored_bytes / raw_bytes`; negative when storing costs more.
    pub savings: f64,
    /// Rows stored encoded (they matched the codebook).
    pub encoded_rows: u64,
    /// Rows stored as they were (all rows of a raw group).
    pub raw_rows: u64,
    /// xxh3-64 of the uncompressed bytes.
    pub xxh3: String,
    /// Why `compress` stored the group raw (only known while compressing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_reason: Option<String>,
}

impl GroupSummary {
    /// The summary of group `g` of an opened container.
    pub fn of(g: &GroupView<'_>) -> Self {
        let info = g.info();
        let stats = g.stats();
        let invariant_bits = g.codebook().map(|c| c.invariant_bits());
        GroupSummary {
            name: info.name.clone(),
            dtype: info.dtype.to_string(),
            shape: info.shape.clone(),
            rows: info.rows,
            row_bytes: info.row_bytes,
            layout: info.layout.name(),
            float_code: g.float().ok().map(|f| {
                let t = f.table();
                let sp = t.split();
                format!(
                    "{}, symbol bits {}..{}, {} sub-streams",
                    t.float_type(),
                    sp.low(),
                    sp.low() + sp.width(),
                    t.sub_streams()
                )
            }),
            ibp_bytes: None,
            float_bytes: None,
            clusters: info.clusters,
            cluster_id_bits: g.clusters().map(|(_, ids)| ids.bits()),
            chunk_bytes: info.chunk.map(|c| c.bytes()),
            threshold: info.threshold.map(|t| t.fraction()),
            invariant_bits,
            invariant_fraction: invariant_bits
                .filter(|_| info.row_bytes > 0)
                .map(|b| b as f64 / (8 * info.row_bytes) as f64),
            raw_bytes: stats.original_bytes,
            stored_bytes: stats.stored_bytes,
            savings: savings(stats.original_bytes, stats.stored_bytes),
            encoded_rows: stats.encoded_rows,
            raw_rows: stats.rows.saturating_sub(stats.encoded_rows),
            xxh3: hex(info.xxh3),
            raw_reason: None,
        }
    }

    /// Summaries of every group of `file`, in order.
    pub fn all(file: &IbpFile<'_>) -> Vec<Self> {
        file.groups().map(|g| Self::of(&g)).collect()
    }

    fn compressed(&self) -> bool {
        self.layout != GroupLayout::Raw.name()
    }
}

/// The group table both commands print.
pub fn group_table<'g>(groups: impl IntoIterator<Item = &'g GroupSummary>) -> Table {
    let mut t = Table::new([
        "tensor",
        "dtype",
        "shape",
        "rows × row",
        "layout",
        "threshold",
        "chunk",
        "invariant bits",
        "raw",
        "stored",
        "savings",
        "encoded/raw rows",
    ]);
    let dash = || "-".to_string();
    for g in groups {
        let shape: Vec<String> = g.shape.iter().map(u64::to_string).collect();
        t.push(vec![
            g.name.clone(),
            g.dtype.clone(),
            format!("[{}]", shape.join(", ")),
            format!("{} × {} B", g.rows, g.row_bytes),
            layout_cell(g),
            g.threshold.map_or_else(dash, |t| format!("{t:.2}")),
            g.chunk_bytes.map_or_else(dash, |c| format!("{c} B")),
            match (g.invariant_bits, g.invariant_fraction) {
                (Some(b), Some(f)) => format!("{b} ({})", percent(f)),
                _ => dash(),
            },
            human(g.raw_bytes),
            human(g.stored_bytes),
            percent(g.savings),
            format!("{}/{}", g.encoded_rows, g.raw_rows),
        ]);
    }
    t
}

/// The layout column: the layout, its clusters or float table, and the
/// other coding's size when compressing weighed both.
fn layout_cell(g: &GroupSummary) -> String {
    let mut s = match (g.clusters, g.cluster_id_bits, &g.float_code) {
        (Some(k), Some(b), _) => format!("{} (k = {k}, {b}-bit ids)", g.layout),
        (_, _, Some(f)) => format!("{} ({f})", g.layout),
        _ => g.layout.to_string(),
    };
    let other = if g.layout == GroupLayout::Float.name() {
        g.ibp_bytes.map(|b| format!("ibp {}", human(b)))
    } else {
        g.float_bytes.map(|b| format!("float {}", human(b)))
    };
    if let Some(o) = other {
        s.push_str(&format!("; {o}"));
    }
    s
}

/// Sums over the groups of a file.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Totals {
    /// Number of groups.
    pub groups: usize,
    /// Groups stored packed or fixed-stride.
    pub compressed_groups: usize,
    /// Uncompressed bytes of all groups.
    pub raw_bytes: u64,
    /// Bytes of all groups' sections.
    pub stored_bytes: u64,
    /// `1 - stored_bytes / raw_bytes`.
    pub savings: f64,
}

impl Totals {
    /// The totals of `groups`.
    pub fn of(groups: &[GroupSummary]) -> Self {
        let raw_bytes = groups.iter().map(|g| g.raw_bytes).sum();
        let stored_bytes = groups.iter().map(|g| g.stored_bytes).sum();
        Totals {
            groups: groups.len(),
            compressed_groups: groups.iter().filter(|g| g.compressed()).count(),
            raw_bytes,
            stored_bytes,
            savings: savings(raw_bytes, stored_bytes),
        }
    }

    /// "groups: 3 (2 compressed), 46.88 MB -> 40.90 MB, 12.8% saved".
    pub fn line(&self) -> String {
        format!(
            "groups: {} ({} compressed), {} -> {}, {} saved",
            self.groups,
            self.compressed_groups,
            human(self.raw_bytes),
            human(self.stored_bytes),
            percent(self.savings)
        )
    }
}

/// Write `text` to stdout. A closed pipe (`ibp inspect x.ibp | head`) ends
/// the output quietly, as it does for other command-line tools, instead of
/// the panic `print!` would give.
pub fn emit(text: &str) -> Result<()> {
    emit_with(|out| out.write_all(text.as_bytes()))
}

/// Write to stdout through `write`, buffered, with [`emit`]'s handling of a
/// closed pipe: for output too large to build in memory first.
pub fn emit_with(write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match write(&mut out).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::io("writing to stdout", e))
        }
        _ => Ok(()),
    }
}

/// Groups a report lists without `--verbose`: up to this many (a file of
/// more shows its largest ones, and one line for the rest).
pub const SUMMARY_GROUPS: usize = 10;

/// The group table of a report: every group with `verbose` or when there
/// are at most [`SUMMARY_GROUPS`] (in file order), else the largest
/// [`SUMMARY_GROUPS`] by raw bytes (largest first) and a line for the rest.
pub fn group_summary(groups: &[GroupSummary], verbose: bool) -> String {
    if verbose || groups.len() <= SUMMARY_GROUPS {
        return group_table(groups).render();
    }
    let mut order: Vec<&GroupSummary> = groups.iter().collect();
    order.sort_by_key(|g| std::cmp::Reverse(g.raw_bytes));
    let (shown, rest) = order.split_at(SUMMARY_GROUPS);
    let raw: u64 = rest.iter().map(|g| g.raw_bytes).sum();
    let stored: u64 = rest.iter().map(|g| g.stored_bytes).sum();
    let as_raw = rest.iter().filter(|g| g.layout == "raw").count();
    let mut s = format!(
        "the {SUMMARY_GROUPS} largest of {} tensors:\n",
        groups.len()
    );
    s.push_str(&group_table(shown.iter().copied()).render());
    s.push_str(&format!(
        "... and {} more tensors, {} -> {} ({as_raw} of them stored raw); --verbose lists every tensor\n",
        rest.len(),
        human(raw),
        human(stored)
    ));
    s
}

/// `value` as pretty JSON with a final newline, for `--json`.
pub fn json(value: &impl Serialize) -> Result<String> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| Error::invalid(format!("cannot write the report as JSON: {e}")))
}
