//! The device API (`ibp_kernels::device`) inside user kernels on the GPU:
//! the fused embedding-bag kernels of `examples/fused-kernels` (their
//! shipped PTX, built by `scripts/ptx.sh` with `ibp-kernel-builder`, as a
//! user's build.rs would), and the kernels of docs/DEVICE-API.md's crate,
//! against a CPU sum in the kernels' order, bit for bit; rows in pinned
//! host memory and in device memory; corrupt rows reaching the host as a
//! status; row ids past the dataset reported, not read. Prints `skipped:
//! no CUDA device` without a GPU (a failure with `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;
#[path = "../examples/fused_host/mod.rs"]
mod fused_host;

use common::{Rng, gpu_or_skip};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use fused_host::Kernels;
use fused_kernels::{BAD_INDEX, BagParams, CORRUPT, OK};
use ibp::Rows;
use ibp::codebook::Codebook;
use ibp::gpu::{GpuDataset, Residency, copy_to_host_blocking, cust};
use ibp::layout::{LayoutOptions, Packed, PackedRef, compress_packed};

/// `n` rows of `dim` floats of one exponent range (`[1, 2)` times a
/// per-column sign): compressible, as embedding rows are. bf16 rows keep
/// the high halves.
fn rows(rng: &mut Rng, n: usize, dim: usize, bf16: bool) -> Vec<u8> {
    let signs: Vec<bool> = (0..dim).map(|_| rng.next() & 1 == 1).collect();
    let mut out = Vec::new();
    for _ in 0..n {
        for s in &signs {
            let v = f32::from_bits(0x3f80_0000 | (rng.next() as u32 & 0x007f_ffff));
            let v = if *s { -v } else { v };
            if bf16 {
                out.extend(((v.to_bits() >> 16) as u16).to_le_bytes());
            } else {
                out.extend(v.to_le_bytes());
            }
        }
    }
    out
}

/// The CPU's sums in the kernels' order (ids past the rows skipped, as the
/// kernels skip them).
fn cpu_sums(data: &[u8], l: usize, bf16: bool, ids: &[u32], starts: &[u32]) -> Vec<u32> {
    let es = if bf16 { 2 } else { 4 };
    let dim = l / es;
    let n = data.len() / l;
    let mut out = Vec::new();
    for w in starts.windows(2) {
        let mut acc = vec![0f32; dim];
        for &t in &ids[w[0] as usize..w[1] as usize] {
            if t as usize >= n {
                continue;
            }
            let row = &data[t as usize * l..];
            for (e, a) in acc.iter_mut().enumerate() {
                *a += if bf16 {
                    f32::from_bits((u16::from_le_bytes([row[2 * e], row[2 * e + 1]]) as u32) << 16)
                } else {
                    f32::from_le_bytes(row[4 * e..4 * e + 4].try_into().unwrap())
                };
            }
        }
        out.extend(acc.iter().map(|a| a.to_bits()));
    }
    out
}

/// Run the fused bag kernel for `ds` over `(ids, starts)`: the sums' bits
/// and the status of each bag.
fn fused_bags(
    k: &Kernels,
    ds: &GpuDataset,
    bf16: bool,
    ids: &[u32],
    starts: &[u32],
) -> (Vec<u32>, Vec<u32>) {
    let view = ds.device_view().unwrap();
    let l = view.row_bytes as u32;
    let dim = l / if bf16 { 2 } else { 4 };
    let bags = starts.len() - 1;
    let (name, acc) = match (bf16, l) {
        (true, ..=1024) => ("bag_fused_bf16_s2", 0),
        (false, ..=1536) => ("bag_fused_f32_s3", 0),
        (false, _) => ("bag_fused_f32_smem", (4 * dim).next_multiple_of(16)),
        _ => unreachable!("no such test"),
    };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let d_ids = DeviceBuffer::from_slice(ids).unwrap();
    let d_starts = DeviceBuffer::from_slice(starts).unwrap();
    let out = DeviceBuffer::<f32>::zeroed(bags * dim as usize).unwrap();
    let status = DeviceBuffer::<u32>::zeroed(bags).unwrap();
    let ws = view.workspace_bytes() + acc;
    let p = BagParams {
        view,
        plain: 0,
        ids: d_ids.as_device_ptr().as_raw(),
        bag_starts: d_starts.as_device_ptr().as_raw(),
        out: out.as_device_ptr().as_raw(),
        status: status.as_device_ptr().as_raw(),
        bags: bags as u32,
        dim,
        book_smem: view.book_bytes,
        ws_bytes: ws,
    };
    // The example's block: the book and a workspace a warp.
    let block = k
        .block_for(name, view.book_bytes.next_multiple_of(16), ws)
        .unwrap();
    // SAFETY: BagParams for a bag kernel; every buffer is live and sized as
    // BagParams states; the book and a workspace per warp of shared memory.
    unsafe { k.launch_block(name, block, &stream, p) }.unwrap();
    stream.synchronize().unwrap();
    let sums = copy_to_host_blocking(&out)
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    (sums, copy_to_host_blocking(&status).unwrap())
}

/// The rows of `data` (`l` bytes each) fitted and compressed to the packed
/// layout.
fn fit_and_pack(data: &[u8], l: usize) -> (Codebook, Packed) {
    let rows = Rows::new(data, l).unwrap();
    let cb = ibp::fit::fit(rows, &Default::default()).unwrap().codebook;
    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    (cb, packed)
}

#[test]
fn fused_bag_sums_equal_the_cpu_sums_bit_for_bit() {
    let Some(gpu) = gpu_or_skip("fused_bag_sums_equal_the_cpu_sums_bit_for_bit") else {
        return;
    };
    let k = Kernels::load(&gpu).unwrap();
    let mut rng = Rng(77);
    // Registers (bf16 768 B, f32 1536 B and a ragged 1100 B), shared memory
    // (Cora's 5732 B).
    for (dim, bf16) in [(384, true), (384, false), (275, false), (1433, false)] {
        let l = dim * if bf16 { 2 } else { 4 };
        let n = 3000;
        let data = rows(&mut rng, n, dim, bf16);
        let (cb, packed) = fit_and_pack(&data, l);
        let (ids, starts) = fused_host::bags(n, 700, 5 + l as u64);
        let want = cpu_sums(&data, l, bf16, &ids, &starts);
        for residency in [Residency::Pinned, Residency::Device] {
            let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), residency).unwrap();
            let (got, status) = fused_bags(&k, &ds, bf16, &ids, &starts);
            assert!(
                status.iter().all(|&s| s == OK),
                "L={l} {residency:?}: {status:?}"
            );
            let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(
                bad, 0,
                "L={l} bf16={bf16} {residency:?}: {bad} elements differ"
            );
        }
    }
}

#[test]
fn corrupt_rows_reach_the_host_as_a_status() {
    let Some(gpu) = gpu_or_skip("corrupt_rows_reach_the_host_as_a_status") else {
        return;
    };
    let k = Kernels::load(&gpu).unwrap();
    let mut rng = Rng(4243);
    let (dim, l, n) = (384, 1536, 256);
    let data = rows(&mut rng, n, dim, false);
    let (cb, packed) = fit_and_pack(&data, l);
    // One bag per row: bag t is row t alone.
    let ids: Vec<u32> = (0..n as u32).collect();
    let starts: Vec<u32> = (0..=n as u32).collect();
    let want = cpu_sums(&data, l, false, &ids, &starts);
    let mut reported = 0;
    for trial in 0..40 {
        // Flip one of the first 256 bits of an encoded row (its
        // participation bits, from which its length follows).
        let victim = rng.next() as usize % n;
        if packed.flags[victim / 8] >> (victim % 8) & 1 == 0 {
            continue;
        }
        let mut payload = packed.payload.clone();
        let bit = rng.next() as usize % 256;
        payload[packed.offsets[victim] as usize + bit / 8] ^= 1 << (bit % 8);
        let v = PackedRef::new(
            l,
            n,
            &packed.flags,
            std::borrow::Cow::Borrowed(&packed.offsets),
            &payload,
        )
        .unwrap();
        let ds = GpuDataset::upload_packed(&gpu, &cb, &v, Residency::Pinned).unwrap();
        let (got, status) = fused_bags(&k, &ds, false, &ids, &starts);
        for t in 0..n {
            let same = got[t * dim..(t + 1) * dim] == want[t * dim..(t + 1) * dim];
            if t != victim {
                assert_eq!(status[t], OK, "trial {trial}: row {t}");
                assert!(same, "trial {trial}: row {t} changed");
            } else if status[t] == CORRUPT {
                reported += 1;
            } else {
                // The flip changed only a raw chunk's value: reported OK.
                assert_eq!(status[t], OK, "trial {trial}");
            }
        }
    }
    assert!(
        reported > 5,
        "only {reported} damaged rows were reported corrupt"
    );
}

#[test]
fn row_ids_past_the_dataset_are_reported_not_read() {
    let Some(gpu) = gpu_or_skip("row_ids_past_the_dataset_are_reported_not_read") else {
        return;
    };
    let k = Kernels::load(&gpu).unwrap();
    let mut rng = Rng(99);
    let (dim, l, n) = (384, 768, 100);
    let data = rows(&mut rng, n, dim, true);
    let (cb, packed) = fit_and_pack(&data, l);
    let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
    // Bag 0: good ids; bag 1: one id just past the end among good ones;
    // bag 2: a huge id alone.
    let ids = vec![1, 2, 3, 4, 5, n as u32, 6, u32::MAX];
    let starts = vec![0, 2, 7, 8];
    let (got, status) = fused_bags(&k, &ds, true, &ids, &starts);
    assert_eq!(status, vec![OK, BAD_INDEX, BAD_INDEX]);
    // The good rows of every bag are still summed (the bad one skipped).
    assert_eq!(got, cpu_sums(&data, l, true, &ids, &starts));
}

/// The PTX of the device-API tutorial's kernel crate, which
/// `kernel-builder`'s test `the_device_api_tutorials_crate_builds_to_ptx`
/// writes from docs/DEVICE-API.md's listings in a temporary folder, outside
/// this repository, and builds with the builder
/// (`IBP_USER_PTX_OUT` copies it out; `scripts/stage-device.sh` puts it in
/// `.device/data` for the GPU machine, which has no Rust).
fn user_crate_ptx() -> Option<String> {
    let path = std::env::var_os("IBP_USER_PTX")
        .map(std::path::PathBuf::from)
        .or_else(|| common::data_file("user-kernels.ptx"))?;
    std::fs::read_to_string(path).ok()
}

#[test]
fn a_kernel_crate_built_outside_the_repository_runs_on_the_gpu() {
    use std::ffi::c_void;

    use cust::module::Module;

    let name = "a_kernel_crate_built_outside_the_repository_runs_on_the_gpu";
    let Some(gpu) = gpu_or_skip(name) else {
        return;
    };
    let Some(ptx) = user_crate_ptx() else {
        assert!(
            !common::gpu_required(),
            "{name}: no user-kernels.ptx in IBP_DATA_DIR (scripts/stage-device.sh builds it)"
        );
        common::notice(&format!(
            "{name}: skipped: no user-kernels.ptx (set IBP_USER_PTX_OUT and run kernel-builder's tests)"
        ));
        return;
    };
    let module = Module::from_ptx(&ptx, &[]).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let launch = |kernel: &str, grid: u32, block: u32, shared: u32, args: &mut [*mut c_void]| {
        let f = module.get_function(kernel).unwrap();
        // SAFETY: each call passes its kernel's parameters, in order, with
        // buffers of the sizes its `# Safety` asks.
        unsafe { stream.launch(&f, grid, block, shared, args) }.unwrap();
        stream.synchronize().unwrap();
    };

    // Its own use of ibp's bit arithmetic.
    let mask = DeviceBuffer::<u64>::zeroed(1).unwrap();
    let (mut a, mut n) = (mask.as_device_ptr().as_raw(), 13u32);
    launch(
        "user_low_mask",
        1,
        1,
        0,
        &mut [
            &mut a as *mut u64 as *mut c_void,
            &mut n as *mut u32 as *mut c_void,
        ],
    );
    assert_eq!(copy_to_host_blocking(&mask).unwrap(), [0x1fff]);

    // The prelude's `#[kernel]`, thread indices, barrier and shared array.
    let words: Vec<u32> = (0..32).map(|i| 1000 + i).collect();
    let data = DeviceBuffer::from_slice(&words).unwrap();
    let mut a = data.as_device_ptr().as_raw();
    launch(
        "reverse",
        1,
        32,
        0,
        &mut [&mut a as *mut u64 as *mut c_void],
    );
    let rev: Vec<u32> = words.iter().rev().copied().collect();
    assert_eq!(copy_to_host_blocking(&data).unwrap(), rev);

    // The device API: one warp a row decodes it into a sink of its own
    // (the sum of the row's bytes), rows in pinned host and device memory.
    let mut rng = Rng(2026);
    let (dim, l, n) = (384, 1536, 500);
    let data = rows(&mut rng, n, dim, false);
    let (cb, packed) = fit_and_pack(&data, l);
    assert!(
        packed.flags.iter().any(|&f| f != 0),
        "no row was stored encoded"
    );
    let want: Vec<u32> = data
        .chunks(l)
        .map(|r| r.iter().map(|&b| b as u32).sum())
        .collect();
    for residency in [Residency::Pinned, Residency::Device] {
        let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), residency).unwrap();
        let mut view = ds.device_view().unwrap();
        let out = DeviceBuffer::<u32>::zeroed(n).unwrap();
        let mut o = out.as_device_ptr().as_raw();
        launch(
            "row_sums",
            n.div_ceil(8) as u32,
            256,
            8 * view.workspace_bytes(),
            &mut [
                &mut view as *mut _ as *mut c_void,
                &mut o as *mut u64 as *mut c_void,
            ],
        );
        assert_eq!(
            copy_to_host_blocking(&out).unwrap(),
            want,
            "{residency:?}: the user kernel's row sums differ from the CPU's"
        );
    }
}

/// The float-coded rows' device API (`decode_float_row`) in the examples'
/// kernels: `float_rows_u16` decodes every row of a bf16 group, which must
/// equal the original bytes, and `float_gemv_bf16` multiplies them with
/// `x`, which must equal the CPU's GEMV in the kernel's order bit for bit;
/// for `S` = 16 and 32, the payload in pinned host memory and in device
/// memory, with raw rows among the coded ones.
#[test]
fn fused_float_rows_and_gemv_equal_the_cpu_bit_for_bit() {
    use fused_kernels::FloatGemvParams;
    use ibp::float_code::{FitOptions, FloatType};
    use ibp::gpu::{FloatDecoder, PinnedBuffer};

    let Some(gpu) = gpu_or_skip("fused_float_rows_and_gemv_equal_the_cpu_bit_for_bit") else {
        return;
    };
    let k = Kernels::load(&gpu).unwrap();
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut rng = Rng(9191);
    let (cols, n) = (384, 2000);
    let l = 2 * cols;
    // Bell-shaped bf16 weights, every 37th row random bits (stored raw).
    let mut data = Vec::with_capacity(n * l);
    for r in 0..n {
        for _ in 0..cols {
            let u = rng.next();
            let h = if r % 37 == 3 {
                u as u16
            } else {
                let v = ((u >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                    * ((u >> 8 & 0xff) as f32 / 512.0);
                (v.to_bits() >> 16) as u16
            };
            data.extend(h.to_le_bytes());
        }
    }
    let x: Vec<f32> = (0..cols)
        .map(|i| f32::from_bits((0x3f80 | (rng.next() as u32 & 0x7f) | (i as u32 & 1) << 15) << 16))
        .collect();
    for s in [32u8, 16] {
        let rows = Rows::new(&data, l).unwrap();
        let opts = FitOptions::default().with_sub_streams(s);
        let table = ibp::float_code::fit(FloatType::Bf16, rows, &opts).unwrap();
        let coded = ibp::float_code::compress(&table, rows).unwrap();
        assert!(coded.coded_rows() > 0 && coded.coded_rows() < n, "S={s}");
        let want = fused_host::kernel_order_gemv(&data, cols, s as usize, &x);
        let staged = PinnedBuffer::from_slice(&FloatDecoder::staging_image(&coded)).unwrap();
        let span = staged.span(0..staged.len()).unwrap();
        let pinned = FloatDecoder::new_staged(&gpu, &coded).unwrap();
        let device = FloatDecoder::new(&gpu, &coded).unwrap();
        for (what, view) in [
            ("pinned", pinned.device_view_staged(&span).unwrap()),
            ("device", device.device_view().unwrap()),
        ] {
            let d_x = DeviceBuffer::from_slice(&x).unwrap();
            let y = DeviceBuffer::<f32>::zeroed(n).unwrap();
            let status = DeviceBuffer::<u32>::zeroed(1).unwrap();
            let out = DeviceBuffer::<u8>::zeroed(n * l).unwrap();
            let p = FloatGemvParams {
                view,
                x: d_x.as_device_ptr().as_raw(),
                y: y.as_device_ptr().as_raw(),
                status: status.as_device_ptr().as_raw(),
                out: out.as_device_ptr().as_raw(),
                cols: cols as u32,
                ws_bytes: view.workspace_bytes(),
            };
            let fixed =
                view.table_bytes.next_multiple_of(16) + (4 * cols as u32).next_multiple_of(16);
            for name in ["float_rows_u16", "float_gemv_bf16"] {
                let block = k.block_for(name, fixed, p.ws_bytes).unwrap();
                // SAFETY: FloatGemvParams for both kernels; the view's
                // decoders and staging area, x (cols), y (n), out (n rows)
                // live; the table, x and a workspace a warp of shared memory.
                unsafe { k.launch_block(name, block, &stream, p) }.unwrap();
            }
            stream.synchronize().unwrap();
            assert_eq!(
                copy_to_host_blocking(&status).unwrap(),
                [OK],
                "S={s} {what}"
            );
            assert!(
                copy_to_host_blocking(&out).unwrap() == data,
                "S={s} {what}: decoded rows differ"
            );
            // The random rows hold NaNs: a NaN's payload is the machine's,
            // so two NaNs count as equal.
            let nan = |b: u32| f32::from_bits(b).is_nan();
            let got: Vec<u32> = copy_to_host_blocking(&y)
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let bad = got
                .iter()
                .zip(&want)
                .filter(|&(&a, &b)| a != b && !(nan(a) && nan(b)))
                .count();
            assert_eq!(bad, 0, "S={s} {what}: {bad} of {n} y differ");
        }
    }
}
