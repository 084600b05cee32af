#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// The modules follow the pipeline: fit (count, choose a threshold) ->
// codebook -> encode (one tensor) -> layout (a dataset) -> container (a file);
// cluster holds one codebook per cluster of tensors;
// io reads and restores the user's formats; gpu launches the kernels;
// kv makes real KV-cache test data (MiniLM run by a forward pass of ours).
pub mod cluster;
pub mod codebook;
pub mod container;
mod dataset;
pub mod encode;
mod error;
pub mod fit;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod io;
#[cfg(test)]
mod kernel_emu;
#[cfg(any(test, feature = "cuda"))]
pub(crate) mod kernel_tables;
pub mod kv;
pub mod layout;
mod progress;

pub use dataset::Rows;
pub use error::{Error, ErrorKind, Result};
pub use progress::Progress;
