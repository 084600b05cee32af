//! Every safetensors type candle loads, through `IbpTensors`, against
//! candle's own loader: a file written here with each type in several
//! shapes (a scalar, a vector, a matrix large enough to be compressed, a
//! 3-D tensor, an empty one), compressed as `ibp compress` does.

mod common;

use candle_core::{DType, Device};
use candle_nn::var_builder::SimpleBackend;
use common::{bits, compress_file, scratch};
use ibp_candle::IbpTensors;

/// One tensor of a test file: name, safetensors dtype, element size, shape,
/// bytes.
type Entry<'a> = (String, &'a str, usize, Vec<usize>, Vec<u8>);

/// A safetensors file of `tensors`, written by hand so that candle's missing
/// types (`U16`, `I8`, `BOOL`) can be in it too.
fn safetensors(tensors: &[Entry<'_>]) -> Vec<u8> {
    let mut header = String::from("{");
    let mut data = Vec::new();
    for (i, (name, dtype, _, shape, bytes)) in tensors.iter().enumerate() {
        let shape: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        header += &format!(
            "{}\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            if i == 0 { "" } else { "," },
            shape.join(","),
            data.len(),
            data.len() + bytes.len()
        );
        data.extend_from_slice(bytes);
    }
    header += "}";
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend(data);
    out
}

/// Bytes that look like weights of `size`-byte elements: small values
/// whose high bytes repeat (so ibp compresses them), low bytes varied.
fn values(n: usize, size: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut e = x.to_le_bytes()[..size].to_vec();
            if size > 1 {
                e[size - 1] = 0x3c | ((x >> 63) as u8 * 0x80);
            }
            e
        })
        .collect()
}

#[test]
fn every_candle_type_and_shape_restored() {
    let types = [
        ("F64", 8, DType::F64),
        ("F32", 4, DType::F32),
        ("F16", 2, DType::F16),
        ("BF16", 2, DType::BF16),
        ("I64", 8, DType::I64),
        ("I32", 4, DType::I32),
        ("I16", 2, DType::I16),
        ("U32", 4, DType::U32),
        ("U16", 2, DType::U32), // widened, as candle's loader does
        ("U8", 1, DType::U8),
    ];
    let shapes: [Vec<usize>; 5] = [vec![], vec![7], vec![300, 64], vec![4, 50, 9], vec![0, 16]];
    let mut tensors = Vec::new();
    for (t, &(name, size, _)) in types.iter().enumerate() {
        for (s, shape) in shapes.iter().enumerate() {
            let n: usize = shape.iter().product();
            let bytes = values(n, size, (t * 16 + s) as u64 + 1);
            tensors.push((format!("{name}.{s}"), name, size, shape.clone(), bytes));
        }
    }
    // Types candle's loader refuses: ours refuses them too.
    tensors.push(("I8".into(), "I8", 1, vec![3], vec![1, 2, 3]));
    tensors.push(("BOOL".into(), "BOOL", 1, vec![2], vec![0, 1]));
    let st = scratch("dtypes.safetensors");
    std::fs::write(&st, safetensors(&tensors)).unwrap();
    let ibp = scratch("dtypes.ibp");
    compress_file(&st, &ibp);

    // SAFETY: the test's own file, not modified while mapped.
    let want = unsafe { candle_core::safetensors::MmapedSafetensors::new(&st) }.unwrap();
    let got = IbpTensors::open(&ibp).unwrap();
    let mut coded = 0;
    for (name, _, _, shape, _) in &tensors {
        let w = want.load(name, &Device::Cpu);
        let g = got.load(name, &Device::Cpu);
        match (w, g) {
            (Ok(w), Ok(g)) => {
                assert_eq!((g.dtype(), g.dims()), (w.dtype(), w.dims()), "{name}");
                assert_eq!(g.dims(), shape.as_slice(), "{name}");
                assert!(
                    bits(&g.flatten_all().unwrap().to_dtype(w.dtype()).unwrap())
                        == bits(&w.flatten_all().unwrap()),
                    "{name}"
                );
                // Through the VarBuilder's conversion too.
                let c = got.get_unchecked(name, DType::F32, &Device::Cpu).unwrap();
                assert!(
                    bits(&c) == bits(&w.to_dtype(DType::F32).unwrap()),
                    "{name} as f32"
                );
                coded += usize::from(
                    got.file()
                        .find_group(name)
                        .is_some_and(|g| g.codebook().is_some()),
                );
            }
            (Err(_), Err(_)) => assert!(name == "I8" || name == "BOOL", "{name}: both refused"),
            (w, g) => panic!(
                "{name}: candle {:?}, ibp {:?}",
                w.map(|t| t.dims().to_vec()),
                g.map(|t| t.dims().to_vec())
            ),
        }
    }
    // The matrices and the 3-D tensors were compressed, not stored raw;
    // the tiny ones (the scalars, the vectors of 7, the empty tensors) are
    // not groups at all but verbatim bytes of the envelope, found too.
    assert!(coded >= 9, "only {coded} tensors compressed");
    assert_eq!(got.file().group_count(), 20);
    assert_eq!(got.names().count(), tensors.len());
    for (dtype_name, _, dtype) in types {
        let t = got.load(&format!("{dtype_name}.2"), &Device::Cpu).unwrap();
        assert_eq!(t.dtype(), dtype);
    }
}
