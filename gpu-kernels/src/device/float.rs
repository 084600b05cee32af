//! Decode a float-coded row (`docs/FORMAT.md` §7, `ibp::float_code`)
//! inside your own kernel: one warp a row, each decoded element handed to
//! the lane that decoded it, in registers.
//!
//! ```ignore
//! // once per block: the group's decode table into shared memory
//! // (view.table_bytes bytes at view.table), then a barrier;
//! // then, in one warp (all 32 lanes call, with the same row):
//! let ws = warp_workspace;                       // view.workspace_bytes() of shared memory
//! let mut dot = MyDot::default();                // impl FloatSink
//! let r = unsafe { decode_float_row(&Hw, &view, &SharedBook(table_smem), ws, row, &mut dot) };
//! ```
//!
//! # Which lane gets which element
//!
//! A row of `S` sub-streams (`view.sub_streams`, chosen at the fit:
//! `ibp::float_code::FitOptions::with_sub_streams`) is decoded by lanes
//! `0 .. S`: lane `k` gets elements `k, k + S, k + 2S, …` in that order,
//! for coded and raw rows alike; lanes `S .. 32` get none. So for fused use
//! fit with **`S = 32`** (every lane decodes) or **`S = 16`** (half the
//! lanes decode, for a slightly better ratio: MiniLM's bf16 embeddings
//! 1.477 at `S = 16`, 1.454 at `S = 32`); the default `S = 4`, made for
//! the bulk decoder's groups of lanes, leaves 28 lanes of the warp idle.
//!
//! Q: why one element at a time, not 16 bytes a lane as [`super::Sink`]?
//! A: a sub-stream is a chain of dependent codes: each element is known
//! only after the previous one's length. Handing it over at once lets the
//! consumer's work (a multiply-add) overlap the next lookup, and needs no
//! registers to assemble pieces.

use super::RowError;
pub use crate::detail::float_decode::FloatSink;
use crate::detail::float_decode::{
    Shape, SharedWords, check_meet, decode_sub_stream, locate, put_raw, stage_row,
};
pub use crate::params::FloatView;
use crate::params::STATUS_BAD_INDEX;
use crate::simt::{Book, Machine};

/// Decode row `t` of the float-coded group `view` into `sink`, the calling
/// warp's 32 lanes together (warp-uniform control: every lane passes the
/// same arguments; lane `k < S` is handed elements `k, k + S, …`).
///
/// The row's stored bytes are read with 16-byte loads (the pieces that
/// hold them, from device memory or mapped pinned host memory alike) into
/// the warp's workspace at shared address `ws`, then decoded by the bulk
/// decoder's own sub-stream loop
/// ([`crate::detail::float_decode::decode_sub_stream`]) with the decode
/// table read through `table`. A row id not below `view.rows` is
/// [`RowError::BadIndex`] (nothing read); a damaged index entry or row is
/// [`RowError::Corrupt`], exactly where the CPU decoder refuses it, and
/// nothing outside the row's pieces is read. On `Err` the sink may have
/// received part of the row (garbage for a corrupt one).
///
/// # Safety
/// `view` is a group's view made by the host (`FloatDecoder::device_view`
/// or `device_view_staged`, its global form: `FloatView::to_global`),
/// whose buffers are alive; `table` reads that group's decode table
/// (`view.table_bytes` bytes, e.g. a copy in shared memory);
/// `ws .. ws + view.workspace_bytes()` is this warp's shared memory,
/// 16-aligned.
#[inline(always)]
pub unsafe fn decode_float_row<H: Machine, B: Book, K: FloatSink>(
    h: &H,
    view: &FloatView,
    table: &B,
    ws: u32,
    t: u64,
    sink: &mut K,
) -> Result<(), RowError> {
    // SAFETY: the index holds what the view says (the caller's).
    let (start, len) = match unsafe { locate(h, view, t) } {
        Ok(x) => x,
        Err(STATUS_BAD_INDEX) => return Err(RowError::BadIndex),
        Err(_) => return Err(RowError::Corrupt),
    };
    // The 16-byte pieces that hold the row, into the workspace, the
    // whole warp's loads (see `stage_row` for why through shared memory).
    let lane = h.lane();
    // SAFETY: the row's pieces lie in the payload's readable span
    // (16-aligned, padded), and the workspace holds
    // `workspace_bytes()` (the caller's).
    let row = unsafe { stage_row(h, view.payload + start, len, ws, lane, 32) };
    h.sync_warp();
    let sh = Shape::of(view);
    let words = SharedWords(h);
    let coded = len != view.row_bytes;
    let (mut pos, mut err) = (0, 0);
    if lane < sh.sub_streams() {
        // SAFETY: the row's bytes are in the workspace at `row`, which
        // holds 16 bytes past them (`workspace_bytes`); the table is the
        // group's.
        unsafe {
            if coded {
                (pos, err) = decode_sub_stream(&words, table, &sh, row, len, lane, sink);
            } else {
                put_raw(&words, &sh, row, lane, sink);
            }
        }
    }
    // The odd lane's end to its even partner.
    let partner = h.shfl_xor(pos, 1);
    if coded && lane < sh.sub_streams() && lane & 1 == 0 && err == 0 {
        // SAFETY: as above.
        err = unsafe { check_meet(&words, &sh, row, len, lane, pos, partner) };
    }
    let bad = h.ballot(err != 0) != 0;
    // The next row may reuse the workspace.
    h.sync_warp();
    if bad { Err(RowError::Corrupt) } else { Ok(()) }
}
