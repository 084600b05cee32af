//! `ibp inspect`: what an `.ibp` container holds, without decompressing
//! it: the original file's fingerprint, every group, every section.
//!
//! Opening the file checks all of it (checksums, layout, codebooks, offset
//! tables), so a damaged file is reported here, as it would be by
//! `decompress`, with a typed error and its exit code.

use std::io::Write;
use std::path::PathBuf;

use ibp::Result;
use ibp::container::{FLAG_REQUIRED, IbpFile, NO_OWNER, SectionKind};
use serde::Serialize;

use super::input::open_container;
use super::table::{GroupSummary, Table, Totals, emit_with, group_summary, hex, human};

/// Arguments of `ibp inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The .ibp container.
    input: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// List every tensor and every section (by default a file of more than
    /// ten tensors shows its ten largest, and the sections are counted by
    /// kind).
    #[arg(short, long)]
    verbose: bool,
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
    kind: &'static str,
    kind_id: u32,
    /// Group or piece number; absent for the manifest.
    owner: Option<u32>,
    offset: u64,
    length: u64,
    /// Written as 16 hex digits.
    #[serde(serialize_with = "as_hex")]
    xxh3: u64,
    required: bool,
}

/// Q: why not keep the hex string? A: a container can have hundreds of
/// thousands of sections; a string each was most of what `inspect` held.
fn as_hex<S: serde::Serializer>(x: &u64, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&hex(*x))
}

pub fn run(args: Args) -> Result<()> {
    let file = open_container(&args.input)?;
    let r = report(&args, &file);
    // Streamed: a container of many groups and sections prints a lot.
    emit_with(|out| {
        if args.json {
            serde_json::to_writer_pretty(&mut *out, &r)?;
            out.write_all(b"\n")
        } else {
            write_text(&r, args.verbose, out)
        }
    })
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
                kind: SectionKind::from_u32(e.kind).map_or("unknown", SectionKind::name),
                kind_id: e.kind,
                owner: (e.owner != NO_OWNER).then_some(e.owner),
                offset: e.offset,
                length: e.length,
                xxh3: e.xxh3,
                required: e.flags & FLAG_REQUIRED != 0,
            })
            .collect(),
        notes: file.notes().to_vec(),
    }
}

fn write_text(r: &Report, verbose: bool, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "file:     {} ({}, {} bytes)",
        r.file,
        human(r.file_bytes),
        r.file_bytes
    )?;
    writeln!(out, "format:   .ibp version {}", r.format_version)?;
    match &r.source {
        Some(src) => writeln!(
            out,
            "original: {} file, {} bytes ({}), xxh3 {}",
            src.format,
            src.length,
            human(src.length),
            src.xxh3
        )?,
        None => writeln!(out, "original: not recorded (the file cannot be restored)")?,
    }
    writeln!(out)?;
    if r.groups.is_empty() {
        writeln!(out, "no tensor groups: the whole file is stored as is")?;
    } else {
        out.write_all(group_summary(&r.groups, verbose).as_bytes())?;
        writeln!(out)?;
        writeln!(out, "{}", r.totals.line())?;
    }

    writeln!(out)?;
    if !verbose {
        // Counted by kind, in the order each kind first appears.
        let mut kinds: Vec<(&str, usize)> = Vec::new();
        for e in &r.sections {
            match kinds.iter_mut().find(|(k, _)| *k == e.kind) {
                Some((_, n)) => *n += 1,
                None => kinds.push((e.kind, 1)),
            }
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
        writeln!(
            out,
            "sections ({}): {}; --verbose lists them",
            r.sections.len(),
            kinds.join(", ")
        )?;
        for n in &r.notes {
            writeln!(out, "note: {n}")?;
        }
        return Ok(());
    }
    writeln!(out, "sections ({}):", r.sections.len())?;
    let mut t = Table::new(["#", "kind", "owner", "offset", "length", "xxh3", "flags"]);
    for e in &r.sections {
        let kind = SectionKind::from_u32(e.kind_id);
        t.push(vec![
            e.index.to_string(),
            match kind {
                Some(_) => e.kind.to_string(),
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
            hex(e.xxh3),
            if e.required { "required" } else { "optional" }.to_string(),
        ]);
    }
    t.write_to(out)?;
    if !r.notes.is_empty() {
        writeln!(out)?;
        for n in &r.notes {
            writeln!(out, "note: {n}")?;
        }
    }
    Ok(())
}
