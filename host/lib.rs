//! Invariant Bit Packing: lossless compression of ML tensors (GNN features,
//! embedding tables, LLM weights and KV caches) with decompression on NVIDIA
//! GPUs, in kernels written in Rust.
//!
//! IBP looks at one bit position across many equal-length tensors (*rows*).
//! Positions that hold the same value in most rows are invariant: a
//! [`codebook::Codebook`] stores them once, and every chunk of a row that
//! agrees with it drops those bits. Decompression returns the original bits,
//! on the CPU or the GPU, from the same bytes. The project's documents (the
//! command line, the GPU guide, the format, benchmarks) are in its `docs/`
//! folder; `docs/FORMAT.md` specifies every bit.
//!
//! # Two tiers
//!
//! - **The CPU codec** (default features): fit, encode, the two layouts, the
//!   `.ibp` container and the input formats. Stable Rust, no CUDA, no
//!   command-line dependencies.
//! - **The GPU path** (feature `cuda`): the `gpu` module decodes, fits and
//!   compresses on an NVIDIA GPU (A100, H100/H200 and later), producing and
//!   reading the CPU codec's bytes exactly. It builds on stable Rust (the
//!   kernels' PTX, compiled by rustc's NVPTX backend, ships with the crate)
//!   and needs a `libcuda.so` to link and `libcuda.so.1` at run time;
//!   `cust::error::CudaError` converts into [`Error`].
//!
//! The `ibp` command line is a package of its own (`cli/`, `ibp-cli`) and is
//! not part of this API.
//!
//! # Module map
//!
//! The modules follow the pipeline: fit → codebook → encode → layout →
//! pipeline (how each group is stored, on the CPU or a device) → container.
//!
//! | module | what for |
//! | --- | --- |
//! | [`fit`] | count the bits of a dataset and choose the threshold and chunk size ([`fit::fit`]); clustered fits |
//! | [`codebook`] | the [`codebook::Codebook`]: mask, bit values, chunk size, and the tables the codec runs on |
//! | [`encode`] | one row: [`encode::encode_row`], [`encode::decode_row`], stored sizes |
//! | [`layout`] | a dataset of rows: the packed layout (smallest) and the fixed-stride layout (a slot per row) |
//! | [`cluster`] | one codebook per cluster of rows, in memory |
//! | [`float_code`] | a second coding of a group of floats beside IBP's: the exponent entropy-coded with a per-group table, rows still decoded one by one, on the CPU or the GPU (not yet in the container) |
//! | [`pipeline`] | a document into a container: the plan of how each group is stored (raw, packed, fixed, clustered), fit and compression on the CPU or a [`pipeline::GroupDevice`], verification ([`pipeline::compress_document`]) |
//! | [`container`] | the `.ibp` file format: [`container::ContainerWriter`] writes it, [`container::IbpFile`] reads and restores it |
//! | [`io`] | the user's formats (safetensors, npy, npz, raw) parsed into a [`io::Document`] and restored byte for byte |
//! | `emu` (feature `emu`) | compressed rows in host memory for the device API on the emulated machine (`ibp-kernel-emu`): kernels of yours tested without a GPU |
//! | [`Rows`], [`Error`], [`ErrorKind`], [`Progress`] | a dataset of equal-length rows; the one error type and its kinds; the progress hook of long operations |
#![cfg_attr(
    feature = "cuda",
    doc = "| [`gpu`] (feature `cuda`) | the GPU path: datasets in pinned or device memory, the [`gpu::Decoder`] (ranges and gathers, zero-copy or DMA), the [`gpu::FloatDecoder`] of float-coded rows, fit and compression, the feature cache, the KV store |"
)]
#![cfg_attr(
    not(feature = "cuda"),
    doc = "| `gpu` (feature `cuda`, not in this build) | the GPU path: datasets in pinned or device memory, the decoder (ranges and gathers, zero-copy or DMA), fit and compression, the feature cache, the KV store |"
)]
//!
//! # A dataset in memory
//!
//! ```
//! use ibp::Rows;
//! use ibp::fit::{FitOptions, fit};
//! use ibp::layout::{LayoutOptions, compress_packed, decompress_packed_row};
//!
//! // 1000 rows of 64 f32 values that share their sign and exponent bits.
//! let values: Vec<f32> = (0..64_000).map(|i| 1.0 + (i % 97) as f32 / 128.0).collect();
//! let rows = Rows::of(&values, 64)?;
//!
//! let fitted = fit(rows, &FitOptions::default())?;
//! let packed = compress_packed(&fitted.codebook, rows, &LayoutOptions::default())?;
//! assert!(packed.payload.len() < rows.bytes().len());
//!
//! // Any row alone, without touching the others.
//! let mut row = vec![0u8; rows.row_bytes()];
//! decompress_packed_row(&fitted.codebook, &packed.view(), 999, &mut row)?;
//! assert_eq!(row, rows.row(999));
//! # Ok::<(), ibp::Error>(())
//! ```
//!
//! # A file, through the container
//!
//! [`io::parse`] reads the user's format, [`pipeline::compress_document`]
//! writes an `.ibp` file, and [`container::IbpFile`] restores the original
//! bytes, checked against the hashes the file records.
//!
//! ```
//! use ibp::container::IbpFile;
//! use ibp::pipeline::{CompressOptions, compress_document};
//! use ibp::io::{self, DType, ParseOptions, SourceFormat};
//!
//! // Raw little-endian f32, 512 rows of 128 values.
//! let values: Vec<f32> = (0..65_536).map(|i| (i % 7) as f32).collect();
//! let original: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
//! let opts = ParseOptions::default().with_raw(DType::F32, Some(vec![512, 128]));
//! let doc = io::parse(&original, SourceFormat::Raw, &opts)?;
//!
//! let (ibp_bytes, report) = compress_document(&doc, &CompressOptions::default(), Vec::new())?;
//! assert!(ibp_bytes.len() < original.len());
//!
//! let file = IbpFile::from_bytes(&ibp_bytes)?;
//! assert_eq!(file.restore_to_vec()?, original);
//! # let _ = report;
//! # Ok::<(), ibp::Error>(())
//! ```
//!
//! # Errors
//!
//! Every fallible call returns [`Result`]: an [`Error`] with a message for
//! people and an [`ErrorKind`] to branch on (corrupt or truncated data, an
//! invalid argument, unsupported input, CUDA, I/O). No input makes the
//! library panic; corrupt data is refused with `Corrupt` or `Truncated`.
//!
//! # What is public, and why
//!
//! The public API is what a host app calls; everything else is private to
//! the crate. Counted with `scripts/public-items.py` over rustdoc's JSON
//! (modules, types, traits, functions, methods, constants, public fields
//! and variants; `#[doc(hidden)]` items left out): **841** items with the
//! `cuda` feature (826 before float-coded groups in the container and the
//! pipeline; 819 before `gpu::FloatDecoder`'s 7; 763 before `float_code`'s
//! 56; 764 at b8cf772, issue 32); the `cudarc` feature adds
//! `gpu::cudarc_interop`, and `nccl` adds `gpu::collective` (compressed
//! collectives across GPUs).
//!
//! | module | items | why it is public |
//! | --- | --- | --- |
//! | crate root | 38 | [`Rows`] (the input of every fit and layout), [`Error`] and [`ErrorKind`] (the one error type, to branch on), [`Progress`] (the hook of long calls) |
//! | [`fit`] | 44 | the fit is the first step of every use: options, the chosen codebook and the candidates it weighed, bit counts for fits across batches |
//! | [`codebook`] | 45 | a codebook is what a fit returns and every layout and decode takes; its fields are the format's (`docs/FORMAT.md` §4) |
//! | [`encode`] | 7 | one row, for users who lay rows out themselves |
//! | [`layout`] | 54 | the two layouts a dataset is stored in, owned and borrowed, and random access to one row |
//! | [`cluster`] | 59 | clustered codebooks: their fit and sweep, ids, compression and decode |
//! | [`float_code`] | 56 | the float coding (`docs/FORMAT.md` §7): element types, the symbol split, the fit and its table, compression, decode by range and gather, the bounds |
//! | [`container`] | 124 | the `.ibp` file: reading, restoring, inspecting groups and sections (`ibp inspect`), and the writer for files built by hand |
//! | [`pipeline`] | 74 | compressing a parsed document into a container, on the CPU or a [`pipeline::GroupDevice`], with its options and per-group report |
//! | [`io`] | 86 | the user's formats (safetensors, npy, npz, raw), parsed and restored byte for byte |
//! | `gpu` (feature `cuda`) | 252 | the GPU path: `Gpu`, datasets (`GpuDataset`, `DeviceBook`), the `Decoder` and its `Request`s, the `FloatDecoder` of float-coded rows, the DMA paths, `Fitter`, `Compressor`, the feature cache, the KV store, pinned memory, other libraries' memory and streams (`Span`, `SpanMut`, `ForeignStream`) |
//!
//! Kept out on purpose: the kernels' tables (`kernel_tables`), the decode
//! launch and its rows description, the driver layer (`gpu::driver`: every
//! raw CUDA call), the DMA gather's staging, and the encoder's internal
//! stages. The benchmark harness is `gpu::bench`, doc(hidden) and behind
//! the `bench-hooks` feature that only the command line turns on; the test
//! kernels are `gpu::testing`, behind `testing`; the emulated dataset is
//! `emu`, behind `emu`.
#![cfg_attr(
    feature = "cuda",
    doc = "\n# On the GPU\n\nThe [`gpu`] module's documentation has a complete example: the rows \
above placed in pinned host memory and gathered on the device."
)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// The modules follow the pipeline (the crate doc's module map above).
pub mod cluster;
pub mod codebook;
pub mod container;
mod dataset;
#[cfg_attr(not(any(test, feature = "cuda")), allow(dead_code))]
pub(crate) mod dma_pieces;
#[cfg(feature = "emu")]
pub mod emu;
pub mod encode;
mod error;
pub mod fit;
pub mod float_code;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod io;
#[cfg(test)]
mod kernel_emu;
// Q: why allow dead code in an `emu`-only build? A: `emu` needs the two
// decode tables; the encoder's tables are the GPU path's and the tests'.
#[cfg(any(test, feature = "cuda", feature = "emu"))]
#[cfg_attr(not(any(test, feature = "cuda")), allow(dead_code))]
pub(crate) mod kernel_tables;
pub mod layout;
pub mod pipeline;
mod progress;

pub use dataset::Rows;
pub use error::{Error, ErrorKind, Result};
pub use progress::Progress;

/// The Rust examples of `docs/GPU.md`, each a complete program, compiled as
/// doctests (`cargo test --features cuda --doc`) so that the page cannot
/// drift from the API. Only rustdoc's doctest pass sees this item.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../docs/GPU.md")]
pub struct GpuGuideExamples;

/// The host program of `docs/DEVICE-API.md` (its `no_run` listing; the
/// kernel listings are built to PTX by kernel-builder's test), compiled as
/// a doctest like the GPU guide's.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../docs/DEVICE-API.md")]
pub struct DeviceApiHostProgram;
