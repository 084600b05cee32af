//! The binary framing of an `.ibp` file (`docs/FORMAT.md` §6): header,
//! directory entries and trailer, their encodings, and the checks a reader
//! makes on them. Everything here is fixed-size and little-endian.

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, Result};

/// The first 8 bytes of every `.ibp` file.
///
/// Q: why a PNG-style magic? A: the non-ASCII first byte and the CR LF,
/// SUB and LF bytes make text-mode transfers and 7-bit channels damage the
/// magic itself, so such damage is caught before anything else is read.
pub const MAGIC: [u8; 8] = *b"\x89IBP\r\n\x1a\n";

/// The first 8 bytes of the trailer.
pub const TRAILER_MAGIC: [u8; 8] = *b"\x89IBPEND\n";

/// The format version this build writes, and the newest it reads.
pub const VERSION: u16 = 1;

/// Every section, the directory and the trailer start at a multiple of this.
///
/// Q: why 64? A: it is a cache line, more than any element alignment
/// (`u64` offsets, `f64` data) and lets a memory-mapped section be cast in
/// place; GPU copies from pinned host memory do not need more.
pub const ALIGN: u64 = 64;

/// Bytes of the header and of the trailer.
pub const HEADER_LEN: u64 = 64;
/// Bytes of the trailer.
pub const TRAILER_LEN: u64 = 64;
/// Bytes of one directory entry.
pub const ENTRY_LEN: u64 = 48;

/// `owner` of a section that belongs to the whole file.
pub const NO_OWNER: u32 = u32::MAX;

/// Directory entry flag: a reader that does not know the section's kind
/// must refuse the file.
pub const FLAG_REQUIRED: u16 = 1;

/// The kinds of section this ibp knows (§6.3; kind 9 is §6.8's, kind 10
/// §6.9's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum SectionKind {
    /// The JSON manifest; exactly one per file.
    Manifest = 1,
    /// Raw bytes of one envelope piece (owner: the piece number).
    Piece = 2,
    /// A group's codebook: `Mask` then `Bitval`, `L` bytes each.
    Codebook = 3,
    /// A group's flag bitmap, `⌈N/8⌉` bytes.
    Flags = 4,
    /// A packed group's offsets table, `N + 1` little-endian u64.
    Offsets = 5,
    /// A packed group's payload.
    Payload = 6,
    /// A fixed-stride group's slots, `N · L` bytes.
    Slots = 7,
    /// An uncompressed group's bytes.
    Raw = 8,
    /// A clustered group's cluster ids, `⌈log2 k⌉` bits per tensor
    /// (`docs/FORMAT.md` §6.8).
    ClusterIds = 9,
    /// A float-coded group: its table, index and payload, the bytes of
    /// [`crate::float_code::FloatCoded::to_bytes`] (`docs/FORMAT.md` §6.9).
    FloatGroup = 10,
}

impl SectionKind {
    /// Every kind, for lookups.
    pub const ALL: [SectionKind; 10] = [
        SectionKind::Manifest,
        SectionKind::Piece,
        SectionKind::Codebook,
        SectionKind::Flags,
        SectionKind::Offsets,
        SectionKind::Payload,
        SectionKind::Slots,
        SectionKind::Raw,
        SectionKind::ClusterIds,
        SectionKind::FloatGroup,
    ];

    /// The kind with number `n`, if this ibp knows it.
    pub fn from_u32(n: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u32 == n)
    }

    /// Lower-case name, for messages and `ibp inspect`.
    pub fn name(self) -> &'static str {
        match self {
            SectionKind::Manifest => "manifest",
            SectionKind::Piece => "piece",
            SectionKind::Codebook => "codebook",
            SectionKind::Flags => "flags",
            SectionKind::Offsets => "offsets",
            SectionKind::Payload => "payload",
            SectionKind::Slots => "slots",
            SectionKind::Raw => "raw",
            SectionKind::ClusterIds => "cluster ids",
            SectionKind::FloatGroup => "float group",
        }
    }
}

/// One directory entry: where a section is and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Section kind number ([`SectionKind`] for the known ones).
    pub kind: u32,
    /// Flags; bit 0 is [`FLAG_REQUIRED`].
    pub flags: u16,
    /// The group (or piece) the section belongs to, or [`NO_OWNER`].
    pub owner: u32,
    /// Absolute offset of the first byte.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
    /// xxh3-64 (seed 0) of the section's bytes.
    pub xxh3: u64,
}

impl DirEntry {
    /// A readable name: `"payload of group 3"`, `"section 7 (kind 99)"`.
    pub fn describe(&self, index: usize) -> String {
        match SectionKind::from_u32(self.kind) {
            Some(SectionKind::Manifest) => "manifest section".to_string(),
            Some(SectionKind::Piece) => format!("envelope piece {}", self.owner),
            Some(k) => format!("{} section of group {}", k.name(), self.owner),
            None => format!("section {index} (kind {})", self.kind),
        }
    }

    /// The entry's 48 bytes.
    pub fn encode(&self) -> [u8; ENTRY_LEN as usize] {
        let mut b = [0u8; ENTRY_LEN as usize];
        b[0..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..6].copy_from_slice(&self.flags.to_le_bytes());
        b[8..12].copy_from_slice(&self.owner.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.length.to_le_bytes());
        b[32..40].copy_from_slice(&self.xxh3.to_le_bytes());
        b
    }

    /// Decode entry number `index` from its 48 bytes (reserved bytes must be
    /// zero).
    pub fn decode(b: &[u8; ENTRY_LEN as usize], index: usize) -> Result<Self> {
        if b[6..8] != [0, 0] || b[12..16] != [0; 4] || b[40..48] != [0; 8] {
            return Err(Error::corrupt(format!(
                "directory entry {index}: reserved bytes are not zero"
            )));
        }
        Ok(DirEntry {
            kind: u32_at(b, 0),
            flags: u16::from_le_bytes([b[4], b[5]]),
            owner: u32_at(b, 8),
            offset: u64_at(b, 16),
            length: u64_at(b, 24),
            xxh3: u64_at(b, 32),
        })
    }
}

/// The header's 64 bytes.
pub fn encode_header() -> [u8; HEADER_LEN as usize] {
    let mut b = [0u8; HEADER_LEN as usize];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..10].copy_from_slice(&VERSION.to_le_bytes());
    b[10..12].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    let sum = xxh3_64(&b[..56]);
    b[56..64].copy_from_slice(&sum.to_le_bytes());
    b
}

/// Check the header and return the format version.
pub fn decode_header(b: &[u8; HEADER_LEN as usize]) -> Result<u16> {
    if b[0..8] != MAGIC {
        return Err(Error::corrupt(
            "not an ibp container: the magic number is missing",
        ));
    }
    // The checksum first: a damaged version field must read as damage, not
    // as "written by a newer ibp".
    if u64_at(b, 56) != xxh3_64(&b[..56]) {
        return Err(Error::corrupt("header: checksum mismatch"));
    }
    let version = u16::from_le_bytes([b[8], b[9]]);
    if version > VERSION {
        return Err(Error::unsupported(format!(
            "container format version {version} is newer than this ibp (reads up to {VERSION}); upgrade ibp"
        )));
    }
    if version == 0 {
        return Err(Error::corrupt("header: format version 0"));
    }
    if u16::from_le_bytes([b[10], b[11]]) as u64 != HEADER_LEN || b[12..56].iter().any(|&x| x != 0)
    {
        return Err(Error::corrupt(
            "header: bad length or non-zero reserved bytes",
        ));
    }
    Ok(version)
}

/// What the trailer records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// Absolute offset of the directory.
    pub dir_offset: u64,
    /// Number of directory entries.
    pub dir_count: u64,
    /// xxh3-64 of the directory's `48 · dir_count` bytes.
    pub dir_xxh3: u64,
    /// Length of the whole file, trailer included.
    pub file_len: u64,
    /// Format version (equal to the header's).
    pub version: u16,
}

impl Trailer {
    /// The trailer's 64 bytes.
    pub fn encode(&self) -> [u8; TRAILER_LEN as usize] {
        let mut b = [0u8; TRAILER_LEN as usize];
        b[0..8].copy_from_slice(&TRAILER_MAGIC);
        b[8..16].copy_from_slice(&self.dir_offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.dir_count.to_le_bytes());
        b[24..32].copy_from_slice(&self.dir_xxh3.to_le_bytes());
        b[32..40].copy_from_slice(&self.file_len.to_le_bytes());
        b[40..42].copy_from_slice(&self.version.to_le_bytes());
        let sum = xxh3_64(&b[..56]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decode and check the trailer found at the end of a file of
    /// `actual_len` bytes.
    pub fn decode(b: &[u8; TRAILER_LEN as usize], actual_len: u64) -> Result<Self> {
        if b[0..8] != TRAILER_MAGIC {
            return Err(Error::truncated(
                "container has no trailer at its end: the file is truncated (or was never finished)",
            ));
        }
        if u64_at(b, 56) != xxh3_64(&b[..56]) {
            return Err(Error::corrupt("trailer: checksum mismatch"));
        }
        if b[42..56].iter().any(|&x| x != 0) {
            return Err(Error::corrupt("trailer: non-zero reserved bytes"));
        }
        let t = Trailer {
            dir_offset: u64_at(b, 8),
            dir_count: u64_at(b, 16),
            dir_xxh3: u64_at(b, 24),
            file_len: u64_at(b, 32),
            version: u16::from_le_bytes([b[40], b[41]]),
        };
        if t.file_len > actual_len {
            return Err(Error::truncated(format!(
                "container is {actual_len} bytes but its trailer says {}",
                t.file_len
            )));
        }
        if t.file_len < actual_len {
            return Err(Error::corrupt(format!(
                "container is {actual_len} bytes but its trailer says {}",
                t.file_len
            )));
        }
        Ok(t)
    }
}

/// `x` rounded up to a multiple of [`ALIGN`] (saturating, so hostile offsets
/// cannot overflow; a saturated value never matches a real layout).
pub fn align_up(x: u64) -> u64 {
    x.checked_next_multiple_of(ALIGN).unwrap_or(u64::MAX)
}

/// Bytes that sections of these lengths take in the file, each padded to
/// [`ALIGN`] (saturating).
pub(crate) fn sections_file_bytes(lengths: &[u64]) -> u64 {
    lengths
        .iter()
        .fold(0u64, |sum, &len| sum.saturating_add(align_up(len)))
}

/// Bytes a clustered group adds to the file besides its sections, at most:
/// its cluster-ids directory entry (48 bytes) and the manifest's
/// `"clusters":k` and longer layout name (at most 25 bytes), each of which
/// can cost up to 64 bytes once padded.
pub(crate) const CLUSTERED_FILE_OVERHEAD: u64 = 2 * ALIGN;

/// Zero bytes that pad `len` up to a multiple of [`ALIGN`].
pub fn padding(len: u64) -> usize {
    (align_up(len) - len) as usize
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}
