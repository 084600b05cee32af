//! The DMA gather: rows staged on the host into pinned pieces, copied and
//! decoded on the device, against the original rows and zero-copy's reports.

use super::*;

/// The DMA gather of `index` (host memory) into a poisoned buffer with guard
/// bytes, twice on one scratch; the rows and the status's verdict.
fn dma_gather<I: ibp::gpu::GatherIndex + Into<u64>>(
    gpu: &Gpu,
    dec: &Decoder<'_>,
    index: &[I],
    l: usize,
    scratch: &mut ibp::gpu::DmaScratch,
) -> (Vec<u8>, ibp::Result<()>) {
    let mut status = DecodeStatus::new().unwrap();
    let s = stream();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; index.len() * l + GUARD]).unwrap();
    // Twice: the second call must wait for the first one's copies and
    // decodes before reusing the pieces.
    for _ in 0..2 {
        dec.gather_dma_blocking(gpu, index, &mut out, &status, scratch, &s)
            .unwrap();
    }
    s.synchronize().unwrap();
    let host = copy_to_host_blocking(&out).unwrap();
    assert!(
        host[index.len() * l..].iter().all(|&b| b == POISON),
        "the DMA gather wrote past the output rows"
    );
    let verdict = status.check_blocking();
    (host[..index.len() * l].to_vec(), verdict)
}

#[test]
fn dma_gather_matches_original_and_reports_like_zero_copy() {
    let Some(gpu) = gpu_or_skip("dma_gather_matches_original_and_reports_like_zero_copy") else {
        return;
    };
    let mut rng = Rng(0xd3a);
    for (l, n, chunk, mix, piece) in [
        (1024usize, 3000usize, 4u32, Mix::Mixed, 64 * 1024usize),
        (256, 5000, 2, Mix::Encoded, 4096),
        (5732, 400, 8, Mix::Encoded, 1 << 20),
        (100, 2000, 1, Mix::Raw, 700),
        (33, 50, 1, Mix::Mixed, ibp::gpu::DEFAULT_DMA_PIECE_BYTES),
    ] {
        let (data, cb) = dataset(&mut rng, l, n, ChunkSize::try_from(chunk).unwrap(), mix);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
        let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
        let mut scratch = ibp::gpu::DmaScratch::new(piece).unwrap();
        let what = format!("L={l} N={n} C={chunk} {mix:?} piece {piece}");
        // Random rows with repeats, u64 and u32: bit-exact.
        let index: Vec<u64> = (0..(2 * n).min(3000))
            .map(|_| rng.next() % n as u64)
            .collect();
        let (got, verdict) = dma_gather(&gpu, &dec, &index, l, &mut scratch);
        verdict.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(got == expected(&data, l, &index), "{what}: rows differ");
        let narrow: Vec<u32> = index.iter().map(|&t| t as u32).collect();
        let (got32, verdict) = dma_gather(&gpu, &dec, &narrow, l, &mut scratch);
        verdict.unwrap();
        assert!(got32 == got, "{what}: u32 indices differ from u64");
        // Bad indices: reported with the first bad output row (in a later
        // piece, so the row is the call's, not the piece's), zero-filled,
        // the other rows decoded.
        let mut bad = index.clone();
        let first_bad = bad.len() * 2 / 3;
        for (k, v) in [n as u64, u64::MAX, n as u64 + 5].into_iter().enumerate() {
            bad[first_bad + 7 * k] = v;
        }
        let (got, verdict) = dma_gather(&gpu, &dec, &bad, l, &mut scratch);
        let e = verdict.unwrap_err();
        assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument, "{what}: {e}");
        assert!(
            e.to_string().contains(&format!("output row {first_bad} (")),
            "{what}: {e}"
        );
        for (i, (&t, row)) in bad.iter().zip(got.chunks(l)).enumerate() {
            if t >= n as u64 {
                assert!(
                    row.iter().all(|&b| b == 0),
                    "{what}: bad row {i} not zeroed"
                );
            } else {
                assert!(
                    row == &data[t as usize * l..][..l],
                    "{what}: row {i} (tensor {t}) differs"
                );
            }
        }
        // The zero-copy gather reports the same.
        let zc = gpu_gather(&gpu, &ds, &bad, &DecodeOptions::default()).unwrap_err();
        assert_eq!(zc.to_string(), e.to_string(), "{what}");
    }
}

#[test]
fn dma_gather_reports_corrupt_tensors_and_refuses_what_it_cannot_serve() {
    let Some(gpu) =
        gpu_or_skip("dma_gather_reports_corrupt_tensors_and_refuses_what_it_cannot_serve")
    else {
        return;
    };
    let mut rng = Rng(0xbad);
    let (l, n) = (512, 300);
    let (data, cb) = dataset(
        &mut rng,
        l,
        n,
        ChunkSize::try_from(4).unwrap(),
        Mix::Encoded,
    );
    let mut packed =
        compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
    // Damage one encoded tensor the CPU decoder reports corrupt: the top
    // bit of its last stored byte.
    let victim = (n / 2..n)
        .find(|&t| {
            let mut p = packed.clone();
            p.payload[p.offsets[t + 1] as usize - 1] ^= 0x80;
            let mut row = vec![0u8; l];
            ibp::layout::decompress_packed_row(&cb, &p.view(), t, &mut row)
                .is_err_and(|e| e.kind() == ibp::ErrorKind::Corrupt)
        })
        .expect("a tensor whose damage the CPU decoder sees");
    let end = packed.offsets[victim + 1] as usize;
    packed.payload[end - 1] ^= 0x80;
    let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
    let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
    let mut scratch = ibp::gpu::DmaScratch::new(8 * 1024).unwrap();
    // The victim at output row 250 (pieces of a few rows: a late piece).
    let mut index: Vec<u64> = (0..400)
        .map(|i| (i * 7 % n) as u64)
        .filter(|&t| t != victim as u64)
        .collect();
    index[250] = victim as u64;
    let (got, verdict) = dma_gather(&gpu, &dec, &index, l, &mut scratch);
    let e = verdict.unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::Corrupt, "{e}");
    assert!(e.to_string().contains("output row 250 ("), "{e}");
    for (i, (&t, row)) in index.iter().zip(got.chunks(l)).enumerate() {
        if i == 250 {
            assert!(row.iter().all(|&b| b == 0), "corrupt row not zeroed");
        } else {
            assert!(row == &data[t as usize * l..][..l], "row {i} differs");
        }
    }
    let zc = gpu_gather(&gpu, &ds, &index, &DecodeOptions::default()).unwrap_err();
    assert_eq!(zc.to_string(), e.to_string());

    // Refused, with nothing enqueued: a device-resident dataset, a tensor
    // larger than a piece, an output too small.
    let status = DecodeStatus::new().unwrap();
    let s = stream();
    let mut out = DeviceBuffer::<u8>::zeroed(10 * l).unwrap();
    let dev = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Device).unwrap();
    let on_dev = Decoder::new(&gpu, &dev, &DecodeOptions::default()).unwrap();
    let ix = [0u64, 1, 2];
    let e = on_dev
        .gather_dma_blocking(&gpu, &ix, &mut out, &status, &mut scratch, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
    let mut tiny = ibp::gpu::DmaScratch::new(64).unwrap();
    let e = dec
        .gather_dma_blocking(&gpu, &ix, &mut out, &status, &mut tiny, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
    let many = [0u64; 11];
    let e = dec
        .gather_dma_blocking(&gpu, &many, &mut out, &status, &mut scratch, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
    // An empty gather does nothing.
    dec.gather_dma_blocking::<u64>(&gpu, &[], &mut out, &status, &mut scratch, &s)
        .unwrap();
}
