//! Opening a container: the parse that proves, once, every structural fact
//! the module docs of `reader` list, as byte ranges the file then keeps.

use super::*;

/// Everything open learns, as byte ranges (no borrows), so that it can be
/// moved in next to the storage it describes.
pub(super) struct Parsed {
    version: u16,
    sections: Vec<DirEntry>,
    groups: Vec<GroupEntry>,
    pieces: Vec<Range<usize>>,
    envelope: Vec<Segment<u32>>,
    source: Option<SourceInfo>,
    notes: Vec<String>,
}

impl Parsed {
    pub(super) fn into_file(self, storage: Storage<'_>) -> IbpFile<'_> {
        IbpFile {
            storage,
            version: self.version,
            sections: self.sections,
            groups: self.groups,
            pieces: self.pieces,
            envelope: self.envelope,
            source: self.source,
            notes: self.notes,
        }
    }

    pub(super) fn parse(bytes: &[u8]) -> Result<Parsed> {
        let len = bytes.len() as u64;
        let magic_len = bytes.len().min(MAGIC.len());
        if bytes[..magic_len] != MAGIC[..magic_len] {
            return Err(Error::corrupt(
                "not an ibp container: the magic number is missing",
            ));
        }
        if len < HEADER_LEN + TRAILER_LEN {
            return Err(Error::truncated(format!(
                "container of {len} bytes is shorter than a header and a trailer"
            )));
        }
        let version = format::decode_header(fixed(bytes, 0)?)?;
        let trailer_at = len - TRAILER_LEN;
        let t = Trailer::decode(fixed(bytes, trailer_at as usize)?, len)?;
        if t.version != version {
            return Err(Error::corrupt(format!(
                "header says version {version}, trailer says {}",
                t.version
            )));
        }
        let sections = directory(bytes, &t, trailer_at)?;
        check_sections(bytes, &sections)?;

        let mut manifest = None;
        let mut piece_entries = Vec::new();
        let mut group_entries = Vec::new();
        for (i, e) in sections.iter().enumerate() {
            let range = e.offset as usize..(e.offset + e.length) as usize;
            match SectionKind::from_u32(e.kind) {
                Some(SectionKind::Manifest) => {
                    if manifest.is_some() || e.owner != NO_OWNER {
                        return Err(Error::corrupt(
                            "the directory has a second manifest, or one with an owner",
                        ));
                    }
                    manifest = Some(Manifest::from_json(&bytes[range])?);
                }
                Some(SectionKind::Piece) => piece_entries.push((e.owner, range)),
                Some(kind) => group_entries.push((i, kind, e.owner, range)),
                None if e.flags & FLAG_REQUIRED != 0 => {
                    return Err(Error::unsupported(format!(
                        "{} is required but this ibp does not know its kind; upgrade ibp",
                        e.describe(i)
                    )));
                }
                None => {} // optional, unknown: skipped
            }
        }
        let manifest =
            manifest.ok_or_else(|| Error::corrupt("the container has no manifest section"))?;

        let mut pieces = vec![None; piece_entries.len()];
        for (owner, range) in piece_entries {
            match pieces.get_mut(owner as usize) {
                Some(slot @ None) => *slot = Some(range),
                _ => {
                    return Err(Error::corrupt(format!(
                        "envelope piece {owner} is out of range or repeated"
                    )));
                }
            }
        }
        let pieces: Vec<Range<usize>> = pieces.into_iter().map(Option::unwrap_or_default).collect();

        let mut sects = vec![GroupSections::default(); manifest.groups.len()];
        for (i, kind, owner, range) in group_entries {
            let what = sections[i].describe(i);
            let slot = sects
                .get_mut(owner as usize)
                .and_then(|s| s.slot(kind))
                .ok_or_else(|| Error::corrupt(format!("{what}: no such group")))?;
            if slot.replace(range).is_some() {
                return Err(Error::corrupt(format!("{what}: repeated")));
            }
        }
        let groups = manifest
            .groups
            .into_iter()
            .zip(sects)
            .enumerate()
            .map(|(i, (info, s))| group_entry(bytes, i, info, s))
            .collect::<Result<Vec<_>>>()?;

        let mut seen_groups = vec![false; groups.len()];
        let mut seen_pieces = vec![false; pieces.len()];
        check_envelope(&manifest.envelope, &mut seen_groups, &mut seen_pieces, 0)
            .map_err(|m| Error::corrupt(format!("manifest: {m}")))?;
        if seen_groups.contains(&false) || seen_pieces.contains(&false) {
            return Err(Error::corrupt(
                "manifest: the envelope leaves a group or piece unused",
            ));
        }
        Ok(Parsed {
            version,
            sections,
            groups,
            pieces,
            envelope: manifest.envelope,
            source: manifest.source,
            notes: manifest.notes,
        })
    }
}

fn fixed<const N: usize>(bytes: &[u8], at: usize) -> Result<&[u8; N]> {
    bytes
        .get(at..at.wrapping_add(N))
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Error::truncated("container too short"))
}

/// Read and check the directory: its place, its checksum, and that its
/// sections tile the space after the header exactly (canonical layout).
fn directory(bytes: &[u8], t: &Trailer, trailer_at: u64) -> Result<Vec<DirEntry>> {
    let dir_len = t
        .dir_count
        .checked_mul(ENTRY_LEN)
        .filter(|&l| l <= trailer_at)
        .ok_or_else(|| {
            Error::corrupt(format!(
                "trailer: {} directory entries cannot fit the file",
                t.dir_count
            ))
        })?;
    let dir_end = t
        .dir_offset
        .checked_add(dir_len)
        .filter(|&e| e <= trailer_at);
    let dir_end = match dir_end {
        Some(e) if t.dir_offset >= HEADER_LEN && t.dir_offset.is_multiple_of(format::ALIGN) => e,
        _ => {
            return Err(Error::corrupt(
                "trailer: the directory's offset is out of place",
            ));
        }
    };
    if format::align_up(dir_end) != trailer_at {
        return Err(Error::corrupt(
            "trailer: the directory does not end right before the trailer",
        ));
    }
    let dir = &bytes[t.dir_offset as usize..dir_end as usize];
    if xxh3_64(dir) != t.dir_xxh3 {
        return Err(Error::corrupt("directory: checksum mismatch"));
    }
    check_zero(bytes, dir_end, trailer_at, "padding after the directory")?;
    let entries = dir
        .as_chunks::<{ ENTRY_LEN as usize }>()
        .0
        .iter()
        .enumerate()
        .map(|(i, b)| DirEntry::decode(b, i))
        .collect::<Result<Vec<_>>>()?;
    let mut expected = HEADER_LEN;
    for (i, e) in entries.iter().enumerate() {
        if e.offset != expected {
            return Err(Error::corrupt(format!(
                "{}: starts at byte {} instead of {expected}, where the previous section leaves off",
                e.describe(i),
                e.offset
            )));
        }
        let end = e
            .offset
            .checked_add(e.length)
            .filter(|&end| end <= t.dir_offset)
            .ok_or_else(|| {
                Error::truncated(format!("{}: runs past the directory", e.describe(i)))
            })?;
        check_zero(
            bytes,
            end,
            format::align_up(end).min(t.dir_offset),
            "padding after a section",
        )?;
        expected = format::align_up(end);
    }
    if expected != t.dir_offset {
        return Err(Error::corrupt(
            "directory: sections do not reach the directory",
        ));
    }
    Ok(entries)
}

fn check_zero(bytes: &[u8], from: u64, to: u64, what: &str) -> Result<()> {
    if bytes[from as usize..to as usize].iter().any(|&b| b != 0) {
        return Err(Error::corrupt(format!(
            "{what} (bytes {from}..{to}) is not zero"
        )));
    }
    Ok(())
}

/// Verify every section's checksum, in parallel.
fn check_sections(bytes: &[u8], entries: &[DirEntry]) -> Result<()> {
    entries.par_iter().enumerate().try_for_each(|(i, e)| {
        let s = &bytes[e.offset as usize..(e.offset + e.length) as usize];
        if xxh3_64(s) != e.xxh3 {
            return Err(Error::corrupt(format!(
                "{}: checksum mismatch",
                e.describe(i)
            )));
        }
        Ok(())
    })
}

/// Check that a group has exactly the sections its layout needs, with the
/// lengths its shape implies, and build its codebook.
fn group_entry(bytes: &[u8], i: usize, info: GroupInfo, s: GroupSections) -> Result<GroupEntry> {
    let bad = |m: &str| Error::corrupt(format!("group {i} ({:?}): {m}", info.name));
    let len = |r: &Option<Range<usize>>| r.as_ref().map(|r| r.len() as u64);
    let rows = usize::try_from(info.rows).map_err(|_| bad("too many rows"))?;
    let l = usize::try_from(info.row_bytes).map_err(|_| bad("rows too long"))?;
    let data_len = info
        .rows
        .checked_mul(info.row_bytes)
        .ok_or_else(|| bad("size overflows"))?;
    let all = [
        &s.codebook,
        &s.flags,
        &s.offsets,
        &s.payload,
        &s.slots,
        &s.raw,
        &s.ids,
        &s.float,
    ];
    let present = all.map(Option::is_some);
    let wanted = match info.layout {
        GroupLayout::Raw => [false, false, false, false, false, true, false, false],
        GroupLayout::Coded(Layout::Packed) => [true, true, true, true, false, false, false, false],
        GroupLayout::Coded(Layout::FixedStride) => {
            [true, true, false, false, true, false, false, false]
        }
        GroupLayout::Clustered => [true, true, true, true, false, false, true, false],
        GroupLayout::Float => [false, false, false, false, false, false, false, true],
    };
    if present != wanted {
        return Err(bad(&format!(
            "a {} group must have exactly its sections",
            info.layout.name()
        )));
    }
    let mut stats = GroupStats {
        rows: info.rows,
        encoded_rows: 0,
        original_bytes: data_len,
        stored_bytes: all.iter().filter_map(|r| len(r)).sum(),
    };
    let slice = |r: &Option<Range<usize>>| r.clone().map(|r| &bytes[r]).unwrap_or_default();
    let mut codebook = None;
    let mut clusters = None;
    let mut offsets_copy = None;
    if info.layout == GroupLayout::Float {
        // Checked here and dropped: `GroupView::float` reads it again, so
        // open holds one group's coded form at a time, not every group's.
        let f = float_group(slice(&s.float), i, &info)?;
        stats.encoded_rows = f.coded_rows() as u64;
    } else if info.layout == GroupLayout::Raw {
        if len(&s.raw) != Some(data_len) {
            return Err(Error::truncated(format!(
                "group {i} ({:?}): raw section is not {data_len} bytes",
                info.name
            )));
        }
    } else {
        let cb_bytes = slice(&s.codebook);
        let k = info.clusters.unwrap_or(1);
        if Some(cb_bytes.len() as u64) != (2 * info.row_bytes).checked_mul(u64::from(k)) {
            return Err(bad(&format!(
                "the codebook section is not {k} codebook(s) of twice the row length"
            )));
        }
        let chunk = info.chunk.ok_or_else(|| bad("no chunk size"))?;
        let mut cbs = clustered::codebooks(cb_bytes, l, chunk).map_err(|e| bad(e.message()))?;
        if info.layout == GroupLayout::Clustered {
            let ids = clustered::cluster_ids(slice(&s.ids), k, rows)
                .map_err(|e| bad(&format!("cluster ids: {}", e.message())))?;
            clusters = Some(ClusterTable {
                codebooks: std::mem::take(&mut cbs),
                ids,
            });
        }
        let flags = slice(&s.flags);
        if flags.len() != flag_bytes(rows) {
            return Err(bad("the flag bitmap has the wrong length"));
        }
        if info.layout != GroupLayout::Coded(Layout::FixedStride) {
            let (offsets, payload) = (slice(&s.offsets), slice(&s.payload));
            offsets_copy = packed_offsets(i, &info, flags, offsets, payload, chunk)?;
        } else {
            let cb = cbs.first().ok_or_else(|| bad("no codebook"))?;
            if Some(len(&s.slots).unwrap_or(0)) != Some(data_len) {
                return Err(Error::truncated(format!(
                    "group {i} ({:?}): slots are not {data_len} bytes",
                    info.name
                )));
            }
            let f = FixedStrideRef::new(l, rows, flags, slice(&s.slots))
                .map_err(|e| corrupt_in(e, i, &info))?;
            f.validate(cb).map_err(|e| corrupt_in(e, i, &info))?;
        }
        stats.encoded_rows = flags.iter().map(|b| u64::from(b.count_ones())).sum();
        codebook = cbs.pop();
    }
    Ok(GroupEntry {
        info,
        sections: s,
        codebook,
        clusters,
        offsets_copy,
        stats,
    })
}

/// Read and check a float-coded group's section (`docs/FORMAT.md` §6.9):
/// a valid table and index (`FloatCoded::from_bytes`), the manifest's rows
/// and row length, and a table of the group's own float type.
fn float_group(bytes: &[u8], i: usize, info: &GroupInfo) -> Result<FloatCoded> {
    let f = FloatCoded::from_bytes(bytes).map_err(|e| corrupt_in(e, i, info))?;
    let bad = |m: String| Error::corrupt(format!("group {i} ({:?}): {m}", info.name));
    if f.rows() as u64 != info.rows || f.row_bytes() as u64 != info.row_bytes {
        return Err(bad(format!(
            "the float-group section holds {} rows of {} bytes, the manifest says {} of {}",
            f.rows(),
            f.row_bytes(),
            info.rows,
            info.row_bytes
        )));
    }
    float_type_fits(f.table().float_type(), &info.dtype).map_err(bad)?;
    Ok(f)
}

/// A codec error about stored data, as corruption of group `i`.
fn corrupt_in(e: Error, i: usize, info: &GroupInfo) -> Error {
    let kind = if e.kind() == ErrorKind::Truncated {
        ErrorKind::Truncated
    } else {
        ErrorKind::Corrupt
    };
    Error::new(
        kind,
        format!("group {i} ({:?}): {}", info.name, e.message()),
    )
}

/// The checks of a packed (or clustered) group's offsets and payload.
/// Returns the offsets copied when the section cannot be read as u64 in
/// place (unaligned, or a big-endian host).
fn packed_offsets(
    i: usize,
    info: &GroupInfo,
    flags: &[u8],
    offsets: &[u8],
    payload: &[u8],
    chunk: crate::codebook::ChunkSize,
) -> Result<Option<Vec<u64>>> {
    let bad = |m: &str| Error::corrupt(format!("group {i} ({:?}): {m}", info.name));
    let (rows, l) = (info.rows as usize, info.row_bytes as usize);
    if Some(offsets.len() as u64) != info.rows.checked_add(1).and_then(|n| n.checked_mul(8)) {
        return Err(bad("the offsets table has the wrong length"));
    }
    // Every stored tensor holds at least its ⌈K/8⌉ bytes of
    // participation bits. Checking the total here bounds N · L by
    // 8C times the payload, so decompression never allocates a size
    // the file cannot back (per-tensor lengths are checked when
    // decoding).
    let min_row = (l.div_ceil(chunk.bytes() as usize)).div_ceil(8) as u64;
    if info
        .rows
        .checked_mul(min_row)
        .is_none_or(|m| m > payload.len() as u64)
    {
        return Err(bad(&format!(
            "a {}-byte payload cannot hold {} tensors of at least {min_row} bytes",
            payload.len(),
            info.rows
        )));
    }
    let p = PackedRef::from_le_offsets(l, rows, flags, offsets, payload)
        .map_err(|e| corrupt_in(e, i, info))?;
    p.validate().map_err(|e| corrupt_in(e, i, info))?;
    if bytemuck::try_cast_slice::<u8, u64>(offsets).is_err() || cfg!(target_endian = "big") {
        return Ok(Some(p.offsets().to_vec()));
    }
    Ok(None)
}
