//! Decode inside your own kernel: the public device API.
//!
//! A user kernel (built with `ibp-kernel-builder`, depending on this crate)
//! decodes rows of a compressed dataset one warp per row, and takes each
//! row 16 bytes a lane a step through a [`Sink`] — in registers, so a
//! reduction, a conversion or a product never writes the row to memory.
//!
//! ```ignore
//! // in a user kernel, one warp per output (all 32 lanes call):
//! let view: DatasetView = params.view;             // from GpuDataset::device_view
//! let ws = warp_workspace;                         // view.workspace_bytes() of shared memory
//! let book = GlobalBook(view.book);                // or the book copied to shared memory
//! let mut sum = MySumSink::default();
//! let r = unsafe { ibp_kernels::device::decode_row(&Hw, &view, &book, ws, row, &mut sum) };
//! ```
//!
//! [`decode_row_to_shared`] decodes a row into a caller's shared-memory
//! region instead (a [`SharedStore`] sink), for consumers that need the
//! whole row at once (a tile of a product, a row read by several warps).
//!
//! [`fetch_row`] and [`decode_fetched`] split [`decode_row`] in two, so a
//! warp that walks many rows fetches its next row (loads into registers)
//! while it decodes this one: the GEMV example's fused kernel does.
//!
//! Rows may live in device memory or in mapped pinned host memory: the
//! view holds addresses, and both are read with the same `ld.global`.
//!
//! Float-coded rows (`docs/FORMAT.md` §7, `ibp::float_code`) decode the
//! same way, a warp a row, through [`float::decode_float_row`]: each lane
//! is handed its elements one at a time ([`float::FloatSink`]).
//!
//! The fetch is bounded by the row's slot (the 16-byte pieces that hold its
//! bytes, never past them), a corrupt row is reported
//! ([`RowError::Corrupt`]) and nothing outside its slot is read;
//! the decode itself is the built-in kernels' step ([`crate::detail::step`]).

pub mod float;

use crate::detail::bits::WARP;
use crate::detail::book::{CLASS_UNIFORM, Layout};
use crate::detail::step::{self, ANY, Contig, Geometry, Sink, shared_raw32};
pub use crate::params::DatasetView;
use crate::params::LINE;
use crate::simt::{Book, Machine, Shared, warp_sum64};

impl DatasetView {
    /// The view with every address converted to a global one
    /// (`cvta.to.global`): the host passes generic addresses, and `ld.global`
    /// wants global ones. Call it once at the top of a kernel.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub fn to_global(self) -> Self {
        let g = |a: u64| if a == 0 { 0 } else { crate::arch::to_global(a) };
        DatasetView {
            src: g(self.src),
            offsets: g(self.offsets),
            lengths: g(self.lengths),
            flags: g(self.flags),
            book: g(self.book),
            entries: g(self.entries),
            ..self
        }
    }
}

/// Why a row was not decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowError {
    /// The row number is not below `rows`.
    BadIndex,
    /// The stored row disagrees with its length or padding.
    Corrupt,
}

/// Decode row `t` of `view` into `sink`, the calling warp's 32 lanes
/// together (warp-uniform control: every lane passes the same arguments).
///
/// The row's stored bytes are read with 16-byte loads into the warp's
/// workspace at shared address `ws` (16-aligned), then decoded by the step
/// of the built-in kernels; a raw row is handed over as it is. On `Err` the
/// sink may have received part of the row.
///
/// # Safety
/// `view` describes a dataset the host validated (`GpuDataset`): its
/// buffers hold what its fields say; `book` reads that dataset's decode
/// book; `ws .. ws + view.workspace_bytes()` is this warp's shared memory.
#[inline(always)]
pub unsafe fn decode_row<H: Machine, B: Book, K: Sink>(
    h: &H,
    view: &DatasetView,
    book: &B,
    ws: u32,
    t: u64,
    sink: &mut K,
) -> Result<(), RowError> {
    if t >= view.rows {
        return Err(RowError::BadIndex);
    }
    // SAFETY: the caller's (`view`), t < rows.
    let slot = unsafe { locate(h, view, t) };
    // SAFETY: the slot is row t's, inside the dataset's payload (`view`).
    unsafe { decode_slot(h, view, book, ws, slot, sink) }
}

/// Where row `t < rows` of `view` is stored. Warp-uniform.
///
/// Q: why not a `Result`, with the bounds check inside?
/// A: measured (H100, the Cora embedding bag): with the check inside and
/// the slot returned in a `Result`, the fused bag kernel, whose PTX was
/// otherwise the same, ran 17% slower; with the check at the callers its
/// PTX is what it was before this function existed.
///
/// # Safety
/// As [`decode_row`] (`view`), and `t < view.rows`.
#[inline(always)]
pub(crate) unsafe fn locate<H: Machine>(h: &H, view: &DatasetView, t: u64) -> Slot {
    let l = view.row_bytes;
    // SAFETY: t < rows: flag byte t / 8, offsets t and t + 1, length t.
    let encoded = unsafe { h.ld_u8(view.flags + t / 8) } >> (t % 8) & 1 == 1;
    let (start, known) = if view.offsets != 0 {
        // SAFETY: as above.
        let (a, b) = unsafe {
            (
                h.ld_u64(view.offsets + 8 * t),
                h.ld_u64(view.offsets + 8 * t + 8),
            )
        };
        (a, Some(b.wrapping_sub(a)))
    } else if view.lengths != 0 {
        // SAFETY: as above.
        (
            t * l,
            Some(unsafe { h.ld_u32(view.lengths + 4 * t) } as u64),
        )
    } else {
        (t * l, None)
    };
    Slot {
        addr: view.src + start,
        len: known,
        encoded,
    }
}

/// Row `t` of `view` on its way to the warp: its first `N` pieces (16 bytes
/// each) per lane already requested into registers, what [`fetch_row`]
/// started and [`decode_fetched`] finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetched<const N: usize> {
    slot: Slot,
    len: u64,
    pieces: [[u32; 4]; N],
}

/// Start fetching row `t` of `view`: issue 16-byte loads of its stored
/// bytes into registers, up to `N` a lane (rows of up to `N · 512` stored
/// bytes entirely; the rest is loaded by [`decode_fetched`]), and return
/// without waiting for them, so that the warp can decode another row
/// meanwhile. Warp-uniform, as [`decode_row`]. On `Err` nothing was read.
///
/// A warp that walks rows `r, r + n, …` fetches row `r + n` before it
/// decodes row `r`:
///
/// ```ignore
/// let mut cur = fetch_row::<_, 2>(h, &view, r);
/// while r < view.rows {
///     let next = if r + n < view.rows { fetch_row::<_, 2>(h, &view, r + n) } else { Err(RowError::BadIndex) };
///     let res = cur.and_then(|f| decode_fetched(h, &view, &book, ws, &f, &mut sink));
///     // … use the row …
///     cur = next;
///     r += n;
/// }
/// ```
///
/// Q: why registers, not `cp.async` into a second workspace?
/// A: from mapped pinned host memory, 16-byte `cp.async` copies read the
/// link at half its rate or less (measured on the H200: 29.5 GB/s against
/// 51 for loads, and the GEMV example fetching ahead that way read 1.65×
/// the bytes over PCIe and ran at half the speed). Loads complete in their
/// registers while the warp decodes; the registers are what it costs (4 a
/// piece: 8 for `N = 2`).
///
/// # Safety
/// As [`decode_row`].
#[inline(always)]
pub unsafe fn fetch_row<H: Machine, const N: usize>(
    h: &H,
    view: &DatasetView,
    t: u64,
) -> Result<Fetched<N>, RowError> {
    if t >= view.rows {
        return Err(RowError::BadIndex);
    }
    // SAFETY: the caller's, t < rows.
    let slot = unsafe { locate(h, view, t) };
    let len = checked_len(view, slot)?;
    // SAFETY: the slot is row t's, inside the dataset's payload.
    Ok(unsafe { fetch_pieces(h, slot, len) })
}

/// [`fetch_row`] of a row found elsewhere (a cache's slab, as
/// [`decode_slot`] takes it): its length checked against its form, then
/// its first `N` pieces a lane requested into registers. On `Err` nothing
/// was read.
///
/// # Safety
/// As [`decode_slot`] (`view` and `slot`).
#[inline(always)]
pub unsafe fn fetch_slot<H: Machine, const N: usize>(
    h: &H,
    view: &DatasetView,
    slot: Slot,
) -> Result<Fetched<N>, RowError> {
    let len = checked_len(view, slot)?;
    // SAFETY: the caller's (`slot`).
    Ok(unsafe { fetch_pieces(h, slot, len) })
}

/// The first `N` pieces a lane of the `len` stored bytes at `slot`,
/// requested into registers.
///
/// Q: why is the length check not in here?
/// A: with it inside (one `?` for both callers) the Cora and GEMV fused
/// kernels' PTX changed (a select became a branch around the loads); with
/// the check at each caller [`fetch_row`]'s PTX is what it was.
///
/// # Safety
/// The 16-byte pieces that hold `slot.addr .. slot.addr + len` are
/// readable.
#[inline(always)]
unsafe fn fetch_pieces<H: Machine, const N: usize>(h: &H, slot: Slot, len: u64) -> Fetched<N> {
    let (first, end) = (slot.addr / 16, (slot.addr + len).div_ceil(16));
    let mut pieces = [[0u32; 4]; N];
    let mut i = 0;
    while i < N {
        let q = first + h.lane() as u64 + (i * WARP as usize) as u64;
        if q < end {
            // SAFETY: a 16-aligned piece overlapping the slot (inside its
            // allocation).
            pieces[i] = unsafe { h.ld_v4(16 * q) };
        }
        i += 1;
    }
    Fetched { slot, len, pieces }
}

/// Decode a row that [`fetch_row`] started into `sink`: store its pieces
/// into the workspace at `ws` (loading those past the first `N` a lane),
/// each at its place in the slot's lines (the workspace mirrors them from
/// the first line's start), then decode. Warp-uniform. [`decode_slot`]
/// does the same with nothing fetched ahead.
///
/// Q: why pieces rather than the whole lines?
/// A: rows of the packed layout (and of a cache slab) share their first
/// and last lines with their neighbours; over PCIe every byte of those
/// lines counts. For MiniLM's 1536-byte f32 rows stored in ~1340 bytes,
/// whole lines cost up to a line (~9%) more per row, most of what the
/// compression saves. The step may read up to 16 bytes past the slot's
/// end and 3 before its start: workspace bytes whose values it ignores.
///
/// # Safety
/// `f` came from [`fetch_row`] on `view`; `book` and `ws` as for
/// [`decode_row`].
#[inline(always)]
pub unsafe fn decode_fetched<H: Machine, B: Book, K: Sink, const N: usize>(
    h: &H,
    view: &DatasetView,
    book: &B,
    ws: u32,
    f: &Fetched<N>,
    sink: &mut K,
) -> Result<(), RowError> {
    // SAFETY: forwarded.
    unsafe { decode_fetched_as::<H, B, K, N, false>(h, view, book, ws, f, sink) }
}

/// [`decode_fetched`] with the step's class fixed by `UNI`: true decodes
/// every step as uniform (`crate::detail::book::CLASS_UNIFORM`), for a
/// kernel of its own launched only for a book whose every step is uniform
/// (the feature cache's `ibp_cache_gather_uniform`); false decides each
/// step's class from the book, as [`decode_row`] does.
///
/// # Safety
/// As [`decode_fetched`]; with `UNI`, every step of the book is uniform
/// and its chunks are of at most 4 bytes.
#[inline(always)]
pub unsafe fn decode_fetched_as<H: Machine, B: Book, K: Sink, const N: usize, const UNI: bool>(
    h: &H,
    view: &DatasetView,
    book: &B,
    ws: u32,
    f: &Fetched<N>,
    sink: &mut K,
) -> Result<(), RowError> {
    let src = f.slot.addr;
    let first = src / LINE;
    let end = (src + f.len).div_ceil(16);
    let mut i = 0;
    while i < N {
        let q = src / 16 + h.lane() as u64 + (i * WARP as usize) as u64;
        if q < end {
            // SAFETY: inside the workspace (the slot's lines from the first
            // one's start), 16-aligned.
            unsafe { h.sts_v4(ws + (16 * q - first * LINE) as u32, f.pieces[i]) };
        }
        i += 1;
    }
    let mut q = src / 16 + h.lane() as u64 + (N * WARP as usize) as u64;
    while q < end {
        // SAFETY: a 16-aligned piece overlapping the slot (inside its
        // allocation); the destination is inside the workspace.
        unsafe { h.sts_v4(ws + (16 * q - first * LINE) as u32, h.ld_v4(16 * q)) };
        q += WARP as u64;
    }
    h.sync_warp();
    // SAFETY: the row's stored bytes are resident in the workspace.
    unsafe { decode_resident::<H, B, K, UNI>(h, view, book, ws, f.slot, sink) }
}

/// The stored length a fetch of `slot` may read, checked against the
/// row's form: `L` for a fixed-stride slot whose length the participation
/// bits give.
#[inline(always)]
fn checked_len(view: &DatasetView, slot: Slot) -> Result<u64, RowError> {
    let l = view.row_bytes;
    let pbytes = (view.chunks() as u64).div_ceil(8);
    match slot.len {
        Some(n) if slot.encoded && (n < pbytes || n >= l) => Err(RowError::Corrupt),
        Some(n) if !slot.encoded && n != l => Err(RowError::Corrupt),
        Some(n) => Ok(n),
        // Fixed-stride, length to derive: the whole slot may be read.
        None => Ok(l),
    }
}

/// Where one stored row is: its address, its stored length when known and
/// whether it is stored encoded. A row of a dataset ([`decode_row`] finds
/// it), or a copy of one elsewhere, e.g. in a GPU feature cache's slab
/// (`crate::detail::cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Global address of the row's first stored byte.
    pub addr: u64,
    /// Stored bytes, or `None` for a fixed-stride slot whose length the
    /// participation bits give (the whole `L`-byte slot may then be read).
    pub len: Option<u64>,
    /// Stored encoded (else raw: `L` bytes as they are).
    pub encoded: bool,
}

/// Decode one stored row at `slot` into `sink`: the body of [`decode_row`]
/// once the row is found, for callers that keep rows elsewhere (a cache).
/// Warp-uniform, like [`decode_row`]; the stored length is checked against
/// the row's form ([`RowError::Corrupt`]) before anything is read.
///
/// # Safety
/// `view` describes the dataset the row belongs to (its geometry, book and
/// entry table are used; its payload is not read); the 16-byte pieces
/// that hold `slot.addr .. slot.addr + len` (or `+ L` when the length is
/// not known) are readable; `book` and `ws` as for [`decode_row`].
#[inline(always)]
pub unsafe fn decode_slot<H: Machine, B: Book, K: Sink>(
    h: &H,
    view: &DatasetView,
    book: &B,
    ws: u32,
    slot: Slot,
    sink: &mut K,
) -> Result<(), RowError> {
    // Q: why is this not `decode_fetched` with nothing held (`N = 0`), and
    // the length check not `checked_len`?
    // A: it was, and measured on the H200 and an H100 (2026-11-26) the
    // Cora embedding bag's fused kernel, bound by the decode's instruction
    // issue, ran 6–17% slower for PTX that differed only in how this check
    // and the loop below were phrased. Written as before, its PTX is what
    // it was (checked instruction by instruction).
    let l = view.row_bytes;
    let k = view.chunks();
    let pbytes = (k as u64).div_ceil(8);
    let slot_len = match slot.len {
        Some(n) if slot.encoded && (n < pbytes || n >= l) => return Err(RowError::Corrupt),
        Some(n) if !slot.encoded && n != l => return Err(RowError::Corrupt),
        Some(n) => n,
        // Fixed-stride, length to derive: the whole slot may be read.
        None => l,
    };
    // The 16-byte pieces that hold the slot's bytes, one a lane, each at
    // its place in the slot's lines (see `decode_fetched`).
    let src = slot.addr;
    let first = src / LINE;
    let end = (src + slot_len).div_ceil(16);
    let mut q = src / 16 + h.lane() as u64;
    while q < end {
        // SAFETY: a 16-aligned piece overlapping the slot (inside its
        // allocation); the destination is inside the workspace (the slot's
        // lines from the first one's start).
        unsafe { h.sts_v4(ws + (16 * q - first * LINE) as u32, h.ld_v4(16 * q)) };
        q += WARP as u64;
    }
    h.sync_warp();
    // SAFETY: the stored bytes are resident (the loads above).
    unsafe { decode_resident::<H, B, K, false>(h, view, book, ws, slot, sink) }
}

/// Decode the row at `slot` whose stored bytes are resident in the
/// workspace at `ws` (as [`decode_fetched`] places them), then let the warp's
/// lanes meet: the workspace may be reused after it returns.
///
/// # Safety
/// As [`decode_slot`], with the stored bytes resident and the slot's
/// length checked ([`checked_len`]); with `UNI`, as [`decode_fetched_as`].
#[inline(always)]
unsafe fn decode_resident<H: Machine, B: Book, K: Sink, const UNI: bool>(
    h: &H,
    view: &DatasetView,
    book: &B,
    ws: u32,
    slot: Slot,
    sink: &mut K,
) -> Result<(), RowError> {
    let l = view.row_bytes;
    let k = view.chunks();
    let (encoded, known) = (slot.encoded, slot.len);
    let src = slot.addr;
    let base = ws + (src % LINE) as u32;
    if !encoded {
        // A raw row: 16 bytes a lane a step, as the decode would hand them.
        let mut ob = 16 * h.lane();
        while ob < (l as u32).next_multiple_of(16 * WARP) {
            // Lanes past the row read nothing (the workspace ends there).
            let w = if (ob as u64) < l {
                [0, 4, 8, 12].map(|i| shared_raw32(h, base, 8 * (ob + i)))
            } else {
                [0; 4]
            };
            let n = (l as u32).saturating_sub(ob).min(16);
            sink.put(ob, w, n);
            ob += 16 * WARP;
        }
        // As below: the warp's next row may overwrite the workspace.
        h.sync_warp();
        return Ok(());
    }
    let layout = Layout::new(k, view.chunk);
    let e_bytes = match known {
        Some(n) => n as u32,
        None => {
            // E from the participation bits: the bits every matching chunk
            // saves, summed over the warp.
            let mut saved = 0u64;
            let mut c = h.lane();
            while c < k {
                if shared_raw32(h, base, c) & 1 == 1 {
                    // SAFETY: c < K, inside the book's PARAMS field.
                    let x = unsafe { book.ld_u32(layout.params + 4 * c) };
                    saved += crate::detail::book::saved_bits(x) as u64;
                }
                c += WARP;
            }
            let e = (k as u64 + 8 * l - warp_sum64(h, saved)).div_ceil(8);
            if e >= l {
                return Err(RowError::Corrupt);
            }
            e as u32
        }
    };
    let g = Geometry {
        chunks: k,
        row_bytes: l as u32,
        layout,
        entries: view.entries,
        flags: 0,
    };
    // SAFETY: the stored bytes are resident at `base`, followed by the rest
    // of the workspace's lines and its 16 bytes of padding.
    let mut s = unsafe { Contig::new(h, base) };
    // SAFETY: the book and entries are the dataset's (`view`); with
    // `UNI`, its steps are uniform and its chunks of at most 4 bytes.
    let ok = unsafe {
        if UNI {
            // The uniform step only, as the batch kernels' uniform forms.
            match view.chunk {
                1 => step::decode_row_as::<1, CLASS_UNIFORM, ANY, true, _, _, _, _, _>(
                    h, &mut s, book, h, &g, e_bytes, sink,
                ),
                2 => step::decode_row_as::<2, CLASS_UNIFORM, ANY, true, _, _, _, _, _>(
                    h, &mut s, book, h, &g, e_bytes, sink,
                ),
                _ => step::decode_row_as::<4, CLASS_UNIFORM, ANY, true, _, _, _, _, _>(
                    h, &mut s, book, h, &g, e_bytes, sink,
                ),
            }
        } else {
            match view.chunk {
                1 => step::decode_row::<1, _, _, _, _, _>(h, &mut s, book, h, &g, e_bytes, sink),
                2 => step::decode_row::<2, _, _, _, _, _>(h, &mut s, book, h, &g, e_bytes, sink),
                4 => step::decode_row::<4, _, _, _, _, _>(h, &mut s, book, h, &g, e_bytes, sink),
                _ => step::decode_row::<8, _, _, _, _, _>(h, &mut s, book, h, &g, e_bytes, sink),
            }
        }
    };
    // The workspace is reused by the warp's next row: every lane must be
    // done reading it.
    h.sync_warp();
    if ok { Ok(()) } else { Err(RowError::Corrupt) }
}

/// A [`Sink`] that stores the row in shared memory, at a 16-aligned shared
/// address: one 16-byte store a lane a step (the last step's bytes past the
/// row land in the region's padding, see
/// [`DatasetView::row_shared_bytes`]).
pub struct SharedStore<'a, S> {
    s: &'a S,
    dst: u32,
}

impl<'a, S: Shared> SharedStore<'a, S> {
    /// The row at shared address `dst`.
    ///
    /// # Safety
    /// `dst` is 16-aligned and `dst .. dst + row_shared_bytes()` is shared
    /// memory that nothing else uses during the decode.
    #[inline(always)]
    pub unsafe fn new(s: &'a S, dst: u32) -> Self {
        SharedStore { s, dst }
    }
}

impl<S: Shared> Sink for SharedStore<'_, S> {
    #[inline(always)]
    fn put(&mut self, ob: u32, w: [u32; 4], n: u32) {
        if n > 0 {
            // SAFETY: ob < L, so ob + 16 <= L rounded up to 16: inside the
            // region (`SharedStore::new`); ob is a multiple of 16.
            unsafe { self.s.sts_v4(self.dst + ob, w) }
        }
    }
}

/// Decode row `t` of `view` into shared memory at `dst`, the calling warp's
/// 32 lanes together: [`decode_row`] with a [`SharedStore`], then a warp
/// barrier, so that every lane of the warp may read any byte of the row
/// (the rest of the block after a block barrier of the caller's).
///
/// On `Err` the region holds part of the row at most.
///
/// # Safety
/// As [`decode_row`], and `dst` as [`SharedStore::new`] states; the
/// region and the workspace do not overlap.
#[inline(always)]
pub unsafe fn decode_row_to_shared<H: Machine, B: Book>(
    h: &H,
    view: &DatasetView,
    book: &B,
    ws: u32,
    t: u64,
    dst: u32,
) -> Result<(), RowError> {
    // SAFETY: the caller's.
    let mut sink = unsafe { SharedStore::new(h, dst) };
    // SAFETY: the caller's.
    let r = unsafe { decode_row(h, view, book, ws, t, &mut sink) };
    h.sync_warp();
    r
}
