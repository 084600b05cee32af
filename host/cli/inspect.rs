//! `ibp inspect`: what an `.ibp` container holds, without decompressing
//! it: the original file's fingerprint, every group, every section.
//!
//! Opening the file checks all of it (checksums, layout, codebooks, offset
//! tables), so a damaged file is reported here, as it would be by
//! `decompress`, with a typed error and its exit code.

use std::fmt::Write as _;
use std::path::PathBuf;

use ibp::Result;
use ibp::container::{FLAG_REQUIRED, IbpFile, NO_OWNER, SectionKind};
use serde::Serialize;

use super::input::open_container;
use super::table::{GroupSummary, Table, Totals, emit, group_table, hex, human, json};

/// Arguments of `ibp inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The .ibp container.
    input: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// What `--json` prints.
#[derive(Serialize, Debug)]
struct Report {
    file: String,
    file_bytes: u64,
    format_version: u16,
    /// The original file, when the container records it.
    source: Option<Source>,
    groups: Vec<GroupSummary>,
    totals: Totals,
    sections: Vec<Section>,
    notes: Vec<String>,
}

#[derive(Serialize, Debug)]
struct Source {
    format: String,
    length: u64,
    xxh3: String,
}

/// One directory entry.
#[derive(Serialize, Debug)]
struct Section {
    index: usize,
    /// The kind's name, or "unknown" for kinds this ibp does not know
    /// (optional sections of a later writer).
    kind: String,
    kind_id: u32,
    /// Group or piece number; absent for the manifest.
    owner: Option<u32>,
    offset: u64,
    length: u64,
    xxh3: String,
    required: bool,
}

pub fn run(args: Args) -> Result<()> {
    let file = open_container(&args.input)?;
    let r = report(&args, &file);
    emit(&if args.json { json(&r)? } else { text(&r) })
}

fn report(args: &Args, file: &IbpFile<'_>) -> Report {
    let groups = GroupSummary::all(file);
    Report {
        file: args.input.display().to_string(),
        file_bytes: file.bytes().len() as u64,
        format_version: file.version(),
        source: file.source().map(|s| Source {
            format: s.format.clone(),
            length: s.fingerprint.len,
            xxh3: hex(s.fingerprint.xxh3),
        }),
        totals: Totals::of(&groups),
        groups,
        sections: file
            .sections()
            .iter()
            .enumerate()
            .map(|(index, e)| Section {
                index,
                kind: SectionKind::from_u32(e.kind)
                    .map_or("unknown", SectionKind::name)
                    .to_string(),
                kind_id: e.kind,
                owner: (e.owner != NO_OWNER).then_some(e.owner),
                offset: e.offset,
                length: e.length,
                xxh3: hex(e.xxh3),
                required: e.flags & FLAG_REQUIRED != 0,
            })
            .collect(),
        notes: file.notes().to_vec(),
    }
}

fn text(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "file:     {} ({}, {} bytes)",
        r.file,
        human(r.file_bytes),
        r.file_bytes
    );
    let _ = writeln!(s, "format:   .ibp version {}", r.format_version);
    match &r.source {
        Some(src) => {
            let _ = writeln!(
                s,
                "original: {} file, {} bytes ({}), xxh3 {}",
                src.format,
                src.length,
                human(src.length),
                src.xxh3
            );
        }
        None => s.push_str("original: not recorded (restores are checked per tensor only)\n"),
    }
    s.push('\n');
    if r.groups.is_empty() {
        s.push_str("no tensor groups: the whole file is stored as is\n");
    } else {
        s.push_str(&group_table(&r.groups).render());
        s.push('\n');
        let _ = writeln!(s, "{}", r.totals.line());
    }

    s.push('\n');
    let _ = writeln!(s, "sections ({}):", r.sections.len());
    let mut t = Table::new(["#", "kind", "owner", "offset", "length", "xxh3", "flags"]);
    for e in &r.sections {
        let kind = SectionKind::from_u32(e.kind_id);
        t.push(vec![
            e.index.to_string(),
            match kind {
                Some(_) => e.kind.clone(),
                None => format!("unknown ({})", e.kind_id),
            },
            match (kind, e.owner) {
                (_, None) => "-".to_string(),
                (Some(SectionKind::Piece), Some(p)) => format!("piece {p}"),
                (Some(_), Some(g)) => format!("group {g}"),
                (None, Some(o)) => o.to_string(),
            },
            e.offset.to_string(),
            e.length.to_string(),
            e.xxh3.clone(),
            if e.required { "required" } else { "optional" }.to_string(),
        ]);
    }
    s.push_str(&t.render());
    if !r.notes.is_empty() {
        s.push('\n');
        for n in &r.notes {
            let _ = writeln!(s, "note: {n}");
        }
    }
    s
}
