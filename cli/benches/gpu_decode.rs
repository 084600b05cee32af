//! GPU decompression throughput (criterion): a slice of the paper's Figure 7
//! grid from pinned host memory (zero-copy) and from device memory, kernel
//! time by CUDA events (`iter_custom`). The full grid, the ideal and gather
//! baselines and the real tables are in `ibp bench`, which writes
//! `docs/results/<gpu>.md`. Every configuration is decoded and compared with
//! the original bytes before it is timed.
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
    use ibp::gpu::copy_to_host_blocking;
    use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, Residency};
    use ibp::layout::{LayoutOptions, compress_packed};
    use ibp_testdata::figure7_dataset;

    let gpu = match Gpu::first() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("gpu_decode: skipped: no CUDA device ({e})");
            return;
        }
    };
    let stream = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
    let mut group = c.benchmark_group(format!("decode/{}", gpu.info().name));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let rows = 100_000;
    for &size in &[1024usize, 4096] {
        for &savings in &[0.125, 0.5, 0.9] {
            let (data, cb) = figure7_dataset(rows, size, savings, 11).unwrap();
            let packed = compress_packed(
                &cb,
                Rows::new(&data, size).unwrap(),
                &LayoutOptions::default(),
            )
            .unwrap();
            for residency in [Residency::Pinned, Residency::Device] {
                let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), residency).unwrap();
                let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
                let mut status = DecodeStatus::new().unwrap();
                let mut out = DeviceBuffer::<u8>::zeroed(data.len()).unwrap();
                dec.range(&gpu, 0, rows as u64, &mut out, &status, &stream)
                    .unwrap();
                stream.synchronize().unwrap();
                status.check_blocking().unwrap();
                assert_eq!(
                    copy_to_host_blocking(&out).unwrap(),
                    data,
                    "round trip before timing"
                );
                group.throughput(Throughput::Bytes(data.len() as u64));
                let name = format!("{residency:?}/{size}B/{:.1}%", 100.0 * savings);
                group.bench_function(name, |b| {
                    b.iter_custom(|iters| {
                        let (a, z) = (
                            Event::new(EventFlags::DEFAULT).unwrap(),
                            Event::new(EventFlags::DEFAULT).unwrap(),
                        );
                        a.record(&stream).unwrap();
                        for _ in 0..iters {
                            dec.range(&gpu, 0, rows as u64, &mut out, &status, &stream)
                                .unwrap();
                        }
                        z.record(&stream).unwrap();
                        z.synchronize().unwrap();
                        z.elapsed(&a).unwrap()
                    })
                });
                status.check_blocking().unwrap();
            }
        }
    }
    group.finish();
}

#[cfg(not(feature = "cuda"))]
fn bench(_: &mut Criterion) {
    eprintln!("gpu_decode: skipped: built without the `cuda` feature");
}

criterion_group!(benches, bench);
criterion_main!(benches);
