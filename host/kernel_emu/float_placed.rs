//! The float decoder (`ibp_kernels::detail::float_decode`) on the emulated
//! grid reading rows where two host-side layouts of `ibp::gpu` put them,
//! against the CPU decoder, every load and store checked against the
//! buffers those layouts allocate ([`Checked`]):
//! - [`crate::gpu::FloatFeatureCache`]'s direct index of absolute addresses
//!   (`float_cache::plan`): hot rows in a packed slab, the others in the
//!   padded payload, the slab and payload allocated as the plan sizes them;
//! - [`crate::gpu::FloatDecoder::range_dma`]'s pieces (`float_dma`): each
//!   piece's bytes at the start of a ring buffer of the scratch's usable
//!   size plus its read-past bytes, decoded with the payload address
//!   rebased onto it.

use ibp_kernel_emu::{Buffer, Grid, HostBytes, launch};
use ibp_kernels::detail::float_bulk::decode;
use ibp_kernels::params::{FLOAT_DIRECT_INDEX, FloatDecodeParams, STATUS_BAD_INDEX};

use super::float::{Checked, synthetic};
use super::xorshift;
use crate::Rows;
use crate::float_code::{FitOptions, FloatCoded, FloatType, compress, fit};
use crate::gpu::float_cache::plan;
use crate::gpu::float_dma::{READ_PAST, next_piece};

/// Decode `count` output rows with `p` (its `out`, `status` and `ids` set
/// by this function) by one kernel, loads allowed only inside `spans`;
/// the output rows and the status words.
fn run<const STAGE: bool>(
    p: &FloatDecodeParams,
    ids: Option<&[u64]>,
    count: usize,
    spans: &[(u64, u64)],
) -> (Vec<u8>, [u64; 2]) {
    let l = p.row_bytes as usize;
    let ids_buf = ids.map(Buffer::from_slice);
    let out = Buffer::from_bytes(&vec![0xA5u8; count * l]);
    let status = Buffer::from_slice(&[0u64, u64::MAX]);
    let p = FloatDecodeParams {
        ids: ids_buf.as_ref().map_or(0, Buffer::addr),
        count: count as u64,
        out: out.addr(),
        out_stride: l as u64,
        status: status.addr(),
        stage_bytes: if STAGE { p.view().workspace_bytes() } else { 0 },
        // Tiles, as `ibp::gpu::FloatDecoder` launches by default.
        tile_elems: if (out.addr() | l as u64).is_multiple_of(16) {
            FloatDecodeParams::tile_elems_for(p.sub_streams.clamp(1, 32))
        } else {
            0
        },
        ..*p
    };
    let mut all = vec![
        (out.addr(), out.addr() + out.len() as u64),
        (status.addr(), status.addr() + 16),
    ];
    all.extend_from_slice(spans);
    if let Some(b) = &ids_buf {
        all.push((b.addr(), b.addr() + b.len() as u64));
    }
    let per_warp = 32 / p.sub_streams.clamp(1, 32).next_power_of_two() * p.stage_bytes;
    let book = HostBytes(p.table);
    let tiles = p.tile_warp_bytes();
    let g = Grid::new(2, 2).with_shared_bytes((2 * (per_warp + tiles)) as usize);
    launch(g, |lane| {
        let (w, n) = lane.global_warp();
        let h = Checked {
            lane,
            spans: &all,
            writable: 2,
        };
        let ws = lane.warp_in_block() * per_warp;
        let tile = 2 * per_warp + lane.warp_in_block() * tiles;
        // SAFETY: the table, index and rows are laid out as the test's
        // caller built them (the layouts under test), every load checked
        // against `spans`; out, status and ids sized as the params say;
        // each warp's stages, then its tiles, inside the block's shared
        // memory.
        unsafe { decode::<_, _, STAGE>(&h, &book, &p, w, n, ws, tile) }
    });
    let s = status.as_slice::<u64>();
    (out.bytes().to_vec(), [s[0], s[1]])
}

/// Both kernels, which must agree.
fn run_both(
    p: &FloatDecodeParams,
    ids: Option<&[u64]>,
    count: usize,
    spans: &[(u64, u64)],
) -> (Vec<u8>, [u64; 2]) {
    let direct = run::<false>(p, ids, count, spans);
    let staged = run::<true>(p, ids, count, spans);
    assert!(
        direct == staged,
        "the staged decode differs from the direct one"
    );
    direct
}

/// A group of bf16 or f32 rows, some stored raw.
fn group(t: FloatType, rows: usize, n: usize, seed: u64) -> FloatCoded {
    let data = synthetic(t, rows, n, seed);
    let r = Rows::new(&data, n * t.bytes()).unwrap();
    compress(&fit(t, r, &FitOptions::default()).unwrap(), r).unwrap()
}

/// The CPU's rows `ids` (an id past the end: a zero row).
fn cpu(coded: &FloatCoded, ids: &[u64]) -> Vec<u8> {
    let l = coded.row_bytes();
    let mut out = vec![0u8; ids.len() * l];
    for (o, &t) in out.chunks_mut(l).zip(ids) {
        if t < coded.rows() as u64 {
            coded.gather(&[t], o).unwrap();
        }
    }
    out
}

#[test]
fn emulated_cache_index_reads_slab_and_pinned_rows_in_place() {
    for (t, n) in [(FloatType::Bf16, 64), (FloatType::F32, 33)] {
        let coded = group(t, 60, n, 31 + n as u64);
        let rows = coded.rows() as u64;
        let img = coded.device_image().unwrap();
        let start = |r: u64| coded.row_range(r as usize).unwrap().start as u64;
        let stored = |r: u64| coded.row_range(r as usize).unwrap().len() as u64;
        // The pinned payload, padded as `PinnedFloatRows` pads it.
        let len = coded.payload().len();
        let mut host = coded.payload().to_vec();
        host.resize(len.next_multiple_of(16) + 16, 0);
        let host = Buffer::from_bytes(&host);
        let hot: Vec<u64> = (0..rows).rev().step_by(2).collect();
        let payload = len as u64;
        for budget in [0, payload / 4, payload + 64] {
            let budget = plan::index_bytes(rows).unwrap() + budget;
            let cap = plan::slab_capacity(budget, rows).unwrap();
            let placed = plan::place(&hot, rows, stored, cap).unwrap();
            let alloc = plan::slab_alloc(placed.used) as usize;
            let mut image = vec![0u8; alloc.max(1)];
            for &(r, o) in &placed.rows {
                let b = &coded.payload()[coded.row_range(r as usize).unwrap()];
                image[o as usize..o as usize + b.len()].copy_from_slice(b);
            }
            let slab = Buffer::from_bytes(&image);
            let (starts, lens) =
                plan::direct_index(rows, start, stored, &placed, slab.addr(), host.addr());
            let (starts, lens) = (Buffer::from_slice(&starts), Buffer::from_slice(&lens));
            let table = Buffer::from_bytes(&img.table);
            let p = FloatDecodeParams {
                payload: 0,
                payload_len: u64::MAX,
                bases: starts.addr(),
                rel: lens.addr(),
                table: table.addr(),
                block_log2: 0,
                rel_width: FLOAT_DIRECT_INDEX,
                ..img.params
            };
            // What the cache allocates, and nothing more.
            let spans = [
                (slab.addr(), slab.addr() + alloc as u64),
                (host.addr(), host.addr() + host.len() as u64),
                (starts.addr(), starts.addr() + 8 * rows),
                (lens.addr(), lens.addr() + 4 * rows),
            ];
            let mut x = 5 + budget;
            let mut ids: Vec<u64> = (0..50).map(|_| xorshift(&mut x) % rows).collect();
            ids.extend([0, rows - 1, ids[4], 0]);
            let (out, st) = run_both(&p, Some(&ids), ids.len(), &spans);
            assert_eq!(st, [0, u64::MAX], "{t} budget {budget}");
            assert!(out == cpu(&coded, &ids), "{t} budget {budget}: rows differ");
            // Every row, and an id past the end (reported, zeroed).
            let all: Vec<u64> = (0..rows).collect();
            let (out, _) = run_both(&p, None, all.len(), &spans);
            assert!(
                out == cpu(&coded, &all),
                "{t} budget {budget}: range differs"
            );
            let bad = [1, rows, 2];
            let (out, st) = run_both(&p, Some(&bad), 3, &spans);
            assert_eq!(st, [STATUS_BAD_INDEX, 1], "{t}");
            assert!(out == cpu(&coded, &bad), "{t}: bad id");
        }
    }
}

#[test]
fn emulated_dma_pieces_decode_from_a_rebased_ring() {
    for (t, n) in [(FloatType::Bf16, 64), (FloatType::F32, 33)] {
        let coded = group(t, 80, n, 7 + n as u64);
        let rows = coded.rows() as u64;
        let img = coded.device_image().unwrap();
        let (bases, rel, table) = (
            Buffer::from_bytes(&img.bases),
            Buffer::from_bytes(&img.rel),
            Buffer::from_bytes(&img.table),
        );
        let mut starts: Vec<u64> = (0..rows)
            .map(|r| coded.row_range(r as usize).unwrap().start as u64)
            .collect();
        starts.push(coded.payload().len() as u64);
        let l = coded.row_bytes();
        // A scratch piece of a row and its alignment, of a few rows, of all.
        for cap in [(l + 127) as u64, 3 * l as u64, 1 << 20] {
            let (first, end) = (3u64, rows - 2);
            let mut out = Vec::new();
            let mut a = first;
            while a < end {
                let (b, from, to) = next_piece(&starts, a, end, cap).unwrap();
                // The device piece: the copied bytes at its start, stale
                // (here zero) bytes after them.
                let mut piece = vec![0u8; cap as usize + READ_PAST];
                piece[..(to - from) as usize]
                    .copy_from_slice(&coded.payload()[from as usize..to as usize]);
                let ring = Buffer::from_bytes(&piece);
                let p = FloatDecodeParams {
                    payload: ring.addr().wrapping_sub(from),
                    payload_len: to,
                    bases: bases.addr(),
                    rel: rel.addr(),
                    table: table.addr(),
                    first: a,
                    ..img.params
                };
                let spans = [
                    (ring.addr(), ring.addr() + ring.len() as u64),
                    (bases.addr(), bases.addr() + bases.len() as u64),
                    (rel.addr(), rel.addr() + rel.len() as u64),
                ];
                let (o, st) = run_both(&p, None, (b - a) as usize, &spans);
                assert_eq!(st, [0, u64::MAX], "{t} cap {cap} piece {a}..{b}");
                out.extend(o);
                a = b;
            }
            let want = cpu(&coded, &(first..end).collect::<Vec<_>>());
            assert!(out == want, "{t} cap {cap}: the pieces' rows differ");
        }
    }
}
