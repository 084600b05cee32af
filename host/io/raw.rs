//! Bare tensor bytes with no header: the caller says what they are.
#![forbid(unsafe_code)]

use std::borrow::Cow;

use super::{DType, Document, Fingerprint, Segment, SourceFormat, TensorGroup, element_count};
use crate::error::{Error, Result};

/// Read `bytes` as one tensor of `dtype` and `shape` named `name`. Without a
/// shape the tensor is one-dimensional; with one, it must cover the bytes
/// exactly (a mismatch is almost always a wrong `--dtype` or `--shape`).
pub fn parse<'a>(
    bytes: &'a [u8],
    dtype: DType,
    shape: Option<&[u64]>,
    name: &str,
) -> Result<Document<'a>> {
    let size = dtype.size();
    let shape = match shape {
        Some(s) => {
            // The shape is the caller's (`--shape`), not the file's: an
            // overflow is a bad argument, not corrupt data.
            let want = element_count(s)
                .map_err(|e| Error::invalid(e.message()))?
                .checked_mul(size);
            if want != Some(bytes.len() as u64) {
                return Err(Error::invalid(format!(
                    "shape {s:?} of {dtype} needs {} bytes but the file has {}",
                    want.map_or("more than 2^64".to_string(), |w| w.to_string()),
                    bytes.len()
                )));
            }
            s.to_vec()
        }
        None => {
            if !(bytes.len() as u64).is_multiple_of(size) {
                return Err(Error::invalid(format!(
                    "{} bytes are not a whole number of {dtype} elements ({size} bytes each)",
                    bytes.len()
                )));
            }
            vec![bytes.len() as u64 / size]
        }
    };
    Ok(Document {
        format: SourceFormat::Raw,
        groups: vec![TensorGroup {
            name: name.to_string(),
            dtype,
            shape,
            data: Cow::Borrowed(bytes),
        }],
        envelope: vec![Segment::Group(0)],
        original: Fingerprint::of(bytes),
        notes: Vec::new(),
        deferred: Vec::new(),
    })
}
