//! What the MiniLM tests share: the data files, `.ibp` copies of the model
//! made as `ibp compress` makes them, MiniLM's configuration, batching and
//! mean pooling.

#![allow(dead_code)] // each test binary uses its own part

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, HiddenAct};
use ibp::io::{ParseOptions, SourceFormat};
use ibp::pipeline::{CompressOptions, compress_document};
use ibp_candle::IbpTensors;
use ibp_testdata::kv::Tokenizer;

/// The sentences every test embeds: short and long, punctuation, a word
/// split into pieces, a word the vocabulary lacks.
pub const SENTENCES: [&str; 6] = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market fell sharply today.",
    "Hello, World!",
    "sentence-transformers map sentences to a dense vector space, used for clustering or semantic search.",
    "Quantum computers use qubits; ¿qué tal?",
];

/// MiniLM's files: its weights as a safetensors file and
/// `minilm-vocab.txt`, where `scripts/setup.sh` put them (`$IBP_DATA_DIR`),
/// or `None` with the skip note printed.
///
/// The weights are `model.safetensors` (f32), or, where only
/// `minilm-bf16.ibp` travelled (the GPU machine: the f32 file is over the
/// carry limit; scripts/stage-candle.sh), that file restored: MiniLM's
/// weights rounded to bf16, the original bytes checked by ibp's restore.
pub fn data() -> Option<(PathBuf, PathBuf)> {
    let vocab = ibp_testdata::data_file("minilm-vocab.txt");
    let weights = ibp_testdata::data_file("model.safetensors").or_else(restored_bf16);
    let found = weights.zip(vocab);
    if found.is_none() {
        println!("skipped: MiniLM data not found (run scripts/setup.sh, or set IBP_DATA_DIR)");
    }
    found
}

/// `minilm-bf16.ibp` restored to its safetensors file, once.
fn restored_bf16() -> Option<PathBuf> {
    static RESTORED: OnceLock<Option<PathBuf>> = OnceLock::new();
    RESTORED
        .get_or_init(|| {
            let src = ibp_testdata::data_file("minilm-bf16.ibp")?;
            let file = ibp::container::IbpFile::open(&src).expect("opening minilm-bf16.ibp");
            let out = scratch("minilm-restored.safetensors");
            let mut w = std::io::BufWriter::new(std::fs::File::create(&out).unwrap());
            file.restore(&mut w, &Default::default())
                .expect("restoring minilm-bf16.ibp");
            std::io::Write::flush(&mut w).unwrap();
            Some(out)
        })
        .clone()
}

/// all-MiniLM-L6-v2's configuration (its config.json).
pub fn minilm_config() -> Config {
    Config {
        vocab_size: 30522,
        hidden_size: 384,
        num_hidden_layers: 6,
        num_attention_heads: 12,
        intermediate_size: 1536,
        hidden_act: HiddenAct::Gelu,
        hidden_dropout_prob: 0.1,
        max_position_embeddings: 512,
        type_vocab_size: 2,
        initializer_range: 0.02,
        layer_norm_eps: 1e-12,
        pad_token_id: 0,
        position_embedding_type: Default::default(),
        use_cache: true,
        classifier_dropout: None,
        model_type: Some("bert".into()),
    }
}

/// Where the test files go: the target folder's scratch space, or, where
/// the binary runs on another machine (the GPU host), the system's
/// temporary folder; one folder per test binary.
pub fn scratch(name: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if target.is_dir() {
        target.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join("ibp-candle").join(env!("CARGO_CRATE_NAME"));
    std::fs::create_dir_all(&dir).expect("creating the scratch folder");
    dir.join(name)
}

/// The safetensors file `src` compressed into `dst`, as `ibp compress`
/// does (the default options: packed layout, hash-checked).
pub fn compress_file(src: &Path, dst: &Path) {
    let bytes = std::fs::read(src).expect("reading the safetensors file");
    let doc = ibp::io::parse(&bytes, SourceFormat::Safetensors, &ParseOptions::default())
        .expect("parsing the safetensors file");
    let (out, _) =
        compress_document(&doc, &CompressOptions::default(), Vec::new()).expect("compressing");
    std::fs::write(dst, out).expect("writing the .ibp file");
}

/// MiniLM's weights as a safetensors file of `dtype` (the floats converted
/// by candle where the data's file holds another type, the integers as
/// they are) and its `.ibp` copy, made once per test binary.
pub fn model_files(dtype: DType) -> Option<(PathBuf, PathBuf)> {
    static F32: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    static BF16: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let (weights, _) = data()?;
    let cell = match dtype {
        DType::F32 => &F32,
        DType::BF16 => &BF16,
        other => panic!("no model file of {other:?}"),
    };
    Some(
        cell.get_or_init(|| {
            let t = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
            let st = if t["embeddings.word_embeddings.weight"].dtype() == dtype {
                weights
            } else {
                let t: std::collections::HashMap<String, Tensor> = t
                    .into_iter()
                    .map(|(k, v)| {
                        let v = if v.dtype().is_float() {
                            v.to_dtype(dtype).unwrap()
                        } else {
                            v
                        };
                        (k, v)
                    })
                    .collect();
                let p = scratch(&format!("minilm-{dtype:?}.safetensors"));
                candle_core::safetensors::save(&t, &p).unwrap();
                p
            };
            let ibp = scratch(&format!("minilm-{dtype:?}.ibp"));
            compress_file(&st, &ibp);
            (st, ibp)
        })
        .clone(),
    )
}

/// MiniLM from candle's own safetensors loader.
pub fn model_from_safetensors(st: &Path, dtype: DType, dev: &Device) -> Result<BertModel> {
    // SAFETY: the file is the test's own, not modified while mapped.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[st], dtype, dev)? };
    BertModel::load(vb, &minilm_config())
}

/// MiniLM from the `.ibp` file, through [`IbpTensors`].
pub fn model_from_ibp(ibp: &Path, dtype: DType, dev: &Device) -> Result<BertModel> {
    let vb = VarBuilder::from_backend(Box::new(IbpTensors::open(ibp)?), dtype, dev.clone());
    BertModel::load(vb, &minilm_config())
}

/// The tokenizer of MiniLM's vocabulary (ours: testdata/src/kv/tokenizer.rs).
pub fn tokenizer(vocab: &Path) -> Tokenizer {
    Tokenizer::from_vocab(&std::fs::read_to_string(vocab).unwrap()).unwrap()
}

/// `[CLS] tokens [SEP]` of each sentence, padded with 0 to the longest:
/// the ids, token types (all 0) and attention mask, each `batch × len`.
pub fn batch(
    tok: &Tokenizer,
    sentences: &[&str],
    dev: &Device,
) -> Result<(Tensor, Tensor, Tensor)> {
    let rows: Vec<Vec<u32>> = sentences
        .iter()
        .map(|s| {
            let mut ids = vec![tok.cls()];
            ids.extend(tok.encode(s).into_iter().take(254));
            ids.push(tok.sep());
            ids
        })
        .collect();
    let len = rows.iter().map(Vec::len).max().unwrap_or(0);
    let (mut ids, mut mask) = (Vec::new(), Vec::new());
    for r in &rows {
        ids.extend(r.iter().copied().chain(std::iter::repeat(0)).take(len));
        mask.extend((0..len).map(|i| u32::from(i < r.len())));
    }
    let n = rows.len();
    let ids = Tensor::from_vec(ids, (n, len), dev)?;
    let mask = Tensor::from_vec(mask, (n, len), dev)?;
    Ok((ids.clone(), ids.zeros_like()?, mask))
}

/// Sentence embeddings as sentence-transformers computes them for MiniLM:
/// the mean of the last layer's states over the tokens the mask keeps, in
/// f32, scaled to unit length (`batch × hidden`).
pub fn embed(model: &BertModel, ids: &Tensor, types: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let hidden = model
        .forward(ids, types, Some(mask))?
        .to_dtype(DType::F32)?;
    let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
    let sum = hidden.broadcast_mul(&m)?.sum(1)?;
    let mean = sum.broadcast_div(&m.sum(1)?)?;
    let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
    mean.broadcast_div(&norm)
}

/// A tensor's bits, for comparisons that a float `==` would blur (NaN,
/// signed zeros).
pub fn bits(t: &Tensor) -> Vec<u8> {
    let t = t.flatten_all().unwrap();
    match t.dtype() {
        DType::F32 => t
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec1::<half::f16>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::I64 => t
            .to_vec1::<i64>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::U32 => t
            .to_vec1::<u32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::U8 => t.to_vec1::<u8>().unwrap(),
        DType::F64 => t
            .to_vec1::<f64>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::I32 => t
            .to_vec1::<i32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I16 => t
            .to_vec1::<i16>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        other => panic!("bits of {other:?}"),
    }
}
