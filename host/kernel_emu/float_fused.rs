//! The fused device API for float-coded rows
//! (`ibp_kernels::device::float::decode_float_row`) on the emulated warp,
//! against the CPU decoder (`crate::float_code`) bit for bit: every dtype,
//! `S` = 16 and 32 (the fused sizes) and others, raw rows, the decode table
//! in shared memory, the lane-to-element map, and hostile input (damaged
//! rows, a damaged index, ids past the end).

use ibp_kernel_emu::{Buffer, Grid, Lane, launch};
use ibp_kernels::device::RowError;
use ibp_kernels::device::float::{FloatSink, FloatView, decode_float_row};
use ibp_kernels::simt::{Block, Book, Lanes, Mem, Shared};

use crate::Rows;
use crate::float_code::{FitOptions, FloatCoded, FloatType, compress, fit};

use super::float::synthetic;
use super::xorshift;

/// The decode table in the block's shared memory, at `.1`.
struct SmemBook<'a, 'b>(&'a Lane<'b>, u32);

// SAFETY (every method): forwarded to the caller, as `Book` documents.
impl Book for SmemBook<'_, '_> {
    unsafe fn ld_u8(&self, off: u32) -> u32 {
        // SAFETY: the caller's (an offset inside the table).
        unsafe { self.0.lds_u8(self.1 + off) }
    }
    unsafe fn ld_u32(&self, off: u32) -> u32 {
        // SAFETY: the caller's (an offset inside the table).
        unsafe { self.0.lds_u32(self.1 + off) }
    }
    unsafe fn ld_v2(&self, off: u32) -> [u32; 2] {
        // SAFETY: the caller's (an offset inside the table).
        unsafe {
            [
                self.0.lds_u32(self.1 + off),
                self.0.lds_u32(self.1 + off + 4),
            ]
        }
    }
    unsafe fn ld_v4(&self, off: u32) -> [u32; 4] {
        // SAFETY: the caller's (an offset inside the table).
        unsafe { self.0.lds_v4(self.1 + off) }
    }
}

/// A sink that stores element `i` as a u32 at `out + 4i` and checks the
/// lane-to-element map: lane `k` gets `k, k + S, …` in order.
struct Collect<'a, 'b> {
    lane: &'a Lane<'b>,
    out: u64,
    next: u32,
    s: u32,
}

impl FloatSink for Collect<'_, '_> {
    fn put(&mut self, i: u32, v: u32) {
        assert!(
            self.lane.lane() < self.s,
            "lane {} past S",
            self.lane.lane()
        );
        assert_eq!(
            i,
            self.next,
            "lane {}: elements out of order",
            self.lane.lane()
        );
        self.next += self.s;
        // SAFETY: the output row holds n u32 and i < n (the decoder's).
        unsafe { self.lane.st_u32(self.out + 4 * u64::from(i), v) };
    }
}

/// A group's device buffers, as `ibp::gpu::FloatDecoder` uploads them, and
/// its view.
struct Image {
    _payload: Buffer,
    table: Buffer,
    bases: Buffer,
    rel: Buffer,
    view: FloatView,
}

impl Image {
    fn of(coded: &FloatCoded) -> Self {
        let img = coded.device_image().unwrap();
        // The payload's padding: 16 bytes past its end (a Buffer is
        // 128-aligned, in whole lines).
        let mut bytes = coded.payload().to_vec();
        bytes.resize(bytes.len() + 16, 0);
        let payload = Buffer::from_bytes(&bytes);
        let table = Buffer::from_bytes(&img.table);
        let bases = Buffer::from_bytes(&img.bases);
        let rel = Buffer::from_bytes(&img.rel);
        let mut p = img.params;
        p.payload = payload.addr();
        p.table = table.addr();
        p.bases = bases.addr();
        p.rel = rel.addr();
        p.table_smem_bytes = img.table.len() as u32;
        Image {
            _payload: payload,
            view: p.view(),
            table,
            bases,
            rel,
        }
    }

    /// Rows `ids` decoded by `decode_float_row`, a warp a row (grid-stride)
    /// on `blocks` × `warps`, the table copied to shared memory once per
    /// block: each row's elements as u32 (poisoned first) and its status (0
    /// OK, 1 bad index, 2 corrupt).
    fn run(&self, ids: &[u64], blocks: u32, warps: u32) -> (Vec<u32>, Vec<u32>) {
        let v = self.view;
        let n = (v.row_bytes / v.elem_bytes) as usize;
        let out = Buffer::from_slice(&vec![0xA5A5_A5A5u32; ids.len() * n]);
        let status = Buffer::from_slice(&vec![9u32; ids.len()]);
        let tb = v.table_bytes.next_multiple_of(16);
        let ws_bytes = v.workspace_bytes();
        let grid = Grid::new(blocks, warps).with_shared_bytes((tb + warps * ws_bytes) as usize);
        let _ = (&self.table, &self.bases, &self.rel);
        launch(grid, |lane| {
            // The table into shared memory, once per block.
            let mut i = lane.thread_idx();
            while i < v.table_bytes / 4 {
                // SAFETY: i·4 < table_bytes: inside the table and the
                // block's shared memory.
                unsafe { lane.sts_u32(4 * i, lane.ld_u32(v.table + 4 * u64::from(i))) };
                i += lane.block_dim();
            }
            lane.sync_threads();
            let book = SmemBook(lane, 0);
            let ws = tb + lane.warp_in_block() * ws_bytes;
            let (first, step) = lane.global_warp();
            let mut r = first;
            while r < ids.len() as u64 {
                let mut sink = Collect {
                    lane,
                    out: out.addr() + 4 * r * n as u64,
                    next: lane.lane(),
                    s: v.sub_streams,
                };
                // SAFETY: the view's buffers live (self); the table is in
                // shared memory at 0; this warp's workspace follows it.
                let res =
                    unsafe { decode_float_row(lane, &v, &book, ws, ids[r as usize], &mut sink) };
                let code = match res {
                    Ok(()) => {
                        if lane.lane() < v.sub_streams {
                            assert!(
                                sink.next >= n as u32,
                                "lane {}: elements missing",
                                lane.lane()
                            );
                        }
                        0
                    }
                    Err(RowError::BadIndex) => 1,
                    Err(RowError::Corrupt) => 2,
                };
                if lane.lane() == 0 {
                    // SAFETY: one u32 per row.
                    unsafe { lane.st_u32(status.addr() + 4 * r, code) };
                }
                r += step;
            }
        });
        (
            out.as_slice::<u32>().to_vec(),
            status.as_slice::<u32>().to_vec(),
        )
    }
}

/// The CPU's rows `ids` of `coded`, as u32 elements.
fn cpu_rows(coded: &FloatCoded, ids: &[u64], e: usize) -> Vec<u32> {
    let mut out = vec![0u8; ids.len() * coded.row_bytes()];
    coded.gather(ids, &mut out).unwrap();
    out.chunks(e)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..e].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect()
}

#[test]
fn fused_float_rows_equal_the_cpu_on_every_dtype() {
    let cases: &[(FloatType, usize, u8)] = &[
        (FloatType::Bf16, 384, 32),
        (FloatType::Bf16, 384, 16),
        (FloatType::Bf16, 77, 16),
        (FloatType::F16, 101, 32),
        (FloatType::F16, 96, 16),
        (FloatType::F32, 50, 16),
        (FloatType::F32, 200, 32),
        (FloatType::E4M3, 200, 32),
        (FloatType::E5M2, 64, 16),
        (FloatType::E4M3, 37, 4),
        (FloatType::Bf16, 48, 1),
    ];
    for (c, &(t, n, s)) in cases.iter().enumerate() {
        let data = synthetic(t, 60, n, 41 + c as u64);
        let rows = Rows::new(&data, n * t.bytes()).unwrap();
        let table = fit(t, rows, &FitOptions::default().with_sub_streams(s)).unwrap();
        let coded = compress(&table, rows).unwrap();
        let what = format!("{t} n={n} S={s}");
        assert!(coded.coded_rows() > 0, "{what}: nothing coded");
        if s > 1 {
            assert!(coded.coded_rows() < coded.rows(), "{what}: no raw rows");
        }
        let img = Image::of(&coded);
        let mut x = 3 + c as u64;
        let mut ids: Vec<u64> = (0..coded.rows() as u64).collect();
        ids.extend((0..20).map(|_| xorshift(&mut x) % coded.rows() as u64));
        let (got, st) = img.run(&ids, 2, 3);
        assert!(st.iter().all(|&v| v == 0), "{what}: status {st:?}");
        assert!(
            got == cpu_rows(&coded, &ids, t.bytes()),
            "{what}: rows differ"
        );
    }
}

#[test]
fn fused_float_rows_report_corrupt_rows_and_bad_ids() {
    let (t, n) = (FloatType::Bf16, 64);
    let data = synthetic(t, 40, n, 78);
    let rows = Rows::new(&data, n * 2).unwrap();
    let table = fit(t, rows, &FitOptions::default().with_sub_streams(32)).unwrap();
    let coded = compress(&table, rows).unwrap();
    let bytes = coded.to_bytes();
    let at = bytes.len() - coded.payload().len();
    let all: Vec<u64> = (0..coded.rows() as u64).collect();
    let mut x = 9u64;
    let mut refused = 0;
    // Damaged payloads: a row decodes to the CPU's exactly when the CPU
    // takes it, and is reported corrupt otherwise.
    for trial in 0..40 {
        let mut b = bytes.clone();
        for _ in 0..1 + trial % 3 {
            let i = at + (xorshift(&mut x) as usize % coded.payload().len());
            b[i] ^= 1 << (xorshift(&mut x) % 8);
        }
        let bad = FloatCoded::from_bytes(&b).unwrap();
        let (got, st) = Image::of(&bad).run(&all, 1, 2);
        for (i, &id) in all.iter().enumerate() {
            let mut want = vec![0u8; coded.row_bytes()];
            match bad.gather(&[id], &mut want) {
                Ok(()) => {
                    assert_eq!(st[i], 0, "trial {trial}: row {i}");
                    let w: Vec<u32> = want
                        .chunks(2)
                        .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
                        .collect();
                    assert_eq!(&got[i * n..(i + 1) * n], &w[..], "trial {trial}: row {i}");
                }
                Err(_) => {
                    refused += 1;
                    assert_eq!(st[i], 2, "trial {trial}: row {i} not reported");
                }
            }
        }
    }
    assert!(refused > 10, "only {refused} refused rows");
    // Ids past the end: reported, nothing decoded for them.
    let img = Image::of(&coded);
    let ids = [3, coded.rows() as u64, 0, u64::MAX];
    let (got, st) = img.run(&ids, 1, 1);
    assert_eq!(st, [0, 1, 0, 1]);
    assert_eq!(&got[..n], &cpu_rows(&coded, &[3], 2)[..]);
    assert!(got[n..2 * n].iter().all(|&v| v == 0xA5A5_A5A5));
    // A damaged index: row 6's start past the payload's end, so rows 5 and
    // 6 are corrupt; the others decode.
    let mut img = Image::of(&coded);
    let w = img.view.rel_width as usize;
    let mut rel = img.rel.bytes().to_vec();
    rel[6 * w..7 * w].copy_from_slice(&[0xff, 0xff]);
    img.rel = Buffer::from_bytes(&rel);
    img.view.rel = img.rel.addr();
    let (got, st) = img.run(&all, 1, 1);
    let want_st: Vec<u32> = (0..all.len())
        .map(|i| u32::from(i == 5 || i == 6) * 2)
        .collect();
    assert_eq!(st, want_st);
    assert_eq!(&got[..5 * n], &cpu_rows(&coded, &all[..5], 2)[..]);
    assert_eq!(&got[7 * n..], &cpu_rows(&coded, &all[7..], 2)[..]);
}
