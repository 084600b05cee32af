//! Clustered datasets on the GPU (`GpuDataset::upload_clustered`, the
//! kernels `ibp_decode_clustered` and `ibp_decode_clustered_stream`): each
//! tensor decodes with its own cluster's codebook, bit for bit, in batch and
//! streaming mode, from pinned host memory and from device memory, by range,
//! gather, the DMA range path and the DMA gather; a clustered group of an
//! `.ibp` file
//! uploads as it is; the paths that decode with one codebook refuse a
//! clustered dataset with a typed error. Prints `skipped: no CUDA device`
//! without a GPU (a failure with `IBP_REQUIRE_GPU=1`).
#![cfg(feature = "cuda")]

mod common;

use common::{Rng, gpu_or_skip};
use cust::memory::DeviceBuffer;
use cust::stream::{Stream, StreamFlags};
use ibp::cluster::{ClusterIds, compress_clustered_with_ids};
use ibp::codebook::{ChunkSize, Codebook};
use ibp::container::IbpFile;
use ibp::gpu::{
    CacheOptions, DecodeOptions, DecodeStatus, Decoder, DmaScratch, FeatureCache, Gpu, GpuDataset,
    Residency, copy_to_host_blocking,
};
use ibp::io::{self, ParseOptions, SourceFormat};
use ibp::pipeline::{Clustering, CompressOptions, compress_document};
use ibp::{ErrorKind, Rows};

const POISON: u8 = 0xA5;
const GUARD: usize = 256;

fn stream() -> Stream {
    Stream::new(StreamFlags::NON_BLOCKING, None).expect("stream")
}

/// `k` codebooks of `l`-byte tensors (about 75% invariant bits, each its
/// own), `n` tensors each drawn from its cluster's codebook (a few chunks
/// off, so both chunk kinds occur), and the cluster ids.
fn clustered(
    rng: &mut Rng,
    l: usize,
    n: usize,
    k: usize,
    chunk: ChunkSize,
) -> (Vec<u8>, Vec<Codebook>, Vec<u32>) {
    let books: Vec<Codebook> = (0..k)
        .map(|_| {
            let mask: Vec<u8> = (0..l)
                .map(|_| (rng.next() as u8) | (rng.next() as u8))
                .collect();
            let bitval: Vec<u8> = mask.iter().map(|m| m & rng.next() as u8).collect();
            Codebook::new(chunk, mask, bitval).expect("valid codebook")
        })
        .collect();
    let ids: Vec<u32> = (0..n).map(|_| (rng.next() % k as u64) as u32).collect();
    let mut data = vec![0u8; n * l];
    for (row, &c) in data.chunks_mut(l).zip(&ids) {
        let (mask, bitval) = (books[c as usize].mask(), books[c as usize].bitval());
        for (j, b) in row.iter_mut().enumerate() {
            *b = (rng.next() as u8 & !mask[j]) | bitval[j];
        }
        if l > 8 && rng.next().is_multiple_of(3) {
            let j = rng.next() as usize % l;
            row[j] ^= mask[j];
        }
    }
    (data, books, ids)
}

/// Decode `index` rows of `ds` into a poisoned buffer with guard bytes;
/// check the guard and the status, return the rows.
fn gather(gpu: &Gpu, ds: &GpuDataset, index: &[u64], opts: &DecodeOptions) -> Vec<u8> {
    let l = ds.row_bytes() as usize;
    let dec = Decoder::new(gpu, ds, opts).unwrap();
    let mut status = DecodeStatus::new().unwrap();
    let s = stream();
    let mut out = DeviceBuffer::from_slice(&vec![POISON; index.len() * l + GUARD]).unwrap();
    let d_index = DeviceBuffer::from_slice(index).unwrap();
    dec.gather(gpu, &d_index, &mut out, &status, &s).unwrap();
    s.synchronize().unwrap();
    let host = copy_to_host_blocking(&out).unwrap();
    assert!(host[index.len() * l..].iter().all(|&b| b == POISON));
    status.check_blocking().unwrap();
    host[..index.len() * l].to_vec()
}

fn expected(data: &[u8], l: usize, index: &[u64]) -> Vec<u8> {
    index
        .iter()
        .flat_map(|&t| data[t as usize * l..(t as usize + 1) * l].iter().copied())
        .collect()
}

fn first_bad_row(got: &[u8], want: &[u8], l: usize) -> Option<usize> {
    got.chunks(l).zip(want.chunks(l)).position(|(a, b)| a != b)
}

#[test]
fn each_tensor_decodes_with_its_own_codebook() {
    let Some(gpu) = gpu_or_skip("each_tensor_decodes_with_its_own_codebook") else {
        return;
    };
    let mut rng = Rng(4242);
    // Batch mode up to a few KB, streaming mode past 6 KB; k from 2 to 300
    // (ids of 1 to 9 bits, straddling words).
    for (l, n, k, chunk) in [
        (100usize, 3000usize, 2usize, ChunkSize::One),
        (256, 4000, 5, ChunkSize::Two),
        (1536, 2000, 37, ChunkSize::Four),
        (5732, 500, 8, ChunkSize::Eight),
        (8192, 300, 300, ChunkSize::Four),
    ] {
        let (data, books, ids) = clustered(&mut rng, l, n, k, chunk);
        let c = compress_clustered_with_ids(&books, &ids, Rows::new(&data, l).unwrap()).unwrap();
        let all: Vec<u64> = (0..n as u64).collect();
        let random: Vec<u64> = (0..2 * n).map(|_| rng.next() % n as u64).collect();
        for residency in [Residency::Pinned, Residency::Device] {
            let ds =
                GpuDataset::upload_clustered(&gpu, &books, &c.ids, &c.packed.view(), residency)
                    .unwrap();
            assert_eq!(ds.clusters(), Some(k));
            for (name, index) in [("range", &all), ("gather", &random)] {
                let what = format!("L={l} k={k} {residency:?} {name}");
                let got = gather(&gpu, &ds, index, &DecodeOptions::default());
                let want = expected(&data, l, index);
                if let Some(r) = first_bad_row(&got, &want, l) {
                    panic!("{what}: output row {r} (tensor {}) differs", index[r]);
                }
            }
            // One codebook for every tensor decodes something else: the
            // test tells the books apart.
            let one = GpuDataset::upload_clustered(
                &gpu,
                &vec![books[0].clone(); k],
                &c.ids,
                &c.packed.view(),
                residency,
            )
            .unwrap();
            let dec = Decoder::new(&gpu, &one, &DecodeOptions::default()).unwrap();
            let mut status = DecodeStatus::new().unwrap();
            let s = stream();
            let mut out = DeviceBuffer::from_slice(&vec![0u8; n * l]).unwrap();
            dec.range(&gpu, 0, n as u64, &mut out, &status, &s).unwrap();
            s.synchronize().unwrap();
            let wrong =
                status.check_blocking().is_err() || copy_to_host_blocking(&out).unwrap() != data;
            assert!(wrong, "L={l} k={k}: the books are alike");
        }
        // The DMA range path (pinned, packed): absolute tensor numbers, so
        // the ids follow.
        let ds =
            GpuDataset::upload_clustered(&gpu, &books, &c.ids, &c.packed.view(), Residency::Pinned)
                .unwrap();
        let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
        let mut scratch = DmaScratch::new(64 * 1024).unwrap();
        let mut status = DecodeStatus::new().unwrap();
        let s = stream();
        let (first, count) = (n as u64 / 5, n as u64 / 2);
        let mut out = DeviceBuffer::from_slice(&vec![POISON; count as usize * l]).unwrap();
        dec.range_dma(&gpu, first, count, &mut out, &status, &mut scratch, &s)
            .unwrap();
        s.synchronize().unwrap();
        status.check_blocking().unwrap();
        let got = copy_to_host_blocking(&out).unwrap();
        let want = &data[first as usize * l..(first + count) as usize * l];
        assert!(
            first_bad_row(&got, want, l).is_none(),
            "L={l} k={k}: DMA range"
        );
        // The DMA gather: pieces renumber the tensors and carry their ids.
        let mut out = DeviceBuffer::from_slice(&vec![POISON; random.len() * l]).unwrap();
        dec.gather_dma_blocking(&gpu, &random, &mut out, &status, &mut scratch, &s)
            .unwrap();
        s.synchronize().unwrap();
        status.check_blocking().unwrap();
        let got = copy_to_host_blocking(&out).unwrap();
        let want = expected(&data, l, &random);
        if let Some(r) = first_bad_row(&got, &want, l) {
            panic!(
                "L={l} k={k}: DMA gather row {r} (tensor {}) differs",
                random[r]
            );
        }
    }
}

#[test]
fn a_clustered_group_of_a_file_uploads_as_it_is() {
    let Some(gpu) = gpu_or_skip("a_clustered_group_of_a_file_uploads_as_it_is") else {
        return;
    };
    let mut rng = Rng(77);
    let (l, n) = (384usize, 3000usize);
    let (data, _, _) = clustered(&mut rng, l, n, 6, ChunkSize::Four);
    let doc = io::parse(
        &data,
        SourceFormat::Raw,
        &ParseOptions::default().with_raw(io::DType::U8, Some(vec![n as u64, l as u64])),
    )
    .unwrap();
    let opts = CompressOptions::default().with_clusters(Clustering::Fixed(6));
    let (bytes, _) = compress_document(&doc, &opts, Vec::new()).unwrap();
    let file = IbpFile::from_bytes(&bytes).unwrap();
    let g = file.group(0).unwrap();
    assert!(g.clusters().is_some(), "the group was not stored clustered");
    let ds = GpuDataset::upload_group(&gpu, &g, Residency::Pinned).unwrap();
    assert!(ds.is_clustered());
    let all: Vec<u64> = (0..n as u64).collect();
    let got = gather(&gpu, &ds, &all, &DecodeOptions::default());
    assert!(first_bad_row(&got, &data, l).is_none());
}

#[test]
fn one_codebook_paths_refuse_a_clustered_dataset() {
    let Some(gpu) = gpu_or_skip("one_codebook_paths_refuse_a_clustered_dataset") else {
        return;
    };
    let mut rng = Rng(5);
    let (l, n) = (256usize, 500usize);
    let (data, books, ids) = clustered(&mut rng, l, n, 3, ChunkSize::Four);
    let c = compress_clustered_with_ids(&books, &ids, Rows::new(&data, l).unwrap()).unwrap();
    let ds =
        GpuDataset::upload_clustered(&gpu, &books, &c.ids, &c.packed.view(), Residency::Pinned)
            .unwrap();
    // The device API (one codebook per view).
    assert_eq!(ds.device_view().unwrap_err().kind(), ErrorKind::Unsupported);
    // The feature cache.
    let e = FeatureCache::new(&[&gpu], &[&ds], &[0, 1], &CacheOptions::new(1 << 20))
        .err()
        .expect("a cache over a clustered dataset");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    // Bad input: ids beyond the codebooks, ids not one per tensor, mixed
    // chunk sizes, no codebooks.
    let beyond = ClusterIds::pack(&vec![5u32; n], 8).unwrap();
    let e =
        GpuDataset::upload_clustered(&gpu, &books, &beyond, &c.packed.view(), Residency::Pinned)
            .err()
            .unwrap();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    let short = ClusterIds::pack(&ids[1..], 3).unwrap();
    let e = GpuDataset::upload_clustered(&gpu, &books, &short, &c.packed.view(), Residency::Pinned)
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let mut mixed = books.clone();
    mixed[1] = Codebook::new(
        ChunkSize::Two,
        books[1].mask().to_vec(),
        books[1].bitval().to_vec(),
    )
    .unwrap();
    let e = GpuDataset::upload_clustered(&gpu, &mixed, &c.ids, &c.packed.view(), Residency::Pinned)
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = GpuDataset::upload_clustered(&gpu, &[], &c.ids, &c.packed.view(), Residency::Pinned)
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}
