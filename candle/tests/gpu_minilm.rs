//! The candle integration on CUDA (feature `cuda`): MiniLM loaded by
//! candle's own safetensors loader and from the `.ibp` file gives
//! bit-identical sentence embeddings on the GPU, in f32 and from bf16
//! weights; the compressed embedding's forward pass on the GPU (table in
//! device or pinned host memory) returns what candle's `Embedding` and ibp's
//! own gather return, bit for bit; MiniLM's layers offloaded every way
//! (raw, IBP zero-copy and DMA, float-coded) compute what they compute
//! resident, bit for bit.
//!
//! Without a GPU each test prints "skipped: no CUDA device" and passes;
//! with `IBP_REQUIRE_GPU=1` that is a failure.

mod common;

use std::sync::Arc;

use candle_core::{DType, Device, Module, Tensor};
use common::*;
use ibp::gpu::{DecodeOptions, DecodeStatus, Decoder, Gpu, GpuDataset, Residency};
use ibp_candle::{CompressedEmbedding, IbpTensors};

/// candle's CUDA device 0, or `None` (with the skip note) without one.
fn cuda() -> Option<Device> {
    match Device::new_cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            if std::env::var("IBP_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("IBP_REQUIRE_GPU=1 but no CUDA device: {e}");
            }
            println!(
                "skipped: no CUDA device ({})",
                e.to_string().lines().next().unwrap_or_default()
            );
            None
        }
    }
}

fn embeddings_bit_identical(dtype: DType) {
    let Some(dev) = cuda() else { return };
    let Some((st, ibp)) = model_files(dtype) else {
        return;
    };
    let (_, vocab) = data().unwrap();
    let tok = tokenizer(&vocab);
    let (ids, types, mask) = batch(&tok, &SENTENCES, &dev).unwrap();
    // f32 compute from bf16 weights: see cpu_minilm.rs (candle's BERT
    // masks with f32::MIN, -inf in bf16).
    let compute = DType::F32;
    let a = embed(
        &model_from_safetensors(&st, compute, &dev).unwrap(),
        &ids,
        &types,
        &mask,
    )
    .unwrap();
    let b = embed(
        &model_from_ibp(&ibp, compute, &dev).unwrap(),
        &ids,
        &types,
        &mask,
    )
    .unwrap();
    assert!(a.device().is_cuda());
    assert!(
        bits(&a) == bits(&b),
        "{dtype:?}: the embeddings differ on the GPU"
    );
    // And they are MiniLM's: close to the CPU's (another summation order).
    let (ic, tc, mc) = batch(&tok, &SENTENCES, &Device::Cpu).unwrap();
    let c = embed(
        &model_from_safetensors(&st, compute, &Device::Cpu).unwrap(),
        &ic,
        &tc,
        &mc,
    )
    .unwrap();
    let cos = (a.to_device(&Device::Cpu).unwrap() * &c)
        .unwrap()
        .sum(1)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    assert!(
        cos.iter().all(|&x| x > 0.999),
        "{dtype:?}: GPU vs CPU cosines {cos:?}"
    );
    println!(
        "{dtype:?}: {} sentences bit-identical on CUDA",
        SENTENCES.len()
    );
}

#[test]
fn minilm_embeddings_bit_identical_cuda_f32() {
    embeddings_bit_identical(DType::F32);
}

#[test]
fn minilm_embeddings_bit_identical_cuda_bf16() {
    embeddings_bit_identical(DType::BF16);
}

/// Every tensor loaded onto the GPU from the `.ibp` file holds the bits
/// candle's loader puts there.
#[test]
fn every_tensor_restored_on_cuda() {
    let Some(dev) = cuda() else { return };
    for dtype in [DType::F32, DType::BF16] {
        let Some((st, ibp)) = model_files(dtype) else {
            return;
        };
        let want = candle_core::safetensors::load(&st, &dev).unwrap();
        let got = IbpTensors::open(&ibp).unwrap();
        for (name, w) in &want {
            let g = got.load(name, &dev).unwrap();
            assert!(g.device().is_cuda());
            assert_eq!((g.dtype(), g.dims()), (w.dtype(), w.dims()), "{name}");
            assert!(bits(&g) == bits(w), "{name}: the bits differ");
        }
    }
}

/// The compressed embedding on the GPU against candle's `Embedding` (from
/// the safetensors file, on the GPU) and against ibp's own gather of the
/// same ids: the same bits, table in device memory and in pinned memory.
fn gpu_embedding_matches(dtype: DType) {
    let Some(dev) = cuda() else { return };
    let Some((st, ibp)) = model_files(dtype) else {
        return;
    };
    let name = "embeddings.word_embeddings.weight";
    let table = candle_core::safetensors::load(&st, &dev)
        .unwrap()
        .remove(name)
        .unwrap();
    let reference = candle_nn::Embedding::new(table, 384);
    let tensors = Arc::new(IbpTensors::open(&ibp).unwrap());
    let ids: Vec<u32> = (0..4096u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % 30522)
        .collect();

    // ibp's own gather: a cust buffer, a cust stream.
    let ours = {
        use ibp::gpu::cust::memory::{CopyDestination, DeviceBuffer};
        use ibp::gpu::cust::stream::{Stream, StreamFlags};
        let gpu = Gpu::new(0).unwrap();
        let g = tensors.file().find_group(name).unwrap();
        let ds = GpuDataset::upload_group(&gpu, &g, Residency::Device).unwrap();
        let dec = Decoder::new(&gpu, &ds, &DecodeOptions::default()).unwrap();
        let mut status = DecodeStatus::new().unwrap();
        let idx = DeviceBuffer::from_slice(&ids).unwrap();
        let mut out = DeviceBuffer::<u8>::zeroed(ids.len() * g.row_bytes() as usize).unwrap();
        let s = Stream::new(StreamFlags::NON_BLOCKING, None).unwrap();
        dec.gather(&gpu, &idx, &mut out, &status, &s).unwrap();
        s.synchronize().unwrap();
        status.check_blocking().unwrap();
        let mut host = vec![0u8; out.len()];
        out.copy_to(&mut host[..]).unwrap();
        host
    };

    let Device::Cuda(cdev) = &dev else {
        unreachable!()
    };
    for residency in [Residency::Device, Residency::Pinned] {
        let mut emb = CompressedEmbedding::new(tensors.clone(), name).unwrap();
        emb.to_gpu(cdev, residency).unwrap();
        let idx = Tensor::from_vec(ids.clone(), (64, 64), &dev).unwrap();
        for idx in [idx.clone(), idx.to_dtype(DType::I64).unwrap()] {
            let got = emb.forward(&idx).unwrap();
            emb.check_blocking().unwrap();
            assert!(got.device().is_cuda());
            assert_eq!((got.dims(), got.dtype()), (&[64, 64, 384][..], dtype));
            let want = reference.forward(&idx).unwrap();
            assert!(
                bits(&got) == bits(&want),
                "{dtype:?} {residency:?}: differs from candle's Embedding"
            );
            assert!(
                bits(&got) == ours,
                "{dtype:?} {residency:?}: differs from ibp's gather"
            );
        }
        // An id out of range: the status reports it (its row zero-filled).
        let bad = Tensor::new(&[1u32, 30522], &dev).unwrap();
        let _ = emb.forward(&bad).unwrap();
        assert!(emb.check_blocking().is_err());
        emb.check_blocking().unwrap(); // cleared
    }
}

#[test]
fn gpu_embedding_matches_candle_and_ibp_f32() {
    gpu_embedding_matches(DType::F32);
}

#[test]
fn gpu_embedding_matches_candle_and_ibp_bf16() {
    gpu_embedding_matches(DType::BF16);
}

/// The weight names of one BERT layer (under `encoder.layer.{i}.` in the
/// file, `layer.0.` in a one-layer encoder).
const LAYER: [&str; 16] = [
    "attention.self.query.weight",
    "attention.self.query.bias",
    "attention.self.key.weight",
    "attention.self.key.bias",
    "attention.self.value.weight",
    "attention.self.value.bias",
    "attention.output.dense.weight",
    "attention.output.dense.bias",
    "attention.output.LayerNorm.weight",
    "attention.output.LayerNorm.bias",
    "intermediate.dense.weight",
    "intermediate.dense.bias",
    "output.dense.weight",
    "output.dense.bias",
    "output.LayerNorm.weight",
    "output.LayerNorm.bias",
];

/// MiniLM's six layers in bf16, offloaded raw, IBP-compressed (zero-copy
/// and DMA + device decode) and float-coded, each run as a stack of twelve
/// (every layer twice, so that both slots are refilled), give the bits the
/// same layers give resident.
#[test]
fn offloaded_layers_match_resident_every_way() {
    use candle_nn::VarBuilder;
    use candle_transformers::models::bert::{BertEncoder, Config};
    use ibp::Rows;
    use ibp::float_code::{self, FloatType};
    use ibp::layout::{LayoutOptions, compress_packed};
    use ibp_candle::{CodedTransfer, HostTensor, OffloadOptions, OffloadedStack};

    let Some(dev) = cuda() else { return };
    let Some((_, path)) = model_files(DType::BF16) else {
        return;
    };
    let Device::Cuda(cdev) = &dev else {
        unreachable!()
    };
    let src = IbpTensors::open(&path).unwrap();
    let cfg = Config {
        num_hidden_layers: 1,
        hidden_dropout_prob: 0.0,
        ..minilm_config()
    };
    let name = |n: &str| format!("layer.0.{n}");
    // Per real layer: (name, tensor on the CPU, its bytes).
    let real: Vec<Vec<(String, Tensor, Vec<u8>)>> = (0..6)
        .map(|l| {
            LAYER
                .iter()
                .map(|n| {
                    let t = src
                        .load(&format!("encoder.layer.{l}.{n}"), &Device::Cpu)
                        .unwrap();
                    let b = bits(&t);
                    (name(n), t, b)
                })
                .collect()
        })
        .collect();
    let order: Vec<usize> = (0..12).map(|i| i % 6).collect();
    let x = Tensor::randn(0f32, 1.0, (2, 16, 384), &dev)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let mask = Tensor::zeros((2, 1, 1, 16), DType::BF16, &dev).unwrap();
    let mut want = x.clone();
    for &l in &order {
        let map = real[l]
            .iter()
            .map(|(n, t, _)| (n.clone(), t.to_device(&dev).unwrap()))
            .collect();
        let enc =
            BertEncoder::load(VarBuilder::from_tensors(map, DType::BF16, &dev), &cfg).unwrap();
        want = enc.forward(&want, &mask).unwrap();
    }
    let want = bits(&want);

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Kept {
        Raw,
        Ibp,
        Float,
    }
    let gpu = Gpu::new(0).unwrap();
    let tensor = |kept: Kept, (n, t, b): &(String, Tensor, Vec<u8>)| -> HostTensor {
        let shape = t.shape().clone();
        if t.rank() != 2 || kept == Kept::Raw {
            return HostTensor::raw(n, DType::BF16, shape, b).unwrap();
        }
        let rows = Rows::new(b, t.dims()[1] * 2).unwrap();
        if kept == Kept::Ibp {
            let f = ibp::fit::fit(rows, &ibp::fit::FitOptions::default()).unwrap();
            let p = compress_packed(&f.codebook, rows, &LayoutOptions::default()).unwrap();
            HostTensor::compressed(&gpu, n, DType::BF16, shape, &f.codebook, &p.view()).unwrap()
        } else {
            let fc =
                float_code::fit(FloatType::Bf16, rows, &float_code::FitOptions::default()).unwrap();
            let coded = float_code::compress(&fc, rows).unwrap();
            HostTensor::float_coded(&gpu, n, DType::BF16, shape, &coded).unwrap()
        }
    };
    for (kept, transfer) in [
        (Kept::Raw, CodedTransfer::Dma),
        (Kept::Ibp, CodedTransfer::ZeroCopy),
        (Kept::Ibp, CodedTransfer::Dma),
        (Kept::Float, CodedTransfer::Dma),
    ] {
        let layers = order
            .iter()
            .map(|&l| real[l].iter().map(|r| tensor(kept, r)).collect())
            .collect();
        let opts = OffloadOptions::default().with_transfer(transfer);
        let stack = OffloadedStack::with_options(cdev, Gpu::new(0).unwrap(), layers, opts, |vb| {
            BertEncoder::load(vb, &cfg)
        })
        .unwrap();
        let (link, whole) = stack.bytes();
        assert!(kept == Kept::Raw || link < whole, "{kept:?}: nothing saved");
        // Twice: the second pass refills slots the first one used.
        for pass in 0..2 {
            let got = stack.forward(&x, |l, h| l.forward(h, &mask)).unwrap();
            stack.check_blocking().unwrap();
            assert!(
                bits(&got) == want,
                "{kept:?} {transfer:?}, pass {pass}: differs from resident"
            );
        }
    }
}
