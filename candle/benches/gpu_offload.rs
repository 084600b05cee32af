//! One forward pass of a deep stack built from MiniLM's real layers, its
//! weights resident on the GPU or offloaded to pinned host memory, raw or
//! compressed by ibp (issue 37: offloaded compressed against offloaded raw
//! at batch 1 and 32).
//!
//! The stack, scaled up the way ibp's benchmarks scale real data: MiniLM's
//! six layers (rounded to bf16), each weight tiled `SCALE × SCALE` times
//! (hidden 384·SCALE, 12·SCALE heads of 32), repeated in order until the
//! weights pass `GIB` GiB; every layer has its own copy in memory. The
//! values are real MiniLM weights, so ibp compresses them as it would the
//! model; the tiling only makes each layer large enough that a transfer is
//! worth overlapping (a MiniLM layer is 3.5 MB, gone in a few µs).
//!
//! The ways, each timed over `IBP_OFFLOAD_RUNS` passes (median) after a
//! warm-up pass whose output must be the same bits in every way (the
//! weights are the same):
//! - resident: every layer's weights in device memory, no transfer;
//! - offloaded raw: pinned host memory → device buffer (`cuMemcpyHtoDAsync`);
//! - offloaded IBP: ibp's decoder reads the compressed rows over PCIe and
//!   writes the device buffer (biases and norms, stored raw, are copied);
//! - offloaded with the entropy-coded float coding: not landed (n/a).
//!
//! Environment: `IBP_OFFLOAD_GIB` (default 8), `IBP_OFFLOAD_SCALE` (8),
//! `IBP_OFFLOAD_SEQ` (128 tokens a sequence), `IBP_OFFLOAD_RUNS` (3).

use std::collections::HashMap;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertEncoder, Config, HiddenAct};
use ibp::Rows;
use ibp::fit::{FitOptions, fit};
use ibp::gpu::Gpu;
use ibp::layout::{LayoutOptions, Packed, compress_packed};
use ibp_candle::{HostTensor, IbpTensors, OffloadedStack};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The weight names of one BERT layer, under `layer.0.` (a one-layer
/// encoder's).
const NAMES: [&str; 16] = [
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

fn config(scale: usize) -> Config {
    Config {
        vocab_size: 30522,
        hidden_size: 384 * scale,
        num_hidden_layers: 1,
        num_attention_heads: 12 * scale,
        intermediate_size: 1536 * scale,
        hidden_act: HiddenAct::Gelu,
        hidden_dropout_prob: 0.0,
        max_position_embeddings: 512,
        type_vocab_size: 2,
        initializer_range: 0.02,
        layer_norm_eps: 1e-12,
        pad_token_id: 0,
        position_embedding_type: Default::default(),
        use_cache: false,
        classifier_dropout: None,
        model_type: Some("bert".into()),
    }
}

/// One scaled-up tensor: bf16 on the CPU, its bytes, and, for a matrix,
/// its ibp compression (one codebook, rows of the matrix).
struct Scaled {
    tensor: Tensor,
    bytes: Vec<u8>,
    coded: Option<(ibp::codebook::Codebook, Packed)>,
}

fn bytes_of(t: &Tensor) -> candle_core::Result<Vec<u8>> {
    Ok(t.flatten_all()?
        .to_vec1::<half::bf16>()?
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .collect())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
    let (gib, scale, seq, runs) = (
        env("IBP_OFFLOAD_GIB", 8),
        env("IBP_OFFLOAD_SCALE", 8),
        env("IBP_OFFLOAD_SEQ", 128),
        env("IBP_OFFLOAD_RUNS", 3).max(1),
    );
    let Some(path) = ibp_testdata::data_file("minilm-bf16.ibp") else {
        println!(
            "skipped: minilm-bf16.ibp not found (scripts/stage-candle.sh makes it; set IBP_DATA_DIR)"
        );
        return Ok(());
    };
    let src = IbpTensors::open(&path)?;

    // The six real layers, scaled up and compressed once each.
    let t0 = Instant::now();
    let mut real: Vec<Vec<Scaled>> = Vec::new();
    for l in 0..6 {
        let mut layer = Vec::new();
        for n in NAMES {
            let t = src.load(&format!("encoder.layer.{l}.{n}"), &Device::Cpu)?;
            let t = match t.rank() {
                2 => t.repeat((scale, scale))?,
                _ => t.repeat(scale)?,
            };
            let bytes = bytes_of(&t)?;
            let coded = if t.rank() == 2 {
                // Rows of 384 values, MiniLM's own width (every dimension
                // of the scaled matrices is a multiple of it).
                let rows = Rows::new(&bytes, 384 * 2)?;
                let f = fit(rows, &FitOptions::default())?;
                let p = compress_packed(&f.codebook, rows, &LayoutOptions::default())?;
                Some((f.codebook, p))
            } else {
                None
            };
            layer.push(Scaled {
                tensor: t,
                bytes,
                coded,
            });
        }
        real.push(layer);
    }
    let layer_bytes: usize = real[0].iter().map(|s| s.bytes.len()).sum();
    let n_layers = ((gib as u64) << 30).div_ceil(layer_bytes as u64) as usize;
    println!(
        "stack: {n_layers} layers of {:.1} MB (MiniLM's 6 layers ×{scale} wide, bf16), {:.2} GiB; prepared in {:.1} s",
        layer_bytes as f64 / 1e6,
        (n_layers * layer_bytes) as f64 / (1u64 << 30) as f64,
        t0.elapsed().as_secs_f64()
    );

    let cfg = config(scale);
    let name = |n: &str| format!("layer.0.{n}");
    let gpu = Gpu::new(0)?;
    let build = |vb: VarBuilder<'static>| BertEncoder::load(vb, &cfg);

    // Resident: every layer's own copy on the device.
    let t0 = Instant::now();
    let resident: Vec<BertEncoder> = (0..n_layers)
        .map(|i| {
            let map: HashMap<String, Tensor> = NAMES
                .iter()
                .zip(&real[i % 6])
                .map(|(n, s)| Ok((name(n), s.tensor.to_device(&dev)?)))
                .collect::<candle_core::Result<_>>()?;
            BertEncoder::load(VarBuilder::from_tensors(map, DType::BF16, &dev), &cfg)
        })
        .collect::<candle_core::Result<_>>()?;
    println!("resident: built in {:.1} s", t0.elapsed().as_secs_f64());
    let host = |compressed: bool| -> candle_core::Result<OffloadedStack<BertEncoder>> {
        let layers = (0..n_layers)
            .map(|i| {
                NAMES
                    .iter()
                    .zip(&real[i % 6])
                    .map(|(n, s)| match (&s.coded, compressed) {
                        (Some((cb, p)), true) => HostTensor::compressed(
                            &gpu,
                            &name(n),
                            DType::BF16,
                            s.tensor.shape().clone(),
                            cb,
                            &p.view(),
                        ),
                        _ => HostTensor::raw(
                            &name(n),
                            DType::BF16,
                            s.tensor.shape().clone(),
                            &s.bytes,
                        ),
                    })
                    .collect::<candle_core::Result<Vec<_>>>()
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        OffloadedStack::new(
            cdev,
            Gpu::new(0).map_err(candle_core::Error::wrap)?,
            layers,
            build,
        )
    };
    let t0 = Instant::now();
    let raw = host(false)?;
    let ibp_stack = host(true)?;
    let (raw_link, _) = raw.bytes();
    let (ibp_link, tensor_bytes) = ibp_stack.bytes();
    println!(
        "offloaded: built in {:.1} s; pinned raw {:.2} GiB, pinned IBP {:.2} GiB ({:.1}% saved)",
        t0.elapsed().as_secs_f64(),
        raw_link as f64 / (1u64 << 30) as f64,
        ibp_link as f64 / (1u64 << 30) as f64,
        100.0 * (1.0 - ibp_link as f64 / tensor_bytes as f64)
    );

    println!();
    println!(
        "| batch × {seq} tokens | resident (ms) | offloaded raw (ms) | offloaded IBP (ms) | IBP vs raw | entropy-coded |"
    );
    println!("|---:|---:|---:|---:|---:|---|");
    for batch in [1usize, 32] {
        let x = Tensor::randn(0f32, 1.0, (batch, seq, 384 * scale), &dev)?.to_dtype(DType::BF16)?;
        // All tokens attended: the extended mask is zeros. (candle's BERT
        // builds it as (1 - mask)·f32::MIN, -inf in bf16 and NaN where the
        // mask is 1; the encoder takes the extended mask directly.)
        let mask = Tensor::zeros((batch, 1, 1, seq), DType::BF16, &dev)?;
        let run_resident = || -> candle_core::Result<Tensor> {
            let mut h = x.clone();
            for l in &resident {
                h = l.forward(&h, &mask)?;
            }
            Ok(h)
        };
        let run_off = |s: &OffloadedStack<BertEncoder>| s.forward(&x, |l, h| l.forward(h, &mask));
        // Warm-up, and the three outputs compared bit for bit.
        let a = bytes_of(&run_resident()?)?;
        let b = bytes_of(&run_off(&raw)?)?;
        let c = bytes_of(&run_off(&ibp_stack)?)?;
        raw.check_blocking()?;
        ibp_stack.check_blocking()?;
        assert!(a == b, "offloaded raw differs from resident");
        assert!(a == c, "offloaded IBP differs from resident");
        let time = |f: &dyn Fn() -> candle_core::Result<Tensor>| -> candle_core::Result<f64> {
            let mut ms = Vec::new();
            for _ in 0..runs {
                dev.synchronize()?;
                let t = Instant::now();
                let out = f()?;
                dev.synchronize()?;
                ms.push(t.elapsed().as_secs_f64() * 1e3);
                drop(out);
            }
            ms.sort_by(f64::total_cmp);
            Ok(ms[ms.len() / 2])
        };
        let r = time(&run_resident)?;
        let o = time(&|| run_off(&raw))?;
        let i = time(&|| run_off(&ibp_stack))?;
        raw.check_blocking()?;
        ibp_stack.check_blocking()?;
        println!(
            "| {batch} | {r:.1} | {o:.1} | {i:.1} | {:.2}× | n/a (not landed) |",
            o / i
        );
    }
    Ok(())
}
