//! all-MiniLM-L6-v2 in candle-transformers' BERT on the CPU, loaded by
//! candle's own safetensors loader and from the `.ibp` file `ibp compress`
//! makes of the same file: every tensor comes back with its name, dtype,
//! shape and bits, and the sentence embeddings are bit-identical, in f32
//! and bf16. Each test prints "skipped: …" and passes when
//! `scripts/setup.sh` has not fetched the MiniLM data.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::var_builder::SimpleBackend;
use common::*;
use ibp_candle::{CompressedEmbedding, IbpTensors};

/// Every tensor of the safetensors file, as candle loads it, against the
/// same name from the `.ibp` file: the same set of names, and for each the
/// same dtype, shape and bytes.
fn every_tensor_restored(dtype: DType) {
    let Some((st, ibp)) = model_files(dtype) else {
        return;
    };
    let want: BTreeMap<String, Tensor> = candle_core::safetensors::load(&st, &Device::Cpu)
        .unwrap()
        .into_iter()
        .collect();
    let got = IbpTensors::open(&ibp).unwrap();
    let mut names: Vec<&str> = got.names().collect();
    names.sort_unstable();
    assert_eq!(names, want.keys().map(String::as_str).collect::<Vec<_>>());
    let mut compressed = 0;
    for (name, w) in &want {
        let g = got.load(name, &Device::Cpu).unwrap();
        assert_eq!((g.dtype(), g.dims()), (w.dtype(), w.dims()), "{name}");
        assert!(bits(&g) == bits(w), "{name}: the bits differ");
        assert!(got.contains_tensor(name));
        let group = got.file().find_group(name).unwrap();
        compressed += usize::from(group.codebook().is_some());
    }
    // The matrices were compressed, not stored raw: the loader decoded them.
    assert!(
        compressed >= 30,
        "only {compressed} tensors were compressed"
    );
    assert!(!got.contains_tensor("no.such.tensor"));
    assert!(got.load("no.such.tensor", &Device::Cpu).is_err());
}

#[test]
fn every_tensor_restored_f32() {
    every_tensor_restored(DType::F32);
}

#[test]
fn every_tensor_restored_bf16() {
    every_tensor_restored(DType::BF16);
}

/// The sentence embeddings of MiniLM loaded both ways, from files of
/// `dtype`: the same bits.
///
/// Q: why compute in f32 from the bf16 weights? A: candle-transformers'
/// BERT turns the attention mask into `(1 - mask) · f32::MIN` in the
/// model's dtype, and `f32::MIN` rounds to -inf in bf16, so a bf16 forward
/// pass gives NaN everywhere (`0 · -inf`), whichever loader: nothing to
/// compare. The weights are the bf16 file's (checked bit for bit by
/// `every_tensor_restored_bf16`), widened by the `VarBuilder`.
fn embeddings_bit_identical(dtype: DType) {
    let Some((st, ibp)) = model_files(dtype) else {
        return;
    };
    let (_, vocab) = data().unwrap();
    let dev = Device::Cpu;
    let tok = tokenizer(&vocab);
    let (ids, types, mask) = batch(&tok, &SENTENCES, &dev).unwrap();
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
    assert_eq!(a.dims(), [SENTENCES.len(), 384]);
    assert!(bits(&a) == bits(&b), "{dtype:?}: the embeddings differ");
    // Real embeddings, not zeros or NaN: unit length, paraphrase closest.
    let v = a.to_vec2::<f32>().unwrap();
    for e in &v {
        let n: f32 = e.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-3, "{dtype:?}: norm² {n}");
    }
    let cos = |i: usize, j: usize| -> f32 { v[i].iter().zip(&v[j]).map(|(x, y)| x * y).sum() };
    assert!(
        cos(0, 1) > cos(0, 2) + 0.2,
        "{dtype:?}: {} vs {}",
        cos(0, 1),
        cos(0, 2)
    );
    println!(
        "{dtype:?}: {} sentences, bit-identical; cos(paraphrase) {:.3}, cos(unrelated) {:.3}",
        v.len(),
        cos(0, 1),
        cos(0, 2)
    );
}

#[test]
fn minilm_embeddings_bit_identical_f32() {
    embeddings_bit_identical(DType::F32);
}

#[test]
fn minilm_embeddings_bit_identical_bf16() {
    embeddings_bit_identical(DType::BF16);
}

/// The candle model is MiniLM: its f32 embeddings agree with our own
/// forward pass (testdata/src/kv/bert.rs, another summation order) to
/// float rounding, and the token ids are bert-base-uncased's.
#[test]
fn candle_minilm_matches_our_reference_forward_pass() {
    let Some((st, vocab)) = data() else { return };
    let dev = Device::Cpu;
    let tok = tokenizer(&vocab);
    assert_eq!(tok.encode("Hello, World!"), [7592, 1010, 2088, 999]);
    let (ids, types, mask) = batch(&tok, &SENTENCES, &dev).unwrap();
    let a = embed(
        &model_from_safetensors(&st, DType::F32, &dev).unwrap(),
        &ids,
        &types,
        &mask,
    )
    .unwrap();
    let files = ibp_testdata::kv::MiniLmFiles {
        weights: st.clone(),
        vocab: vocab.clone(),
        card: vocab.clone(),
    };
    let ours = ibp_testdata::kv::MiniLm::load(&files).unwrap();
    for (i, s) in SENTENCES.iter().enumerate() {
        let r = ours.embed(s).unwrap();
        let c = a.get(i).unwrap().to_vec1::<f32>().unwrap();
        let cos: f32 = r.iter().zip(&c).map(|(x, y)| x * y).sum();
        assert!(cos > 0.9999, "{s:?}: cosine {cos}");
    }
}

/// The compressed embedding table returns what `candle_nn::Embedding`
/// returns from the decompressed table, bit for bit, for `u32` and `i64`
/// ids of any shape; an id out of range is an error.
fn compressed_embedding_matches(dtype: DType) {
    let Some((st, ibp)) = model_files(dtype) else {
        return;
    };
    let name = "embeddings.word_embeddings.weight";
    let table = candle_core::safetensors::load(&st, &Device::Cpu)
        .unwrap()
        .remove(name)
        .unwrap();
    let reference = candle_nn::Embedding::new(table, 384);
    let emb = CompressedEmbedding::new(Arc::new(IbpTensors::open(&ibp).unwrap()), name).unwrap();
    assert_eq!(
        (emb.rows(), emb.hidden_size(), emb.dtype()),
        (30522, 384, dtype)
    );
    let ids: Vec<u32> = vec![101, 7592, 1010, 2088, 999, 102, 0, 30521, 7592, 1];
    let ids = Tensor::from_vec(ids, (2, 5), &Device::Cpu).unwrap();
    for ids in [
        ids.clone(),
        ids.to_dtype(DType::I64).unwrap(),
        ids.flatten_all().unwrap(),
        ids.t().unwrap(),
    ] {
        let want = reference.forward(&ids).unwrap();
        let got = emb.forward(&ids).unwrap();
        assert_eq!((got.dims(), got.dtype()), (want.dims(), want.dtype()));
        assert!(
            bits(&got) == bits(&want),
            "{dtype:?} {:?}: rows differ",
            ids.dims()
        );
    }
    let none = Tensor::zeros(0, DType::U32, &Device::Cpu).unwrap();
    assert_eq!(emb.forward(&none).unwrap().dims(), [0, 384]);
    let bad = Tensor::new(&[5u32, 30522], &Device::Cpu).unwrap();
    assert!(emb.forward(&bad).is_err());
    let negative = Tensor::new(&[-1i64], &Device::Cpu).unwrap();
    assert!(emb.forward(&negative).is_err());
    let floats = Tensor::new(&[1f32], &Device::Cpu).unwrap();
    assert!(emb.forward(&floats).is_err());
}

#[test]
fn compressed_embedding_matches_candle_f32() {
    compressed_embedding_matches(DType::F32);
}

#[test]
fn compressed_embedding_matches_candle_bf16() {
    compressed_embedding_matches(DType::BF16);
}

/// A compressed embedding refuses a table that is not 2-D.
#[test]
fn compressed_embedding_refuses_other_shapes() {
    let Some((_, ibp)) = model_files(DType::F32) else {
        return;
    };
    let t = Arc::new(IbpTensors::open(&ibp).unwrap());
    assert!(CompressedEmbedding::new(t.clone(), "embeddings.LayerNorm.weight").is_err());
    assert!(CompressedEmbedding::new(t, "no.such.table").is_err());
}

/// A damaged `.ibp` file: a flipped byte in a compressed tensor's payload
/// is an error (at open, or at that tensor's load), never a panic or wrong
/// weights.
#[test]
fn damaged_tensor_is_an_error() {
    let Some((_, ibp)) = model_files(DType::F32) else {
        return;
    };
    let mut bytes = std::fs::read(&ibp).unwrap();
    let name = "encoder.layer.0.attention.self.query.weight";
    let at = {
        let f = ibp::container::IbpFile::from_bytes(&bytes).unwrap();
        let p = f.find_group(name).unwrap().packed().expect("stored packed");
        let payload = p.payload();
        payload.as_ptr() as usize - f.bytes().as_ptr() as usize + payload.len() / 2
    };
    bytes[at] ^= 0x10;
    // The container's section checksums catch it at open; a reader that got
    // past them would still meet the group's hash at load.
    let refused = match ibp::container::IbpFile::from_vec(bytes) {
        Err(e) => {
            assert_eq!(e.kind(), ibp::ErrorKind::Corrupt, "{e}");
            assert!(IbpTensors::open(&ibp).is_ok(), "the undamaged file opens");
            true
        }
        Ok(file) => IbpTensors::new(file)
            .unwrap()
            .load(name, &Device::Cpu)
            .is_err(),
    };
    assert!(refused, "a damaged tensor loaded");
}
