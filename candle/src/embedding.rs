//! [`CompressedEmbedding`]: an embedding table that stays compressed.

use std::sync::Arc;

use candle_core::{CpuStorage, DType, Layout, Module, Result, Shape, Tensor};
use rayon::prelude::*;

use crate::backend::{IbpTensors, candle_dtype, cpu_storage_with, dims};

/// An embedding table (`rows × hidden`) kept compressed, for candle: the
/// `Module` that replaces `candle_nn::Embedding` when the table is large.
///
/// Its forward pass takes token ids (`u32` or `i64`, any shape) and returns
/// their rows (the ids' shape, then `hidden`), the same values
/// `candle_nn::Embedding` returns from the decompressed table. Only the rows
/// asked for are decoded, straight into the output tensor's own memory:
///
/// - on the CPU, by ibp's CPU decoder, one row at a time on rayon's pool;
/// - on a CUDA device (feature `cuda`, after `CompressedEmbedding::to_gpu`),
///   by one ibp gather launched on candle's stream, from the table in device
///   memory or pinned host memory (read over PCIe).
///
/// The table must be stored compressed or raw with a row per index of its
/// first axis, as `ibp compress` stores a 2-D tensor.
pub struct CompressedEmbedding {
    tensors: Arc<IbpTensors>,
    /// The group's index in the file.
    group: usize,
    rows: usize,
    hidden: usize,
    dtype: DType,
    #[cfg(feature = "cuda")]
    pub(crate) gpu: Option<crate::gpu::GpuTable>,
}

impl CompressedEmbedding {
    /// The table `name` of `tensors` (a 2-D tensor of `rows × hidden`).
    pub fn new(tensors: Arc<IbpTensors>, name: &str) -> Result<Self> {
        let g = tensors.group(name)?;
        let shape = dims(g.shape())?;
        let dtype = match candle_dtype(g.dtype()) {
            Some((d, false)) => d,
            _ => {
                return Err(candle_core::Error::Msg(format!(
                    "table {name:?} is of type {}; a compressed embedding needs a type candle holds as stored",
                    g.dtype().name()
                ))
                .bt());
            }
        };
        let &[rows, hidden] = shape.as_slice() else {
            return Err(candle_core::Error::Msg(format!(
                "table {name:?} has shape {shape:?}; an embedding table is 2-D"
            ))
            .bt());
        };
        if g.rows() != rows as u64 || g.row_bytes() != (hidden * dtype.size_in_bytes()) as u64 {
            return Err(candle_core::Error::Msg(format!(
                "table {name:?} is stored as {} rows of {} bytes, not one row per index",
                g.rows(),
                g.row_bytes()
            ))
            .bt());
        }
        let group = g.index();
        Ok(CompressedEmbedding {
            tensors,
            group,
            rows,
            hidden,
            dtype,
            #[cfg(feature = "cuda")]
            gpu: None,
        })
    }

    /// Rows of the table (the vocabulary's size).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row.
    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// The table's element type, the output's.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The table's group in the file.
    pub(crate) fn group_view(&self) -> ibp::Result<ibp::container::GroupView<'_>> {
        self.tensors
            .file()
            .group(self.group)
            .ok_or_else(|| ibp::Error::invalid("the table's group is gone"))
    }

    /// The rows `ids` on the CPU into `out` (`ids.len() × row bytes`).
    fn decode_rows_cpu(&self, ids: &[u64], out: &mut [u8]) -> ibp::Result<()> {
        let g = self.group_view()?;
        let l = g.row_bytes() as usize;
        if l == 0 {
            return Ok(());
        }
        out.par_chunks_mut(l)
            .zip(ids.par_iter())
            .try_for_each(|(dst, &id)| g.decompress_rows(id..id.saturating_add(1), dst))
    }
}

/// The gather as a candle custom op on the ids: its output storage is a new
/// allocation that the decoder writes, which is how a custom op returns
/// memory candle then owns (candle has no public constructor of a tensor
/// from a storage).
pub(crate) struct Gather<'a>(pub(crate) &'a CompressedEmbedding);

impl Gather<'_> {
    fn out_shape(&self, layout: &Layout) -> Shape {
        let mut d = layout.dims().to_vec();
        d.push(self.0.hidden);
        Shape::from(d)
    }
}

/// The ids of a CPU storage as `u64` (an `i64` below 0 becomes an index out
/// of range).
fn cpu_ids(storage: &CpuStorage, layout: &Layout) -> Result<Vec<u64>> {
    let (start, end) = layout.contiguous_offsets().ok_or_else(not_contiguous)?;
    Ok(match storage {
        CpuStorage::U32(v) => v[start..end].iter().map(|&i| u64::from(i)).collect(),
        CpuStorage::I64(v) => v[start..end].iter().map(|&i| i as u64).collect(),
        CpuStorage::U8(v) => v[start..end].iter().map(|&i| u64::from(i)).collect(),
        other => return Err(bad_ids(candle_core::backend::BackendStorage::dtype(other))),
    })
}

pub(crate) fn not_contiguous() -> candle_core::Error {
    candle_core::Error::Msg("the ids of a compressed embedding must be contiguous".into()).bt()
}

pub(crate) fn bad_ids(dtype: DType) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "the ids of a compressed embedding are u8, u32 or i64, not {dtype:?}"
    ))
    .bt()
}

impl candle_core::CustomOp1 for Gather<'_> {
    fn name(&self) -> &'static str {
        "ibp-gather"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let ids = cpu_ids(storage, layout)?;
        if let Some(&bad) = ids.iter().find(|&&i| i >= self.0.rows as u64) {
            return Err(candle_core::Error::Msg(format!(
                "id {bad} is out of range for an embedding table of {} rows",
                self.0.rows
            ))
            .bt());
        }
        let out = cpu_storage_with(self.0.dtype, ids.len() * self.0.hidden, |bytes| {
            self.0.decode_rows_cpu(&ids, bytes)
        })?;
        Ok((out, self.out_shape(layout)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let storage = crate::gpu::gather(self.0, storage, layout)?;
        Ok((storage, self.out_shape(layout)))
    }
}

impl Module for CompressedEmbedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        // Q: why make the ids contiguous here? A: the decoder reads them as
        // one array; `contiguous` is free for ids that already are.
        ids.contiguous()?.apply_op1_no_bwd(&Gather(self))
    }
}

impl std::fmt::Debug for CompressedEmbedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompressedEmbedding")
            .field("rows", &self.rows)
            .field("hidden", &self.hidden)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}
