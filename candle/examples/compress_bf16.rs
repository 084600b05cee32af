//! A safetensors model with its floats rounded to bf16 (by candle, to
//! nearest), written as safetensors and compressed to `.ibp` as `ibp
//! compress` does: how a bf16 checkpoint for candle is made, and how
//! scripts/stage-candle.sh makes the MiniLM file the GPU machine gets.
//!
//! ```console
//! $ cargo run -p ibp-candle --release --example compress_bf16 -- model.safetensors model-bf16.ibp
//! ```

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use ibp::io::{ParseOptions, SourceFormat};
use ibp::pipeline::{CompressOptions, compress_document};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [src, dst] = args.as_slice() else {
        return Err("usage: compress_bf16 IN.safetensors OUT.ibp".into());
    };
    let tensors: HashMap<String, Tensor> = candle_core::safetensors::load(src, &Device::Cpu)?
        .into_iter()
        .map(|(k, v)| {
            let v = if v.dtype().is_float() {
                v.to_dtype(DType::BF16)?
            } else {
                v
            };
            Ok((k, v))
        })
        .collect::<candle_core::Result<_>>()?;
    let st = format!("{dst}.safetensors.tmp");
    candle_core::safetensors::save(&tensors, &st)?;
    let bytes = std::fs::read(&st)?;
    std::fs::remove_file(&st)?;
    let doc = ibp::io::parse(&bytes, SourceFormat::Safetensors, &ParseOptions::default())?;
    let (out, report) = compress_document(&doc, &CompressOptions::default(), Vec::new())?;
    std::fs::write(dst, &out)?;
    println!(
        "{src}: {} tensors in bf16, {} bytes as safetensors, {} as .ibp ({:.1}% saved)",
        tensors.len(),
        bytes.len(),
        out.len(),
        100.0 * (1.0 - out.len() as f64 / bytes.len() as f64)
    );
    let _ = report;
    Ok(())
}
