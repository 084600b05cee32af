//! Bit-counting throughput on the GPU, from device memory and from pinned
//! host memory read zero-copy over PCIe. Kernel time only, measured with CUDA
//! events around the launches (criterion's `iter_custom`). Compare the device
//! figure with the H200's device copy (4.2 TB/s counting bytes read plus
//! written; a kernel that only reads can approach that figure), and the
//! pinned figure with the zero-copy PCIe read (51 GB/s measured).
//!
//! Without the `cuda` feature, or without a device, it prints why and exits.

use criterion::{Criterion, criterion_group, criterion_main};

#[cfg(feature = "cuda")]
fn bench(c: &mut Criterion) {
    use std::time::Duration;

    use criterion::Throughput;
    use cust::event::{Event, EventFlags};
    use cust::memory::DeviceBuffer;
    use cust::stream::{Stream, StreamFlags};
    use ibp::Rows;
    use ibp::gpu::{Fitter, Gpu, PinnedBuffer};

    let gpu = match Gpu::first() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("gpu_count: skipped: no CUDA device ({e})");
            return;
        }
    };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let fitter = Fitter::new(&gpu);
    let mut group = c.benchmark_group(format!("count_bits/{}", gpu.info().name));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    // Rows: Cora f32 (5732 B), MiniLM f32 (1536 B), 256 B, and a ragged 1001 B.
    for &l in &[5732usize, 1536, 256, 1001] {
        let n = (1usize << 30) / l;
        let mut bytes = vec![0u8; n * l];
        let mut s = 0x1234_5678u64;
        for w in bytes.chunks_mut(8) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            w.copy_from_slice(&s.to_le_bytes()[..w.len()]);
        }
        // Warm-up check: GPU counts equal CPU counts on a slice.
        let check = &bytes[..l * 1000];
        let want = ibp::fit::count_bits(Rows::new(check, l).unwrap());
        assert_eq!(
            fitter
                .count_bits_blocking(Rows::new(check, l).unwrap(), 1 << 20)
                .unwrap(),
            want
        );

        let dev = DeviceBuffer::from_slice(&bytes).unwrap();
        let pinned = PinnedBuffer::from_slice(&bytes).unwrap();
        drop(bytes);
        let mut counts = DeviceBuffer::<u64>::zeroed(8 * l).unwrap();
        group.throughput(Throughput::Bytes((n * l) as u64));
        let mut time = |src: &dyn ibp::gpu::GpuReadable, iters: u64| {
            let (a, b) = (
                Event::new(EventFlags::DEFAULT).unwrap(),
                Event::new(EventFlags::DEFAULT).unwrap(),
            );
            a.record(&stream).unwrap();
            for _ in 0..iters {
                fitter.count_bits(src, l, &mut counts, &stream).unwrap();
            }
            b.record(&stream).unwrap();
            b.synchronize().unwrap();
            b.elapsed(&a).unwrap()
        };
        group.bench_function(format!("device/L={l}"), |bch| {
            bch.iter_custom(|iters| time(&dev, iters))
        });
        group.bench_function(format!("pinned/L={l}"), |bch| {
            bch.iter_custom(|iters| time(&pinned, iters))
        });
    }
    group.finish();
}

#[cfg(not(feature = "cuda"))]
fn bench(_: &mut Criterion) {
    eprintln!("gpu_count: skipped: built without the `cuda` feature");
}

criterion_group!(benches, bench);
criterion_main!(benches);
