//! The float coding's parameter blocks (`docs/FORMAT.md` §7): the decode,
//! the encoder's three kernels and the KV store's placement, with their
//! constants; re-exported by [`crate::params`].

/// `ibp_float_decode`: decode rows of a float-coded group (`docs/FORMAT.md`
/// §7; the body is `crate::detail::float_bulk`). Output row `i`, at
/// `out + i * out_stride`, gets row `t = ids[i]` (u64 ids) or, when `ids`
/// is 0, `t = first + i`. A row whose id is not below `rows` or whose stored
/// bytes are not a row of this table is reported in `status` (two u64: an
/// OR of `STATUS_*` bits, and the smallest failed output row, which the
/// host initialises to `u64::MAX`) and its output row is zeroed.
///
/// The group's three parts live where the host put them: the payload
/// (every row's stored bytes, readable up to `payload_len` rounded up to 8
/// plus 8 bytes), the index (`bases`: `⌈rows / 2^block_log2⌉ + 1` u64;
/// `rel`: `rel_width` bytes a row, readable in whole 4-byte words) and the
/// decode table (`2^max_len` u16 entries `symbol | length << 12`, `0xffff`
/// where no code starts, readable in whole 4-byte words).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloatDecodeParams {
    /// Every stored row, back to back.
    pub payload: u64,
    /// Bytes of the payload.
    pub payload_len: u64,
    /// Block bases: the payload offset of each block's first row, then the
    /// payload's length.
    pub bases: u64,
    /// Each row's start relative to its block's base.
    pub rel: u64,
    /// The decode table.
    pub table: u64,
    /// Rows of the group.
    pub rows: u64,
    /// The requested rows (u64), or 0 for `first ..`.
    pub ids: u64,
    /// First row of a range (`ids` 0).
    pub first: u64,
    /// Output rows.
    pub count: u64,
    /// Output row 0 (aligned to the element size).
    pub out: u64,
    /// Bytes between output rows (`≥ row_bytes`, a multiple of the element
    /// size).
    pub out_stride: u64,
    /// Two u64: error bits and the smallest failed output row.
    pub status: u64,
    /// Bytes of a row, raw (`L`, at most [`FLOAT_MAX_ROW_BYTES`]).
    pub row_bytes: u32,
    /// Bytes of an element: 1, 2 or 4.
    pub elem_bytes: u32,
    /// Residual bits of an element.
    pub residual_bits: u32,
    /// The symbol field: its lowest bit and its width.
    pub low: u32,
    pub width: u32,
    /// Sub-streams per row (1 or even, ≤ 32).
    pub sub_streams: u32,
    /// Bits of each stored region length.
    pub len_bits: u32,
    /// The longest code, in bits (≤ [`FLOAT_MAX_CODE_LEN`]).
    pub max_len: u32,
    /// log2 of rows per index block.
    pub block_log2: u32,
    /// Bytes of a relative row start: 0, 2 or 4; or
    /// [`FLOAT_DIRECT_INDEX`]: `bases` then holds each row's start (u64,
    /// from `payload`) and `rel` its stored length (u32).
    pub rel_width: u32,
    /// Bytes of the decode table (`2^max_len · 2`, at least 4), copied into
    /// shared memory once per block.
    pub table_smem_bytes: u32,
    /// `ibp_float_decode_staged`: bytes of shared memory a group of lanes
    /// stages its row in (at least [`FloatView::workspace_bytes`], a
    /// multiple of 16), the warps' workspaces after the table (its bytes
    /// rounded up to 16); the payload then 16-aligned and readable up to its
    /// length rounded up to 16. 0 for `ibp_float_decode`.
    pub stage_bytes: u32,
    /// Elements a group's output tile holds (`2S · FLOAT_TILE_PAIRS`), or 0
    /// to store every element directly. Tiles need `out` and `out_stride`
    /// multiples of 16; each warp's tiles
    /// ([`FloatDecodeParams::tile_warp_bytes`]) follow every warp's stages
    /// in shared memory.
    pub tile_elems: u32,
    /// Unused (keeps the block a multiple of 8 bytes).
    pub _pad0: u32,
}

impl FloatDecodeParams {
    /// Elements of a group's tile for rows of `sub_streams` sub-streams:
    /// [`FLOAT_TILE_PAIRS`] pairs of every lane.
    #[inline(always)]
    pub const fn tile_elems_for(sub_streams: u32) -> u32 {
        2 * sub_streams * FLOAT_TILE_PAIRS
    }

    /// Bytes between two groups' tiles: a tile and 16 bytes, so that the
    /// groups' element stores fall in different banks.
    #[inline(always)]
    pub const fn tile_stride(&self) -> u32 {
        (self.tile_elems << (self.elem_bytes.trailing_zeros() & 3)) + 16
    }

    /// Bytes of shared memory a warp's tiles take (0 without tiles).
    #[inline(always)]
    pub const fn tile_warp_bytes(&self) -> u32 {
        if self.tile_elems == 0 {
            0
        } else {
            let s = if self.sub_streams == 0 {
                1
            } else {
                self.sub_streams
            };
            (32 / s.next_power_of_two()) * self.tile_stride()
        }
    }

    /// The group's part of the parameters (what a row's decode reads),
    /// as the fused device API takes it.
    #[inline(always)]
    pub const fn view(&self) -> FloatView {
        FloatView {
            payload: self.payload,
            payload_len: self.payload_len,
            bases: self.bases,
            rel: self.rel,
            table: self.table,
            rows: self.rows,
            row_bytes: self.row_bytes,
            elem_bytes: self.elem_bytes,
            residual_bits: self.residual_bits,
            low: self.low,
            width: self.width,
            sub_streams: self.sub_streams,
            len_bits: self.len_bits,
            max_len: self.max_len,
            block_log2: self.block_log2,
            rel_width: self.rel_width,
            table_bytes: self.table_smem_bytes,
            _pad0: 0,
        }
    }
}

/// A float-coded group (`docs/FORMAT.md` §7) as a user kernel sees it:
/// what [`crate::device::float::decode_float_row`] needs to decode any of
/// its rows inside the kernel. The host makes it
/// (`ibp::gpu::FloatDecoder::device_view` or `device_view_staged`); its
/// addresses are valid while that decoder (and a staged payload) lives.
///
/// The payload is 16-aligned and readable up to its length rounded up to
/// 16, plus 16 bytes; the index and the decode table are as
/// [`FloatDecodeParams`] says.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloatView {
    /// Every stored row, back to back (16-aligned).
    pub payload: u64,
    /// Bytes of the payload.
    pub payload_len: u64,
    /// Block bases: the payload offset of each block's first row, then the
    /// payload's length.
    pub bases: u64,
    /// Each row's start relative to its block's base.
    pub rel: u64,
    /// The decode table (`table_bytes` bytes), to be copied into shared
    /// memory once per block.
    pub table: u64,
    /// Rows of the group.
    pub rows: u64,
    /// Bytes of a row, raw (`L`, at most [`FLOAT_MAX_ROW_BYTES`]).
    pub row_bytes: u32,
    /// Bytes of an element: 1, 2 or 4.
    pub elem_bytes: u32,
    /// Residual bits of an element.
    pub residual_bits: u32,
    /// The symbol field: its lowest bit and its width.
    pub low: u32,
    pub width: u32,
    /// Sub-streams per row (1 or even, ≤ 32): the lanes that decode a row.
    pub sub_streams: u32,
    /// Bits of each stored region length.
    pub len_bits: u32,
    /// The longest code, in bits (≤ [`FLOAT_MAX_CODE_LEN`]).
    pub max_len: u32,
    /// log2 of rows per index block.
    pub block_log2: u32,
    /// Bytes of a relative row start: 0, 2 or 4; or
    /// [`FLOAT_DIRECT_INDEX`] (a start and a length a row).
    pub rel_width: u32,
    /// Bytes of the decode table (`2^max_len · 2`, at least 4, a multiple
    /// of 4).
    pub table_bytes: u32,
    /// Unused (keeps the block a multiple of 8 bytes).
    pub _pad0: u32,
}

impl FloatView {
    /// Bytes of shared memory a warp's workspace needs for
    /// [`crate::device::float::decode_float_row`]: the row's stored bytes
    /// at their offset in a 16-byte piece (at most 15), rounded up to 16,
    /// and 16 bytes past them (the decoder reads aligned word pairs).
    #[inline(always)]
    pub const fn workspace_bytes(&self) -> u32 {
        ((self.row_bytes + 15 + 15) & !15) + 16
    }

    /// The view with every address converted to a global one
    /// (`cvta.to.global`): the host passes generic addresses, and
    /// `ld.global` wants global ones. Call it once at the top of a kernel.
    #[cfg(target_arch = "nvptx64")]
    #[inline(always)]
    pub fn to_global(self) -> Self {
        let g = |a: u64| if a == 0 { 0 } else { crate::arch::to_global(a) };
        FloatView {
            payload: g(self.payload),
            bases: g(self.bases),
            rel: g(self.rel),
            table: g(self.table),
            ..self
        }
    }
}

/// The longest code the GPU decoder takes: its decode table (4096 u16
/// entries, 8 KiB) fits shared memory beside anything.
pub const FLOAT_MAX_CODE_LEN: u32 = 12;
/// The longest row the GPU decoder takes, in bytes (16 MiB): every bit
/// position of a row, and every position a damaged row's sub-stream can
/// step to, fits a u32 with room to spare.
pub const FLOAT_MAX_ROW_BYTES: u32 = 1 << 24;
/// `rel_width` of a direct index: row `t` is the `rel[t]` (u32) bytes at
/// `payload + bases[t]` (u64), wherever the rows lie (slots, a cache's
/// slab, pinned pages: with `payload` 0 and `payload_len` `u64::MAX` the
/// starts are addresses). Not a stored form (`docs/FORMAT.md` §7's index is
/// the block one): the host builds it for rows it placed itself, and the
/// decoder still checks each length against the row and the span.
pub const FLOAT_DIRECT_INDEX: u32 = 8;
/// Pairs of elements a lane decodes into its group's tile between two
/// copies out (`ibp_kernels::detail::float_bulk`).
pub const FLOAT_TILE_PAIRS: u32 = 8;
/// A decode-table entry that no code starts with.
pub const FLOAT_NO_SYMBOL: u32 = 0xffff;

/// `ibp_float_hist`, `ibp_float_size` and `ibp_float_encode`: the GPU
/// encoder of the float coding (`docs/FORMAT.md` §7; the bodies are
/// `crate::detail::float_encode`).
///
/// - `ibp_float_hist` adds the count of every value of the `width`-bit field
///   at `low` over every element of the rows into `hist` (`2^width` u64,
///   zeroed by the host), with `2^width` u32 of dynamic shared memory.
/// - `ibp_float_size` writes every row's stored length to `sizes` (`rows`
///   u64): coded, or `row_bytes` when the table does not shorten it.
/// - `ibp_float_encode`, after the scan of `sizes` into `offsets` (`rows +
///   1` u64), ORs every row's stored bytes into `payload` (zeroed by the
///   host, readable and writable up to `offsets[rows]` rounded up to 4) at
///   `offsets[i]`, and writes the index: `bases` (`⌈rows / 2^block_log2⌉ + 1`
///   u64) and `rel` (`rel_width` bytes a row, in whole 4-byte words);
///   `ibp_float_encode_strided` writes every row at a fixed `stride`
///   instead, after the size pass alone (the float-coded KV store's
///   stage).
///
/// The rows are `rows` rows of `row_bytes` bytes from `src` (4-aligned,
/// readable in whole 4-byte words); `table` (the size and encode kernels) is
/// the encode table, `2^width` u32 entries `rev | code << 12 | len << 24`
/// ([`FLOAT_NO_CODE`] for a symbol without a code), copied into
/// `table_smem_bytes` of dynamic shared memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloatEncodeParams {
    /// The rows, back to back.
    pub src: u64,
    /// Rows.
    pub rows: u64,
    /// The encode table.
    pub table: u64,
    /// The symbol histogram (`ibp_float_hist`).
    pub hist: u64,
    /// Stored lengths, u64 a row.
    pub sizes: u64,
    /// Their exclusive scan, `rows + 1` u64.
    pub offsets: u64,
    /// The payload (zeroed before `ibp_float_encode`).
    pub payload: u64,
    /// The index's block bases and relative starts.
    pub bases: u64,
    pub rel: u64,
    /// When not 0, `rows · sub_streams` u32: `ibp_float_size` writes each
    /// sub-stream's code bits there (row-major) and `ibp_float_encode`
    /// reads them instead of counting again.
    pub lane_bits: u64,
    /// `ibp_float_encode_strided` (only): row `i` goes to `payload + i ·
    /// stride` (a multiple of 4, at least `row_bytes`), `sizes[i]` bytes
    /// long, and no index: `offsets`, `bases` and `rel` are neither read
    /// nor written (no scan first). The payload, zeroed, is `rows · stride`
    /// bytes.
    pub stride: u64,
    /// Bytes of a row (at most [`FLOAT_MAX_ROW_BYTES`]).
    pub row_bytes: u32,
    /// Bytes of an element: 1, 2 or 4.
    pub elem_bytes: u32,
    /// Residual bits of an element.
    pub residual_bits: u32,
    /// The symbol field: its lowest bit and its width.
    pub low: u32,
    pub width: u32,
    /// Sub-streams per row (1 or even, ≤ 32).
    pub sub_streams: u32,
    /// Bits of each stored region length.
    pub len_bits: u32,
    /// log2 of rows per index block.
    pub block_log2: u32,
    /// Bytes of a relative row start: 0, 2 or 4.
    pub rel_width: u32,
    /// Bytes of dynamic shared memory: the table (or the histogram), `4 ·
    /// 2^width`.
    pub table_smem_bytes: u32,
}

/// An encode-table entry of a symbol the table has no code for.
pub const FLOAT_NO_CODE: u32 = u32::MAX;

/// `ibp_float_kv_place`: the float-coded KV store's placement
/// (`crate::detail::float_kv`; `ibp::gpu::FloatKvStore`). Row `i < rows`
/// of an append is the `sizes[i]` bytes at `stage + i · stage_stride` (its
/// stored form, coded or raw, as `ibp_float_encode` wrote it with
/// `stride`); it becomes store
/// row `first + i`, copied into its slot (`pages + (first + i) ·
/// slot_bytes`) when it fits, else into the next overflow entry (`pages +
/// overflow_at + e · entry_bytes`, `e` handed out by the counter
/// `counters[0]`), and its index entry is written: `starts[first + i]`
/// (from `pages`) and `lens[first + i]`. When `e ≥ overflow_entries` the
/// row is not stored: its length is [`FLOAT_KV_REFUSED`] (which the
/// decoder refuses) and `counters[1]` takes the minimum with its store
/// row.
///
/// `stage` is 16-aligned and readable over `rows · stage_stride` bytes,
/// `stage_stride` a multiple of 16 at least every size; `sizes` holds
/// `rows` u64, each at most `entry_bytes`; `pages` (16-aligned, mapped
/// pinned host memory or device
/// memory) is writable over the slots of rows `first .. first + rows` and
/// the overflow area, each slot and entry a multiple of 16 bytes and
/// 16-aligned; `counters` two u64 (the next entry, the first refused row),
/// `starts` and `lens` `first + rows` entries, in device memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloatKvPlaceParams {
    /// The append's stored forms, a row every `stage_stride` bytes
    /// (device memory).
    pub stage: u64,
    /// Bytes from a row's stored form to the next's in `stage`.
    pub stage_stride: u64,
    /// Their lengths: `rows` u64.
    pub sizes: u64,
    /// Rows of the append.
    pub rows: u64,
    /// The store row of row 0.
    pub first: u64,
    /// The store's span: the slots, then the overflow area.
    pub pages: u64,
    /// Bytes of a slot (a multiple of 16).
    pub slot_bytes: u64,
    /// Byte offset of overflow entry 0 from `pages` (a multiple of 16).
    pub overflow_at: u64,
    /// Bytes of an overflow entry (the raw row rounded up to 16).
    pub entry_bytes: u64,
    /// Entries of the overflow area.
    pub overflow_entries: u64,
    /// Two u64: the next overflow entry, the first refused store row.
    pub counters: u64,
    /// Every store row's start from `pages` (u64).
    pub starts: u64,
    /// Every store row's stored length (u32).
    pub lens: u64,
}

/// The length of a store row the float-coded KV store could not place (its
/// overflow area was full): longer than any row, so the decoder reports
/// it as damaged instead of reading it.
pub const FLOAT_KV_REFUSED: u32 = u32::MAX;
