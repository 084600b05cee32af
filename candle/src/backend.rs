//! [`IbpTensors`]: candle-nn's `SimpleBackend` over an `.ibp` container.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use candle_core::{DType, Device, Result, Shape, Tensor};
use ibp::container::{GroupView, IbpFile};
use ibp::io::{Segment, SourceFormat};

use crate::wrap;

/// The tensors of an `.ibp` file (one written by `ibp compress` from a
/// safetensors file), for candle: each group is one tensor, under the
/// safetensors name, dtype and shape it was compressed from.
///
/// `VarBuilder::from_backend(Box::new(tensors), dtype, device)` loads any
/// candle model from it. A tensor is decoded when the model asks for it,
/// into the new tensor's own memory, and its group's hash is checked; the
/// conversions are the ones candle's safetensors loader makes (a `U16`
/// tensor widens to `U32`, and the `VarBuilder`'s dtype is reached with
/// `to_dtype`), so a model loaded from here holds the same bits as one
/// loaded from the original file.
///
/// On a CUDA device the tensor is decoded on the host and copied over, as
/// candle's own safetensors loader does; [`crate::CompressedEmbedding`]
/// decodes on the GPU.
///
/// Tensors under 256 bytes (`ibp::pipeline::TINY_TENSOR_BYTES`: scalars,
/// short vectors, empty tensors) are not groups: `ibp compress` keeps them
/// verbatim in the container's envelope, beside the safetensors header.
/// They are found there, by the header the envelope holds.
pub struct IbpTensors {
    file: IbpFile<'static>,
    verbatim: HashMap<String, Verbatim>,
}

/// A tensor kept verbatim in the envelope: its type, shape, and its bytes
/// as a range of one envelope piece.
struct Verbatim {
    dtype: ibp::io::DType,
    shape: Vec<u64>,
    piece: u32,
    range: Range<usize>,
}

impl IbpTensors {
    /// Open an `.ibp` file (memory-mapped; every section checked here).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::new(IbpFile::open(path.as_ref()).map_err(wrap)?)
    }

    /// The tensors of an open container. Errors when the container says it
    /// came from a safetensors file whose header it does not hold intact.
    pub fn new(file: IbpFile<'static>) -> Result<Self> {
        let verbatim = verbatim_tensors(&file).map_err(wrap)?;
        Ok(IbpTensors { file, verbatim })
    }

    /// The container.
    pub fn file(&self) -> &IbpFile<'static> {
        &self.file
    }

    /// The tensors' names: the groups' in the file's order, then those
    /// kept verbatim.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let mut tiny: Vec<&str> = self.verbatim.keys().map(String::as_str).collect();
        tiny.sort_unstable();
        self.file.groups().map(|g| g.name()).chain(tiny)
    }

    /// Whether the file holds tensor `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.file.find_group(name).is_some() || self.verbatim.contains_key(name)
    }

    /// The group holding tensor `name`.
    pub(crate) fn group(&self, name: &str) -> Result<GroupView<'_>> {
        self.file.find_group(name).ok_or_else(|| {
            candle_core::Error::CannotFindTensor {
                path: name.to_string(),
            }
            .bt()
        })
    }

    /// Tensor `name` on `device`, in the dtype candle's safetensors loader
    /// gives it ([`candle_dtype`]).
    pub fn load(&self, name: &str, device: &Device) -> Result<Tensor> {
        if self.file.find_group(name).is_none()
            && let Some(v) = self.verbatim.get(name)
        {
            return self.load_verbatim(name, v, device);
        }
        let g = self.group(name)?;
        let (dtype, widen) = candle_dtype(g.dtype()).ok_or_else(|| unsupported(&g))?;
        let dims = dims(g.shape())?;
        let t = if widen {
            // u16 → u32, as candle's safetensors loader does (candle has no
            // u16 type).
            let mut v = vec![0u16; dims.iter().product()];
            g.decompress_into(bytemuck::cast_slice_mut(&mut v))
                .map_err(wrap)?;
            let v: Vec<u32> = v.into_iter().map(u32::from).collect();
            Tensor::from_vec(v, dims, &Device::Cpu)?
        } else {
            cpu_tensor_with(dtype, &dims, |bytes| g.decompress_into(bytes))?
        };
        match device {
            Device::Cpu => Ok(t),
            _ => t.to_device(device),
        }
    }
}

impl IbpTensors {
    /// A tensor kept verbatim in the envelope.
    fn load_verbatim(&self, name: &str, v: &Verbatim, device: &Device) -> Result<Tensor> {
        let bytes = self
            .file
            .piece(v.piece)
            .and_then(|p| p.get(v.range.clone()))
            .ok_or_else(|| {
                candle_core::Error::Msg(format!("tensor {name:?}: its bytes are gone"))
            })?;
        let (dtype, widen) = candle_dtype(&v.dtype).ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "tensor {name:?} is of type {}, which candle's safetensors loader does not load either",
                v.dtype.name()
            ))
            .bt()
        })?;
        let dims = dims(&v.shape)?;
        let t = if widen {
            let v: Vec<u32> = bytes
                .as_chunks::<2>()
                .0
                .iter()
                .map(|&b| u32::from(u16::from_le_bytes(b)))
                .collect();
            Tensor::from_vec(v, dims, &Device::Cpu)?
        } else {
            cpu_tensor_with(dtype, &dims, |out| {
                out.copy_from_slice(bytes);
                Ok(())
            })?
        };
        match device {
            Device::Cpu => Ok(t),
            _ => t.to_device(device),
        }
    }
}

/// The safetensors header's tensors that are not groups (ibp keeps tensors
/// under 256 bytes verbatim in the envelope), each located in the envelope
/// piece that holds its bytes. Empty for a container of another format.
fn verbatim_tensors(file: &IbpFile<'_>) -> ibp::Result<HashMap<String, Verbatim>> {
    let mut out = HashMap::new();
    if file.source().and_then(|s| s.source_format()) != Some(SourceFormat::Safetensors) {
        return Ok(out);
    }
    let bad =
        |what: &str| ibp::Error::corrupt(format!("a safetensors container whose envelope {what}"));
    // Where each envelope segment lies in the original file.
    let mut spans: Vec<(u64, u64, Option<u32>)> = Vec::new();
    let mut at = 0u64;
    for seg in file.envelope() {
        let (len, piece) = match seg {
            Segment::Raw(p) => (
                file.piece(*p)
                    .ok_or_else(|| bad("names a missing piece"))?
                    .len() as u64,
                Some(*p),
            ),
            Segment::Group(i) => (
                file.group(*i)
                    .ok_or_else(|| bad("names a missing group"))?
                    .info()
                    .data_len(),
                None,
            ),
            Segment::Deflate { .. } => return Err(bad("holds a deflate segment")),
        };
        spans.push((at, at + len, piece));
        at += len;
    }
    // The header: its length and JSON, at the start of the first piece.
    let head = match spans.first() {
        Some(&(0, _, Some(p))) => file.piece(p).unwrap_or_default(),
        _ => return Err(bad("does not start with the header")),
    };
    let n = head
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        .ok_or_else(|| bad("has a header under 8 bytes"))?;
    let json = usize::try_from(n)
        .ok()
        .and_then(|n| head.get(8..8usize.checked_add(n)?))
        .ok_or_else(|| bad("has a header longer than its first piece"))?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(json)
        .map_err(|e| bad(&format!("has a header that is not JSON ({e})")))?;
    let data_start = 8 + n;
    for (name, info) in header {
        if name == "__metadata__" || file.find_group(&name).is_some() {
            continue;
        }
        let field = |k: &str| {
            info.get(k)
                .ok_or_else(|| bad(&format!("lists {name:?} without {k}")))
        };
        let Some(dtype) = field("dtype")?
            .as_str()
            .and_then(ibp::io::DType::from_safetensors)
        else {
            continue; // a type that is not whole bytes: candle refuses it too
        };
        let nums = |k: &str| -> ibp::Result<Vec<u64>> {
            field(k)?
                .as_array()
                .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect())
                .ok_or_else(|| bad(&format!("lists {name:?} with a bad {k}")))
        };
        let shape = nums("shape")?;
        let &[b, e] = nums("data_offsets")?.as_slice() else {
            return Err(bad(&format!("lists {name:?} with a bad data_offsets")));
        };
        let len = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d));
        if b > e || len != Some(e - b) {
            return Err(bad(&format!(
                "lists {name:?} with a size that is not its shape's"
            )));
        }
        let (b, e) = (data_start.saturating_add(b), data_start.saturating_add(e));
        // Q: why any piece for an empty tensor? A: it has no bytes to find;
        // its offset may fall between a group and the next piece.
        let raw = spans.iter().filter_map(|&(s, end, p)| Some((s, end, p?)));
        let found = if b == e {
            raw.clone().next().map(|(_, _, p)| (p, 0..0))
        } else {
            raw.clone()
                .find(|&(s, end, _)| s <= b && e <= end)
                .map(|(s, _, p)| (p, (b - s) as usize..(e - s) as usize))
        };
        let Some((piece, range)) = found else {
            return Err(bad(&format!("holds {name:?} in no single piece")));
        };
        out.insert(
            name,
            Verbatim {
                dtype,
                shape,
                piece,
                range,
            },
        );
    }
    Ok(out)
}

impl candle_nn::var_builder::SimpleBackend for IbpTensors {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> Result<Tensor> {
        let t = self.load(name, dev)?.to_dtype(dtype)?;
        if t.shape() != &s {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name}"),
                expected: s,
                got: t.shape().clone(),
            }
            .bt());
        }
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> Result<Tensor> {
        self.load(name, dev)?.to_dtype(dtype)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.contains(name)
    }
}

/// The candle dtype of a tensor stored as `dtype`, as candle's safetensors
/// loader maps the same safetensors type, and whether the values widen
/// (`u16` becomes `u32`). `None` for the types candle's loader refuses
/// (`I8`, `U64`, `BOOL`, the sub-byte floats) and types safetensors has
/// no name for.
pub fn candle_dtype(dtype: &ibp::io::DType) -> Option<(DType, bool)> {
    use ibp::io::DType as I;
    let d = match dtype {
        I::F64 => DType::F64,
        I::F32 => DType::F32,
        I::F16 => DType::F16,
        I::BF16 => DType::BF16,
        I::I64 => DType::I64,
        I::I32 => DType::I32,
        I::I16 => DType::I16,
        I::U32 => DType::U32,
        I::U16 => return Some((DType::U32, true)),
        I::U8 => DType::U8,
        I::Other { name, size: 1 } if name == "F8_E4M3" => DType::F8E4M3,
        _ => return None,
    };
    Some((d, false))
}

fn unsupported(g: &GroupView<'_>) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "tensor {:?} is of type {}, which candle's safetensors loader does not load either",
        g.name(),
        g.dtype().name()
    ))
    .bt()
}

/// The shape as candle's dimensions.
pub(crate) fn dims(shape: &[u64]) -> Result<Vec<usize>> {
    shape
        .iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| candle_core::Error::Msg(format!("dimension {d} exceeds usize")))
        })
        .collect()
}

/// A CPU tensor of `dtype` and `dims` whose bytes `fill` writes, in place,
/// into the tensor's own allocation: no copy after the decode.
pub(crate) fn cpu_tensor_with(
    dtype: DType,
    dims: &[usize],
    fill: impl FnOnce(&mut [u8]) -> ibp::Result<()>,
) -> Result<Tensor> {
    let n: usize = dims.iter().product();
    macro_rules! typed {
        ($t:ty) => {{
            let mut v = vec![<$t as bytemuck::Zeroable>::zeroed(); n];
            fill(bytemuck::cast_slice_mut(&mut v)).map_err(wrap)?;
            Tensor::from_vec(v, dims, &Device::Cpu)
        }};
    }
    match dtype {
        DType::U8 => typed!(u8),
        DType::U32 => typed!(u32),
        DType::I16 => typed!(i16),
        DType::I32 => typed!(i32),
        DType::I64 => typed!(i64),
        DType::BF16 => typed!(half::bf16),
        DType::F16 => typed!(half::f16),
        DType::F32 => typed!(f32),
        DType::F64 => typed!(f64),
        // Q: why a copy for fp8? A: its element type is candle's
        // dependency's (`float8`), not ours; one byte per element, so the
        // bytes are the tensor's.
        other => {
            let mut v = vec![0u8; n * other.size_in_bytes()];
            fill(&mut v).map_err(wrap)?;
            Tensor::from_raw_buffer(&v, other, dims, &Device::Cpu)
        }
    }
}

/// A CPU storage of `dtype` holding `n` elements that `fill` writes in
/// place (the custom op's output: [`crate::CompressedEmbedding`]).
pub(crate) fn cpu_storage_with(
    dtype: DType,
    n: usize,
    fill: impl FnOnce(&mut [u8]) -> ibp::Result<()>,
) -> Result<candle_core::CpuStorage> {
    use candle_core::CpuStorage as S;
    macro_rules! typed {
        ($t:ty, $variant:ident) => {{
            let mut v = vec![<$t as bytemuck::Zeroable>::zeroed(); n];
            fill(bytemuck::cast_slice_mut(&mut v)).map_err(wrap)?;
            Ok(S::$variant(v))
        }};
    }
    match dtype {
        DType::U8 => typed!(u8, U8),
        DType::U32 => typed!(u32, U32),
        DType::I16 => typed!(i16, I16),
        DType::I32 => typed!(i32, I32),
        DType::I64 => typed!(i64, I64),
        DType::BF16 => typed!(half::bf16, BF16),
        DType::F16 => typed!(half::f16, F16),
        DType::F32 => typed!(f32, F32),
        DType::F64 => typed!(f64, F64),
        other => Err(candle_core::Error::Msg(format!(
            "a compressed embedding of {other:?} is not supported"
        ))
        .bt()),
    }
}
