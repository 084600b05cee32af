//! The float-coded rows' GPU decoder (`ibp_kernels::detail::float_decode`)
//! on the emulated grid, against the CPU decoder (`crate::float_code`) bit
//! for bit: ranges and gathers of MiniLM's word embeddings (bf16 and f32,
//! when the model file is present), synthetic FP8, f16 and f32 rows under
//! several sub-stream counts, ragged rows and raw rows, and hostile input
//! (damaged rows, a damaged index, ids past the end). Every load and store
//! the body makes is checked against the buffers its contract names
//! ([`Checked`]), so a read past the payload's padding fails a test.

use ibp_kernel_emu::{Buffer, Grid, HostBytes, Lane, launch};
use ibp_kernels::detail::float_bulk::decode;
use ibp_kernels::params::{
    FLOAT_DIRECT_INDEX, FloatDecodeParams, STATUS_BAD_INDEX, STATUS_CORRUPT,
};
use ibp_kernels::simt::{Async, Lanes, Mem, Shared};

use crate::Rows;
use crate::float_code::{FitOptions, FloatCoded, FloatType, Split, compress, fit};

use super::xorshift;

/// An emulated lane whose every load and store must fall inside the spans
/// the kernel's contract gives it (`FloatDecodeParams`): the payload and
/// its padding, the index, the ids, the output and the status. A read
/// outside them (a damaged row's bytes followed past its end) fails the
/// test instead of reading a neighbour's bytes.
pub(super) struct Checked<'a> {
    pub(super) lane: &'a Lane<'a>,
    /// Readable spans `[start, end)`; the first `writable` are writable too.
    pub(super) spans: &'a [(u64, u64)],
    pub(super) writable: usize,
}

impl Checked<'_> {
    fn check(&self, a: u64, n: u64, write: bool) {
        let spans = if write {
            &self.spans[..self.writable]
        } else {
            self.spans
        };
        assert!(
            spans.iter().any(|&(s, e)| a >= s && a + n <= e),
            "{} of {n} bytes at {a:#x} outside the kernel's buffers",
            if write { "a store" } else { "a load" }
        );
    }
}

impl Lanes for Checked<'_> {
    fn lane(&self) -> u32 {
        self.lane.lane()
    }
    fn shfl_up(&self, x: u32, d: u32) -> u32 {
        self.lane.shfl_up(x, d)
    }
    fn shfl_down(&self, x: u32, d: u32) -> u32 {
        self.lane.shfl_down(x, d)
    }
    fn shfl_idx(&self, x: u32, src: u32) -> u32 {
        self.lane.shfl_idx(x, src)
    }
    fn shfl_xor(&self, x: u32, m: u32) -> u32 {
        self.lane.shfl_xor(x, m)
    }
    fn ballot(&self, pred: bool) -> u32 {
        self.lane.ballot(pred)
    }
}

// Every method checks the address against the spans, then forwards.
impl Mem for Checked<'_> {
    unsafe fn ld_u8(&self, a: u64) -> u32 {
        self.check(a, 1, false);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.ld_u8(a) }
    }
    unsafe fn ld_u32(&self, a: u64) -> u32 {
        self.check(a, 4, false);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.ld_u32(a) }
    }
    unsafe fn ld_u64(&self, a: u64) -> u64 {
        self.check(a, 8, false);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.ld_u64(a) }
    }
    unsafe fn ld_ro_u64(&self, a: u64) -> u64 {
        self.check(a, 8, false);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.ld_ro_u64(a) }
    }
    unsafe fn st_u8(&self, a: u64, v: u32) {
        self.check(a, 1, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.st_u8(a, v) }
    }
    unsafe fn st_u32(&self, a: u64, v: u32) {
        self.check(a, 4, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.st_u32(a, v) }
    }
    unsafe fn st_u64(&self, a: u64, v: u64) {
        self.check(a, 8, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.st_u64(a, v) }
    }
    unsafe fn ld_v4(&self, a: u64) -> [u32; 4] {
        self.check(a, 16, false);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.ld_v4(a) }
    }
    unsafe fn st_u16(&self, a: u64, v: u32) {
        self.check(a, 2, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.st_u16(a, v) }
    }
    unsafe fn or_u64(&self, a: u64, v: u64) {
        self.check(a, 8, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.or_u64(a, v) }
    }
    unsafe fn min_u64(&self, a: u64, v: u64) {
        self.check(a, 8, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.min_u64(a, v) }
    }
    unsafe fn st_v4(&self, a: u64, v: [u32; 4]) {
        self.check(a, 16, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.st_v4(a, v) }
    }
    unsafe fn or_u32(&self, a: u64, v: u32) {
        self.check(a, 4, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.or_u32(a, v) }
    }
    unsafe fn add_u64(&self, a: u64, v: u64) {
        self.check(a, 8, true);
        // SAFETY: the caller's contract (the address checked above).
        unsafe { self.lane.add_u64(a, v) }
    }
}

// Shared memory is the emulator's own, bounded by the block's size; the
// staged decode's stages and barriers forward as they are.
impl Shared for Checked<'_> {
    unsafe fn lds_u8(&self, a: u32) -> u32 {
        // SAFETY: the caller's contract.
        unsafe { self.lane.lds_u8(a) }
    }
    unsafe fn lds_u32(&self, a: u32) -> u32 {
        // SAFETY: the caller's contract.
        unsafe { self.lane.lds_u32(a) }
    }
    unsafe fn sts_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract.
        unsafe { self.lane.sts_u32(a, v) }
    }
    unsafe fn sts_u8(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract.
        unsafe { self.lane.sts_u8(a, v) }
    }
    unsafe fn sts_u16(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract.
        unsafe { self.lane.sts_u16(a, v) }
    }
    unsafe fn sts_v4(&self, a: u32, v: [u32; 4]) {
        // SAFETY: the caller's contract.
        unsafe { self.lane.sts_v4(a, v) }
    }
    unsafe fn lds_v4(&self, a: u32) -> [u32; 4] {
        // SAFETY: the caller's contract.
        unsafe { self.lane.lds_v4(a) }
    }
    unsafe fn ors_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract.
        unsafe { self.lane.ors_u32(a, v) }
    }
    unsafe fn adds_u32(&self, a: u32, v: u32) {
        // SAFETY: the caller's contract.
        unsafe { self.lane.adds_u32(a, v) }
    }
}

impl Async for Checked<'_> {
    unsafe fn cp16(&self, dst: u32, src: u64) {
        self.check(src, 16, false);
        // SAFETY: the caller's contract (the source checked above).
        unsafe { self.lane.cp16(dst, src) }
    }
    fn commit(&self) {
        self.lane.commit()
    }
    fn wait_all(&self) {
        self.lane.wait_all()
    }
    fn wait_all_but_last(&self) {
        self.lane.wait_all_but_last()
    }
    fn wait_all_but_two(&self) {
        self.lane.wait_all_but_two()
    }
    fn sync_warp(&self) {
        self.lane.sync_warp()
    }
}

/// A group's device buffers, as `ibp::gpu::FloatDecoder` uploads them.
struct Image {
    payload: Buffer,
    table: Buffer,
    bases: Buffer,
    rel: Buffer,
    params: FloatDecodeParams,
}

impl Image {
    fn of(coded: &FloatCoded) -> Self {
        let img = coded.device_image().unwrap();
        // The payload's padding (FloatDecodeParams): 16 bytes past its end.
        let mut payload = coded.payload().to_vec();
        payload.resize(payload.len() + 16, 0);
        Image {
            payload: Buffer::from_bytes(&payload),
            table: Buffer::from_bytes(&img.table),
            bases: Buffer::from_bytes(&img.bases),
            rel: Buffer::from_bytes(&img.rel),
            params: img.params,
        }
    }

    /// The rows of `coded` placed by a direct index
    /// (`FLOAT_DIRECT_INDEX`): in slots of `row_bytes + 32` bytes in
    /// reverse order, row `t` at byte `t % 5` of its slot, as a KV store or
    /// a cache places rows it owns.
    fn direct(coded: &FloatCoded) -> Self {
        let base = Self::of(coded);
        let n = coded.rows();
        let slot = coded.row_bytes().next_multiple_of(16) + 32;
        let mut payload = vec![0u8; n * slot + 16];
        let (mut starts, mut lens) = (Vec::new(), Vec::new());
        for t in 0..n {
            let r = coded.row_range(t).unwrap();
            let at = (n - 1 - t) * slot + t % 5;
            payload[at..at + r.len()].copy_from_slice(&coded.payload()[r.clone()]);
            starts.push(at as u64);
            lens.push(r.len() as u32);
        }
        Image {
            payload: Buffer::from_bytes(&payload),
            bases: Buffer::from_slice(&starts),
            rel: Buffer::from_slice(&lens),
            params: FloatDecodeParams {
                payload_len: (n * slot) as u64,
                rel_width: FLOAT_DIRECT_INDEX,
                block_log2: 0,
                ..base.params
            },
            table: base.table,
        }
    }

    /// Decode `count` rows (`ids`, or `first ..` when `ids` is `None`) on a
    /// grid of `blocks` × `warps`, by both kernels (rows read where they
    /// lie, and staged in shared memory first), which must agree byte for
    /// byte; returns the output rows (poisoned first) and the two status
    /// words.
    fn run(
        &self,
        ids: Option<&[u64]>,
        first: u64,
        count: usize,
        grid: (u32, u32),
    ) -> (Vec<u8>, [u64; 2]) {
        let direct = self.run_as::<false>(ids, first, count, grid, false);
        for (staged, tiles) in [(true, false), (false, true), (true, true)] {
            let other = if staged {
                self.run_as::<true>(ids, first, count, grid, tiles)
            } else {
                self.run_as::<false>(ids, first, count, grid, tiles)
            };
            assert!(
                direct == other,
                "the decode (staged {staged}, tiles {tiles}) differs from the direct one (status {:?} against {:?})",
                other.1,
                direct.1
            );
        }
        direct
    }

    /// [`Image::run`] by one kernel: `STAGE`, each coded row staged in the
    /// block's shared memory (a stage of `FloatView::workspace_bytes` a
    /// group, as `ibp::gpu::FloatDecoder` lays them out); `tiles`, the
    /// elements written through the warps' tiles after the stages.
    fn run_as<const STAGE: bool>(
        &self,
        ids: Option<&[u64]>,
        first: u64,
        count: usize,
        grid: (u32, u32),
        tiles: bool,
    ) -> (Vec<u8>, [u64; 2]) {
        let l = self.params.row_bytes as usize;
        let ids_buf = ids.map(Buffer::from_slice);
        let out = Buffer::from_bytes(&vec![0xA5u8; count * l]);
        let status = Buffer::from_slice(&[0u64, u64::MAX]);
        let p = FloatDecodeParams {
            payload: self.payload.addr(),
            bases: self.bases.addr(),
            rel: self.rel.addr(),
            table: self.table.addr(),
            ids: ids_buf.as_ref().map_or(0, Buffer::addr),
            first,
            count: count as u64,
            out: out.addr(),
            out_stride: l as u64,
            status: status.addr(),
            stage_bytes: if STAGE {
                self.params.view().workspace_bytes()
            } else {
                0
            },
            tile_elems: if tiles && (out.addr() | l as u64).is_multiple_of(16) {
                FloatDecodeParams::tile_elems_for(self.params.sub_streams.clamp(1, 32))
            } else {
                0
            },
            ..self.params
        };
        let groups = 32 / p.sub_streams.clamp(1, 32).next_power_of_two();
        let per_warp = groups * p.stage_bytes;
        let book = HostBytes(self.table.addr());
        // What the contract lets the kernel touch: the output and the
        // status (writable), the payload with its padding (the length
        // rounded up to 8, and 8 bytes), the index and the ids.
        let pay = p.payload_len.next_multiple_of(8) + 8;
        let mut spans = vec![
            (out.addr(), out.addr() + out.len() as u64),
            (status.addr(), status.addr() + 16),
            (p.payload, p.payload + pay),
            (p.bases, p.bases + self.bases.len() as u64),
            (p.rel, p.rel + self.rel.len() as u64),
        ];
        if let Some(b) = &ids_buf {
            spans.push((b.addr(), b.addr() + b.len() as u64));
        }
        let tiles = p.tile_warp_bytes();
        let g = Grid::new(grid.0, grid.1).with_shared_bytes((grid.1 * (per_warp + tiles)) as usize);
        launch(g, |lane| {
            let (w, n) = lane.global_warp();
            let h = Checked {
                lane,
                spans: &spans,
                writable: 2,
            };
            let ws = lane.warp_in_block() * per_warp;
            let tile = grid.1 * per_warp + lane.warp_in_block() * tiles;
            // SAFETY: every buffer is sized as FloatDecodeParams states
            // (the payload 128-aligned with 16 bytes of padding, the others
            // in whole words), and outlives the launch; the block's shared
            // memory holds each warp's stages, then each warp's tiles, as
            // the kernel lays them out.
            unsafe { decode::<_, _, STAGE>(&h, &book, &p, w, n, ws, tile) }
        });
        let s = status.as_slice::<u64>();
        (out.bytes().to_vec(), [s[0], s[1]])
    }
}

/// The CPU's rows `ids` of `coded`.
fn cpu_gather(coded: &FloatCoded, ids: &[u64]) -> Vec<u8> {
    let mut out = vec![0u8; ids.len() * coded.row_bytes()];
    coded.gather(ids, &mut out).unwrap();
    out
}

/// Ranges and gathers of `coded` on the emulated GPU equal the CPU's, with
/// a clean status.
fn check_group(coded: &FloatCoded, what: &str) {
    let img = Image::of(coded);
    let n = coded.rows() as u64;
    let mut x = 7 + n;
    // Ranges: all, a middle piece, the last row; on grids of one warp and
    // of several blocks.
    for (first, count, grid) in [
        (0, n, (1, 1)),
        (n / 3, (n / 2).min(67), (3, 2)),
        (n - 1, 1, (1, 1)),
    ] {
        let (out, st) = img.run(None, first, count as usize, grid);
        let want = cpu_gather(coded, &(first..first + count).collect::<Vec<_>>());
        assert_eq!(st, [0, u64::MAX], "{what}: range {first}+{count} status");
        assert!(out == want, "{what}: range {first}+{count} differs");
    }
    // A gather: any order, repeats, both ends.
    let mut ids: Vec<u64> = (0..53).map(|_| xorshift(&mut x) % n).collect();
    ids.extend([0, n - 1, ids[3], 0]);
    let (out, st) = img.run(Some(&ids), 0, ids.len(), (2, 2));
    assert_eq!(st, [0, u64::MAX], "{what}: gather status");
    assert!(out == cpu_gather(coded, &ids), "{what}: gather differs");
}

/// Bell-shaped values of `t`, `rows` rows of `n` elements, and every
/// eleventh row random bits (stored raw).
pub(super) fn synthetic(t: FloatType, rows: usize, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut out = Vec::new();
    for r in 0..rows {
        for _ in 0..n {
            let u = xorshift(&mut s);
            let bits = if r % 11 == 5 {
                u as u32
            } else {
                let x = ((u >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                    * ((u >> 8 & 0xff) as f32 / 64.0);
                match t {
                    FloatType::F32 => x.to_bits(),
                    FloatType::Bf16 => u32::from(half::bf16::from_f32(x).to_bits()),
                    FloatType::F16 => u32::from(half::f16::from_f32(x).to_bits()),
                    FloatType::E4M3 => u32::from(ibp_testdata::fp8::E4M3.from_f32(x * 8.0)),
                    FloatType::E5M2 => u32::from(ibp_testdata::fp8::E5M2.from_f32(x * 8.0)),
                }
            };
            out.extend_from_slice(&bits.to_le_bytes()[..t.bytes()]);
        }
    }
    out
}

#[test]
fn emulated_float_decode_equals_the_cpu_on_synthetic_rows() {
    let cases: &[(FloatType, usize, u8, Option<Split>)] = &[
        (FloatType::E4M3, 37, 4, None),
        (FloatType::E5M2, 64, 2, None),
        (FloatType::F16, 101, 4, None),
        (FloatType::F16, 96, 1, None),
        (FloatType::Bf16, 77, 6, None),
        (
            FloatType::Bf16,
            64,
            8,
            Some(Split::exponent(FloatType::Bf16, true, 3)),
        ),
        (FloatType::F32, 50, 4, Some(Split::new(20, 12))),
        (FloatType::E4M3, 200, 32, None),
    ];
    for (c, &(t, n, s, split)) in cases.iter().enumerate() {
        let data = synthetic(t, 90, n, 3 + c as u64);
        let rows = Rows::new(&data, n * t.bytes()).unwrap();
        let mut opts = FitOptions::default().with_sub_streams(s);
        if let Some(sp) = split {
            opts = opts.with_split(sp);
        }
        let table = fit(t, rows, &opts).unwrap();
        let coded = compress(&table, rows).unwrap();
        let what = format!("{t} n={n} S={s}");
        assert!(coded.coded_rows() > 0, "{what}: nothing coded");
        if n > 8 {
            assert!(coded.coded_rows() < coded.rows(), "{what}: no raw rows");
        }
        check_group(&coded, &what);
    }
}

#[test]
fn emulated_float_decode_takes_a_lone_symbol_of_no_bits() {
    // FP8 E4M3 values of one exponent: the table's one symbol has a code
    // of 0 bits, and a row stores only its residuals.
    let mut x = 11u64;
    let data: Vec<u8> = (0..40 * 24)
        .map(|_| (7 << 3) | (xorshift(&mut x) as u8 & 0x87))
        .collect();
    let rows = Rows::new(&data, 24).unwrap();
    let split = Split::exponent(FloatType::E4M3, false, 0);
    let opts = FitOptions::default().with_split(split);
    let table = fit(FloatType::E4M3, rows, &opts).unwrap();
    assert_eq!(table.symbols(), &[(7, 0)]);
    let coded = compress(&table, rows).unwrap();
    assert_eq!(coded.coded_rows(), coded.rows());
    check_group(&coded, "one symbol");
}

/// MiniLM's word embeddings as f32 rows (384 values), the first `rows`.
pub(super) fn minilm(rows: usize) -> Option<(Vec<u8>, usize)> {
    let Some(path) = ibp_testdata::data_file("model.safetensors") else {
        eprintln!("skipped MiniLM rows: model.safetensors not found ($IBP_DATA_DIR)");
        return None;
    };
    let f = crate::io::InputFile::open(&path).unwrap();
    let opts =
        crate::io::ParseOptions::default().with_select(["embeddings.word_embeddings.weight"]);
    let doc = crate::io::parse(f.bytes(), crate::io::SourceFormat::Safetensors, &opts).unwrap();
    let g = &doc.groups[0];
    let l = g.row_shape(None).unwrap().row_bytes as usize;
    Some((g.data[..rows * l].to_vec(), l))
}

#[test]
fn emulated_float_decode_equals_the_cpu_on_minilm_rows() {
    let Some((f32s, l)) = minilm(1500) else {
        return;
    };
    let bf16: Vec<u8> = f32s
        .as_chunks::<4>()
        .0
        .iter()
        .flat_map(|b| half::bf16::from_f32(f32::from_le_bytes(*b)).to_le_bytes())
        .collect();
    for (t, data, row) in [(FloatType::F32, &f32s, l), (FloatType::Bf16, &bf16, l / 2)] {
        let rows = Rows::new(data, row).unwrap();
        let table = fit(t, rows, &FitOptions::default()).unwrap();
        let coded = compress(&table, rows).unwrap();
        assert!(
            coded.coded_rows() > coded.rows() / 2,
            "MiniLM {t}: few coded"
        );
        check_group(&coded, &format!("MiniLM {t}"));
    }
}

#[test]
fn emulated_float_decode_reports_corrupt_rows_and_bad_ids() {
    let (t, n) = (FloatType::Bf16, 48);
    let data = synthetic(t, 40, n, 77);
    let rows = Rows::new(&data, n * 2).unwrap();
    let table = fit(t, rows, &FitOptions::default()).unwrap();
    let coded = compress(&table, rows).unwrap();
    let bytes = coded.to_bytes();
    let at = bytes.len() - coded.payload().len();
    let all: Vec<u64> = (0..coded.rows() as u64).collect();
    let mut x = 5u64;
    let mut reported = 0;
    // Damaged payloads: every output row is the CPU's, or zero when the CPU
    // refuses the row, and the status names the first refused row.
    for trial in 0..60 {
        let mut b = bytes.clone();
        for _ in 0..1 + trial % 3 {
            let i = at + (xorshift(&mut x) as usize % coded.payload().len());
            b[i] ^= 1 << (xorshift(&mut x) % 8);
        }
        let bad = FloatCoded::from_bytes(&b).unwrap();
        let (out, st) = Image::of(&bad).run(None, 0, all.len(), (1, 2));
        let l = coded.row_bytes();
        let mut first_bad = u64::MAX;
        for (i, &id) in all.iter().enumerate() {
            let mut want = vec![0u8; l];
            let got = &out[i * l..(i + 1) * l];
            match bad.gather(&[id], &mut want) {
                Ok(()) => assert_eq!(got, &want[..], "trial {trial}: row {i}"),
                Err(_) => {
                    first_bad = first_bad.min(i as u64);
                    assert!(
                        got.iter().all(|&v| v == 0),
                        "trial {trial}: row {i} not zeroed"
                    );
                }
            }
        }
        let want_st = if first_bad == u64::MAX {
            [0, u64::MAX]
        } else {
            reported += 1;
            [STATUS_CORRUPT, first_bad]
        };
        assert_eq!(st, want_st, "trial {trial}");
    }
    assert!(
        reported > 10,
        "only {reported} damaged groups had a refused row"
    );
    // Ids past the end, in a gather: reported and zeroed, the rest decode.
    let img = Image::of(&coded);
    let ids = [3, coded.rows() as u64, 0, u64::MAX];
    let (out, st) = img.run(Some(&ids), 0, ids.len(), (1, 1));
    assert_eq!(st, [STATUS_BAD_INDEX, 1]);
    let l = coded.row_bytes();
    assert_eq!(&out[..l], &cpu_gather(&coded, &[3])[..]);
    assert!(out[l..2 * l].iter().all(|&v| v == 0));
    assert_eq!(&out[2 * l..3 * l], &cpu_gather(&coded, &[0])[..]);
    // A damaged index: row 6's start moved past the payload's end, so rows
    // 5 and 6 lie outside it; the others still decode.
    let mut img = Image::of(&coded);
    let w = img.params.rel_width as usize;
    assert_eq!(w, 2);
    img.rel.bytes_mut()[6 * w..7 * w].copy_from_slice(&[0xff, 0xff]);
    let (out, st) = img.run(None, 0, coded.rows(), (1, 1));
    assert_eq!(st, [STATUS_CORRUPT, 5]);
    assert!(out[5 * l..7 * l].iter().all(|&v| v == 0));
    assert_eq!(&out[..5 * l], &cpu_gather(&coded, &all[..5])[..]);
    assert_eq!(&out[7 * l..], &cpu_gather(&coded, &all[7..])[..]);
}

#[test]
fn emulated_float_decode_reads_rows_by_a_direct_index() {
    // Rows placed where their owner put them (slots, reverse order,
    // unaligned starts) decode as the CPU's, by range and by gather.
    for (t, n, s) in [(FloatType::Bf16, 64, 4), (FloatType::F32, 33, 2)] {
        let data = synthetic(t, 45, n, 19 + n as u64);
        let rows = Rows::new(&data, n * t.bytes()).unwrap();
        let table = fit(t, rows, &FitOptions::default().with_sub_streams(s)).unwrap();
        let coded = compress(&table, rows).unwrap();
        let img = Image::direct(&coded);
        let all: Vec<u64> = (0..coded.rows() as u64).collect();
        let (out, st) = img.run(None, 0, all.len(), (2, 2));
        assert_eq!(st, [0, u64::MAX], "{t}: direct range status");
        assert!(out == cpu_gather(&coded, &all), "{t}: direct range differs");
        let ids = [7, 0, 44, 7, 20];
        let (out, st) = img.run(Some(&ids), 0, ids.len(), (1, 1));
        assert_eq!(st, [0, u64::MAX], "{t}: direct gather status");
        assert!(
            out == cpu_gather(&coded, &ids),
            "{t}: direct gather differs"
        );
    }
    // A length past the row, and a row past the span: refused, zeroed.
    let data = synthetic(FloatType::Bf16, 12, 40, 5);
    let rows = Rows::new(&data, 80).unwrap();
    let coded = compress(
        &fit(FloatType::Bf16, rows, &FitOptions::default()).unwrap(),
        rows,
    )
    .unwrap();
    let mut img = Image::direct(&coded);
    img.rel.bytes_mut()[4 * 3..4 * 4].copy_from_slice(&81u32.to_le_bytes());
    let end = img.params.payload_len - 10;
    img.bases.bytes_mut()[8 * 9..8 * 10].copy_from_slice(&end.to_le_bytes());
    let all: Vec<u64> = (0..12).collect();
    let (out, st) = img.run(None, 0, 12, (1, 1));
    assert_eq!(st, [STATUS_CORRUPT, 3]);
    for i in 0..12 {
        let got = &out[i * 80..(i + 1) * 80];
        if i == 3 || (i == 9 && coded.row_range(9).unwrap().len() > 10) {
            assert!(got.iter().all(|&v| v == 0), "row {i} not zeroed");
        } else if i != 9 {
            assert_eq!(got, &cpu_gather(&coded, &all[i..=i])[..], "row {i}");
        }
    }
}
