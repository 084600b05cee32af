//! How a group is stored: one pure function, [`plan`], that both the CPU
//! and any [`super::GroupDevice`] follow, so the bytes cannot differ by
//! where a group was compressed.
//!
//! The plan is made in steps, because some of what it weighs costs work:
//! a codebook must be fitted before the packed form's smallest size is
//! known, the rows compressed (or sized) before its exact size is, and
//! clusters fitted before their size is. [`plan`] looks at what is known
//! ([`Facts`]) and returns either the next piece of work ([`Step`]) or the
//! decision ([`Plan`]); the orchestrator ([`super::group`]) does the work,
//! records the result in the facts and asks again. Tested here without a
//! device.

use super::clustered::{Clustering, MAX_CLUSTERED_GROUP_BYTES, packed_file_bytes};
use super::layouts::coded_sections;
use crate::cluster::max_clusters_for;
use crate::codebook::ChunkSize;
use crate::container::GroupLayout;
use crate::fit::ChunkChoice;
use crate::layout::Layout;

/// What is known about a group: what was asked for, its shape, and the
/// results of the steps done so far.
#[derive(Clone, Debug)]
pub(super) struct Facts {
    /// The layout asked for ([`super::CompressOptions::layout`]).
    pub layout: GroupLayout,
    /// The clustering asked for.
    pub clustering: Clustering,
    /// The fit's chunk choice (bounds how many clusters fit in memory).
    pub fit_chunk: ChunkChoice,
    /// Groups with fewer rows are stored raw.
    pub min_rows: u64,
    /// Rows (`N`) and bytes per row (`L`).
    pub rows: u64,
    /// Bytes per row.
    pub row_bytes: u64,
    /// Dimensions of the tensor's shape.
    pub dims: usize,
    /// Whether the caller gave this group's row length.
    pub row_len_given: bool,
    /// The fitted codebook's chunk size, once [`Step::Fit`] was done.
    pub chunk: Option<ChunkSize>,
    /// Bytes of the payload (packed) or slots (fixed), once
    /// [`Step::Compress`] was done.
    pub data: Option<u64>,
    /// The clusters found, once [`Step::Cluster`] was done: `None` inside
    /// when one codebook was chosen.
    pub clustered: Option<Option<ClusterSizes>>,
}

/// The sizes of a group's clustered form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ClusterSizes {
    /// Bytes it takes in the file: sections padded, plus the most the
    /// manifest and directory grow by.
    pub file_bytes: u64,
    /// Bytes of its sections, unpadded.
    pub stored_bytes: u64,
}

/// The next piece of work, or the decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Fit a codebook to the rows; record its chunk size.
    Fit,
    /// Compress the rows in this layout (a device may only size them);
    /// record the bytes of the payload or slots.
    Compress(Layout),
    /// Fit clusters and compress with them; record their sizes.
    Cluster,
    /// Store the group so.
    Store(Plan),
}

/// How a group is stored, and what a person should know about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// The stored form.
    pub storage: Storage,
    /// Clustering asked for but not done, or with fewer clusters than
    /// asked.
    pub note: Option<String>,
}

/// The stored form of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Storage {
    /// As is, for this reason.
    Raw(String),
    /// One codebook, in `layout`; `stored` bytes of sections.
    Coded {
        /// Packed or fixed-stride.
        layout: Layout,
        /// Bytes of its payload (packed) or slots (fixed).
        data: u64,
        /// Bytes of its sections, the codebook's included.
        stored: u64,
    },
    /// One codebook per cluster (packed), as [`Step::Cluster`] found them.
    Clustered,
}

/// The next step for a group, or how it is stored: see the module notes.
pub(super) fn plan(f: &Facts) -> Step {
    if let Some(reason) = raw_before_fit(f) {
        return store(Storage::Raw(reason), None);
    }
    let Some(chunk) = f.chunk else {
        return Step::Fit;
    };
    match f.layout {
        GroupLayout::Coded(Layout::FixedStride) => plan_fixed(f),
        // Raw was handled above; clustering is asked for with `clustering`.
        _ => plan_packed(f, chunk),
    }
}

/// A fixed-stride group, once fitted: asked for its random access, it is
/// stored so whatever its size (it is never smaller than the input).
fn plan_fixed(f: &Facts) -> Step {
    let layout = Layout::FixedStride;
    match f.data {
        None => Step::Compress(layout),
        Some(data) => {
            let stored = stored_bytes(layout, f.rows, f.row_bytes, data);
            store(
                Storage::Coded {
                    layout,
                    data,
                    stored,
                },
                None,
            )
        }
    }
}

/// A packed group fitted with chunks of `chunk`: raw when it cannot be
/// smaller, else sized, then clustered when that is asked for and pays,
/// else packed when smaller than the input.
fn plan_packed(f: &Facts, chunk: ChunkSize) -> Step {
    let layout = Layout::Packed;
    let (n, l) = (f.rows, f.row_bytes);
    let total = n * l;
    if let Some(floor) = packed_floor(n, l, chunk).filter(|&b| b >= total) {
        // Q: why decide before compressing? A: with short rows the offsets
        // table alone (8 bytes a row) outweighs the data; building the
        // packed form only to throw it away cost 8× the input in memory
        // for rows of 2 bytes.
        let why = format!("compressed form (at least {floor} bytes) is not smaller");
        return store(Storage::Raw(why), None);
    }
    let Some(data) = f.data else {
        return Step::Compress(layout);
    };
    let stored = stored_bytes(layout, n, l, data);
    let note = cluster_note(f);
    let may_cluster = f.clustering != Clustering::Off && total <= MAX_CLUSTERED_GROUP_BYTES;
    match f.clustered {
        None if may_cluster => return Step::Cluster,
        Some(Some(c)) if clusters_pay(f, c, data) => return store(Storage::Clustered, note),
        _ => {}
    }
    if stored >= total {
        let why = format!("compressed form ({stored} bytes) is not smaller");
        return store(Storage::Raw(why), note);
    }
    store(
        Storage::Coded {
            layout,
            data,
            stored,
        },
        note,
    )
}

fn store(storage: Storage, note: Option<String>) -> Step {
    Step::Store(Plan { storage, note })
}

/// Why a group is stored raw before anything is fitted, if it is.
fn raw_before_fit(f: &Facts) -> Option<String> {
    if f.layout == GroupLayout::Raw {
        Some("raw storage requested".to_string())
    } else if f.rows == 0 {
        Some("empty".to_string())
    } else if f.dims < 2 && !f.row_len_given {
        Some(format!("{}-D tensor (one row)", f.dims))
    } else if f.rows < f.min_rows {
        Some(format!("{} rows, fewer than {}", f.rows, f.min_rows))
    } else {
        None
    }
}

/// Whether clusters of these sizes are kept over one codebook whose
/// payload is `data` bytes.
///
/// Q: why compare padded section sizes plus an overhead for `auto`?
/// A: `auto` promises a file no larger than `off`; the sections' padding,
/// the ids' directory entry and the manifest's extra keys are all part of
/// the file. A fixed `k` is kept whenever it is smaller than the input.
fn clusters_pay(f: &Facts, c: ClusterSizes, data: u64) -> bool {
    match f.clustering {
        Clustering::Auto => c.file_bytes < packed_file_bytes(f.rows, f.row_bytes, data),
        _ => c.stored_bytes < f.rows * f.row_bytes,
    }
}

/// What the report says about clustering a packed group, if anything.
fn cluster_note(f: &Facts) -> Option<String> {
    let total = f.rows * f.row_bytes;
    match f.clustering {
        Clustering::Off => None,
        _ if total > MAX_CLUSTERED_GROUP_BYTES => Some(format!(
            "not clustered: its {} MiB are over the {} MiB a clustered tensor may have (one codebook used)",
            total >> 20,
            MAX_CLUSTERED_GROUP_BYTES >> 20
        )),
        Clustering::Fixed(k) => {
            let cap = max_clusters_for(f.row_bytes as usize, f.fit_chunk);
            (k > cap).then(|| {
                format!(
                    "at most {cap} clusters for {}-byte rows (their codebook tables' memory), not {k}",
                    f.row_bytes
                )
            })
        }
        Clustering::Auto => None,
    }
}

/// Whether a caller's device takes groups compressed with these options:
/// clustered codebooks are fitted on the CPU, and raw groups need no
/// device.
pub(super) fn device_applies(layout: GroupLayout, clustering: Clustering) -> bool {
    clustering == Clustering::Off && matches!(layout, GroupLayout::Coded(_))
}

/// Bytes of a coded group's sections, its codebook's `2 L` included.
fn stored_bytes(layout: Layout, n: u64, l: u64, data: u64) -> u64 {
    2 * l
        + coded_sections(layout, n, data)
            .iter()
            .map(|&(_, len)| len)
            .sum::<u64>()
}

/// The smallest possible size of a packed group of `rows` rows of
/// `row_bytes` with chunk size `chunk`: codebook, flags, offsets, and at
/// least the participation bits, `⌈⌈L/C⌉/8⌉` bytes, of every row. `None`
/// when it overflows (then it is certainly not smaller).
fn packed_floor(rows: u64, row_bytes: u64, chunk: ChunkSize) -> Option<u64> {
    let min_row = row_bytes.div_ceil(u64::from(chunk.bytes())).div_ceil(8);
    let per_row = min_row.checked_add(8)?;
    (2 * row_bytes)
        .checked_add(rows.div_ceil(8))?
        .checked_add(8)?
        .checked_add(rows.checked_mul(per_row)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(layout: GroupLayout, rows: u64, row_bytes: u64) -> Facts {
        Facts {
            layout,
            clustering: Clustering::Off,
            fit_chunk: ChunkChoice::Auto,
            min_rows: 2,
            rows,
            row_bytes,
            dims: 2,
            row_len_given: false,
            chunk: None,
            data: None,
            clustered: None,
        }
    }

    const PACKED: GroupLayout = GroupLayout::Coded(Layout::Packed);
    const FIXED: GroupLayout = GroupLayout::Coded(Layout::FixedStride);

    fn storage(step: Step) -> Storage {
        match step {
            Step::Store(p) => p.storage,
            other => panic!("expected a decision, got {other:?}"),
        }
    }

    #[test]
    fn groups_that_cannot_pay_for_a_codebook_are_raw_before_any_work() {
        let raw = |f: &Facts| {
            matches!(
                plan(f),
                Step::Store(Plan {
                    storage: Storage::Raw(_),
                    ..
                })
            )
        };
        assert!(raw(&facts(GroupLayout::Raw, 100, 64)));
        assert!(raw(&facts(PACKED, 0, 64)));
        assert!(raw(&facts(PACKED, 1, 64)));
        let mut one_d = facts(PACKED, 100, 4);
        one_d.dims = 1;
        assert_eq!(
            storage(plan(&one_d)),
            Storage::Raw("1-D tensor (one row)".into())
        );
        one_d.row_len_given = true;
        assert_eq!(plan(&one_d), Step::Fit);
    }

    #[test]
    fn packed_groups_fit_then_compress_then_compare_with_the_input() {
        let mut f = facts(PACKED, 1000, 64);
        assert_eq!(plan(&f), Step::Fit);
        f.chunk = Some(ChunkSize::Four);
        assert_eq!(plan(&f), Step::Compress(Layout::Packed));
        // Codebook 128, flags 125, offsets 8008, payload 20000.
        f.data = Some(20_000);
        let stored = 128 + 125 + 8008 + 20_000;
        assert_eq!(
            storage(plan(&f)),
            Storage::Coded {
                layout: Layout::Packed,
                data: 20_000,
                stored
            }
        );
        f.data = Some(64_000 - stored + 20_000);
        assert_eq!(
            storage(plan(&f)),
            Storage::Raw("compressed form (64000 bytes) is not smaller".into())
        );
    }

    #[test]
    fn short_rows_are_raw_before_compressing() {
        // 2-byte rows: the offsets alone outweigh the data.
        let mut f = facts(PACKED, 1000, 2);
        f.chunk = Some(ChunkSize::One);
        let Storage::Raw(why) = storage(plan(&f)) else {
            panic!("not raw")
        };
        assert!(why.starts_with("compressed form (at least"), "{why}");
    }

    #[test]
    fn fixed_groups_are_stored_fixed_whatever_their_size() {
        let mut f = facts(FIXED, 4, 2);
        f.chunk = Some(ChunkSize::One);
        assert_eq!(plan(&f), Step::Compress(Layout::FixedStride));
        f.data = Some(8);
        assert_eq!(
            storage(plan(&f)),
            Storage::Coded {
                layout: Layout::FixedStride,
                data: 8,
                stored: 4 + 1 + 8
            }
        );
    }

    #[test]
    fn clusters_are_tried_after_sizing_and_kept_when_they_pay() {
        let mut f = facts(PACKED, 1000, 64);
        f.clustering = Clustering::Auto;
        f.chunk = Some(ChunkSize::Four);
        f.data = Some(20_000);
        assert_eq!(plan(&f), Step::Cluster);
        let packed_file = packed_file_bytes(1000, 64, 20_000);
        let sizes = |file_bytes| ClusterSizes {
            file_bytes,
            stored_bytes: 1,
        };
        f.clustered = Some(Some(sizes(packed_file - 1)));
        assert_eq!(storage(plan(&f)), Storage::Clustered);
        // `auto` keeps clusters only when the file gets smaller.
        f.clustered = Some(Some(sizes(packed_file)));
        assert!(matches!(
            storage(plan(&f)),
            Storage::Coded {
                layout: Layout::Packed,
                ..
            }
        ));
        f.clustered = Some(None);
        assert!(matches!(storage(plan(&f)), Storage::Coded { .. }));
        // A fixed k is kept whenever it is smaller than the input.
        f.clustering = Clustering::Fixed(4);
        f.clustered = Some(Some(ClusterSizes {
            file_bytes: u64::MAX,
            stored_bytes: 63_999,
        }));
        assert_eq!(storage(plan(&f)), Storage::Clustered);
    }

    #[test]
    fn large_groups_are_not_clustered_and_the_plan_says_why() {
        let mut f = facts(PACKED, (MAX_CLUSTERED_GROUP_BYTES >> 10) + 1, 1024);
        f.clustering = Clustering::Fixed(4);
        f.chunk = Some(ChunkSize::Four);
        f.data = Some(f.rows * 100);
        let Step::Store(p) = plan(&f) else {
            panic!("clustering a group over the limit")
        };
        assert!(p.note.is_some_and(|n| n.starts_with("not clustered")));
        // Too many clusters for the rows: clustered, with a note.
        let mut f = facts(PACKED, 100, 1 << 16);
        f.clustering = Clustering::Fixed(4096);
        f.chunk = Some(ChunkSize::Four);
        f.data = Some(1 << 16);
        f.clustered = Some(Some(ClusterSizes {
            file_bytes: 1,
            stored_bytes: 1,
        }));
        let Step::Store(p) = plan(&f) else { panic!() };
        assert_eq!(p.storage, Storage::Clustered);
        assert!(p.note.is_some_and(|n| n.starts_with("at most")));
    }
}
