//! The two lines a candle user changes to load a model's weights from an
//! `.ibp` file instead of its safetensors file, shown on all-MiniLM-L6-v2
//! (candle-transformers' BERT): both models run the same ids and give the
//! same bits; the sizes and load times are printed.
//!
//! ```console
//! $ ibp compress model.safetensors -o model.ibp
//! $ cargo run -p ibp-candle --release --example load -- model.safetensors model.ibp
//! ```

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use ibp_candle::IbpTensors;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [st, ibp] = args.as_slice() else {
        return Err(
            "usage: load MODEL.safetensors MODEL.ibp (ibp compress writes the second)".into(),
        );
    };
    let dev = Device::Cpu;
    let config: Config = serde_json::from_str(MINILM_CONFIG)?;

    let t = Instant::now();
    // Before: candle's own loader, from the safetensors file.
    // SAFETY: the file is not modified while mapped.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[st], DType::F32, &dev)? };
    let before = BertModel::load(vb, &config)?;
    let t_st = t.elapsed();

    let t = Instant::now();
    // After: the same model from the `.ibp` file.
    let vb = VarBuilder::from_backend(Box::new(IbpTensors::open(ibp)?), DType::F32, dev.clone());
    let after = BertModel::load(vb, &config)?;
    let t_ibp = t.elapsed();

    // "[CLS] hello, world! [SEP]" in bert-base-uncased's ids.
    let ids = Tensor::new(&[[101u32, 7592, 1010, 2088, 999, 102]], &dev)?;
    let types = ids.zeros_like()?;
    let a = before
        .forward(&ids, &types, None)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let b = after
        .forward(&ids, &types, None)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
    let size = |p: &str| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    println!(
        "safetensors {} bytes, loaded in {:.0} ms; .ibp {} bytes ({:.1}% saved), loaded in {:.0} ms; outputs {}",
        size(st),
        t_st.as_secs_f64() * 1e3,
        size(ibp),
        100.0 * (1.0 - size(ibp) as f64 / size(st) as f64),
        t_ibp.as_secs_f64() * 1e3,
        if same { "bit-identical" } else { "DIFFERENT" }
    );
    if !same {
        return Err("the two models disagree".into());
    }
    Ok(())
}

/// all-MiniLM-L6-v2's config.json.
const MINILM_CONFIG: &str = r#"{
  "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
  "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1, "max_position_embeddings": 512,
  "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
  "pad_token_id": 0, "classifier_dropout": null, "model_type": "bert"
}"#;
