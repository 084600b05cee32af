//! Fit and compression on the GPU, written once over [`Lanes`](crate::simt::Lanes) and
//! [`Mem`](crate::simt::Mem)
//! so that the host tests run the same bodies (see `crate::simt`).
//!
//! Three warp-per-tensor bodies:
//!
//! - [`eval`]: the fit's one pass. For every sampled tensor and every
//!   candidate `(threshold, chunk size)` at once, the bits the codebook
//!   saves (the mask's bits less what mismatching chunks lose, each word's
//!   thresholds weighed until one matches); a warp reduce-scatter leaves
//!   candidate `l` in lane `l`, which adds the tensor's stored length
//!   `min(E, L)` to its running total.
//!
//! `eval` and `size` walk their tensors with `each_batch`; `encode` has
//! its own (row, step) loop, which carries a writer across steps.
//! - [`size`]: the compressed-size query for one codebook: each tensor's
//!   stored length, optionally copying the tensor to a staging buffer as it
//!   goes (the host path reads pinned memory once this way).
//! - [`encode`]: the stored form of each tensor (`docs/FORMAT.md` §2–§3),
//!   written through a ring of shared memory ([`RingWriter`](crate::detail::pack::RingWriter)).
//!
//! A lane owns 8 bytes of a tensor per step (`q = 32·step + lane`), so every
//! chunk size 1, 2, 4, 8 divides a lane's share, and a lane's payload fits a
//! `u64`.
//!
//! The code, by seam:
//! - [`rows`]: a tensor read a lane word at a time, and the walk of the
//!   sampled tensors;
//! - [`words`]: the lane-word arithmetic of the fit and the size query;
//! - [`fit`]: the fit's pass;
//! - [`measure`]: the size query and the copy of sampled tensors;
//! - [`writer`]: [`WarpWriter`], a bit stream written from registers;
//! - [`lane`]: one lane word's payload and participation bits;
//! - [`tensor`]: one tensor's stored form through a [`WarpWriter`];
//! - [`bulk`]: the bulk encoder through the ring, and the clearing pass.

pub mod bulk;
pub mod fit;
pub mod lane;
pub mod measure;
pub mod rows;
pub mod tensor;
pub mod words;
pub mod writer;

pub use bulk::{clear_shared_groups, encode};
pub use fit::{eval, reduce_scatter};
pub(crate) use lane::{LaneShape, group_word, lane_participation, lane_payload};
pub use measure::{gather, measure_row, size};
pub use rows::{row_word, sample_row, store_bytes};
pub use tensor::{encode_row, encode_slot};
pub use words::{stored_len, word_lost, word_participation, word_saved};
pub use writer::WarpWriter;
