//! Kernel parameter blocks. Each kernel takes exactly one of these by value;
//! the host fills the same struct, so the two sides cannot disagree on the
//! order or width of a field. Pointers travel as `u64` device addresses (a
//! mapped pinned host buffer's device address works wherever device memory
//! does).
//!
//! [`kernels`] lists the kernels themselves, each with its block; the
//! float coding's blocks are in their own file (`params/float.rs`),
//! re-exported here.

mod float;
pub mod kernels;

pub use float::*;

/// `ibp_count_bits`: add, for every bit position of a row of `row_bytes`
/// bytes, the number of the `rows` rows that have it set, into
/// `counts[8 * row_bytes]` (u64, accumulated, never cleared by the kernel).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountParams {
    /// Address of row 0; rows follow each other with no gap.
    pub data: u64,
    /// Number of rows.
    pub rows: u64,
    /// Bytes per row (>= 1).
    pub row_bytes: u64,
    /// Address of `8 * row_bytes` u64 counters.
    pub counts: u64,
}

/// `ibp_test_warp`: exercise the warp helpers. For every lane `l` of every
/// warp `w` (global lane `g = 32 * w + l`), with input `x = input[g]`:
/// `out[g * 8 + k]` for k = 0 lane id, 1 warp id, 2 shfl_up(x, 1),
/// 3 shfl_down(x, 2), 4 shfl_idx(x, 31 - l), 5 inclusive scan, 6 exclusive
/// scan, 7 ballot(x & 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WarpTestParams {
    pub input: u64,
    pub out: u64,
    /// Number of lanes (a multiple of 32).
    pub lanes: u64,
}

/// `ibp_test_cp_async`: each block copies `bytes` bytes from `src` into
/// dynamic shared memory with `cp.async` of `width` bytes (4, 8 or 16), waits,
/// and writes the shared copy to `dst` (`bytes` a multiple of `width`, both
/// addresses aligned to `width`). Block `b` copies `src + b * bytes` to
/// `dst + b * bytes`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpAsyncTestParams {
    pub src: u64,
    pub dst: u64,
    pub bytes: u32,
    pub width: u32,
}

/// `ibp_decode`: decode (or, in [`DECODE_MODE_IDEAL`], only move) `count`
/// tensors into output rows. Output row `i` (at `out + i * out_stride`) gets
/// tensor `t = index[i]` (u64 indices, or u32 with `index_u32`) or, when
/// `index` is 0, `t = first + i`.
///
/// The source is the dataset's base address `src` (device memory or mapped
/// pinned host memory). Packed layout: `offsets` holds `rows + 1` u64 and
/// tensor `t` is `src[offsets[t]..offsets[t+1]]`. Fixed-stride layout:
/// `offsets` is 0 and tensor `t` is the prefix of `src[t·L..(t+1)·L]`.
/// `flags` is the flag bitmap; `table` the per-chunk decoder table
/// (`crate::detail::table`), followed by one byte per chunk: the popcount of its mask.
///
/// Errors are reported in `status` (two u64: an OR of `STATUS_*` bits, and
/// the smallest output row that failed, which the host initialises to
/// `u64::MAX`); a failed row is filled with zeros.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeParams {
    pub src: u64,
    pub offsets: u64,
    pub flags: u64,
    pub table: u64,
    pub index: u64,
    pub first: u64,
    pub count: u64,
    pub rows: u64,
    pub row_bytes: u64,
    pub out: u64,
    pub out_stride: u64,
    pub status: u64,
    /// Chunk size C in bytes.
    pub chunk: u32,
    /// 128-byte lines in each warp's ring (a power of two).
    pub ring_lines: u32,
    /// u32 words of each warp's participation buffer.
    pub pbuf_words: u32,
    /// Clustered datasets (`clusters` ≠ 0): bits per cluster id, 1 to 32.
    pub cluster_bits: u32,
    /// [`DECODE_MODE_DECODE`] or [`DECODE_MODE_IDEAL`].
    pub mode: u32,
    /// 1: batch mode (whole tensors in half a ring, several per batch,
    /// double-buffered); 0: streaming mode (one tensor at a time through the
    /// ring, for tensors too large for batch mode).
    pub batch: u32,
    /// Fixed-stride only, optional: device address of one u32 stored length
    /// per tensor (0: derive each length from the participation bits).
    pub lengths: u64,
    /// How lines are fetched into the ring: [`FETCH_CP_ASYNC`] or
    /// [`FETCH_LOAD_STORE`].
    pub fetch: u32,
    /// `DECODE_FLAG_*` bits: fast paths forced off (tests and benchmarks).
    pub decode_flags: u32,
    /// Packed layout: subtracted from every offset, so `src` may point at a
    /// copy of part of the payload (the DMA path) starting at this offset.
    pub offset_base: u64,
    /// Device address of the decode book (`crate::detail::book`).
    pub book: u64,
    /// Bytes of the decode book copied into shared memory before the warps'
    /// workspaces (batch mode; 0 in streaming mode, which reads the book
    /// through L1).
    pub book_smem_bytes: u32,
    /// 1: `index` holds u32 row numbers (0: u64).
    pub index_u32: u32,
    /// Added to the output row a failure is reported for: the launch's
    /// first row within the caller's call (the DMA paths decode a call in
    /// pieces, one launch per piece, and report rows of the whole call).
    pub row_base: u64,
    /// Clustered datasets only (the kernel `ibp_decode_clustered`; 0
    /// otherwise): device address of the cluster ids, one `cluster_bits`-bit
    /// id per tensor as the container stores them (`docs/FORMAT.md` §6.8),
    /// readable 8 bytes past the last id's word. Tensor `t` decodes with
    /// book `book + id · B` and table `table + id · T` (`B` the book's
    /// bytes, `T` [`crate::detail::table::table_bytes`]).
    pub clusters: u64,
}

/// Padding after a warp's decode ring, in bytes.
///
/// Q: why 32?
/// A: bit windows read up to 16 bytes past a tensor's last byte (20 in the
/// uniform kernels' last step, whose chunks past the tensor's end still
/// advance the reads), and a corrupt tensor decoded beside another
/// (`crate::detail::step::decode_in`) keeps stepping from its first stored
/// byte, reading up to 24 bytes from there whatever its length.
pub const WORKSPACE_PAD: u32 = 32;

/// Bytes of one warp's decode workspace in shared memory: its participation
/// buffer (streaming mode), its ring of lines, and [`WORKSPACE_PAD`] bytes
/// of padding.
#[inline(always)]
pub const fn workspace_bytes(pbuf_words: u32, ring_lines: u32) -> u32 {
    pbuf_words * 4 + ring_lines * 128 + WORKSPACE_PAD
}

/// Decode flag: treat every step as [`crate::detail::book::CLASS_GENERAL`] (the
/// move-mask expansion), whatever its columns.
pub const DECODE_FLAG_NO_CLASSES: u32 = 1;
/// Decode flag: always scan the payload widths, even when every chunk of a
/// step matches.
pub const DECODE_FLAG_NO_PREFIX: u32 = 2;

/// Decode flag, set by the host when the stored bytes are in host memory:
/// a gather, and a fixed-stride range whose tensor holds at most 64 bytes of
/// its last line, read only the 16-byte pieces of their lines that hold the
/// tensor (see `decode::batch`, `fetch_item`).
pub const DECODE_FLAG_TRIM: u32 = 4;

/// Decode flag, set by the host for `ibp_decode_periodic` when the book's
/// pattern repeats by the 16-bit half rather than the byte
/// ([`crate::detail::book::CLASS_PERIODIC_HALVES`]).
pub const DECODE_FLAG_HALVES: u32 = 8;

/// Fetch lines with `cp.async.cg` (asynchronous, bypasses registers and L1).
pub const FETCH_CP_ASYNC: u32 = 0;
/// Fetch lines with 16-byte global loads and shared stores (synchronous).
pub const FETCH_LOAD_STORE: u32 = 1;

/// Decode every tensor.
pub const DECODE_MODE_DECODE: u32 = 0;
/// Benchmark baseline: read exactly each tensor's stored bytes with the same
/// aligned line copies, write `L` bytes per output row, decode nothing.
pub const DECODE_MODE_IDEAL: u32 = 1;

/// A stored tensor disagrees with the format (length, padding).
pub const STATUS_CORRUPT: u64 = 1;
/// An index is not below `rows`.
pub const STATUS_BAD_INDEX: u64 = 2;

/// Candidate thresholds one evaluation pass weighs (four chunk sizes each:
/// one candidate per lane).
pub const MAX_THRESHOLDS: u32 = 8;

/// `ibp_fit_candidates`: the evaluation book of `ibp_fit_eval` (the bit
/// values `V`, then the masks of the `nt ≤ 8` thresholds, each field
/// `⌈row_bytes / 8⌉` little-endian u64 words, then the trailer of mask bit
/// counts, which the kernel adds to: the host zeroes it) built from the bit counts
/// `counts` (`8 · row_bytes` u64, entry `8i + b` for bit `b` of byte `i`).
/// Under threshold `t` a bit whose count is above `one_above[t]` is an
/// invariant 1, below `zero_below[t]` an invariant 0 (`docs/FORMAT.md` §4;
/// the host computes both bounds). One warp per word.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CandidatesParams {
    pub counts: u64,
    pub book: u64,
    pub row_bytes: u64,
    pub one_above: [u64; 8],
    pub zero_below: [u64; 8],
    pub nt: u32,
    pub pad: u32,
}

/// `ibp_fit_eval`, `ibp_size` and `ibp_gather`: one warp per sampled tensor.
///
/// The source holds `rows` tensors of `row_bytes` bytes, tensor `r` at
/// `src + r · stride`; the kernels visit the sample `i = 0 … sample − 1`,
/// tensor `⌊i · rows / sample⌋` (every tensor when `sample == rows`; the host
/// guarantees `i · rows` fits in a u64 otherwise).
///
/// Books are field-major: a field is one u64 per 8-byte word `q` of a
/// tensor (`words = ⌈L/8⌉` of them, the tensor's bytes as little-endian
/// words), and field `f` starts at `book + 8 · f · words`, so the lanes of a
/// warp load consecutive words.
///
/// - `ibp_fit_eval`: `book` has `1 + nt` fields: the bit values `V`, then the
///   masks of the `nt ≤ 8` thresholds, ascending (each mask a subset of the
///   one before it); then a trailer of [`MAX_THRESHOLDS`] u64, entry `t` the
///   number of bits in threshold `t`'s mask (what a tensor whose chunks all
///   match saves). Adds, for candidate lane `l = 4t + log2 C`, the stored bytes
///   of the sample to `totals[2l]` and the number of tensors stored encoded to
///   `totals[2l + 1]`.
/// - `ibp_size`: `book` starts with two fields, the bit values and the mask
///   of one codebook with chunks of `chunk` bytes (an encoder book); writes tensor `i`'s stored length
///   to `sizes[i]` (u64). When `stage` is not 0, also copies tensor `i` to
///   `stage + i · stage_stride`.
/// - `ibp_gather`: only the copy to `stage`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MeasureParams {
    pub src: u64,
    pub stride: u64,
    pub rows: u64,
    pub sample: u64,
    pub row_bytes: u64,
    pub book: u64,
    pub totals: u64,
    pub sizes: u64,
    pub stage: u64,
    pub stage_stride: u64,
    pub nt: u32,
    pub chunk: u32,
}

/// `ibp_encode_c{1,2,4,8}`: write the stored form of tensors `0 … rows − 1`
/// (tensor `i` at `src + i · stride`, `row_bytes` bytes) given their stored
/// lengths `sizes[i]` (from `ibp_size`: `L` means raw).
///
/// Packed layout: `offsets` holds `rows + 1` u64 and tensor `i` goes to
/// `out + offsets[i] − offset_base`. Fixed-stride layout: `offsets` is 0 and
/// tensor `i` goes to the slot `out + i · row_bytes`. `book` is the
/// codebook's encoder book, field-major as for [`MeasureParams`], each
/// chunk's value in its own `C` bytes: the bit values, the mask, the free
/// bits (the mask's complement inside the tensor, 0 past its end), then
/// two fields for chunks whose free bits form at most two runs
/// (`crate::detail::book::params_two_runs`): the lowest run, and `SD`, the first
/// bit `s1` of that run and the shift `d2` of the second (a byte each from
/// the chunk's first byte; a nibble each, `s1 | d2 << 4`, for 1-byte
/// chunks), and last the `log2(8C)` move masks of the chunks' free bits
/// (`crate::detail::bits::move_masks`). `flags` bit [`ENCODE_TWO_RUNS`] says that
/// every chunk's free bits form at most two runs (the two-run fields are
/// then used in place of the move masks by the kernels for 4- and 8-byte
/// chunks; those for 1 and 2 bytes always use the move masks, on a whole
/// lane word's chunks at once: `crate::detail::encode::lane::pack_chunks`).
///
/// `ibp_encode_slots_c{1,2,4,8}`: the fixed-stride layout with nothing
/// measured first (`offsets` 0, `row_bytes` a multiple of 4, `out`
/// 16-aligned and not zeroed): each tensor is encoded into its slot, stored
/// raw over it when its stream outgrows it, and the slot's bytes past the
/// stored form zeroed (unless `flags` has [`ENCODE_SLOTS_SCRATCH`]); the
/// kernel *writes* each stored length to `sizes` (`rows` u64) instead of
/// reading it.
///
/// The output must be zeroed first where writers meet: the 16-byte groups
/// a tensor's first byte, its last byte and (encoded) the first payload
/// bit of its stream fall in; every other group of a region is stored whole
/// (`ibp_encode_clear`, [`ClearParams`], zeroes exactly those groups for a
/// packed output). Only words that hold stored bits are written, and a word
/// shared by two tensors, or by a tensor's participation bits and its
/// payload, is OR-ed into.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncodeParams {
    pub src: u64,
    pub stride: u64,
    pub rows: u64,
    pub row_bytes: u64,
    pub book: u64,
    pub sizes: u64,
    pub offsets: u64,
    pub offset_base: u64,
    pub out: u64,
    pub flags: u64,
}

/// [`EncodeParams::flags`]: every chunk's free bits form at most two runs.
pub const ENCODE_TWO_RUNS: u64 = 1;

/// [`EncodeParams::flags`], `ibp_encode_slots_c*` only: the slots are
/// scratch for [`CompactParams`], so the bytes past each stored form are
/// left as they are (not zeroed).
pub const ENCODE_SLOTS_SCRATCH: u64 = 2;

/// `ibp_compact`: the packed layout from stored forms that lie in slots,
/// as `ibp_encode_slots_c*` writes them with [`ENCODE_SLOTS_SCRATCH`].
/// Tensor `i`'s stored form is the first `offsets[i + 1] − offsets[i]`
/// bytes of its slot at `src + i · stride`; it is copied to
/// `out + offsets[i]` (`offsets`: `rows + 1` u64, an exclusive scan from
/// 0, the last the total), and every byte of `out` from `offsets[rows]` up
/// to `out_len` is zeroed (the padding the decoder reads with the last
/// line). `src` and `stride` are multiples of 4, `out` 16-aligned and
/// `out_len` a multiple of 16 holding the total. One warp a tensor; each
/// 16-byte group of `out` is stored whole, by the warp of the tensor that
/// holds the group's first byte (bytes past that tensor's stored form
/// come from the next tensors'), so `out` need not be zeroed first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactParams {
    pub src: u64,
    pub stride: u64,
    pub rows: u64,
    pub offsets: u64,
    pub out: u64,
    pub out_len: u64,
}

/// `ibp_copy_runs`: copy `count` byte ranges from the buffer at `src` to
/// the buffer at `dst`. `ranges` holds `count` triples of u64, range `i`
/// being `[src_off, dst_off, len]` at `ranges + 24 · i`: bytes
/// `src + src_off ..+ len` go to `dst + dst_off ..+ len`. Offsets and
/// lengths are arbitrary bytes (0 included); the destination ranges do not
/// overlap each other or any source range. Only the ranges' bytes of `dst`
/// are written; of `src`, the aligned 4-byte words holding range bytes are
/// read. One warp a range (the collectives' pack and unpack of the runs of
/// rows an all-to-all moves, `host/gpu/collective`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyRunsParams {
    pub ranges: u64,
    pub count: u64,
    pub src: u64,
    pub dst: u64,
}

/// `ibp_encode_clear`: before `ibp_encode_c*` writes a packed output,
/// zero the 16-byte groups of `out` where two of its writes meet (see
/// [`EncodeParams`]): for tensor `i < rows` (stored length `sizes[i]`,
/// region from `offsets[i] − offset_base`, chunks of `chunk` bytes of a
/// `row_bytes`-byte tensor) the group holding the region's first byte and,
/// when it is encoded, the group holding its stream's bit `K` (the first
/// payload bit); and every group from the one holding byte `data_len` up
/// to `out_len` (the padding the decoder reads with the last line). A
/// region's last group is then the next region's first, or the padding's,
/// or stored whole (`crate::detail::encode::clear_shared_groups`). Each group is
/// zeroed with the rest of its 32-byte sector: `out` is 32-aligned and
/// `out_len` a multiple of 32. One thread per tensor, and one more.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClearParams {
    pub sizes: u64,
    pub offsets: u64,
    pub offset_base: u64,
    pub rows: u64,
    pub row_bytes: u64,
    pub chunk: u64,
    pub out: u64,
    pub data_len: u64,
    pub out_len: u64,
}

/// `ibp_scan_tiles`, `ibp_scan_partials`, `ibp_scan_apply`: the device-wide
/// exclusive scan of `rows` stored lengths `sizes` into `offsets` (`rows + 1`
/// u64, the last the total) and the flag bitmap `flags` (bit `i` set when
/// `sizes[i] < row_bytes`), through one partial sum per tile of
/// [`SCAN_TILE`] tensors in `partials` (`tiles` u64). `total`, when not 0,
/// also receives the total (e.g. a mapped host word).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanParams {
    pub sizes: u64,
    pub rows: u64,
    pub row_bytes: u64,
    pub offsets: u64,
    pub flags: u64,
    pub partials: u64,
    pub tiles: u64,
    pub total: u64,
}

/// `ibp_kv_append_c{1,2,4,8}`: the appendable KV store's append of one
/// piece (`crate::detail::kv`). Tensor `i < rows` (`row_bytes` bytes at
/// `src + i · row_bytes`) is store row `first + i`: its stored length goes
/// to `lengths[first + i]` (u32), its encoded flag is OR-ed into bit
/// `first + i` of the bitmap at `flags` (32-bit words; bits are only ever
/// set, so the bitmap starts zeroed), and its stored form to the slot
/// `out + i · row_bytes`. `book` is the codebook's encoder book (as for
/// [`EncodeParams`]). When `zero_tail` is 1 (`row_bytes` a multiple of 4)
/// each slot's bytes past its stored form are zeroed too, so `out` need not
/// be; otherwise `out` must be zeroed first.
///
/// `pages`, when not 0 (only with `zero_tail` 1 and rows a block takes,
/// `crate::detail::kv::block_shape`), is where the slots go in the end: the
/// mapped pinned pages of row `first`, `rows · row_bytes` bytes. Each
/// block copies its finished slots there itself, and no copy is needed
/// after the kernel.
///
/// The caller guarantees `lengths` holds `first + rows` u32 and `flags`
/// `⌈(first + rows) / 32⌉` 4-aligned u32 words.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvAppendParams {
    pub src: u64,
    pub rows: u64,
    pub row_bytes: u64,
    pub book: u64,
    pub lengths: u64,
    pub flags: u64,
    pub first: u64,
    pub out: u64,
    pub pages: u64,
    pub zero_tail: u32,
}

/// Threads per block of the scan kernels.
pub const SCAN_BLOCK: u32 = 256;
/// Tensors per scan thread (one flag byte).
pub const SCAN_PER_THREAD: u64 = 8;
/// Tensors per scan tile (one block).
pub const SCAN_TILE: u64 = SCAN_BLOCK as u64 * SCAN_PER_THREAD;

/// `ibp_cache_gather`: the GPU feature cache's gather (`crate::detail::cache`).
/// Output row `i` (at `out + i · out_stride`) receives row `ids[i]` (u32
/// ids with `ids_u32`, else u64): decoded from the slab its `index` word
/// names when `slabs` gives that slab an address, else from the dataset
/// `view` (pinned host memory, zero-copy). Errors are reported in `status`
/// as for [`DecodeParams`], and a failed row is zeroed.
///
/// One warp per row; each warp has `ws_bytes` (the view's
/// `workspace_bytes`) of dynamic shared memory after `book_smem_bytes` of
/// decode book (0: the book is read from global memory).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheParams {
    /// The dataset the cache was built from.
    pub view: DatasetView,
    /// `view.rows` index words (`crate::detail::cache`), in this GPU's memory.
    pub index: u64,
    /// Base address of each slab as this GPU reaches it (its own, or a
    /// peer's through peer access); 0 for a slab it cannot reach.
    pub slabs: [u64; MAX_SLABS],
    /// The requested row ids.
    pub ids: u64,
    /// Number of ids (output rows).
    pub count: u64,
    /// Output row 0.
    pub out: u64,
    /// Bytes between output rows (`≥ L`).
    pub out_stride: u64,
    /// Two u64: error bits and the smallest failed output row.
    pub status: u64,
    /// 1: `ids` holds u32 (0: u64).
    pub ids_u32: u32,
    /// Bytes of the decode book copied into shared memory (0: none).
    pub book_smem_bytes: u32,
    /// Bytes of one warp's workspace.
    pub ws_bytes: u32,
    /// Unused (keeps the block a multiple of 8 bytes).
    pub _pad0: u32,
}

/// The decoders read whole lines of this many bytes.
pub const LINE: u64 = 128;

/// Slabs a feature-cache index can name (one per GPU of a host).
pub const MAX_SLABS: usize = 8;

/// A compressed dataset as a kernel reads it; the host fills it
/// (`ibp::gpu::GpuDataset::device_view`). Addresses are global ones (device
/// memory, or mapped pinned host memory).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatasetView {
    /// The stored bytes (payload or slots).
    pub src: u64,
    /// Packed layout: `rows + 1` u64 offsets; 0 for fixed-stride.
    pub offsets: u64,
    /// Fixed-stride, optional: one u32 stored length per row; 0 to derive
    /// each length from its participation bits.
    pub lengths: u64,
    /// The flag bitmap (bit `t`: row `t` is stored encoded).
    pub flags: u64,
    /// The decode book (`crate::detail::book`).
    pub book: u64,
    /// The per-chunk entry table (`crate::detail::table`).
    pub entries: u64,
    /// Rows.
    pub rows: u64,
    /// Bytes per row (`L`).
    pub row_bytes: u64,
    /// Bytes of the decode book.
    pub book_bytes: u32,
    /// Chunk size in bytes.
    pub chunk: u32,
}

impl DatasetView {
    /// Chunks per row.
    #[inline(always)]
    pub const fn chunks(&self) -> u32 {
        let shift = self.chunk.trailing_zeros() & 3;
        ((self.row_bytes + (1 << shift) - 1) >> shift) as u32
    }

    /// Shared memory one warp needs for
    /// [`decode_row`](crate::device::decode_row): the lines a row's slot can
    /// touch at the worst alignment, and 16 bytes of padding.
    #[inline(always)]
    pub const fn workspace_bytes(&self) -> u32 {
        (((self.row_bytes + 2 * LINE - 2) / LINE) * LINE + 16) as u32
    }

    /// Bytes of shared memory a decoded row takes in
    /// [`decode_row_to_shared`](crate::device::decode_row_to_shared): `L`
    /// rounded up to 16.
    #[inline(always)]
    pub const fn row_shared_bytes(&self) -> u32 {
        ((self.row_bytes + 15) & !15) as u32
    }
}
