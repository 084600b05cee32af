//! The library half of the `ibp` command line (package `ibp-cli`): the GPU
//! measurements that `ibp bench`, the criterion benches (`cli/benches/`) and
//! `cli/examples/gpu_decode.rs` share. Not an API: the command line is the
//! binary `ibp`, and the codec is the `ibp` crate.

#[cfg(feature = "cuda")]
pub mod measure;
