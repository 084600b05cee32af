//! A BERT encoder's forward pass in plain Rust (f32, no attention mask: every
//! position of a window is a real token), for all-MiniLM-L6-v2's weights as
//! its `model.safetensors` stores them.
//!
//! The pass is the one of Hugging Face's `BertModel` in eval mode:
//! embeddings (word + position + token type 0) → LayerNorm, then per layer
//! self-attention (Q, K, V projections, softmax(QKᵀ/√d)V per head, output
//! projection, residual, LayerNorm) and the feed-forward block (dense, exact
//! erf GELU, dense, residual, LayerNorm). Linear weights are `[out, in]`.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::Path;

use ibp::io::{self, DType, ParseOptions, SourceFormat};
use ibp::{Error, Result};

/// The shape of a BERT encoder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BertConfig {
    /// Width of the hidden state (384 for MiniLM-L6).
    pub hidden: usize,
    /// Attention heads; `hidden / heads` is the head width.
    pub heads: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Width of the feed-forward block.
    pub intermediate: usize,
    /// Positions the position embeddings cover (the longest window).
    pub max_positions: usize,
    /// LayerNorm's epsilon.
    pub layer_norm_eps: f32,
}

impl BertConfig {
    /// all-MiniLM-L6-v2's `config.json`.
    pub const MINILM_L6: BertConfig = BertConfig {
        hidden: 384,
        heads: 12,
        layers: 6,
        intermediate: 1536,
        max_positions: 512,
        layer_norm_eps: 1e-12,
    };

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// A dense layer, `y = W x + b` with `W` of `[out, in]`.
struct Linear {
    w: Vec<f32>,
    b: Vec<f32>,
    out: usize,
    inp: usize,
}

struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    ff_in: Linear,
    ff_out: Linear,
    ff_norm: LayerNorm,
}

/// The weights of a BERT encoder.
pub struct Bert {
    config: BertConfig,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
}

/// One window's hidden states and, per layer, the keys and values of every
/// position (`positions × hidden` each, position-major: one KV-cache row per
/// token).
pub struct Forward {
    /// The last layer's output.
    pub hidden: Vec<f32>,
    /// Per layer, the key projections.
    pub keys: Vec<Vec<f32>>,
    /// Per layer, the value projections.
    pub values: Vec<Vec<f32>>,
}

impl Bert {
    /// Load the weights from a `model.safetensors` with the layout of
    /// `config` (f32 tensors named as Hugging Face's `BertModel` names them,
    /// with or without a `bert.` prefix).
    pub fn load(path: &Path, config: BertConfig) -> Result<Self> {
        let file = io::InputFile::open(path)?;
        let doc = io::parse(
            file.bytes(),
            SourceFormat::Safetensors,
            &ParseOptions::default(),
        )?;
        let tensors: HashMap<&str, &io::TensorGroup<'_>> = doc
            .groups
            .iter()
            .map(|g| (g.name.strip_prefix("bert.").unwrap_or(&g.name), g))
            .collect();
        let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let g = tensors.get(name).ok_or_else(|| {
                Error::invalid(format!(
                    "{} has no tensor {name:?}; is it a BERT model's safetensors file?",
                    path.display()
                ))
            })?;
            let want: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
            if g.dtype != DType::F32 || g.shape != want {
                return Err(Error::unsupported(format!(
                    "tensor {name:?} is {} {:?}; the forward pass needs f32 {want:?}",
                    g.dtype, g.shape
                )));
            }
            Ok(g.data
                .as_chunks::<4>()
                .0
                .iter()
                .map(|&b| f32::from_le_bytes(b))
                .collect())
        };
        let h = config.hidden;
        let linear = |name: &str, out: usize, inp: usize| -> Result<Linear> {
            Ok(Linear {
                w: get(&format!("{name}.weight"), &[out, inp])?,
                b: get(&format!("{name}.bias"), &[out])?,
                out,
                inp,
            })
        };
        let norm = |name: &str| -> Result<LayerNorm> {
            Ok(LayerNorm {
                gamma: get(&format!("{name}.weight"), &[h])?,
                beta: get(&format!("{name}.bias"), &[h])?,
            })
        };
        if config.heads == 0 || !h.is_multiple_of(config.heads) {
            return Err(Error::invalid(format!(
                "{} heads do not divide a hidden width of {h}",
                config.heads
            )));
        }
        // The vocabulary size is the one tensor dimension the config does
        // not fix.
        let vocab = match tensors.get("embeddings.word_embeddings.weight") {
            // Q: why check the width before `get`? A: with the vocabulary
            // read off the first axis, a transposed table ([384, 30522])
            // was asked to be [384, 384], when [30522, 384] is meant.
            Some(g) if g.shape.len() == 2 && g.shape[1] != h as u64 => {
                return Err(Error::unsupported(format!(
                    "tensor \"embeddings.word_embeddings.weight\" is {} {:?}; the forward pass needs f32 [vocabulary, {h}], one row of {h} per token{}",
                    g.dtype,
                    g.shape,
                    if g.shape[0] == h as u64 {
                        format!(
                            " (this one looks transposed: [{}, {h}] is meant)",
                            g.shape[1]
                        )
                    } else {
                        String::new()
                    }
                )));
            }
            Some(g) => g.shape.first().map_or(0, |&rows| rows as usize),
            None => 0,
        };
        let mut layers = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let p = format!("encoder.layer.{i}");
            layers.push(Layer {
                query: linear(&format!("{p}.attention.self.query"), h, h)?,
                key: linear(&format!("{p}.attention.self.key"), h, h)?,
                value: linear(&format!("{p}.attention.self.value"), h, h)?,
                attn_out: linear(&format!("{p}.attention.output.dense"), h, h)?,
                attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                ff_in: linear(&format!("{p}.intermediate.dense"), config.intermediate, h)?,
                ff_out: linear(&format!("{p}.output.dense"), h, config.intermediate)?,
                ff_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        let word = get("embeddings.word_embeddings.weight", &[vocab, h])?;
        Ok(Bert {
            config,
            word,
            position: get(
                "embeddings.position_embeddings.weight",
                &[config.max_positions, h],
            )?,
            token_type: get("embeddings.token_type_embeddings.weight", &[2, h])?,
            emb_norm: norm("embeddings.LayerNorm")?,
            layers,
        })
    }

    /// The model's shape.
    pub fn config(&self) -> BertConfig {
        self.config
    }

    /// Number of tokens in the word embedding table.
    pub fn vocab_size(&self) -> usize {
        self.word.len() / self.config.hidden
    }

    /// Run one window of token ids (at most `max_positions`, each below
    /// [`Bert::vocab_size`]; [`ibp::ErrorKind::InvalidArgument`]
    /// otherwise).
    pub fn forward(&self, ids: &[u32]) -> Result<Forward> {
        let c = self.config;
        let (n, h) = (ids.len(), c.hidden);
        if n == 0 || n > c.max_positions {
            return Err(Error::invalid(format!(
                "a window holds 1 to {} tokens, not {n}",
                c.max_positions
            )));
        }
        let mut x = vec![0f32; n * h];
        for (pos, (&id, row)) in ids.iter().zip(x.chunks_exact_mut(h)).enumerate() {
            let id = id as usize;
            let word = self.word.get(id * h..(id + 1) * h).ok_or_else(|| {
                Error::invalid(format!(
                    "token id {id} is outside the vocabulary of {}",
                    self.vocab_size()
                ))
            })?;
            let position = &self.position[pos * h..(pos + 1) * h];
            for j in 0..h {
                row[j] = word[j] + position[j] + self.token_type[j];
            }
        }
        layer_norm(&mut x, &self.emb_norm, c.layer_norm_eps);

        let mut keys = Vec::with_capacity(c.layers);
        let mut values = Vec::with_capacity(c.layers);
        for layer in &self.layers {
            let q = linear(&x, &layer.query);
            let k = linear(&x, &layer.key);
            let v = linear(&x, &layer.value);
            let ctx = attention(&q, &k, &v, n, c.heads, c.head_dim());
            keys.push(k);
            values.push(v);
            let attn = linear(&ctx, &layer.attn_out);
            add(&mut x, &attn);
            layer_norm(&mut x, &layer.attn_norm, c.layer_norm_eps);
            let mut inner = linear(&x, &layer.ff_in);
            inner.iter_mut().for_each(|v| *v = gelu(*v));
            let ff = linear(&inner, &layer.ff_out);
            add(&mut x, &ff);
            layer_norm(&mut x, &layer.ff_norm, c.layer_norm_eps);
        }
        Ok(Forward {
            hidden: x,
            keys,
            values,
        })
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// Rows of `x` (each `lin.inp` wide) through `lin`.
///
/// Q: why four rows at a time and eight partial sums per row? A: each
/// weight row is then read once per four tokens instead of once per token
/// (the weights, 7 MB a layer, do not fit in L2), and eight independent
/// lanes let LLVM vectorise the dot products without reassociating a float
/// sum (which it may not do). The order of the additions is fixed, so the
/// output is the same on every run and every thread count.
fn linear(x: &[f32], lin: &Linear) -> Vec<f32> {
    const TOKENS: usize = 4;
    let n = x.len() / lin.inp;
    let mut y = vec![0f32; n * lin.out];
    let mut t = 0;
    while t < n {
        let tb = TOKENS.min(n - t);
        let rows: Vec<&[f32]> = (0..tb)
            .map(|i| &x[(t + i) * lin.inp..(t + i + 1) * lin.inp])
            .collect();
        for o in 0..lin.out {
            let w = &lin.w[o * lin.inp..(o + 1) * lin.inp];
            let mut sums = [0f32; TOKENS];
            if tb == TOKENS {
                let d = dot4([rows[0], rows[1], rows[2], rows[3]], w);
                sums = d;
            } else {
                for (s, r) in sums.iter_mut().zip(&rows) {
                    *s = dot4([r, r, r, r], w)[0];
                }
            }
            for i in 0..tb {
                y[(t + i) * lin.out + o] = sums[i] + lin.b[o];
            }
        }
        t += tb;
    }
    y
}

/// Four dot products with one weight row, eight lanes each.
#[inline(always)]
fn dot4(x: [&[f32]; 4], w: &[f32]) -> [f32; 4] {
    const L: usize = 8;
    let mut acc = [[0f32; L]; 4];
    let full = w.len() / L * L;
    for i in (0..full).step_by(L) {
        let wc = &w[i..i + L];
        for (a, r) in acc.iter_mut().zip(&x) {
            let rc = &r[i..i + L];
            for l in 0..L {
                a[l] += rc[l] * wc[l];
            }
        }
    }
    let mut out = [0f32; 4];
    for ((o, a), r) in out.iter_mut().zip(&acc).zip(&x) {
        let mut s = a.iter().sum::<f32>();
        for i in full..w.len() {
            s += r[i] * w[i];
        }
        *o = s;
    }
    out
}

/// softmax(Q Kᵀ / √d) V per head, for `n` positions that all see each other.
fn attention(q: &[f32], k: &[f32], v: &[f32], n: usize, heads: usize, d: usize) -> Vec<f32> {
    let h = heads * d;
    let scale = 1.0 / (d as f32).sqrt();
    let mut ctx = vec![0f32; n * h];
    let mut p = vec![0f32; n];
    for head in 0..heads {
        let col = head * d;
        for i in 0..n {
            let qi = &q[i * h + col..i * h + col + d];
            let mut max = f32::NEG_INFINITY;
            for (j, pj) in p.iter_mut().enumerate() {
                let kj = &k[j * h + col..j * h + col + d];
                *pj = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                max = max.max(*pj);
            }
            let mut total = 0f32;
            for pj in p.iter_mut() {
                *pj = (*pj - max).exp();
                total += *pj;
            }
            let out = &mut ctx[i * h + col..i * h + col + d];
            for (j, pj) in p.iter().enumerate() {
                let w = pj / total;
                let vj = &v[j * h + col..j * h + col + d];
                out.iter_mut().zip(vj).for_each(|(o, x)| *o += w * x);
            }
        }
    }
    ctx
}

fn layer_norm(x: &mut [f32], norm: &LayerNorm, eps: f32) {
    let h = norm.gamma.len();
    for row in x.chunks_exact_mut(h) {
        let mean = row.iter().sum::<f32>() / h as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(&norm.gamma).zip(&norm.beta) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

/// BERT's exact GELU, `x Φ(x) = x (1 + erf(x / √2)) / 2`.
fn gelu(x: f32) -> f32 {
    let x = f64::from(x);
    (0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))) as f32
}

/// erf from Numerical Recipes' Chebyshev fit of erfc (`erfcc`, fractional
/// error below 1.2e-7 everywhere): enough for an f32 activation, and no
/// dependency (std has no erf).
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 { 1.0 - erfc } else { erfc - 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // erf(0.5), erf(1), erf(2), from tables.
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (2.0, 0.995_322_265),
            (-1.0, -0.842_700_792_9),
        ] {
            assert!((erf(x) - want).abs() < 2e-7, "erf({x}) = {}", erf(x));
        }
        assert!((gelu(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!(gelu(-10.0).abs() < 1e-6);
    }

    #[test]
    fn linear_matches_naive_for_every_tail() {
        // 5 tokens (one block of 4 and a tail of 1), 13 inputs (a tail of 5
        // after 8 lanes), 3 outputs.
        let (n, inp, out) = (5, 13, 3);
        let x: Vec<f32> = (0..n * inp).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let lin = Linear {
            w: (0..out * inp)
                .map(|i| ((i * 5) % 9) as f32 * 0.5 - 2.0)
                .collect(),
            b: vec![1.0, -2.0, 0.5],
            out,
            inp,
        };
        let y = linear(&x, &lin);
        for t in 0..n {
            for o in 0..out {
                let want: f32 = (0..inp)
                    .map(|i| x[t * inp + i] * lin.w[o * inp + i])
                    .sum::<f32>()
                    + lin.b[o];
                assert_eq!(y[t * out + o], want, "token {t}, output {o}");
            }
        }
    }

    #[test]
    fn attention_of_one_position_is_its_value() {
        let q = [1.0, 2.0, 3.0, 4.0];
        let k = [0.5, -1.0, 2.0, 0.0];
        let v = [9.0, 8.0, 7.0, 6.0];
        assert_eq!(attention(&q, &k, &v, 1, 2, 2), v);
        // Two positions with equal keys: the average of the values.
        let q2 = [1.0, 1.0, 1.0, 1.0];
        let k2 = [1.0, 0.0, 1.0, 0.0];
        let v2 = [2.0, 4.0, 6.0, 8.0];
        assert_eq!(attention(&q2, &k2, &v2, 2, 1, 2), [4.0, 6.0, 4.0, 6.0]);
    }
}
