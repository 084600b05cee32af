//! Float-coded groups in the container (`docs/FORMAT.md` §6.9): MiniLM's
//! weights (f32, and rounded to bf16) through compress → file → restore,
//! byte for byte, under every [`Coding`]; random access to rows of a
//! float-coded group; and damaged float sections, which must give typed
//! errors.

mod common;

use ibp::ErrorKind;
use ibp::container::{GroupLayout, IbpFile, SectionKind};
use ibp::io::{self, DType, ParseOptions, SourceFormat};
use ibp::pipeline::{Coding, CompressOptions, CompressReport, compress_document};

use common::container::*;

/// MiniLM's `model.safetensors`, or `None` (with a visible notice).
fn minilm(test: &str) -> Option<Vec<u8>> {
    let Some(p) = common::data_file("model.safetensors") else {
        common::notice(&format!("{test}: skipped: model.safetensors not found"));
        return None;
    };
    Some(std::fs::read(p).unwrap())
}

/// The same model with every f32 tensor rounded to bf16 (nearest even),
/// the others as they are.
fn to_bf16(model: &[u8]) -> Vec<u8> {
    let doc = io::parse(model, SourceFormat::Safetensors, &ParseOptions::default()).unwrap();
    let tensors: Vec<(&str, &str, Vec<u64>, Vec<u8>)> = doc
        .groups
        .iter()
        .map(|g| {
            if g.dtype == DType::F32 {
                let data = g
                    .data
                    .as_chunks::<4>()
                    .0
                    .iter()
                    .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
                    .collect();
                (g.name.as_str(), "BF16", g.shape.clone(), data)
            } else {
                let name = if g.dtype == DType::I64 { "I64" } else { "F32" };
                (g.name.as_str(), name, g.shape.clone(), g.data.to_vec())
            }
        })
        .collect();
    safetensors(&tensors)
}

/// Compress `original` with `coding`, write the container to a file, open
/// it from there and restore it; returns the report and the container.
fn through_a_file(original: &[u8], coding: Coding, tag: &str) -> (CompressReport, Vec<u8>) {
    let doc = io::parse(
        original,
        SourceFormat::Safetensors,
        &ParseOptions::default(),
    )
    .unwrap();
    let opts = CompressOptions::default().with_coding(coding);
    let (bytes, report) = compress_document(&doc, &opts, Vec::new()).unwrap();
    let path = std::env::temp_dir().join(format!(
        "ibp-container-float-{}-{tag}-{}.ibp",
        std::process::id(),
        coding.name()
    ));
    std::fs::write(&path, &bytes).unwrap();
    let file = IbpFile::open(&path).unwrap();
    assert!(
        file.restore_to_vec().unwrap() == original,
        "{tag} --coding {}: the restored file differs",
        coding.name()
    );
    drop(file);
    std::fs::remove_file(&path).unwrap();
    (report, bytes)
}

fn float_groups(r: &CompressReport) -> Vec<&str> {
    r.groups
        .iter()
        .filter(|g| g.layout == GroupLayout::Float)
        .map(|g| g.name.as_str())
        .collect()
}

/// Every coding round-trips the model; `auto` float-codes some of its
/// weights and is never larger than IBP alone; `float` float-codes every
/// 2-D float tensor, `ibp` none. Rows of a float-coded group decode alone.
fn every_coding_round_trips(original: &[u8], tag: &str) {
    let (ibp, ibp_bytes) = through_a_file(original, Coding::Ibp, tag);
    assert!(float_groups(&ibp).is_empty(), "{tag}: ibp float-coded");
    let (auto, auto_bytes) = through_a_file(original, Coding::Auto, tag);
    let (float, _) = through_a_file(original, Coding::Float, tag);
    let chosen = float_groups(&auto);
    eprintln!(
        "{tag}: auto float-coded {} of {} groups ({} -> {} bytes; ibp only {}): {chosen:?}",
        chosen.len(),
        auto.groups.len(),
        auto.input_bytes,
        auto.output_bytes,
        ibp.output_bytes
    );
    assert!(!chosen.is_empty(), "{tag}: auto float-coded nothing");
    assert!(auto.output_bytes <= ibp.output_bytes, "{tag}: auto larger");
    for g in &auto.groups {
        // Both sizes for every group auto weighed, the smaller one chosen.
        if let (Some(i), Some(f)) = (g.ibp_bytes, g.float_bytes) {
            if g.layout == GroupLayout::Float {
                assert!(f < i, "{tag} {}: float chosen, not smaller", g.name);
            } else {
                assert!(
                    f + 64 > i,
                    "{tag} {}: float not chosen, but smaller",
                    g.name
                );
            }
        }
    }
    let forced = float_groups(&float);
    let two_d = float
        .groups
        .iter()
        .filter(|g| g.stats.rows >= 2 && g.layout != GroupLayout::Raw)
        .count();
    assert_eq!(forced.len(), two_d, "{tag}: --coding float");
    assert!(ibp_bytes != auto_bytes);

    // Random access: rows of the embeddings table, float-coded, decoded
    // through the reader's row API, against the group decoded whole.
    let file = IbpFile::from_bytes(&auto_bytes).unwrap();
    let g = file
        .find_group("embeddings.word_embeddings.weight")
        .unwrap();
    assert_eq!(g.layout(), GroupLayout::Float, "{tag}: embeddings");
    let whole = g.decompress().unwrap();
    let l = g.row_bytes() as usize;
    for start in [0u64, 1, 255, 256, 30_000] {
        let mut out = vec![0u8; 3 * l];
        g.decompress_rows(start..start + 3, &mut out).unwrap();
        let at = start as usize * l;
        assert!(out == whole[at..at + 3 * l], "{tag}: rows from {start}");
    }
}

#[test]
fn minilm_f32_round_trips_with_every_coding() {
    let Some(model) = minilm("minilm_f32_round_trips_with_every_coding") else {
        return;
    };
    every_coding_round_trips(&model, "minilm-f32");
}

#[test]
fn minilm_bf16_round_trips_with_every_coding() {
    let Some(model) = minilm("minilm_bf16_round_trips_with_every_coding") else {
        return;
    };
    every_coding_round_trips(&to_bf16(&model), "minilm-bf16");
}

/// A small document with one float-coded bf16 group, its container, and
/// the container's sections.
fn float_container() -> (Vec<u8>, Vec<u8>, Sections) {
    let data: Vec<u8> = (0..64 * 96u32)
        .flat_map(|i| {
            let x = (i.wrapping_mul(2_654_435_761) >> 20) as f32 / 4096.0 - 0.5;
            half::bf16::from_f32(x * x * x).to_le_bytes()
        })
        .collect();
    let original = safetensors(&[("w", "BF16", vec![64, 96], data)]);
    let doc = parse_safetensors(&original);
    let opts = CompressOptions::default().with_coding(Coding::Float);
    let (bytes, report) = compress(&doc, &opts);
    assert_eq!(report.groups[0].layout, GroupLayout::Float);
    let secs = sections_of(&bytes);
    (original, bytes, secs)
}

fn float_section(secs: &Sections) -> usize {
    let at = secs
        .iter()
        .position(|s| s.0 == SectionKind::FloatGroup as u32)
        .expect("a float-group section");
    assert_eq!(secs[at].1, 1, "the float-group section is required");
    at
}

fn open_err(secs: &Sections) -> ErrorKind {
    match IbpFile::from_bytes(&assemble(1, secs)) {
        Ok(_) => panic!("a damaged float section opened"),
        Err(e) => e.kind(),
    }
}

#[test]
fn damaged_float_sections_give_typed_errors() {
    let (original, bytes, secs) = float_container();
    assert!(assemble(1, &secs) == bytes);
    check_restores(&IbpFile::from_bytes(&bytes).unwrap(), &original);
    let at = float_section(&secs);
    let len = secs[at].3.len();

    // Truncated (checksums recomputed, so the float parser sees it): every
    // cut inside the table and index is `Truncated`; a cut in the payload
    // leaves offsets that do not span it, `Corrupt`.
    for cut in [0, 1, 7, 8, 20, 40, len / 2, len - 1] {
        let mut s = secs.clone();
        s[at].3.truncate(cut);
        let k = open_err(&s);
        assert!(
            matches!(k, ErrorKind::Truncated | ErrorKind::Corrupt),
            "cut at {cut}: {k:?}"
        );
    }
    let mut s = secs.clone();
    s[at].3.truncate(4);
    assert_eq!(open_err(&s), ErrorKind::Truncated);

    // Every single flipped bit is refused at open, or when the group is
    // decoded (the group's hash then), with a typed error and no panic;
    // or it changes nothing decoded: only the table's `M` (a bound on the
    // code lengths, §7.2) can, and the restore is then still exact.
    let mut refused_at_open = 0;
    for i in 0..len {
        for bit in [0, 3, 7] {
            let mut s = secs.clone();
            s[at].3[i] ^= 1 << bit;
            match IbpFile::from_bytes(&assemble(1, &s)) {
                Err(e) => {
                    assert!(
                        matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::Truncated),
                        "byte {i} bit {bit}: {e}"
                    );
                    refused_at_open += 1;
                }
                Ok(f) => match f.restore_to_vec() {
                    Err(e) => assert_eq!(e.kind(), ErrorKind::Corrupt, "byte {i} bit {bit}: {e}"),
                    Ok(back) => {
                        assert_eq!(i, 4, "byte {i} bit {bit} changed nothing decoded");
                        assert!(back == original, "byte {i} bit {bit}: restored wrong bytes");
                    }
                },
            }
        }
    }
    assert!(refused_at_open > 0);

    // The file's own checksum catches a flip before any of that.
    let mut flipped = bytes.clone();
    let off = 64
        + secs[..at]
            .iter()
            .map(|s| s.3.len().next_multiple_of(64))
            .sum::<usize>();
    flipped[off + len / 2] ^= 1;
    let e = IbpFile::from_bytes(&flipped).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
}

#[test]
fn a_reader_without_float_coding_refuses_the_file_as_unsupported() {
    let (_, _, secs) = float_container();
    let at = float_section(&secs);
    // A reader that does not know kind 10 sees it as any unknown required
    // kind: 99 stands for it here.
    let mut s = secs.clone();
    s[at].0 = 99;
    let e = IbpFile::from_bytes(&assemble(1, &s)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.to_string().contains("required"), "{e}");
    // Marked optional, it would be skipped, and the group would lack its
    // section: corrupt, never misdecoded.
    s[at].1 = 0;
    let e = IbpFile::from_bytes(&assemble(1, &s)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    // A manifest naming a float group with packed sections is corrupt.
    let mi = secs
        .iter()
        .position(|s| s.0 == SectionKind::Manifest as u32)
        .unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&secs[mi].3).unwrap();
    assert_eq!(json["groups"][0]["layout"], serde_json::json!("float"));
    assert!(json["groups"][0].get("chunk_bytes").is_none());
    json["groups"][0]["dtype"] = serde_json::json!("f16");
    let mut s = secs.clone();
    s[mi].3 = serde_json::to_vec(&json).unwrap();
    let e = IbpFile::from_bytes(&assemble(1, &s)).err().unwrap();
    assert_eq!(
        e.kind(),
        ErrorKind::Corrupt,
        "a bf16 table in an f16 group: {e}"
    );
}

/// `auto` float-codes a group only when it fits one batch (the float coder
/// holds its coded form), keeps IBP otherwise and says why; `float` codes
/// it anyway; the library's default codes with IBP alone.
#[test]
fn auto_tries_float_coding_only_within_one_batch() {
    let (original, _, _) = float_container();
    let doc = parse_safetensors(&original);
    let group_bytes = 64 * 96 * 2;
    let small = CompressOptions::default().with_batch_bytes(group_bytes - 1);
    let (bytes, r) = compress(&doc, &small.clone().with_coding(Coding::Auto));
    assert_ne!(r.groups[0].layout, GroupLayout::Float);
    assert_eq!(r.groups[0].float_bytes, None);
    let note = r.groups[0].note.as_deref().unwrap_or_default();
    assert!(note.starts_with("float coding not tried"), "{note}");
    check_restores(&IbpFile::from_bytes(&bytes).unwrap(), &original);

    let (_, r) = compress(&doc, &small.with_coding(Coding::Float));
    assert_eq!(r.groups[0].layout, GroupLayout::Float);
    let whole = CompressOptions::default().with_batch_bytes(group_bytes);
    let (_, r) = compress(&doc, &whole.clone().with_coding(Coding::Auto));
    assert_eq!(r.groups[0].layout, GroupLayout::Float);
    assert!(r.groups[0].ibp_bytes > r.groups[0].float_bytes);
    let (_, r) = compress(&doc, &CompressOptions::default());
    assert_ne!(r.groups[0].layout, GroupLayout::Float, "the default is IBP");
    assert_eq!(r.groups[0].float_bytes, None);
}
