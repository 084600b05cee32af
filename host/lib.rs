#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod dataset;
pub mod error;
pub mod fit;
#[cfg(feature = "cuda")]
pub mod gpu;

pub use dataset::Rows;
pub use error::{Error, ErrorKind, Result};
