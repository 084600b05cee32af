//! The manifest: a JSON object describing the groups and the envelope
//! (`docs/FORMAT.md` §6.5).
//!
//! Q: why JSON for the manifest and binary for everything else?
//! A: the manifest is small, is read once, and is where later versions add
//! keys; JSON lets a version-1 reader skip keys it does not know and lets a
//! person read a file's description with `ibp inspect --json` or a hex
//! editor. Everything sized by the data (codebooks, offsets, payloads) is
//! binary and aligned for use in place.

use serde::{Deserialize, Serialize};

use crate::codebook::{ChunkSize, Threshold};
use crate::error::{Error, Result};
use crate::io::{DEFLATE_ENGINE, DType, Fingerprint, Segment, SourceFormat};
use crate::layout::Layout;

/// Deflate segments nest at most this deep (a zip inside a zip inside ...).
pub const MAX_ENVELOPE_DEPTH: u32 = 8;

#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct ManifestJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceJson>,
    pub groups: Vec<GroupJson>,
    pub envelope: Vec<EnvJson>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct SourceJson {
    pub format: String,
    pub length: u64,
    pub xxh3: String,
}

#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct GroupJson {
    pub name: String,
    pub dtype: String,
    pub elem_bytes: u64,
    pub shape: Vec<u64>,
    pub rows: u64,
    pub row_bytes: u64,
    pub layout: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_bytes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_bp: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<u64>,
    pub xxh3: String,
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EnvJson {
    Piece(u32),
    Group(u64),
    Deflate {
        engine: String,
        level: u32,
        inner: Vec<EnvJson>,
    },
}

/// How a group's tensors are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupLayout {
    /// Uncompressed: the group's bytes as they were (small, 1-D or
    /// incompressible tensors).
    Raw,
    /// Coded with one codebook, in the packed layout (`docs/FORMAT.md`
    /// §3.2: codebook, flags, offsets, payload) or the fixed-stride layout
    /// (§3.1: codebook, flags, slots).
    Coded(Layout),
    /// Packed layout with one codebook per cluster and a cluster id per
    /// tensor (§6.8): codebooks, cluster ids, flags, offsets, payload.
    Clustered,
    /// Float-coded (`docs/FORMAT.md` §6.9 and §7): the exponents
    /// entropy-coded with one table, in one float-group section.
    Float,
}

impl GroupLayout {
    /// The manifest's name for the layout: `raw`, `packed`, `fixed`,
    /// `clustered` or `float`.
    pub fn name(self) -> &'static str {
        match self {
            GroupLayout::Raw => "raw",
            GroupLayout::Coded(l) => l.name(),
            GroupLayout::Clustered => "clustered",
            GroupLayout::Float => "float",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [
            GroupLayout::Raw,
            GroupLayout::Coded(Layout::Packed),
            GroupLayout::Coded(Layout::FixedStride),
            GroupLayout::Clustered,
            GroupLayout::Float,
        ]
        .into_iter()
        .find(|l| l.name() == name)
    }
}

impl From<Layout> for GroupLayout {
    fn from(layout: Layout) -> Self {
        GroupLayout::Coded(layout)
    }
}

/// A group's description, as the manifest holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape in storage order.
    pub shape: Vec<u64>,
    /// Rows (`N`) and bytes per row (`L`) the codec saw.
    pub rows: u64,
    /// Bytes per row.
    pub row_bytes: u64,
    /// How the group is stored.
    pub layout: GroupLayout,
    /// Chunk size of the codebook (packed and fixed groups).
    pub chunk: Option<ChunkSize>,
    /// The threshold the codebook was fitted with, when known.
    pub threshold: Option<Threshold>,
    /// Number of clusters `k ≥ 2` (clustered groups only).
    pub clusters: Option<u32>,
    /// xxh3-64 of the group's uncompressed bytes.
    pub xxh3: u64,
}

impl GroupInfo {
    /// `rows × row_bytes`, the uncompressed size.
    pub fn data_len(&self) -> u64 {
        self.rows.saturating_mul(self.row_bytes)
    }
}

/// Where the original file came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInfo {
    /// The name of its format ([`SourceFormat::name`]). Kept as a string:
    /// a file from a later ibp that reads more formats still restores here,
    /// since restoring does not depend on the format.
    pub format: String,
    /// Its length and hash: a restore must reproduce both.
    pub fingerprint: Fingerprint,
}

impl SourceInfo {
    /// The source of a file of `format` with `fingerprint`.
    pub fn new(format: SourceFormat, fingerprint: Fingerprint) -> Self {
        SourceInfo {
            format: format.name().to_string(),
            fingerprint,
        }
    }

    /// The format, if this ibp knows it.
    pub fn source_format(&self) -> Option<SourceFormat> {
        SourceFormat::from_name(&self.format)
    }
}

/// The decoded manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub source: Option<SourceInfo>,
    pub groups: Vec<GroupInfo>,
    pub envelope: Vec<Segment<u32>>,
    pub notes: Vec<String>,
}

pub(crate) fn hex(x: u64) -> String {
    format!("{x:016x}")
}

fn unhex(s: &str, what: &str) -> Result<u64> {
    if s.len() != 16 {
        return Err(Error::corrupt(format!(
            "manifest: {what} is not 16 hex digits"
        )));
    }
    u64::from_str_radix(s, 16)
        .map_err(|_| Error::corrupt(format!("manifest: {what} is not 16 hex digits")))
}

impl Manifest {
    pub fn to_json(&self) -> Vec<u8> {
        let m = ManifestJson {
            source: self.source.as_ref().map(|s| SourceJson {
                format: s.format.clone(),
                length: s.fingerprint.len,
                xxh3: hex(s.fingerprint.xxh3),
            }),
            groups: self
                .groups
                .iter()
                .map(|g| GroupJson {
                    name: g.name.clone(),
                    dtype: g.dtype.name().to_string(),
                    elem_bytes: g.dtype.size(),
                    shape: g.shape.clone(),
                    rows: g.rows,
                    row_bytes: g.row_bytes,
                    layout: g.layout.name().to_string(),
                    chunk_bytes: g.chunk.map(ChunkSize::bytes),
                    threshold_bp: g.threshold.map(Threshold::basis_points),
                    clusters: g.clusters.map(u64::from),
                    xxh3: hex(g.xxh3),
                })
                .collect(),
            envelope: self.envelope.iter().map(env_to_json).collect(),
            notes: self.notes.clone(),
        };
        // Serialising plain data with string keys cannot fail.
        serde_json::to_vec(&m).unwrap_or_default()
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        let m: ManifestJson = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt(format!("manifest is not valid: {e}")))?;
        let source = m
            .source
            .map(|s| {
                Ok::<_, Error>(SourceInfo {
                    format: s.format,
                    fingerprint: Fingerprint {
                        len: s.length,
                        xxh3: unhex(&s.xxh3, "source xxh3")?,
                    },
                })
            })
            .transpose()?;
        let groups = m
            .groups
            .into_iter()
            .enumerate()
            .map(|(i, g)| group_from_json(i, g))
            .collect::<Result<_>>()?;
        let envelope = m
            .envelope
            .into_iter()
            .map(|e| env_from_json(e, 0))
            .collect::<Result<_>>()?;
        Ok(Manifest {
            source,
            groups,
            envelope,
            notes: m.notes,
        })
    }
}

fn group_from_json(i: usize, g: GroupJson) -> Result<GroupInfo> {
    let ctx = |m: String| Error::corrupt(format!("manifest: group {i} ({:?}): {m}", g.name));
    let dtype =
        DType::from_stored(&g.dtype, g.elem_bytes).map_err(|e| ctx(e.message().to_string()))?;
    let layout = GroupLayout::from_name(&g.layout).ok_or_else(|| {
        Error::unsupported(format!(
            "group {i} has layout {:?}, unknown to this ibp; upgrade ibp",
            g.layout
        ))
    })?;
    let chunk = match (layout, g.chunk_bytes) {
        (GroupLayout::Raw | GroupLayout::Float, None) => None,
        (GroupLayout::Raw | GroupLayout::Float, Some(_)) => {
            return Err(ctx(format!("a {} group has a chunk size", layout.name())));
        }
        (_, None) => return Err(ctx("no chunk size".into())),
        (_, Some(c)) => Some(ChunkSize::try_from(c).map_err(|e| ctx(e.message().to_string()))?),
    };
    // The codebook section (2 L k bytes) bounds k; u32 keeps ids in 32 bits.
    let clusters = match (layout, g.clusters) {
        (GroupLayout::Clustered, Some(k)) => Some(
            u32::try_from(k)
                .ok()
                .filter(|&k| k >= 2)
                .ok_or_else(|| ctx(format!("{k} clusters; a clustered group has 2 to 2^32 - 1")))?,
        ),
        (GroupLayout::Clustered, None) => return Err(ctx("no number of clusters".into())),
        (_, Some(_)) => return Err(ctx("only a clustered group has clusters".into())),
        (_, None) => None,
    };
    let threshold = g
        .threshold_bp
        .map(|t| Threshold::from_basis_points(t).map_err(|e| ctx(e.message().to_string())))
        .transpose()?;
    let elems = crate::io::element_count(&g.shape).map_err(|e| ctx(e.message().to_string()))?;
    let bytes = elems.checked_mul(dtype.size());
    if g.rows.checked_mul(g.row_bytes) != bytes || (g.row_bytes == 0 && g.rows != 0) {
        return Err(ctx(format!(
            "{} rows of {} bytes do not hold shape {:?} of {dtype}",
            g.rows, g.row_bytes, g.shape
        )));
    }
    if layout != GroupLayout::Raw && g.row_bytes == 0 {
        return Err(ctx("a compressed group has empty rows".into()));
    }
    let xxh3 = unhex(&g.xxh3, "group xxh3")?;
    Ok(GroupInfo {
        name: g.name,
        dtype,
        shape: g.shape,
        rows: g.rows,
        row_bytes: g.row_bytes,
        layout,
        chunk,
        threshold,
        clusters,
        xxh3,
    })
}

fn env_to_json(s: &Segment<u32>) -> EnvJson {
    match s {
        Segment::Raw(p) => EnvJson::Piece(*p),
        Segment::Group(g) => EnvJson::Group(*g as u64),
        Segment::Deflate { level, inner } => EnvJson::Deflate {
            engine: DEFLATE_ENGINE.to_string(),
            level: *level,
            inner: inner.iter().map(env_to_json).collect(),
        },
    }
}

fn env_from_json(e: EnvJson, depth: u32) -> Result<Segment<u32>> {
    Ok(match e {
        EnvJson::Piece(p) => Segment::Raw(p),
        EnvJson::Group(g) => Segment::Group(
            usize::try_from(g)
                .map_err(|_| Error::corrupt("manifest: envelope names a huge group"))?,
        ),
        EnvJson::Deflate {
            engine,
            level,
            inner,
        } => {
            if engine != DEFLATE_ENGINE {
                return Err(Error::unsupported(format!(
                    "envelope uses deflate engine {engine:?}; this ibp re-creates {DEFLATE_ENGINE:?} streams only"
                )));
            }
            if !(1..=9).contains(&level) {
                return Err(Error::corrupt(format!(
                    "manifest: deflate level {level} is not 1-9"
                )));
            }
            if depth >= MAX_ENVELOPE_DEPTH {
                return Err(Error::corrupt("manifest: deflate segments nest too deep"));
            }
            let inner = inner
                .into_iter()
                .map(|s| env_from_json(s, depth + 1))
                .collect::<Result<_>>()?;
            Segment::Deflate { level, inner }
        }
    })
}
