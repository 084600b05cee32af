//! The rules that shape a decoder's launches: streaming mode's book
//! placement and warps, batch mode's blocks an SM, the fewest warps that
//! take no more rounds, and when the pair and lane decoders pay. Each rule
//! comes from instruction counts or a sweep, never from one table; the
//! decoder (`Decoder::for_book`) applies them.

use ibp_kernels::params::workspace_bytes;

use super::DecodeOptions;
use crate::gpu::Gpu;
use crate::gpu::kernels::{self, Step};

/// Of `main` and the shapes `fewer` (each `(block, grid, shared)`), the
/// one of fewest warps in the grid that decodes `count` tensors, a warp a
/// tensor, in no more rounds than `main` ((`Decoder::shape_for`)).
pub(super) fn fewest_warps_for(
    main: (u32, u32, u32),
    fewer: &[(u32, u32, u32)],
    count: u64,
) -> (u32, u32, u32) {
    let warps = |s: &(u32, u32, u32)| (s.0 / 32) as u64 * s.1 as u64;
    let rounds = |s: &(u32, u32, u32)| count.div_ceil(warps(s).max(1));
    let least = rounds(&main);
    fewer
        .iter()
        .copied()
        .filter(|s| rounds(s) <= least)
        // Fewest warps, then least shared memory in the grid (one block
        // of 16 warps rather than two of 8, each with its own book).
        .min_by_key(|s| (warps(s), s.1 as u64 * s.2 as u64))
        .filter(|s| warps(s) < warps(&main))
        .unwrap_or(main)
}

/// What [`stream_book`] chooses.
pub(super) type StreamShapes = (u64, u64, Vec<(u64, u64)>);

/// Streaming mode's book place and warps a block: `(book bytes in shared
/// memory, warps, fewer)`, the book in shared memory (`book_len`) or
/// through L1 (0), and the other shapes of that place with fewer warps an
/// SM, `(warps a block, blocks an SM)` (for launches of few tensors,
/// `Decoder::shape_for`).
///
/// Q: the rule?
/// A: of each place, the shape of most warps an SM, then of least shared
/// memory; the book in shared memory wherever its shape keeps at least
/// two thirds of the warps the other place would. Its loads through L1
/// were the kernel's largest stall (44% of the samples on 16 KB rows of
/// 2-byte chunks, H200), and 24 warps an SM with the book through L1 did
/// not make up for it: 16 KB rows of 1-byte chunks, whose book leaves
/// room for 16 warps, decoded 1.16–1.18× faster on 16 with it in shared
/// memory than on 24 without (H200). It is copied once a block, so one
/// block of 16 or 24 warps may hold as many warps an SM as two or three
/// of eight with the book once instead of two or three times. The
/// occupancy comes from the driver (registers and shared memory), not
/// from a table of row lengths. [`DecodeOptions::stream_book`] and
/// [`DecodeOptions::warps_per_block`] narrow the candidates.
pub(super) fn stream_book(
    gpu: &Gpu,
    book_len: u64,
    warp_bytes: u64,
    budget: u64,
    opts: &DecodeOptions,
    uniform: bool,
) -> StreamShapes {
    let block_sizes: &[u64] = match opts.warps_per_block {
        Some(w) => &[w.clamp(1, 32) as u64],
        None => &[8, 16, 24],
    };
    let places: &[bool] = match opts.stream_book {
        Some(shared) => &[shared],
        None => &[false, true],
    };
    // (warps an SM, book in shared memory, warps a block, blocks an SM,
    // shared memory an SM).
    let mut shapes = Vec::new();
    for &shared in places {
        for &w in block_sizes {
            let smem = if shared { book_len } else { 0 } + w * warp_bytes;
            if smem > budget {
                continue;
            }
            let per_sm = gpu
                .blocks_per_sm(
                    kernels::decode(
                        false,
                        false,
                        1,
                        if uniform {
                            Step::Uniform
                        } else {
                            Step::General
                        },
                    ),
                    (w * 32) as u32,
                    smem as usize,
                )
                .unwrap_or(0) as u64;
            if per_sm > 0 {
                shapes.push((per_sm * w, shared, w, per_sm, per_sm * smem));
            }
        }
    }
    match choose_stream_shape(&shapes) {
        Some((shared, w, fewer)) => (if shared { book_len } else { 0 }, w, fewer),
        // Nothing fits (a book forced into shared memory included): the
        // caller shrinks the block and reports it.
        None => (0, block_sizes[0], Vec::new()),
    }
}

/// A candidate launch shape of streaming mode: `(warps an SM, book in
/// shared memory, warps a block, blocks an SM, shared memory an SM)`.
type Candidate = (u64, bool, u64, u64, u64);

/// What [`choose_stream_shape`] picks: `(book in shared memory, warps a
/// block, fewer)`.
type Chosen = (bool, u64, Vec<(u64, u64)>);

/// [`stream_book`]'s rule on the shapes the driver allows: `(book in
/// shared memory, warps a block, fewer)` with `fewer` the same place's
/// shapes of fewer warps an SM as `(warps a block, blocks an SM)`.
fn choose_stream_shape(shapes: &[Candidate]) -> Option<Chosen> {
    // Of a place, the most warps an SM, then the least shared memory.
    let best = |shared: bool| {
        shapes
            .iter()
            .copied()
            .filter(|s| s.1 == shared)
            .max_by_key(|s| (s.0, std::cmp::Reverse(s.4)))
    };
    let chosen = match (best(true), best(false)) {
        (Some(s), Some(g)) => Some(if 3 * s.0 >= 2 * g.0 { s } else { g }),
        (s, g) => s.or(g),
    }?;
    let (most, shared, w, _, _) = chosen;
    let fewer = shapes
        .iter()
        .filter(|s| s.1 == shared && s.0 < most)
        .map(|s| (s.2, s.3))
        .collect();
    Some((shared, w, fewer))
}

/// Blocks of `warps` warps that the batch kernels' registers let an SM
/// hold (the fewer of the whole-warp and the pair kernel), asked with the
/// least shared memory batch mode runs on (the book and one warp's
/// smallest ring, at most `budget`): the share of the SM's shared memory
/// that each block's ring is then sized from. At most 4 (a quarter of
/// the SM's shared memory still holds halves of 12 lines); 2, the shape
/// the rings were sized for before, where the driver cannot say.
///
/// Q: why ask the driver rather than assume two?
/// A: the registers are the JIT's to allocate (`IBP_JIT_MAX_REGISTERS`,
/// a kernel's own cap); sizing the rings for two blocks where three fit by
/// registers would leave the third unplaced for shared memory.
pub(super) fn batch_blocks_per_sm(
    gpu: &Gpu,
    clustered: bool,
    warps: u64,
    book_len: u64,
    span_max: u64,
    budget: u64,
) -> u64 {
    let block = (warps * 32) as u32;
    let least = (book_len + workspace_bytes(0, (2 * span_max) as u32) as u64).min(budget);
    let mut blocks = 4;
    for groups in [1, 2, 4] {
        for step in [Step::General, Step::Uniform, Step::Periodic] {
            if (groups > 1 || step != Step::General) && clustered {
                continue;
            }
            let k = kernels::decode(true, clustered, groups, step);
            blocks = blocks.min(gpu.blocks_per_sm(k, block, least as usize).unwrap_or(2) as u64);
        }
    }
    blocks.max(1)
}

/// Largest tensor span, in lines, that batch mode takes (half a ring).
pub(super) const BATCH_MAX_LINES: u64 = 48;

/// Whether a launch of `count` tensors of `l` bytes decodes a lane a
/// tensor (`ibp_decode_lanes`) by default, on `sms` SMs.
///
/// Q: where does the rule come from?
/// A: from the row-length sweep, both decoders in one binary (H200,
/// 2026-11-28, `scripts/device-lanes.sh`; every chunk size, 25–90%
/// savings): a lane a tensor ran rows of 64 bytes at 4.8–6.1× the batch
/// decoder and rows of 128 bytes at 1.8–3.1×, but rows of 256 bytes at
/// 0.75–1.37× and longer rows at 0.41–0.99×. Its steps cost what the batch
/// decoder's do; what it saves is the per-tensor work and the half-empty
/// steps, which dominate only short rows. Past them it waits on memory (a
/// warp's 16-byte stores and fetches touch 32 rows each; 0.24 instructions
/// issued a scheduler a cycle on 768-byte rows). It also needs a lane a
/// tensor to fill the GPU: at least eight warps an SM of tensors in the
/// launch.
pub(crate) fn lanes_pay(count: u64, l: u64, sms: u32) -> bool {
    l <= LANE_MAX_ROW && count >= 32 * 8 * sms as u64
}

/// The longest row the lane decoder takes by default (`lanes_pay`).
pub(super) const LANE_MAX_ROW: u64 = 128;

/// Whether batch mode decodes tensors of `l` bytes two a warp by default
/// (`ibp_decode_pairs`), with halves of `half_lines` lines and tensors
/// spanning at most `span_max`.
///
/// Q: where does the rule come from?
/// A: from instruction counts, not from tables. A half-warp step costs
/// what a whole-warp step does (`scripts/sass.sh --steps`: the `_half`
/// probes take 1.0–1.15× the instructions for 256 output bytes of each of
/// two tensors that a whole step takes for 512 of one). So a pair saves
/// only where a tensor's last whole step would be at most half full: it
/// takes `⌈L/256⌉` half-steps for two tensors against `2·⌈L/512⌉` whole
/// ones. The rule asks for a saving of a fifth (`L` in `(0, 256]` or
/// `(512, 768]`: 25–50%), which covers the per-step excess with room,
/// and for halves that hold two tensors, since a tensor with no partner
/// is decoded by both halves at twice its cost. Measured on the H200
/// (2026-11-28, `scripts/device-decoder.sh`): 4096-byte rows whose batches
/// held one tensor ran at 0.53–0.61× with pairs forced on.
///
/// `flat`: the periodic or uniform kernels' books, whose half-step costs
/// what a whole one does to the instruction (`c4_per_half` 163 against
/// `c4_per` 162, `c4_uni_half` 104 against `c4_uni` 103; the general
/// half-step up to 1.15×). For them a row of one whole step (`L` ≤ 512)
/// pairs at a tie too: two tensors cost the same steps and share one
/// tensor's work around them. Measured with `--pairs on` against the rule
/// (H200, 2026-11-29, 2- and 4-byte chunks at 25% and 50%, alternating
/// twice): periodic sweep cells of 320–448 bytes 1.00–1.12× (fp8-like and
/// f16-like), then MiniLM's fp8 tables (384 bytes) 1.09–1.13×; uniform
/// (alike) cells of 320–512 bytes 1.04–1.12×. Longer rows at a tie do
/// not pay as reliably: periodic rows of 832–1,024 bytes (two whole steps
/// against four half-steps) ran 0.98–1.07×, their steps outweighing the
/// shared work, so they keep a tensor a warp.
pub(crate) fn pairs_pay(l: u64, half_lines: u64, span_max: u64, flat: bool) -> bool {
    let (halves, wholes) = (l.div_ceil(256), 2 * l.div_ceil(512));
    let saves = 5 * halves <= 4 * wholes || (flat && l <= 512);
    saves && half_lines >= 2 * span_max
}

/// Whether batch mode decodes tensors of `l` bytes four a warp by default
/// (`ibp_decode_quads_uniform`, `ibp_decode_quads_periodic`: the uniform
/// and periodic steps only), with halves of `half_lines` lines and tensors
/// spanning at most `span_max`.
///
/// Q: where does the rule come from?
/// A: from instruction counts, as `pairs_pay`'s. A quarter-warp step (eight
/// lanes, 128 output bytes) of the uniform and periodic kernels costs what
/// a whole one does (`scripts/sass.sh --steps`: `c2_uni_quarter` 132,
/// `c2_uni` 133; `c4_per_quarter` 161, `c4_per` 162; `c4_per_halves_quarter`
/// 124, `c4_per_halves` 124). So four tensors take `⌈L/128⌉` quarter-steps
/// against `2·⌈L/256⌉` half-steps in pairs: fewer where a row's last
/// half-step would be at most half full, `L mod 256` in `(0, 128]` (384
/// bytes: three against four; 600: five against six), and the work around
/// the steps is shared by four. Measured on the H200 (2026-11-29, call B
/// of the decoder's notebook): 1.11–1.41× the pairs on such sweep cells of
/// 300–1,100 bytes, MiniLM's fp8 tables 1.29–1.30×.
///
/// At a tie (`L mod 256` of 0 or over 128) only that shared work is left,
/// and it pays on short rows alone: rows of at most 768 bytes take four a
/// warp too. Measured with `--quads on` (call C): sweep cells of 512 and
/// 768 bytes 0.99–1.07× the rule, MiniLM's bf16 and f16 tables (768
/// bytes) 1.06–1.08×; cells of 1,024 and 1,536 bytes 0.90–1.08×, most
/// below 1, so longer rows at a tie keep the pairs or a tensor a warp.
///
/// Rows of at most 128 bytes go to the lane decoder (`lanes_pay`) where it
/// runs; the quads take the rest of them. The half must hold four
/// tensors: one with fewer partners is decoded by several groups at once.
pub(crate) fn quads_pay(l: u64, half_lines: u64, span_max: u64) -> bool {
    let saves = l.div_ceil(128) < 2 * l.div_ceil(256);
    l > 0 && (saves || l <= 768) && half_lines >= 4 * span_max
}

/// Tensors a warp (1, 2 or 4) of an unclustered batch-mode decoder, and
/// the fewer it falls back to for a launch too small for four a warp
/// (`launch_groups`): for rows of `l` bytes, halves of `half_lines`
/// lines, tensors spanning at most `span_max`, a book the uniform or
/// periodic kernels decode (`flat`), and the caller's options.
///
/// The caller's `pairs` and `quads` win over the rules: `with_pairs(true)`
/// is two a warp (never four), `with_pairs(false)` one unless four are
/// asked for, `with_quads(true)` four on a `flat` book at any launch size
/// (other books have no four-tensor kernel). Without fast paths the rules
/// take neither.
pub(crate) fn tensors_a_warp(
    l: u64,
    half_lines: u64,
    span_max: u64,
    flat: bool,
    opts: &super::DecodeOptions,
) -> (u32, u32) {
    let rules = !opts.no_fast_paths;
    let pairs = opts
        .pairs
        .unwrap_or(rules && pairs_pay(l, half_lines, span_max, flat));
    let quads = flat
        && opts
            .quads
            .unwrap_or(opts.pairs.is_none() && rules && quads_pay(l, half_lines, span_max));
    let few = if pairs { 2 } else { 1 };
    match (quads, opts.quads) {
        (true, Some(true)) => (4, 4),
        (true, _) => (4, few),
        (false, _) => (few, few),
    }
}

/// Tensors a warp for a launch of `count` tensors on a grid of `warps`
/// warps: `groups` (the decoder's, four by `quads_pay`), or `few` where
/// the launch cannot give every warp four tensors.
///
/// Q: why per launch?
/// A: a warp of four groups with fewer than four tensors leaves groups
/// idle, and a launch of few tensors idles warps anyway: measured on the
/// H200 (2026-11-29), device gathers of 4,096 rows of 384 and 600 bytes
/// ran 0.75–0.96× the pairs with four a warp, 65,536 rows 1.17–1.22×.
pub(crate) fn launch_groups(count: u64, warps: u64, groups: u32, few: u32) -> u32 {
    if groups == 4 && count < 4 * warps {
        few
    } else {
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::pairs_pay;

    #[test]
    fn streaming_books_go_to_shared_memory_where_they_keep_two_thirds_of_the_warps() {
        use super::choose_stream_shape;
        // (warps an SM, book in shared memory, warps a block, blocks an
        // SM, shared memory an SM), as an H200 allows them at 80 registers.
        // 16 KB rows of 4-byte chunks (68 KB book, 4.6 KB a warp): the book
        // fits beside 24 warps; the same 24 warps win with it in shared
        // memory, and the one block of 24 over three of 8 with it in L1.
        let c4 = [
            (24, false, 8, 3, 111_000),
            (16, false, 16, 1, 74_000),
            (24, false, 24, 1, 110_000),
            (8, true, 8, 1, 105_000),
            (16, true, 16, 1, 142_000),
            (24, true, 24, 1, 178_000),
        ];
        let (shared, w, fewer) = choose_stream_shape(&c4).unwrap();
        assert!(shared);
        assert_eq!(w, 24);
        assert_eq!(fewer, vec![(8, 1), (16, 1)]);
        // 16 KB rows of 1-byte chunks (116 KB book): in shared memory only
        // beside 16 warps, two thirds of the 24 the L1 book allows: shared
        // (measured 1.16-1.18x faster).
        let c1 = [
            (24, false, 8, 3, 147_000),
            (8, true, 8, 1, 164_000),
            (16, true, 16, 1, 212_000),
        ];
        let (shared, w, fewer) = choose_stream_shape(&c1).unwrap();
        assert!(shared);
        assert_eq!(w, 16);
        assert_eq!(fewer, vec![(8, 1)]);
        // A book that leaves room for 8 warps against 24: through L1.
        let (shared, w, fewer) = choose_stream_shape(&c1[..2]).unwrap();
        assert!(!shared);
        assert_eq!(w, 8);
        assert!(fewer.is_empty());
        // Of equal warps, the least shared memory: one block of 16 with one
        // book rather than two of 8 with two.
        let tie = [(16, true, 8, 2, 160_000), (16, true, 16, 1, 150_000)];
        assert_eq!(choose_stream_shape(&tie).unwrap().1, 16);
        // Nothing the driver allows (a forced place that does not fit).
        assert!(choose_stream_shape(&[]).is_none());
    }

    #[test]
    fn fewer_warps_only_where_they_take_no_more_rounds() {
        use super::fewest_warps_for;
        // 132 SMs: one block of 24 warps an SM (3,168 warps), or of 16
        // (2,112) or two of 8.
        let main = (768, 132, 200_000);
        let fewer = [(256, 264, 80_000), (512, 132, 150_000)];
        // 4,096 tensors: two rounds on either; the fewer warps win, and of
        // equal warps the shape of less shared memory in the grid.
        assert_eq!(fewest_warps_for(main, &fewer, 4096), fewer[1]);
        // One round on either.
        assert_eq!(fewest_warps_for(main, &fewer, 2000), fewer[1]);
        // 8,192: three rounds on 3,168 warps, four on 2,112: the main.
        assert_eq!(fewest_warps_for(main, &fewer, 8192), main);
        // Many tensors: the main shape.
        assert_eq!(fewest_warps_for(main, &fewer, 1 << 20), main);
        // No smaller shape: the main.
        assert_eq!(fewest_warps_for(main, &[], 10), main);
    }

    #[test]
    fn lanes_pay_for_many_short_rows_only() {
        use super::lanes_pay;
        assert!(lanes_pay(1 << 20, 64, 132));
        assert!(lanes_pay(1 << 20, 128, 132));
        assert!(!lanes_pay(1 << 20, 129, 132));
        assert!(!lanes_pay(1 << 20, 768, 132));
        // Too few tensors to give eight warps an SM a tensor a lane.
        assert!(!lanes_pay(32 * 8 * 132 - 1, 64, 132));
        assert!(lanes_pay(32 * 8 * 132, 64, 132));
    }

    #[test]
    fn tensors_a_warp_follow_the_rules_unless_the_caller_says() {
        use super::super::DecodeOptions;
        use super::tensors_a_warp;
        let d = DecodeOptions::default();
        // 384-byte rows, halves of 32 lines, tensors of at most 3.
        let at = |flat, o: &DecodeOptions| tensors_a_warp(384, 32, 3, flat, o);
        assert_eq!(at(true, &d), (4, 2));
        assert_eq!(at(false, &d), (1, 1));
        // The caller's pairs: two (never four), or one.
        assert_eq!(at(true, &d.clone().with_pairs(true)), (2, 2));
        assert_eq!(at(true, &d.clone().with_pairs(false)), (1, 1));
        // The caller's quads: four at any launch size, on flat books only.
        assert_eq!(at(true, &d.clone().with_quads(true)), (4, 4));
        assert_eq!(at(false, &d.clone().with_quads(true)), (1, 1));
        assert_eq!(at(true, &d.clone().with_quads(false)), (2, 2));
        assert_eq!(
            at(true, &d.clone().with_pairs(false).with_quads(true)),
            (4, 4)
        );
        // No fast paths: neither rule.
        assert_eq!(at(true, &d.clone().with_fast_paths(false)), (1, 1));
        // 1,536-byte rows: a tensor a warp by both rules.
        assert_eq!(tensors_a_warp(1536, 32, 3, true, &d), (1, 1));
        // 600-byte rows: four, or the pairs for small launches.
        assert_eq!(tensors_a_warp(600, 32, 5, true, &d), (4, 2));
        // A half that holds fewer than four tensors: the pairs.
        assert_eq!(tensors_a_warp(600, 32, 9, true, &d), (2, 2));
    }

    #[test]
    fn four_tensors_a_warp_only_for_launches_that_give_every_warp_four() {
        use super::launch_groups;
        // 132 SMs of 16 warps: 2,112 warps.
        assert_eq!(launch_groups(65_536, 2_112, 4, 2), 4);
        assert_eq!(launch_groups(4 * 2_112, 2_112, 4, 2), 4);
        assert_eq!(launch_groups(4_096, 2_112, 4, 2), 2);
        assert_eq!(launch_groups(4_096, 2_112, 4, 1), 1);
        // Pairs and a tensor a warp are the decoder's own at any count.
        assert_eq!(launch_groups(100, 2_112, 2, 2), 2);
        assert_eq!(launch_groups(100, 2_112, 1, 1), 1);
    }

    #[test]
    fn quads_pay_where_a_rows_last_half_step_is_at_most_half_full_or_rows_are_short() {
        use super::quads_pay;
        // Halves of 32 lines, tensors of at most 7 (four fit) or 9 (three).
        for l in [1, 64, 128, 257, 300, 384, 600, 640, 1100, 5732] {
            assert!(quads_pay(l, 32, 7), "{l}");
        }
        // At a tie: rows of up to 768 bytes only.
        for l in [129, 200, 256, 385, 448, 512, 513, 768] {
            assert!(quads_pay(l, 32, 7), "{l}");
        }
        for l in [0, 1000, 1024, 1280, 1536, 4096] {
            assert!(!quads_pay(l, 32, 7), "{l}");
        }
        assert!(!quads_pay(384, 32, 9));
    }

    #[test]
    fn pairs_pay_where_a_rows_last_whole_step_is_at_most_half_full() {
        // Halves of 32 lines, tensors of at most 7.
        for l in [1, 64, 200, 256, 513, 600, 768] {
            assert!(pairs_pay(l, 32, 7, false), "{l}");
        }
        for l in [257, 512, 769, 1024, 1280, 1536, 4096, 5732] {
            assert!(!pairs_pay(l, 32, 7, false), "{l}");
        }
        // A half that holds one tensor never pairs.
        assert!(!pairs_pay(768, 12, 7, false));
        // Periodic and uniform books: one-step rows pair at a tie too,
        // longer ones by the rule; never in a half that holds one tensor.
        for l in [257, 384, 448, 512] {
            assert!(pairs_pay(l, 32, 7, true), "{l}");
        }
        for l in [513, 768] {
            assert!(pairs_pay(l, 32, 7, true), "{l}");
        }
        for l in [769, 1024, 1536] {
            assert!(!pairs_pay(l, 32, 7, true), "{l}");
        }
        assert!(!pairs_pay(384, 12, 7, true));
    }
}
