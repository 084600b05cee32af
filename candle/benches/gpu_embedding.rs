//! The compressed embedding's forward pass on the GPU against the same
//! gather through ibp's own API (issue 37's target: the module at least
//! 0.9× as fast). MiniLM's word embeddings in bf16 (`minilm-bf16.ibp`, made
//! by scripts/stage-candle.sh), the table in device memory and in pinned
//! host memory, 128, 4096 and 65536 random ids (batch 1 and 32 of 128
//! tokens, and a large gather).
//!
//! Both sides decode the same ids from the same kind of dataset into device
//! memory on a non-blocking stream; each is timed over `ITERS` calls after a
//! warm-up that checks the two outputs are the same bits, wall clock from
//! the first enqueue to the stream's end. The module's time includes what a
//! candle user pays: the output's allocation (cudarc's stream-ordered
//! allocator) and the custom op's dispatch.
//!
//! The module is timed twice: with the device's memory pool as cudarc
//! leaves it (release threshold 0: freed memory goes back to the driver at
//! every synchronisation, and the first allocation after one maps it
//! again), then with the pool keeping its memory (release threshold
//! `u64::MAX`, as a caching allocator does). The second isolates the
//! module's own cost from the allocator's policy, which every candle op
//! shares. The last column is the host's time to enqueue one forward pass
//! (under the GPU's time: the GPU is the bound).
//!
//! ```console
//! $ cargo bench -p ibp-candle --features cuda --bench gpu_embedding
//! ```

use std::sync::Arc;
use std::time::Instant;

use candle_core::{Device, Module, Tensor};
use ibp::gpu::cust::memory::{CopyDestination, DeviceBuffer};
use ibp::gpu::cust::stream::{Stream, StreamFlags};
use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, Residency};
use ibp_candle::{CompressedEmbedding, IbpTensors};

const ITERS: usize = 50;
const TABLE: &str = "embeddings.word_embeddings.weight";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; nothing else is read.
    let dev = match Device::new_cuda(0) {
        Ok(d) => d,
        Err(e) => {
            println!(
                "skipped: no CUDA device ({})",
                e.to_string().lines().next().unwrap_or_default()
            );
            return Ok(());
        }
    };
    let Device::Cuda(cdev) = &dev else {
        unreachable!()
    };
    let Some(path) = ibp_testdata::data_file("minilm-bf16.ibp") else {
        println!(
            "skipped: minilm-bf16.ibp not found (scripts/stage-candle.sh makes it; set IBP_DATA_DIR)"
        );
        return Ok(());
    };
    let tensors = Arc::new(IbpTensors::open(&path)?);
    let g = tensors
        .file()
        .find_group(TABLE)
        .ok_or("no word embeddings")?;
    let (rows, row_bytes) = (g.rows(), g.row_bytes() as usize);
    println!(
        "MiniLM word embeddings, bf16: {rows} rows of {row_bytes} bytes, {:.1}% saved",
        100.0 * (1.0 - 1.0 / g.stats().ratio())
    );
    let mut rows_out = Vec::new();
    let gpu = Gpu::new(0)?;
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None)?;
    for residency in [Residency::Device, Residency::Pinned] {
        let ds = GpuDataset::upload_group(&gpu, &g, residency)?;
        let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default())?;
        let mut status = DecodeStatus::new()?;
        let mut emb = CompressedEmbedding::new(tensors.clone(), TABLE)?;
        emb.to_gpu(cdev, residency)?;
        for n in [128usize, 4096, 65536] {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let ids: Vec<u32> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % rows) as u32
                })
                .collect();
            let idx = DeviceBuffer::from_slice(&ids)?;
            let mut out = DeviceBuffer::<u8>::zeroed(n * row_bytes)?;
            let ids_t = Tensor::from_vec(ids.clone(), n, &dev)?;

            // Warm-up, and the two outputs compared.
            dec.gather(&gpu, &idx, &mut out, &status, &stream)?;
            stream.synchronize()?;
            status.check_blocking()?;
            let mut ours = vec![0u8; n * row_bytes];
            out.copy_to(&mut ours[..])?;
            let theirs = emb.forward(&ids_t)?;
            emb.check_blocking()?;
            let theirs: Vec<u8> = theirs
                .flatten_all()?
                .to_vec1::<half::bf16>()?
                .iter()
                .flat_map(|v| v.to_bits().to_le_bytes())
                .collect();
            assert!(theirs == ours, "the module's rows differ from ibp's gather");

            let t = Instant::now();
            for _ in 0..ITERS {
                dec.gather(&gpu, &idx, &mut out, &status, &stream)?;
            }
            stream.synchronize()?;
            let ibp_us = t.elapsed().as_secs_f64() * 1e6 / ITERS as f64;
            status.check_blocking()?;

            // Each output is dropped at once, as a model's activations are:
            // cudarc frees it on the stream, and the next allocation reuses it.
            let module = |keep: bool| -> Result<(f64, f64), Box<dyn std::error::Error>> {
                set_pool_release(cdev, if keep { u64::MAX } else { 0 })?;
                let t = Instant::now();
                for _ in 0..ITERS {
                    drop(emb.forward(&ids_t)?);
                }
                let host_us = t.elapsed().as_secs_f64() * 1e6 / ITERS as f64;
                dev.synchronize()?;
                let us = t.elapsed().as_secs_f64() * 1e6 / ITERS as f64;
                emb.check_blocking()?;
                Ok((us, host_us))
            };
            let (mod_us, _) = module(false)?;
            // One untimed pass with the pool kept, so that its memory is
            // mapped once before the timed one.
            module(true)?;
            let (kept_us, host_us) = module(true)?;
            set_pool_release(cdev, 0)?;
            rows_out.push(format!(
                "| {residency:?} | {n} | {ibp_us:.1} | {mod_us:.1} | {:.2}× | {kept_us:.1} | {:.2}× | {host_us:.1} |",
                ibp_us / mod_us,
                ibp_us / kept_us
            ));
        }
    }
    println!();
    println!(
        "| table in | ids | ibp gather (µs) | module (µs) | module speed vs ibp | module, pool kept (µs) | speed vs ibp | module enqueue (µs) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows_out {
        println!("{r}");
    }
    Ok(())
}

/// Set the release threshold of the memory pool cudarc allocates from (the
/// device's current pool): 0 returns freed memory to the driver at each
/// synchronisation (the default), `u64::MAX` keeps it.
fn set_pool_release(
    dev: &candle_core::cuda_backend::CudaDevice,
    bytes: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let mut v = bytes;
    // SAFETY: (1) the device is the context's own (`cu_device`); (2) the
    // pool returned is valid for it; (3) the release threshold is a u64,
    // which `v` is, alive for the call.
    unsafe {
        let pool = result::device::get_mem_pool(dev.cuda_stream().context().cu_device())?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut v as *mut u64 as *mut std::ffi::c_void,
        )?;
    }
    Ok(())
}
