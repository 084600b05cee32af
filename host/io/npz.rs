//! numpy `.npz` files: zip archives of `.npy` members, stored (method 0) or
//! deflated (method 8), as `numpy.savez` and `numpy.savez_compressed` write
//! them (zip64 extra fields included).
//!
//! Only the members' data is taken apart; everything else (local headers,
//! data descriptors, the central directory, comments, gaps) stays verbatim
//! in the envelope, which keeps the reader small: it needs the central
//! directory to find the members and each local header to find where the
//! member's data begins, and nothing more.
//!
//! A deflated member is inflated, and becomes a [`Segment::Deflate`] only when
//! re-deflating it at some zlib level reproduces the stored stream exactly;
//! otherwise its compressed bytes are kept as they are (still exact, no
//! savings) and a note says so. With [`ParseOptions::with_deferred_inflate`]
//! the inflated bytes are let go once checked and inflated again when used
//! ([`super::Document::group_data`]), so memory holds one member at a time.
#![forbid(unsafe_code)]

use std::borrow::Cow;

use super::deflate::{find_level, inflate_exact};
use super::{
    Deferred, Document, DocumentPieces, Fingerprint, ParseOptions, Segment, SourceFormat, le_u16,
    le_u32, le_u64, npy, take,
};
use crate::error::{Error, Result};

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const EOCD_SIG: u32 = 0x0605_4b50;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const ZIP64_EXTRA_ID: u16 = 0x0001;
const LOCAL_LEN: u64 = 30;
const CENTRAL_LEN: u64 = 46;
const EOCD_LEN: u64 = 22;

/// One member as the central directory and its local header describe it.
#[derive(Clone, Debug)]
struct Member {
    name: String,
    flags: u16,
    method: u16,
    crc32: u32,
    compressed: u64,
    uncompressed: u64,
    local_offset: u64,
    data_start: u64,
}

/// Read an `.npz` archive. Members whose name ends in `.npy` and that hold a
/// plain array become groups named without the `.npy`; the rest stay raw.
pub fn parse<'a>(bytes: &'a [u8], opts: &ParseOptions) -> Result<Document<'a>> {
    let mut members = central_directory(bytes)?;
    members.sort_by_key(|m| m.local_offset);
    let select = opts.selection();
    let mut doc = Document {
        format: SourceFormat::Npz,
        groups: Vec::new(),
        envelope: Vec::new(),
        original: Fingerprint::of(bytes),
        notes: Vec::new(),
        deferred: Vec::new(),
    };
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    for m in &members {
        if m.local_offset < cursor {
            return Err(Error::corrupt(format!(
                "zip member {:?} overlaps the member before it",
                m.name
            )));
        }
        let data = take(
            bytes,
            m.data_start,
            m.compressed,
            &format!("zip member {:?}", m.name),
        )?;
        doc.envelope.push(Segment::Raw(Cow::Borrowed(
            &bytes[cursor as usize..m.data_start as usize],
        )));
        cursor = m.data_start + m.compressed;
        let key = m.name.strip_suffix(".npy");
        if let Some(k) = key {
            keys.push(k);
        }
        match key {
            Some(k) if select.wants(k) => {
                let segs = member(&mut doc, m, k, data, opts.defer_inflate)?;
                doc.envelope.extend(segs);
            }
            _ => doc.envelope.push(Segment::Raw(Cow::Borrowed(data))),
        }
    }
    doc.envelope
        .push(Segment::Raw(Cow::Borrowed(&bytes[cursor as usize..])));
    doc.envelope
        .retain(|s| !matches!(s, Segment::Raw(b) if b.is_empty()));
    select.check_found(keys)?;
    Ok(doc)
}

/// The segments for one `.npy` member's data; adds its group to `doc`, or a
/// note when the member stays raw.
fn member<'a>(
    doc: &mut Document<'a>,
    m: &Member,
    key: &str,
    data: &'a [u8],
    defer: bool,
) -> Result<Vec<Segment<Cow<'a, [u8]>>>> {
    let raw = |doc: &mut Document<'a>, why: String| {
        doc.notes
            .push(format!("member {:?} kept verbatim: {why}", m.name));
        Ok(vec![Segment::Raw(Cow::Borrowed(data))])
    };
    if m.flags & 1 != 0 {
        return raw(doc, "it is encrypted".into());
    }
    let index = doc.groups.len();
    match m.method {
        0 => {
            if m.compressed != m.uncompressed {
                return Err(Error::corrupt(format!(
                    "zip member {:?} is stored but its sizes differ ({} vs {})",
                    m.name, m.compressed, m.uncompressed
                )));
            }
            check_crc(m, data)?;
            match npy::split(Cow::Borrowed(data), key, index) {
                Ok((group, inner)) => {
                    doc.groups.push(group);
                    // A stored member is its npy file: splice its pieces in.
                    Ok(inner)
                }
                Err(e) => raw(doc, format!("not an array ibp reads ({e})")),
            }
        }
        8 => {
            let what = format!("zip member {:?}", m.name);
            let inflated = inflate_exact(data, m.uncompressed, &what)?;
            check_crc(m, &inflated)?;
            let (group, inner) = match npy::split(Cow::Owned(inflated), key, index) {
                Ok(x) => x,
                Err(e) => return raw(doc, format!("not an array ibp reads ({e})")),
            };
            doc.groups.push(group);
            match find_level(
                &inner,
                &mut DocumentPieces(&doc.groups, &doc.deferred),
                data,
            )? {
                Some(level) => {
                    if defer {
                        let head = match inner.first() {
                            Some(Segment::Raw(h)) => h.len() as u64,
                            _ => 0,
                        };
                        let g = &mut doc.groups[index];
                        let len = g.data.len() as u64;
                        g.data = Cow::Borrowed(&[]);
                        doc.deferred.push(Deferred::new(
                            index,
                            what,
                            data,
                            m.uncompressed,
                            m.crc32,
                            head..head + len,
                        ));
                    }
                    Ok(vec![Segment::Deflate { level, inner }])
                }
                None => {
                    doc.groups.pop();
                    raw(
                        doc,
                        "re-deflating does not reproduce its compressed bytes at any zlib level"
                            .into(),
                    )
                }
            }
        }
        other => raw(
            doc,
            format!("compression method {other} (ibp re-creates stored and deflated members only)"),
        ),
    }
}

fn check_crc(m: &Member, data: &[u8]) -> Result<()> {
    let mut crc = flate2::Crc::new();
    crc.update(data);
    if crc.sum() != m.crc32 {
        return Err(Error::corrupt(format!(
            "zip member {:?}: CRC-32 mismatch",
            m.name
        )));
    }
    Ok(())
}

/// Find the end of central directory record: the last signature from which
/// the record plus its comment reach exactly the end of the file.
fn find_eocd(bytes: &[u8]) -> Result<u64> {
    let len = bytes.len() as u64;
    if len < EOCD_LEN {
        return Err(Error::truncated(
            "zip: shorter than an end of central directory record",
        ));
    }
    let lowest = len.saturating_sub(EOCD_LEN + 0xFFFF);
    let mut pos = len - EOCD_LEN;
    loop {
        let p = pos as usize;
        if le_u32(bytes, p) == EOCD_SIG && pos + EOCD_LEN + u64::from(le_u16(bytes, p + 20)) == len
        {
            return Ok(pos);
        }
        if pos == lowest {
            return Err(Error::corrupt(
                "not a zip file: no end of central directory record",
            ));
        }
        pos -= 1;
    }
}

/// Read every central directory entry plus the start of its data.
fn central_directory(bytes: &[u8]) -> Result<Vec<Member>> {
    let eocd_pos = find_eocd(bytes)?;
    let eocd = take(bytes, eocd_pos, EOCD_LEN, "zip end of central directory")?;
    if le_u16(eocd, 4) != 0 || le_u16(eocd, 6) != 0 {
        return Err(Error::unsupported("zip archive spans several disks"));
    }
    let mut count = u64::from(le_u16(eocd, 10));
    let mut cd_size = u64::from(le_u32(eocd, 12));
    let mut cd_offset = u64::from(le_u32(eocd, 16));
    let has_locator = eocd_pos >= 20 && le_u32(bytes, eocd_pos as usize - 20) == ZIP64_LOCATOR_SIG;
    if has_locator {
        let loc = take(bytes, eocd_pos - 20, 20, "zip64 locator")?;
        let z = take(bytes, le_u64(loc, 8), 56, "zip64 end of central directory")?;
        if le_u32(z, 0) != ZIP64_EOCD_SIG {
            return Err(Error::corrupt(
                "zip64 locator does not point at a zip64 end of central directory",
            ));
        }
        count = le_u64(z, 32);
        cd_size = le_u64(z, 40);
        cd_offset = le_u64(z, 48);
    } else if count == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_offset == 0xFFFF_FFFF {
        return Err(Error::corrupt(
            "zip needs zip64 sizes but has no zip64 locator",
        ));
    }
    let cd = take(bytes, cd_offset, cd_size, "zip central directory")?;
    if count > cd_size / CENTRAL_LEN {
        return Err(Error::corrupt(format!(
            "zip claims {count} members in a {cd_size}-byte central directory"
        )));
    }
    let mut members = Vec::with_capacity(count as usize);
    let mut at = 0u64;
    for i in 0..count {
        let what = format!("zip central directory entry {i}");
        let fixed = take(cd, at, CENTRAL_LEN, &what)?;
        if le_u32(fixed, 0) != CENTRAL_SIG {
            return Err(Error::corrupt(format!("{what}: bad signature")));
        }
        let (nlen, xlen, clen) = (
            u64::from(le_u16(fixed, 28)),
            u64::from(le_u16(fixed, 30)),
            u64::from(le_u16(fixed, 32)),
        );
        let name = take(cd, at + CENTRAL_LEN, nlen, &what)?;
        let extra = take(cd, at + CENTRAL_LEN + nlen, xlen, &what)?;
        take(cd, at + CENTRAL_LEN + nlen + xlen, clen, &what)?;
        at += CENTRAL_LEN + nlen + xlen + clen;
        let name = String::from_utf8_lossy(name).into_owned();
        let mut uncompressed = u64::from(le_u32(fixed, 24));
        let mut compressed = u64::from(le_u32(fixed, 20));
        let mut local_offset = u64::from(le_u32(fixed, 42));
        if uncompressed == 0xFFFF_FFFF || compressed == 0xFFFF_FFFF || local_offset == 0xFFFF_FFFF {
            // The zip64 extra holds, in this order, exactly the fields that
            // overflowed.
            let z = zip64_extra(extra)
                .ok_or_else(|| Error::corrupt(format!("{what}: zip64 sizes missing")))?;
            let mut fields = z.as_chunks::<8>().0.iter().map(|c| u64::from_le_bytes(*c));
            for field in [&mut uncompressed, &mut compressed, &mut local_offset] {
                if *field == 0xFFFF_FFFF {
                    *field = fields
                        .next()
                        .ok_or_else(|| Error::corrupt(format!("{what}: zip64 extra too short")))?;
                }
            }
        }
        let local = take(
            bytes,
            local_offset,
            LOCAL_LEN,
            &format!("zip local header of {name:?}"),
        )?;
        if le_u32(local, 0) != LOCAL_SIG {
            return Err(Error::corrupt(format!(
                "zip local header of {name:?}: bad signature"
            )));
        }
        let data_start =
            local_offset + LOCAL_LEN + u64::from(le_u16(local, 26)) + u64::from(le_u16(local, 28));
        members.push(Member {
            name,
            flags: le_u16(fixed, 8),
            method: le_u16(fixed, 10),
            crc32: le_u32(fixed, 16),
            compressed,
            uncompressed,
            local_offset,
            data_start,
        });
    }
    Ok(members)
}

/// The data of the zip64 extended-information field in `extra`, if any.
fn zip64_extra(mut extra: &[u8]) -> Option<&[u8]> {
    while extra.len() >= 4 {
        let id = le_u16(extra, 0);
        let len = usize::from(le_u16(extra, 2));
        let body = extra.get(4..4 + len)?;
        if id == ZIP64_EXTRA_ID {
            return Some(body);
        }
        extra = &extra[4 + len..];
    }
    None
}
