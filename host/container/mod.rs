//! The `.ibp` container file (`docs/FORMAT.md` §6): a header, sections
//! (the manifest, envelope pieces, and per group its codebook, flags,
//! offsets and payload, or slots, or raw bytes, or its float-coded form), a
//! directory and a trailer.
//!
//! - [`ContainerWriter`] writes one front to back to any `Write`, taking
//!   groups one at a time, so nothing needs to be held twice.
//! - [`IbpFile`] opens one (memory-mapped, or from bytes), checks all of it,
//!   and hands out in-place views: [`GroupView::packed`] is a
//!   [`crate::layout::PackedRef`] over the mapped payload.
//! - [`IbpFile::restore`] writes the original file back byte for byte.
//!
//! Deciding how each group is stored, and compressing it, is the
//! pipeline's work ([`crate::pipeline`]); this module is the file format
//! alone: the bytes of `docs/FORMAT.md` §6, written and read.
//!
//! # Example
//!
//! ```
//! use ibp::container::{GroupLayout, IbpFile, RestoreOptions};
//! use ibp::io::{self, DType, ParseOptions, SourceFormat};
//! use ibp::pipeline::{CompressOptions, compress_document};
//!
//! // A raw file of little-endian f32: 512 rows of 128 values.
//! let values: Vec<f32> = (0..65_536).map(|i| (i % 7) as f32).collect();
//! let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
//! let opts = ParseOptions::default().with_raw(DType::F32, Some(vec![512, 128]));
//! let doc = io::parse(&raw, SourceFormat::Raw, &opts)?;
//! let (bytes, _report) = compress_document(&doc, &CompressOptions::default(), Vec::new())?;
//!
//! let file = IbpFile::from_bytes(&bytes)?; // every section checked here
//! let group = file.group(0).expect("one group");
//! assert_eq!((group.rows(), group.row_bytes()), (512, 512));
//! assert!(matches!(group.layout(), GroupLayout::Coded(_)));
//! assert_eq!(group.decompress()?, raw); // one group's tensors
//!
//! let mut restored = Vec::new(); // the whole original file, hash checked
//! file.restore(&mut restored, &RestoreOptions::default())?;
//! assert_eq!(restored, raw);
//! # Ok::<(), ibp::Error>(())
//! ```
//!
//! Q: why a trailer with the directory at the end, like zip?
//! A: it lets the writer stream: section sizes are not known until each
//! group is compressed, and a header-first directory would need seeking or a
//! second pass. Readers start from the end instead, which a memory map makes
//! free.

// No unsafe code anywhere in the container: memory maps come from
// `io::InputFile`, and in-place views are bytemuck casts.
#![forbid(unsafe_code)]

mod clustered;
mod format;
mod manifest;
mod reader;
mod writer;

pub(crate) use format::{CLUSTERED_FILE_OVERHEAD, sections_file_bytes};
pub use format::{DirEntry, FLAG_REQUIRED, NO_OWNER, SectionKind};
pub use manifest::{GroupInfo, GroupLayout, SourceInfo};
pub use reader::{DEFAULT_RESTORE_BLOCK_BYTES, GroupStats, GroupView, IbpFile, RestoreOptions};
pub(crate) use writer::GroupSections;
pub use writer::{ContainerWriter, GroupData, GroupMeta};
