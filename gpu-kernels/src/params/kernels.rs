//! Every kernel of ibp's PTX, declared once: its name, the parameter block
//! it takes and its register cap. ibp's build script reads [`ALL`] to cap
//! the registers (PTX `.maxnreg`, through `ibp-kernel-builder`), and ibp's
//! host launches each kernel through its typed [`Kernel`] constant, so a
//! kernel cannot be launched with another's parameters and no launch names
//! a kernel by string. The entry points themselves are `kernels.rs`; a
//! host test checks that the shipped PTX holds exactly these entries, with
//! these parameter sizes and caps.
//!
//! Adding a kernel: its line here, and its `#[kernel]` function.
//!
//! Q: why do the caps live here and not in `build.rs`?
//! A: so that a kernel's name is written once. Before, it was a string in
//! `build.rs` (the cap, matched by prefix: `"ibp_encode_c"` also capped
//! `ibp_encode_clear`), in the host's launch code and in the entry point.
//!
//! The caps, measured (docs/DESIGN-GPU.md and the notebook entries it
//! links). A warp's registers come from one of an SM's four
//! 16384-register partitions: 80 registers hold six warps a partition, 88
//! and 92 five.

use core::marker::PhantomData;

use super::{
    CacheParams, CandidatesParams, ClearParams, CompactParams, CopyRunsParams, CountParams,
    CpAsyncTestParams, DecodeParams, EncodeParams, FloatDecodeParams, FloatEncodeParams,
    FloatKvPlaceParams, KvAppendParams, MeasureParams, ScanParams, WarpTestParams,
};

/// A kernel of ibp's PTX and the one parameter block it takes.
pub struct Kernel<P> {
    name: &'static str,
    max_registers: Option<u32>,
    params: PhantomData<fn(P)>,
}

impl<P> Clone for Kernel<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Kernel<P> {}

impl<P> core::fmt::Debug for Kernel<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name)
    }
}

impl<P> Kernel<P> {
    /// Only this module declares kernels.
    const fn new(name: &'static str, max_registers: Option<u32>) -> Self {
        Kernel {
            name,
            max_registers,
            params: PhantomData,
        }
    }

    /// The kernel's name in the PTX (its `.entry`).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Its register cap (PTX `.maxnreg`), if it has one.
    pub const fn max_registers(&self) -> Option<u32> {
        self.max_registers
    }

    /// The kernel as the build reads it.
    pub const fn decl(&self) -> Decl {
        Decl {
            name: self.name,
            max_registers: self.max_registers,
            param_bytes: size_of::<P>(),
        }
    }
}

/// A kernel without its parameter type: what the build script and the
/// checks of the PTX read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decl {
    /// The `.entry` name.
    pub name: &'static str,
    /// The register cap (PTX `.maxnreg`), if any.
    pub max_registers: Option<u32>,
    /// Bytes of the parameter block (the entry's one `.param`).
    pub param_bytes: usize,
}

/// Declares each kernel as a typed constant, and [`ALL`].
macro_rules! kernels {
    ($($(#[$doc:meta])* $konst:ident: $p:ty = $name:literal $(, max_registers = $n:literal)?;)*) => {
        $(
            $(#[$doc])*
            pub const $konst: Kernel<$p> = Kernel::new($name, kernels!(@cap $($n)?));
        )*

        /// Every kernel of the PTX, in the order above.
        pub const ALL: &[Decl] = &[$($konst.decl()),*];
    };
    (@cap) => { None };
    (@cap $n:literal) => { Some($n) };
}

kernels! {
    /// Bit counting (paper §4.1).
    COUNT_BITS: CountParams = "ibp_count_bits";
    /// Device test of the warp helpers.
    TEST_WARP: WarpTestParams = "ibp_test_warp";
    /// Device test of dynamic shared memory and `cp.async`.
    TEST_CP_ASYNC: CpAsyncTestParams = "ibp_test_cp_async";
    /// Decompression in batch mode, the book in shared memory.
    DECODE: DecodeParams = "ibp_decode";
    /// Decompression in batch mode, two tensors a warp (half-warps).
    DECODE_PAIRS: DecodeParams = "ibp_decode_pairs";
    /// [`DECODE`] for a book whose every step is uniform.
    DECODE_UNIFORM: DecodeParams = "ibp_decode_uniform";
    /// [`DECODE_PAIRS`] for a book whose every step is uniform.
    DECODE_PAIRS_UNIFORM: DecodeParams = "ibp_decode_pairs_uniform";
    /// [`DECODE`] for a book whose every step is periodic (fp8-like).
    DECODE_PERIODIC: DecodeParams = "ibp_decode_periodic";
    /// [`DECODE_PAIRS`] for a book whose every step is periodic.
    DECODE_PAIRS_PERIODIC: DecodeParams = "ibp_decode_pairs_periodic";
    /// [`DECODE_UNIFORM`] four tensors a warp (quarter-warps).
    DECODE_QUADS_UNIFORM: DecodeParams = "ibp_decode_quads_uniform";
    /// [`DECODE_PERIODIC`] four tensors a warp (quarter-warps).
    DECODE_QUADS_PERIODIC: DecodeParams = "ibp_decode_quads_periodic";
    /// Decompression in streaming mode (large tensors). 80 registers:
    /// ptxas alone picks 78 for sm_90, but the driver's JIT under the
    /// module's cap of 128 took 101 (Nsight Compute, H200), two blocks of
    /// eight warps an SM; at 80, 24 warps an SM, no spills (the H200's
    /// ptxas 13.0).
    DECODE_STREAM: DecodeParams = "ibp_decode_stream", max_registers = 80;
    /// [`DECODE_STREAM`] for a book whose every step is uniform; 80
    /// registers as it.
    DECODE_STREAM_UNIFORM: DecodeParams = "ibp_decode_stream_uniform", max_registers = 80;
    /// Decompression a lane a tensor (device memory, many tensors). 96
    /// registers (from 116 for sm_90): five warps a partition in blocks of
    /// four warps, no spills; at 80 it spills 24 bytes.
    DECODE_LANES: DecodeParams = "ibp_decode_lanes", max_registers = 96;
    /// Decompression of a clustered dataset in batch mode.
    DECODE_CLUSTERED: DecodeParams = "ibp_decode_clustered";
    /// Decompression of a clustered dataset in streaming mode.
    DECODE_CLUSTERED_STREAM: DecodeParams = "ibp_decode_clustered_stream";
    /// The GPU feature cache's gather.
    CACHE_GATHER: CacheParams = "ibp_cache_gather";
    /// [`CACHE_GATHER`] for a book whose every step is uniform.
    CACHE_GATHER_UNIFORM: CacheParams = "ibp_cache_gather_uniform";
    /// Decode of float-coded rows (`docs/FORMAT.md` §7). 64 registers: 32
    /// warps an SM in blocks of 256 threads, as 56 gave (four blocks
    /// either way). Two codes a read (sixth session) keep a second
    /// element's residual and code live: at 48 (40 warps) that spilled 4
    /// bytes on sm_90; the output tiles (seventh session) spilled 36–60
    /// bytes at 56.
    FLOAT_DECODE: FloatDecodeParams = "ibp_float_decode", max_registers = 64;
    /// The same with each coded row staged in shared memory first (rows
    /// whose groups' stages fit: `FloatDecoder` chooses).
    FLOAT_DECODE_STAGED: FloatDecodeParams = "ibp_float_decode_staged", max_registers = 64;
    /// The float coding's symbol histogram (the GPU fit).
    FLOAT_HIST: FloatEncodeParams = "ibp_float_hist";
    /// The float coding's stored length of every row.
    FLOAT_SIZE: FloatEncodeParams = "ibp_float_size";
    /// The float coding's rows and index, written.
    FLOAT_ENCODE: FloatEncodeParams = "ibp_float_encode";
    /// The same at a fixed stride, without an index (the float-coded KV
    /// store's stage).
    FLOAT_ENCODE_STRIDED: FloatEncodeParams = "ibp_float_encode_strided";
    /// The float-coded KV store's placement: each row's stored form into
    /// its slot or an overflow entry, and its index entry.
    FLOAT_KV_PLACE: FloatKvPlaceParams = "ibp_float_kv_place";
    /// The fit's evaluation pass. 88 registers (from 108): 22 warps an SM
    /// instead of 18; it is latency-bound at 25% occupancy; 80 and under
    /// spill.
    FIT_EVAL: MeasureParams = "ibp_fit_eval", max_registers = 88;
    /// The fit's candidate codebooks from the bit counts.
    FIT_CANDIDATES: CandidatesParams = "ibp_fit_candidates";
    /// The size query. 64 registers (from 78) hold 32 warps an SM,
    /// measured 5–14% faster, no spills (ptxas, sm_90).
    SIZE: MeasureParams = "ibp_size", max_registers = 64;
    /// Copy of sampled tensors.
    GATHER: MeasureParams = "ibp_gather";
    /// The KV store's append, 1-byte chunks.
    KV_APPEND_C1: KvAppendParams = "ibp_kv_append_c1";
    /// The KV store's append, 2-byte chunks.
    KV_APPEND_C2: KvAppendParams = "ibp_kv_append_c2";
    /// The KV store's append, 4-byte chunks.
    KV_APPEND_C4: KvAppendParams = "ibp_kv_append_c4";
    /// The KV store's append, 8-byte chunks.
    KV_APPEND_C8: KvAppendParams = "ibp_kv_append_c8";
    /// Compression, 1-byte chunks: the measured path's cap, 88 (eleven
    /// blocks an SM; at 80 the 1- and 2-byte kernels spill for sm_80, 4
    /// and 20 bytes, and at 84 this one still does). Chunks of 1 and 2
    /// bytes take three lane words a step (86–96 registers under a cap of
    /// 96).
    ENCODE_C1: EncodeParams = "ibp_encode_c1", max_registers = 88;
    /// Compression, 2-byte chunks (as 1-byte: 88).
    ENCODE_C2: EncodeParams = "ibp_encode_c2", max_registers = 88;
    /// Compression, 4-byte chunks. The bulk encoder's ceiling, 96 (ten
    /// blocks of two warps an SM): since its 32-bit rewrite it needs
    /// 72–83, and caps of 64 and 72 measured no faster.
    ENCODE_C4: EncodeParams = "ibp_encode_c4", max_registers = 96;
    /// Compression, 8-byte chunks (as 4-byte: 96).
    ENCODE_C8: EncodeParams = "ibp_encode_c8", max_registers = 96;
    /// Compression into unmeasured fixed-stride slots, 1-byte chunks. The
    /// slots kernels at 80: twelve blocks an SM instead of ten, no spills
    /// for sm_80 or sm_90, measured 1–3.5% faster on MiniLM bf16.
    ENCODE_SLOTS_C1: EncodeParams = "ibp_encode_slots_c1", max_registers = 80;
    /// Slots, 2-byte chunks (80).
    ENCODE_SLOTS_C2: EncodeParams = "ibp_encode_slots_c2", max_registers = 80;
    /// Slots, 4-byte chunks. A step's words joined (`encode_rows`) want 92;
    /// at 80 they do not spill and measured 2–6% faster.
    ENCODE_SLOTS_C4: EncodeParams = "ibp_encode_slots_c4", max_registers = 80;
    /// Slots, 8-byte chunks (as 4-byte: 80).
    ENCODE_SLOTS_C8: EncodeParams = "ibp_encode_slots_c8", max_registers = 80;
    /// Before a packed encode: zero the output's groups two writes share.
    ENCODE_CLEAR: ClearParams = "ibp_encode_clear";
    /// The packed layout from slots. 40 registers (from 48, no spills)
    /// hold 50 warps an SM; it waits on memory.
    COMPACT: CompactParams = "ibp_compact", max_registers = 40;
    /// Byte ranges from one buffer to another (a collective's pack and
    /// unpack of the runs of rows an all-to-all moves).
    COPY_RUNS: CopyRunsParams = "ibp_copy_runs";
    /// Scan of stored lengths, phase 1: tile sums and flag bytes.
    SCAN_TILES: ScanParams = "ibp_scan_tiles";
    /// Scan, phase 2: the tile sums' scan, one block.
    SCAN_PARTIALS: ScanParams = "ibp_scan_partials";
    /// Scan, phase 3: each tile's offsets.
    SCAN_APPLY: ScanParams = "ibp_scan_apply";
}

/// The member of a per-chunk family (`[c1, c2, c4, c8]`) for chunks of
/// `chunk` bytes (8 for any other value, as the host's chunk sizes are 1,
/// 2, 4 and 8).
pub const fn by_chunk<P>(family: [Kernel<P>; 4], chunk: u32) -> Kernel<P> {
    match chunk {
        1 => family[0],
        2 => family[1],
        4 => family[2],
        _ => family[3],
    }
}

/// Compression, by chunk size.
pub const ENCODE: [Kernel<EncodeParams>; 4] = [ENCODE_C1, ENCODE_C2, ENCODE_C4, ENCODE_C8];
/// Compression into unmeasured slots, by chunk size.
pub const ENCODE_SLOTS: [Kernel<EncodeParams>; 4] = [
    ENCODE_SLOTS_C1,
    ENCODE_SLOTS_C2,
    ENCODE_SLOTS_C4,
    ENCODE_SLOTS_C8,
];
/// The KV store's append, by chunk size.
pub const KV_APPEND: [Kernel<KvAppendParams>; 4] =
    [KV_APPEND_C1, KV_APPEND_C2, KV_APPEND_C4, KV_APPEND_C8];

/// Whether two names are the same (`==` on `str` is not `const`).
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether every name of `all` is declared once.
const fn names_unique(all: &[Decl]) -> bool {
    let mut i = 0;
    while i < all.len() {
        let mut j = i + 1;
        while j < all.len() {
            if same(all[i].name, all[j].name) {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

const _: () = assert!(names_unique(ALL), "a kernel is declared twice");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_hold_their_chunk_sizes_in_order() {
        for (family, stem) in [
            (ENCODE, "ibp_encode_c"),
            (ENCODE_SLOTS, "ibp_encode_slots_c"),
        ] {
            for c in [1u32, 2, 4, 8] {
                let k = by_chunk(family, c);
                assert_eq!(k.name(), format!("{stem}{c}"));
            }
        }
        for c in [1u32, 2, 4, 8] {
            assert_eq!(by_chunk(KV_APPEND, c).name(), format!("ibp_kv_append_c{c}"));
        }
    }

    #[test]
    fn the_list_holds_every_kernel_with_its_block_and_cap() {
        assert!(names_unique(ALL));
        assert!(!names_unique(&[COUNT_BITS.decl(), COUNT_BITS.decl()]));
        let size = ALL.iter().find(|d| d.name == "ibp_size").unwrap();
        assert_eq!(size.max_registers, Some(64));
        assert_eq!(size.param_bytes, size_of::<MeasureParams>());
        let clear = ALL.iter().find(|d| d.name == "ibp_encode_clear").unwrap();
        assert_eq!(clear.max_registers, None);
    }
}
