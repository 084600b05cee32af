//! The staged range path (`Decoder::range_staged`): the caller copies a
//! range's stored bytes into device memory and the decoder reads them
//! there, bit for bit the original rows, with its inputs checked.

use super::*;
use ibp::gpu::{STAGING_ALIGN, Span};

/// Rows `first..first + count` of `ds` decoded from a staging area the test
/// fills with the rows' stored bytes (a device buffer, poisoned past them),
/// into a poisoned output with guard bytes.
fn staged_range(gpu: &Gpu, ds: &GpuDataset, payload: &[u8], first: u64, count: u64) -> Vec<u8> {
    let l = ds.row_bytes() as usize;
    let range = ds.stored_range(first, count).expect("a packed dataset");
    let need = ds.staging_bytes(first, count).unwrap();
    assert_eq!(need % STAGING_ALIGN, 0);
    let mut bytes = payload[range.start as usize..range.end as usize].to_vec();
    bytes.resize(need, POISON);
    let staging = DeviceBuffer::from_slice(&bytes).unwrap();
    let dec = Decoder::new(gpu, ds, &DecodeOptions::default()).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let s = stream();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; count as usize * l + GUARD]).unwrap();
    let span = Span::of(&staging, 0, need).unwrap();
    dec.range_staged(gpu, first, count, &span, &mut out, &status, &s)
        .unwrap();
    s.synchronize().unwrap();
    let host = copy_to_host_blocking(&out).unwrap();
    assert!(
        host[count as usize * l..].iter().all(|&b| b == POISON),
        "the staged decode wrote past the output rows"
    );
    status.check_blocking().unwrap();
    host[..count as usize * l].to_vec()
}

#[test]
fn staged_range_matches_original_and_checks_its_inputs() {
    let Some(gpu) = gpu_or_skip("staged_range_matches_original_and_checks_its_inputs") else {
        return;
    };
    let mut rng = Rng(0x57a6);
    for (l, n, chunk, mix) in [
        (768usize, 3000usize, 4u32, Mix::Mixed),
        (256, 5000, 2, Mix::Encoded),
        (5732, 300, 8, Mix::Encoded),
        (100, 2000, 1, Mix::Raw),
        (33, 50, 1, Mix::Mixed),
    ] {
        let (data, cb) = dataset(&mut rng, l, n, ChunkSize::try_from(chunk).unwrap(), mix);
        let packed =
            compress_packed(&cb, Rows::new(&data, l).unwrap(), &LayoutOptions::default()).unwrap();
        let payload = packed.view().payload().to_vec();
        for residency in [Residency::Pinned, Residency::Device] {
            let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), residency).unwrap();
            let n = n as u64;
            for (first, count) in [(0, n), (n / 3, n / 2), (n - 1, 1)] {
                let got = staged_range(&gpu, &ds, &payload, first, count);
                let want = expected(&data, l, &(first..first + count).collect::<Vec<_>>());
                assert!(
                    got == want,
                    "L={l} N={n} C={chunk} {mix:?} {residency:?}: rows {first}+{count} differ"
                );
            }
        }
    }

    // Its inputs: a short or misaligned staging area, rows past the end,
    // a fixed-stride dataset.
    let (data, cb) = dataset(
        &mut rng,
        512,
        400,
        ChunkSize::try_from(4).unwrap(),
        Mix::Mixed,
    );
    let rows = Rows::new(&data, 512).unwrap();
    let packed = compress_packed(&cb, rows, &LayoutOptions::default()).unwrap();
    let ds = GpuDataset::upload_packed(&gpu, &cb, &packed.view(), Residency::Pinned).unwrap();
    let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
    let status = DecodeStatus::new().unwrap();
    let s = stream();
    let need = ds.staging_bytes(0, 400).unwrap();
    let staging = DeviceBuffer::<u8>::zeroed(need + STAGING_ALIGN).unwrap();
    let mut out = DeviceBuffer::<u8>::zeroed(400 * 512).unwrap();
    let kind = |first: u64, count: u64, span: Span<'_>, out: &mut DeviceBuffer<u8>| {
        dec.range_staged(&gpu, first, count, &span, out, &status, &s)
            .unwrap_err()
            .kind()
    };
    let short = Span::of(&staging, 0, need - 1).unwrap();
    assert_eq!(
        kind(0, 400, short, &mut out),
        ibp::ErrorKind::InvalidArgument
    );
    let misaligned = Span::of(&staging, 16, need).unwrap();
    assert_eq!(
        kind(0, 400, misaligned, &mut out),
        ibp::ErrorKind::InvalidArgument
    );
    let whole = || Span::of(&staging, 0, need).unwrap();
    assert_eq!(
        kind(1, 400, whole(), &mut out),
        ibp::ErrorKind::InvalidArgument
    );
    let mut small = DeviceBuffer::<u8>::zeroed(399 * 512).unwrap();
    assert_eq!(
        kind(0, 400, whole(), &mut small),
        ibp::ErrorKind::InvalidArgument
    );
    assert!(ds.stored_range(0, 401).is_none());
    let fixed = compress_fixed(&cb, rows, &LayoutOptions::default()).unwrap();
    let fds = GpuDataset::upload_fixed(&gpu, &cb, &fixed.view(), Residency::Pinned).unwrap();
    assert!(fds.stored_range(0, 1).is_none() && fds.staging_bytes(0, 1).is_none());
    let fdec = Decoder::new(&gpu, &fds, &DecodeOptions::default()).unwrap();
    let e = fdec
        .range_staged(&gpu, 0, 400, &whole(), &mut out, &status, &s)
        .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::InvalidArgument);
}
