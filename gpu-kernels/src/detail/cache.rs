//! The GPU feature cache's device side (paper §5, IBP(C/M)): the index word
//! that says where a cached row is, and the gather body that decodes each
//! requested row from a cache slab when it is cached and from the dataset
//! in pinned host memory otherwise.
//!
//! The host side (`ibp::gpu::FeatureCache`) fills the slabs and the index;
//! the index packing below is plain integer code that both sides run.
//!
//! # The index word
//!
//! One u64 per row of the dataset:
//!
//! ```text
//! bit 63      : stored encoded (else raw, L bytes)
//! bits 60..63 : slab (0..8)
//! bits 40..60 : stored length in bytes (< 2^20)
//! bits  0..40 : byte offset in the slab (< 2^40)
//! all ones    : not cached (read the row from the dataset)
//! ```
//!
//! Q: why a length field, where the paper packs slab (3 bits), offset (40
//! bits) and a flag into 44 bits?
//! A: with the offset alone the kernel needs a second, dependent lookup to
//! learn where the row ends (the next row's offset, or the dataset's
//! offsets table, which lives in host memory: a PCIe round trip for every
//! cache hit). The 20 spare bits hold the stored length, so one 8-byte load
//! gives the whole slot: the fetch is bounded exactly (only the lines of
//! the slot), a corrupt length is caught before anything is read, the slab
//! needs no offsets table (all its bytes hold rows) and the rows can sit in
//! any order, so a refill may pack them however it likes. Rows whose stored
//! form is 2^20 bytes or longer (tensors of 1 MiB and more, which gain
//! nothing from a per-row cache) are simply not cached.
//!
//! Q: why all ones for "not cached"?
//! A: it can never be a real entry: an offset of 2^40 − 1 with a length of
//! at least one byte ends past the largest slab, and [`pack`] refuses
//! entries that end past 2^40. So a zeroed-then-filled index needs no
//! separate valid bit.

use crate::detail::bits::WARP;
use crate::detail::step::RowStore;
use crate::device::{Fetched, RowError, Slot, decode_fetched_as, fetch_slot, locate};
pub use crate::params::MAX_SLABS;
use crate::params::{CacheParams, STATUS_BAD_INDEX, STATUS_CORRUPT};
use crate::simt::{Book, Machine};

/// The index word of a row that is not cached.
pub const NOT_CACHED: u64 = u64::MAX;
/// Largest stored row the index can describe, in bytes.
pub const MAX_SLOT_BYTES: u64 = (1 << LEN_BITS) - 1;
/// Largest slab, in bytes.
pub const MAX_SLAB_BYTES: u64 = 1 << OFFSET_BITS;

const OFFSET_BITS: u32 = 40;
const LEN_BITS: u32 = 20;
const SLAB_SHIFT: u32 = OFFSET_BITS + LEN_BITS;
const ENCODED_BIT: u32 = 63;

/// Where a cached row is: slab, byte offset in it, stored length and form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Slab number (`< MAX_SLABS`).
    pub slab: u32,
    /// Byte offset of the row's first stored byte in the slab.
    pub offset: u64,
    /// Stored bytes (`L` for a raw row).
    pub len: u32,
    /// Stored encoded (else raw).
    pub encoded: bool,
}

/// The index word of `e`, or `None` when a field does not fit (slab ≥ 8,
/// length 0 or ≥ 2^20, or the row ending past 2^40).
#[inline(always)]
pub const fn pack(e: Entry) -> Option<u64> {
    let len = e.len as u64;
    if e.slab as usize >= MAX_SLABS || len == 0 || len > MAX_SLOT_BYTES {
        return None;
    }
    if e.offset >= MAX_SLAB_BYTES || MAX_SLAB_BYTES - e.offset < len {
        return None;
    }
    Some(
        (e.encoded as u64) << ENCODED_BIT
            | (e.slab as u64) << SLAB_SHIFT
            | len << OFFSET_BITS
            | e.offset,
    )
}

/// The entry of index word `w`, or `None` for [`NOT_CACHED`].
#[inline(always)]
pub const fn unpack(w: u64) -> Option<Entry> {
    if w == NOT_CACHED {
        return None;
    }
    Some(Entry {
        slab: ((w >> SLAB_SHIFT) & ((1 << (ENCODED_BIT - SLAB_SHIFT)) - 1)) as u32,
        offset: w & (MAX_SLAB_BYTES - 1),
        len: ((w >> OFFSET_BITS) & MAX_SLOT_BYTES) as u32,
        encoded: w >> ENCODED_BIT == 1,
    })
}

/// Base address of slab `s` as this GPU reaches it, 0 when it cannot.
///
/// Q: why a chain of selects rather than `p.slabs[s]`?
/// A: a kernel parameter indexed at run time is copied to local memory
/// first; eight constant-index selects stay in registers.
#[inline(always)]
fn slab_base(p: &CacheParams, s: u32) -> u64 {
    let mut b = 0;
    let mut j = 0;
    while j < MAX_SLABS {
        if j as u32 == s {
            b = p.slabs[j];
        }
        j += 1;
    }
    b
}

/// The row id of output row `i < count`.
///
/// # Safety
/// `i < p.count`; `p.ids` holds `count` ids of the width `p.ids_u32` says.
#[inline(always)]
unsafe fn id<H: Machine>(h: &H, p: &CacheParams, i: u64) -> u64 {
    // SAFETY: as the caller guarantees; the high word only for u64 ids.
    unsafe {
        if p.ids_u32 != 0 {
            h.ld_u32(p.ids + 4 * i) as u64
        } else {
            h.ld_u32(p.ids + 8 * i) as u64 | (h.ld_u32(p.ids + 8 * i + 4) as u64) << 32
        }
    }
}

/// Where row `t < view.rows`, whose index word is `w`, is stored for this
/// GPU: in a slab when the index names one this GPU reaches, else in the
/// dataset.
///
/// # Safety
/// As [`gather`], and `t < p.view.rows`.
#[inline(always)]
unsafe fn slot_of<H: Machine>(h: &H, p: &CacheParams, t: u64, w: u64) -> Slot {
    if let Some(e) = unpack(w) {
        let base = slab_base(p, e.slab);
        if base != 0 {
            // The host wrote the row's stored bytes at this offset of the
            // slab (its allocation rounded up to whole lines).
            return Slot {
                addr: base + e.offset,
                len: Some(e.len as u64),
                encoded: e.encoded,
            };
        }
    }
    // SAFETY: the view is the dataset the cache was built from; t < rows.
    unsafe { locate(h, &p.view, t) }
}

/// Pieces of a row a lane requests one row ahead (rows of up to
/// `AHEAD · 512` stored bytes arrive whole; the rest is loaded when the
/// row decodes).
const AHEAD: usize = 2;

/// A requested row on its way, one stage of [`gather`]'s pipeline.
struct Looked {
    /// The row id (`ids[i]`).
    t: u64,
    /// Its index word ([`NOT_CACHED`] when `t` is out of range).
    w: u64,
}

/// The index word of row `t`, or [`NOT_CACHED`] for an id out of range
/// (reported when the row is fetched).
///
/// # Safety
/// As [`gather`].
#[inline(always)]
unsafe fn look_up<H: Machine>(h: &H, p: &CacheParams, t: u64) -> Looked {
    let w = if t < p.view.rows {
        // SAFETY: t < rows, and the index holds one word per row.
        unsafe { h.ld_u64(p.index + 8 * t) }
    } else {
        NOT_CACHED
    };
    Looked { t, w }
}

/// Start fetching the row `r` looked up: its pieces requested into
/// registers, or why it cannot be decoded (a bad id, a corrupt length).
///
/// # Safety
/// As [`gather`].
#[inline(always)]
unsafe fn fetch<H: Machine>(
    h: &H,
    p: &CacheParams,
    r: &Looked,
) -> Result<Fetched<AHEAD>, RowError> {
    if r.t >= p.view.rows {
        return Err(RowError::BadIndex);
    }
    // SAFETY: t < rows; the slot is the row's, in a slab or the dataset.
    unsafe { fetch_slot::<H, AHEAD>(h, &p.view, slot_of(h, p, r.t, r.w)) }
}

/// The gather: output row `i` (at `out + i · out_stride`) receives row
/// `ids[i]`, for every `i` of this warp (`warp, warp + warps, …`). A bad id
/// or a corrupt row is reported in the status (an OR of `STATUS_*` bits,
/// and the smallest failed output row) and its output row is zeroed.
/// `UNI`: every step of the book is uniform (`ibp_cache_gather_uniform`).
///
/// Q: why a pipeline of three rows?
/// A: a row's bytes wait on two dependent loads (its id, then its index
/// word) before a third (its pieces) can be issued, each a trip to memory
/// (over PCIe for a miss). Decoding the warp's rows one after the other
/// put all three trips before each row's decode. Here, while row `i`
/// decodes, the pieces of row `i + warps` are in flight (from the index
/// word looked up during the row before) and so is the index word of row
/// `i + 2·warps`; only the ids are read when needed (consecutive, cached).
/// Measured (H200, 2026-11-29, beside the previous one-row-at-a-time
/// gather in one call): 1.03× on MiniLM bf16's mostly-hit groups and
/// 1.00–1.01× on Cora's, whose hits are bound by the decode's
/// instructions, not these trips; some miss-heavy points moved both ways
/// (0.93–1.10×). A dataset row's offsets are still read only once its
/// index word says it is a miss, a trip the pipeline does not hide.
///
/// # Safety
/// The host filled `p` (`CacheParams`): the view is a validated dataset,
/// the index holds `view.rows` words whose entries lie inside the slabs
/// `slabs` names, `out` holds `count` rows `out_stride` bytes apart, `ws ..
/// ws + view.workspace_bytes()` is this warp's shared memory and `book`
/// reads the dataset's decode book; with `UNI`, every step of the book is
/// uniform and its chunks are of at most 4 bytes.
#[inline(always)]
pub unsafe fn gather<H: Machine, B: Book, const UNI: bool>(
    h: &H,
    book: &B,
    p: &CacheParams,
    ws: u32,
    warp: u64,
    warps: u64,
) {
    let mut i = warp;
    if i >= p.count {
        return;
    }
    // Every id read below is of an output row below count; look-ups and
    // fetches are bounded by the view and the index (the contract).
    // SAFETY: i < count.
    let first = unsafe { look_up(h, p, id(h, p, i)) };
    // SAFETY: as above.
    let mut cur = unsafe { fetch(h, p, &first) };
    let mut ahead = if i + warps < p.count {
        // SAFETY: i + warps < count.
        unsafe { look_up(h, p, id(h, p, i + warps)) }
    } else {
        Looked {
            t: 0,
            w: NOT_CACHED,
        }
    };
    while i < p.count {
        let out = p.out + i * p.out_stride;
        let next = if i + warps < p.count {
            // SAFETY: `ahead` is row i + warps < count, looked up.
            unsafe { fetch(h, p, &ahead) }
        } else {
            Err(RowError::BadIndex)
        };
        if i + 2 * warps < p.count {
            // SAFETY: i + 2·warps < count.
            ahead = unsafe { look_up(h, p, id(h, p, i + 2 * warps)) };
        }
        // SAFETY: the row is inside the output (the host checked its size).
        let mut sink = unsafe { RowStore::new(h, out) };
        // SAFETY: `f` came from `fetch` on the view; forwarded contract.
        let r = cur.and_then(|f| unsafe {
            decode_fetched_as::<H, B, RowStore<'_, H>, AHEAD, UNI>(
                h, &p.view, book, ws, &f, &mut sink,
            )
        });
        if let Err(e) = r {
            let code = match e {
                RowError::BadIndex => STATUS_BAD_INDEX,
                RowError::Corrupt => STATUS_CORRUPT,
            };
            if h.lane() == 0 {
                // SAFETY: the status holds two u64.
                unsafe {
                    h.or_u64(p.status, code);
                    h.min_u64(p.status + 8, i);
                }
            }
            // Every lane's stores of a partly decoded row come first.
            h.sync_warp();
            let mut j = h.lane() as u64;
            while j < p.view.row_bytes {
                // SAFETY: j < L, inside the output row.
                unsafe { h.st_u8(out + j, 0) };
                j += WARP as u64;
            }
            h.sync_warp();
        }
        cur = next;
        i += warps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_words_round_trip_and_refuse_what_does_not_fit() {
        for e in [
            Entry {
                slab: 0,
                offset: 0,
                len: 1,
                encoded: false,
            },
            Entry {
                slab: 7,
                offset: MAX_SLAB_BYTES - MAX_SLOT_BYTES,
                len: MAX_SLOT_BYTES as u32,
                encoded: true,
            },
            Entry {
                slab: 3,
                offset: 123_456_789,
                len: 5732,
                encoded: true,
            },
        ] {
            let w = pack(e).unwrap();
            assert_ne!(w, NOT_CACHED);
            assert_eq!(unpack(w), Some(e));
        }
        let ok = Entry {
            slab: 1,
            offset: 10,
            len: 10,
            encoded: true,
        };
        assert_eq!(pack(Entry { slab: 8, ..ok }), None);
        assert_eq!(pack(Entry { len: 0, ..ok }), None);
        assert_eq!(pack(Entry { len: 1 << 20, ..ok }), None);
        assert_eq!(
            pack(Entry {
                offset: MAX_SLAB_BYTES - 9,
                ..ok
            }),
            None
        );
        // The largest offset with any length would end past 2^40: the
        // all-ones word is never an entry.
        assert_eq!(
            pack(Entry {
                slab: 7,
                offset: MAX_SLAB_BYTES - 1,
                len: MAX_SLOT_BYTES as u32,
                encoded: true
            }),
            None
        );
        assert_eq!(unpack(NOT_CACHED), None);
    }
}
