//! Tests on the real MiniLM files; each prints `skipped: …` and passes when
//! `scripts/setup.sh` has not fetched them.

use std::sync::OnceLock;

use super::*;
use ibp::Rows;
use ibp::fit::{FitOptions, fit};
use ibp::io::{ParseOptions, SourceFormat};
use ibp::layout::{LayoutOptions, compress_packed, decompress_packed};

fn files() -> Option<MiniLmFiles> {
    let dir = std::env::var_os("IBP_DATA_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/data"),
        PathBuf::from,
    );
    let files = MiniLmFiles::in_dir(&dir);
    if files.exist() {
        Some(files)
    } else {
        println!("skipped: MiniLM data not found (run scripts/setup.sh)");
        None
    }
}

/// The model, loaded once for all tests of this module.
fn model() -> Option<&'static MiniLm> {
    static MODEL: OnceLock<Option<MiniLm>> = OnceLock::new();
    let files = files()?;
    MODEL
        .get_or_init(|| Some(MiniLm::load(&files).expect("loading MiniLM")))
        .as_ref()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn tokenizer_gives_bert_uncased_ids() {
    let Some(m) = model() else { return };
    let t = &m.tokenizer;
    assert_eq!((t.len(), t.cls(), t.sep(), t.unk()), (30522, 101, 102, 100));
    // bert-base-uncased's ids (the vocabulary MiniLM was trained with).
    assert_eq!(t.encode("Hello, World!"), [7592, 1010, 2088, 999]);
    assert_eq!(t.encode("the"), [1996]);
    // A word split into pieces: every piece after the first is a `##` one.
    let ids = t.encode("sentence-transformers");
    let pieces: Vec<&str> = ids.iter().map(|&id| t.token(id).unwrap()).collect();
    assert_eq!(pieces.concat().replace("##", ""), "sentence-transformers");
    assert_eq!(pieces[1], "-");
}

/// Sentence embeddings (mean-pooled, unit length, what sentence-transformers
/// returns for this model) must put a paraphrase closer than an unrelated
/// sentence. A wrong forward pass (a transposed weight, a missing
/// LayerNorm, the wrong GELU or head split) scrambles these rankings.
#[test]
fn embeddings_rank_paraphrases_above_unrelated_sentences() {
    let Some(m) = model() else { return };
    let triples = [
        (
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "A man is riding a horse.",
        ),
        (
            "A woman is playing the violin.",
            "A woman plays a violin.",
            "The stock market fell sharply today.",
        ),
        (
            "The cat sits on the mat.",
            "A cat is sitting on a rug.",
            "Quantum computers use qubits.",
        ),
        (
            "How do I reset my password?",
            "I forgot my password and need to change it.",
            "What is the capital of France?",
        ),
        (
            "Two children are playing in the snow.",
            "Kids play outside in the snow.",
            "A chef is slicing onions in a kitchen.",
        ),
    ];
    let mut report = String::new();
    for (anchor, close, far) in triples {
        let [a, c, f] = [anchor, close, far].map(|s| m.embed(s).unwrap());
        for e in [&a, &c, &f] {
            assert_eq!(e.len(), 384);
            assert!(e.iter().all(|v| v.is_finite()));
            let norm = cosine(e, e).sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        }
        let (sc, sf) = (cosine(&a, &c), cosine(&a, &f));
        report += &format!("{sc:.3} > {sf:.3}: {anchor:?}\n");
        assert!(
            sc > 0.5 && sc > sf + 0.2,
            "{anchor:?}: paraphrase {sc}, unrelated {sf}"
        );
    }
    // The same sentence twice is the same embedding; a different one is not.
    let x = m.embed("A man is eating food.").unwrap();
    assert_eq!(x, m.embed("A man is eating food.").unwrap());
    assert!(cosine(&x, &m.embed("a man is EATING food").unwrap()) > 0.95);
    println!("{report}");
}

#[test]
fn kv_cache_rows_are_per_token_and_per_layer() {
    let Some(m) = model() else { return };
    let text = "The keys and values of every layer, one row per token. ".repeat(12);
    let opts = KvOptions::default().with_window(40);
    let cache = m.kv_cache(&text, &opts).unwrap();
    let body = m.tokenizer.encode(&text).len();
    assert_eq!(cache.windows, body.div_ceil(38));
    assert_eq!(cache.tokens, body + 2 * cache.windows);
    assert_eq!(cache.ids.len(), cache.tokens);
    assert_eq!((cache.layers(), cache.heads, cache.width), (6, 12, 384));
    for l in 0..6 {
        for t in [&cache.keys[l], &cache.values[l]] {
            assert_eq!(t.len(), cache.tokens * 384);
            assert!(t.iter().all(|v| v.is_finite()));
        }
        assert_ne!(cache.keys[l], cache.values[l]);
    }
    // Every window starts with [CLS]: in layer 0 its key depends only on
    // the embeddings of [CLS] at position 0, so all windows agree.
    let first = &cache.keys[0][..384];
    let starts: Vec<usize> = (0..cache.tokens)
        .filter(|&i| cache.ids[i] == m.tokenizer.cls())
        .collect();
    assert_eq!(starts.len(), cache.windows);
    for &s in &starts {
        assert_eq!(&cache.keys[0][s * 384..(s + 1) * 384], first);
    }
    // ... while in the last layer they have seen different windows.
    assert_ne!(
        &cache.keys[5][..384],
        &cache.keys[5][starts[1] * 384..(starts[1] + 1) * 384]
    );
    // Deterministic: the same text gives the same bits.
    assert_eq!(cache, m.kv_cache(&text, &opts).unwrap());

    // The written file reads back through ibp's own safetensors reader.
    let bytes = cache.to_safetensors(&DType::F16).unwrap();
    let doc = ibp::io::parse(&bytes, SourceFormat::Safetensors, &ParseOptions::default()).unwrap();
    assert_eq!(doc.groups.len(), 12);
    assert_eq!(doc.groups[3].name, "layer.1.value");
    assert_eq!(doc.groups[3].shape, [cache.tokens as u64, 384]);
    assert_eq!(
        doc.groups[3].data,
        cache.table_bytes(1, KvPart::Value, &DType::F16).unwrap()
    );
    assert!(m.kv_cache(" \n ", &opts).is_err());
    assert!(
        m.kv_cache(&text, &KvOptions::default().with_window(2))
            .is_err()
    );
}

/// The model card through the model: thousands of tokens, every table
/// fitted and one compressed and restored bit for bit. Prints the savings
/// (docs/BENCHMARKS.md's numbers come from `ibp analyze` on `ibp kv-data` output,
/// which fits the same way).
#[test]
fn kv_cache_of_the_model_card_compresses_losslessly() {
    let Some(m) = model() else { return };
    let files = files().unwrap();
    let mut text = files.card_text().unwrap();
    // Q: why only the card's start in debug builds?
    // A: `cargo test` without `--release` (scripts/test.sh, CI) runs the
    // forward pass unoptimised, some fifty times slower: the whole card
    // took minutes there. 1.5 KB of it is still hundreds of real tokens.
    if cfg!(debug_assertions) {
        let cut = text.char_indices().nth(1500).map_or(text.len(), |(i, _)| i);
        text.truncate(cut);
    }
    let t0 = std::time::Instant::now();
    let cache = m.kv_cache(&text, &KvOptions::default()).unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let want = if cfg!(debug_assertions) { 200 } else { 2000 };
    assert!(cache.tokens > want, "{} tokens", cache.tokens);
    println!(
        "{} tokens in {} windows, forward pass {secs:.1} s",
        cache.tokens, cache.windows
    );
    for dtype in [DType::BF16, DType::F16] {
        let mut total = [(0u64, 0u64); 2];
        for layer in 0..cache.layers() {
            let mut line = format!("{dtype} layer {layer}:");
            for (p, part) in [KvPart::Key, KvPart::Value].into_iter().enumerate() {
                let bytes = cache.table_bytes(layer, part, &dtype).unwrap();
                let rows = Rows::new(&bytes, 384 * 2).unwrap();
                let f = fit(rows, &FitOptions::default()).unwrap();
                assert!(f.savings() > 0.0, "{dtype} layer {layer} {part:?}");
                total[p].0 += f.sample_bytes;
                total[p].1 += f.chosen.stored_bytes;
                line += &format!(" {} {:.1}%", part.name(), 100.0 * f.savings());
                if layer == 2 {
                    let packed =
                        compress_packed(&f.codebook, rows, &LayoutOptions::default()).unwrap();
                    let mut back = vec![0u8; bytes.len()];
                    decompress_packed(&f.codebook, &packed.view(), &mut back).unwrap();
                    assert_eq!(back, bytes);
                }
            }
            println!("{line}");
        }
        for (p, (raw, stored)) in total.iter().enumerate() {
            println!(
                "{dtype} all {}: {:.1}% saved",
                ["keys", "values"][p],
                100.0 * (1.0 - *stored as f64 / *raw as f64)
            );
        }
    }
}

#[test]
fn token_major_interleaves_rows_token_by_token() {
    let a = [1u8, 1, 2, 2, 3, 3];
    let b = [4u8, 4, 5, 5, 6, 6];
    assert_eq!(
        super::token_major(&[&a, &b], 2).unwrap(),
        [1, 1, 4, 4, 2, 2, 5, 5, 3, 3, 6, 6]
    );
    assert!(super::token_major(&[&a, &b[..4]], 2).is_err());
    assert!(super::token_major(&[&a], 4).is_err());
    assert!(super::token_major(&[], 2).is_err());
}

/// A transposed word-embedding table is named as transposed, with the
/// shape that is meant ([30522, 384]), not [384, 384]. Needs no data.
#[test]
fn a_transposed_embedding_table_is_named_so() {
    let (rows, cols) = (384u64, 40u64);
    let header = format!(
        r#"{{"embeddings.word_embeddings.weight":{{"dtype":"F32","shape":[{rows},{cols}],"data_offsets":[0,{}]}}}}"#,
        rows * cols * 4
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.resize(bytes.len() + (rows * cols * 4) as usize, 0);
    let path = std::env::temp_dir().join(format!("ibp-kv-transposed-{}.st", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let e = Bert::load(&path, BertConfig::MINILM_L6).err().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        e.message().contains("[40, 384] is meant") && !e.message().contains("[384, 384]"),
        "{}",
        e.message()
    );
}
