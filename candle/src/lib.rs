//! ibp in [candle](https://docs.rs/candle-core): a candle model's weights
//! loaded from an `.ibp` file, and embedding tables that stay compressed.
//!
//! - [`IbpTensors`]: a candle-nn `SimpleBackend` over an `.ibp` container
//!   (what `ibp compress` writes from a safetensors file), so that
//!   `VarBuilder::from_backend` loads any candle model from it. Names,
//!   dtypes and shapes are the safetensors file's, and the values are its
//!   bits: a model loaded from the `.ibp` computes exactly what the same
//!   model loaded from the safetensors file computes.
//! - [`CompressedEmbedding`]: a candle-nn `Module` over one table of an
//!   `.ibp` file (word embeddings, a feature table) that stays compressed;
//!   its forward pass decodes only the rows it is asked for, straight into
//!   the output tensor's own allocation. On the CPU with ibp's CPU decoder;
//!   with feature `cuda`, on the GPU with one ibp gather launched on
//!   candle's stream, the table in device or pinned host memory.
//!
//! The two lines a candle user changes (`examples/load.rs`):
//!
//! ```no_run
//! use candle_core::{DType, Device};
//! use candle_nn::VarBuilder;
//! use ibp_candle::IbpTensors;
//! # fn main() -> candle_core::Result<()> {
//! let dev = Device::Cpu;
//! // Before: let vb = unsafe { VarBuilder::from_mmaped_safetensors(&["model.safetensors"], DType::F32, &dev)? };
//! let vb = VarBuilder::from_backend(Box::new(IbpTensors::open("model.ibp")?), DType::F32, dev);
//! # let _ = vb; Ok(()) }
//! ```

mod backend;
mod embedding;
#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
mod offload;

pub use backend::{IbpTensors, candle_dtype};
pub use embedding::CompressedEmbedding;
#[cfg(feature = "cuda")]
pub use gpu::GpuTable;
#[cfg(feature = "cuda")]
pub use offload::{CodedTransfer, HostTensor, OffloadOptions, OffloadedStack};

/// An ibp error as candle's (`candle_core::Error::Wrapped`): the ibp error
/// stays reachable through `source()`, kind and message included.
pub(crate) fn wrap(e: ibp::Error) -> candle_core::Error {
    candle_core::Error::wrap(e)
}
