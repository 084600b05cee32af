//! ibp's internals: the code ibp's kernels and its host crate share. Public
//! so that the host runs the very same functions on the CPU (the codec, the
//! tables) and tests the kernel bodies emulated; not part of the device
//! API, and free to change in any release (as CUB's `detail` namespace).
//!
//! - [`bits`]: geometry of chunks and the bit stream of one encoded tensor
//!   (`docs/FORMAT.md`), and the expand/compress (pdep/pext) move masks.
//! - [`count`]: the positional popcount (per-bit-position counter) used by
//!   the fit's bit counting, as a carry-save accumulator.
//! - [`warp`]: warp-scan lane arithmetic and a host emulation of a warp.
//! - [`encode`]: the fit's evaluation pass, the size query and compression.
//! - [`candidates`]: the fit's candidate codebooks from the bit counts.
//! - [`pack`]: the encoder's lane-parallel bit packing and its ring.
//! - [`compact`]: the packed layout from stored forms written into slots.
//! - [`copy_runs`]: byte ranges from one buffer to another (a collective's
//!   pack and unpack).
//! - [`table`]: the decoder's per-chunk entry table.
//! - [`book`]: the decode book (the codebook laid out for 16 output bytes
//!   per lane) and the two-run expansion.
//! - [`step`]: the decoder's inner loop (16 output bytes per lane) over the
//!   [`simt`](crate::simt) traits.
//! - [`decode`]: the decode kernel's body (batch and streaming modes), over
//!   the same traits.
//! - [`cache`]: the GPU feature cache's index word and gather body (rows
//!   from a cache slab or, on a miss, from the dataset in host memory).
//! - [`float_decode`]: the float-coded rows' decoder (`docs/FORMAT.md` §7):
//!   a group of lanes a row, one lane a sub-stream.
//! - [`float_bulk`]: the float decode kernels' body (ranges and gathers,
//!   output through shared-memory tiles).
//! - [`kv`]: the appendable KV store's commit of stored lengths and flags.
//! - [`float_kv`]: the float-coded KV store's placement of stored forms
//!   into slots or overflow entries, with their direct index.
//! - `scan` (nvptx only): the device-wide scan of stored lengths.

pub mod bits;
pub mod book;
pub mod cache;
pub mod candidates;
pub mod compact;
pub mod copy_runs;
pub mod count;
pub mod decode;
pub mod encode;
pub mod float_bulk;
pub mod float_decode;
pub mod float_encode;
pub mod float_kv;
pub mod kv;
pub mod pack;
pub mod step;
pub mod table;
pub mod warp;

#[cfg(all(target_arch = "nvptx64", feature = "builtin"))]
pub(crate) mod scan;
