//! `.safetensors` files: an 8-byte little-endian header length, a JSON
//! header mapping tensor names to `{dtype, shape, data_offsets}` (plus an
//! optional `__metadata__` map), then the tensor bytes.
//!
//! The header is kept verbatim (key order, whitespace and padding included);
//! each tensor's byte range becomes a group, and any bytes between or after
//! the ranges stay raw.
#![forbid(unsafe_code)]

use std::borrow::Cow;

use serde::Deserialize;

use super::{
    DType, Document, Fingerprint, ParseOptions, Segment, SourceFormat, TensorGroup, element_count,
    le_u64, take,
};
use crate::error::{Error, Result};

/// The safetensors library refuses headers above 100 MB; so do we, before
/// handing the bytes to the JSON parser.
const MAX_HEADER: u64 = 100_000_000;

#[derive(Deserialize)]
struct TensorInfo {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// The header's tensors in the JSON's order, `__metadata__` skipped.
///
/// Q: why not a `serde_json::Map` of `Value`s? A: a `Value` tree costs
/// several allocations per tensor (each key, the dtype, two arrays of
/// numbers); a header of a million tiny tensors held over a gigabyte that
/// way (issue 38). Here each tensor costs its name, its dtype and its shape.
struct Header(Vec<(String, TensorInfo)>);

impl<'de> Deserialize<'de> for Header {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Header;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object of tensors")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Header, A::Error> {
                use serde::de::Error as _;
                let mut out = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if name == "__metadata__" {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        continue;
                    }
                    let info = map.next_value::<TensorInfo>().map_err(|e| {
                        A::Error::custom(format!("safetensors tensor {name:?}: {e}"))
                    })?;
                    out.push((name, info));
                }
                Ok(Header(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// A cheap check for [`super::SourceFormat::detect`]: a plausible header
/// length followed by a `{`.
pub fn looks_like(bytes: &[u8]) -> bool {
    bytes.len() >= 10
        && le_u64(bytes, 0) <= (bytes.len() as u64 - 8).min(MAX_HEADER)
        && bytes[8] == b'{'
}

/// Read a `.safetensors` file. Tensors with a dtype ibp does not know
/// (sub-byte types) and tensors left out by `opts.select` stay raw.
pub fn parse<'a>(bytes: &'a [u8], opts: &ParseOptions) -> Result<Document<'a>> {
    let len_field = take(bytes, 0, 8, "safetensors header length")?;
    let header_len = le_u64(len_field, 0);
    if header_len > MAX_HEADER {
        return Err(Error::corrupt(format!(
            "safetensors header claims {header_len} bytes (the limit is {MAX_HEADER})"
        )));
    }
    let header = take(bytes, 8, header_len, "safetensors header")?;
    let Header(entries) = serde_json::from_slice(header).map_err(|e| {
        Error::corrupt(format!(
            "safetensors header is not a JSON object of tensors: {e}"
        ))
    })?;
    let data_start = 8 + header_len;
    let data = &bytes[data_start as usize..];
    {
        let mut names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::corrupt(format!(
                "safetensors header names tensor {:?} twice",
                w[0]
            )));
        }
    }

    let mut tensors = Vec::with_capacity(entries.len());
    for (name, info) in entries {
        let (begin, end) = info.data_offsets;
        if begin > end {
            return Err(Error::corrupt(format!(
                "safetensors tensor {name:?}: data_offsets [{begin}, {end}] run backwards"
            )));
        }
        take(
            data,
            begin,
            end - begin,
            &format!("safetensors tensor {name:?}"),
        )?;
        let dtype = DType::from_safetensors(&info.dtype);
        if let Some(d) = &dtype {
            let want = element_count(&info.shape)?.checked_mul(d.size());
            if want != Some(end - begin) {
                return Err(Error::corrupt(format!(
                    "safetensors tensor {name:?}: shape {:?} of {} needs {} bytes, data_offsets give {}",
                    info.shape,
                    info.dtype,
                    bytes_needed(want),
                    end - begin
                )));
            }
        }
        tensors.push((name, dtype, info, begin, end));
    }
    tensors.sort_by_key(|t| (t.3, t.4));

    let select = opts.selection();
    select.check_found(tensors.iter().map(|t| t.0.as_str()))?;
    let mut doc = Document {
        format: SourceFormat::Safetensors,
        groups: Vec::new(),
        envelope: vec![Segment::Raw(Cow::Borrowed(&bytes[..data_start as usize]))],
        original: Fingerprint::of(bytes),
        notes: Vec::new(),
        deferred: Vec::new(),
    };
    let mut cursor = 0u64;
    for (name, dtype, info, begin, end) in tensors {
        if begin < cursor {
            return Err(Error::corrupt(format!(
                "safetensors tensor {name:?} overlaps another tensor"
            )));
        }
        // Both were checked against data.len() above.
        let (b, e) = (begin as usize, end as usize);
        if begin > cursor {
            doc.envelope
                .push(Segment::Raw(Cow::Borrowed(&data[cursor as usize..b])));
        }
        cursor = end;
        match dtype {
            Some(dtype) if select.wants(&name) => {
                doc.envelope.push(Segment::Group(doc.groups.len()));
                doc.groups.push(TensorGroup {
                    name,
                    dtype,
                    shape: info.shape,
                    data: Cow::Borrowed(&data[b..e]),
                });
            }
            None => {
                doc.notes.push(format!(
                    "tensor {name:?} kept verbatim: dtype {} is not byte-sized",
                    info.dtype
                ));
                doc.envelope.push(Segment::Raw(Cow::Borrowed(&data[b..e])));
            }
            Some(_) => doc.envelope.push(Segment::Raw(Cow::Borrowed(&data[b..e]))),
        }
    }
    if (cursor as usize) < data.len() {
        doc.envelope
            .push(Segment::Raw(Cow::Borrowed(&data[cursor as usize..])));
    }
    Ok(doc)
}

/// A `.safetensors` file holding `tensors` in the order given, with
/// `metadata` as the header's `__metadata__` map (left out when empty).
///
/// The header is padded with spaces to a multiple of 8 bytes, as the
/// safetensors library writes it, so that every tensor starts aligned.
/// Errors with [`crate::ErrorKind::InvalidArgument`] for a dtype safetensors
/// cannot name, data that does not match its shape, or a repeated name.
pub fn write(
    tensors: &[TensorGroup<'_>],
    metadata: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        header.insert("__metadata__".into(), serde_json::json!(metadata));
    }
    let mut offset = 0u64;
    for t in tensors {
        let dtype = t.dtype.safetensors_name().ok_or_else(|| {
            Error::invalid(format!(
                "tensor {:?}: safetensors has no name for dtype {}",
                t.name, t.dtype
            ))
        })?;
        let want = element_count(&t.shape)?.checked_mul(t.dtype.size());
        if want != Some(t.data.len() as u64) {
            return Err(Error::invalid(format!(
                "tensor {:?}: shape {:?} of {} needs {} bytes, not {}",
                t.name,
                t.shape,
                t.dtype,
                bytes_needed(want),
                t.data.len()
            )));
        }
        let end = offset + t.data.len() as u64;
        let info =
            serde_json::json!({"dtype": dtype, "shape": t.shape, "data_offsets": [offset, end]});
        if t.name == "__metadata__" || header.insert(t.name.clone(), info).is_some() {
            return Err(Error::invalid(format!(
                "tensor name {:?} is used twice or reserved",
                t.name
            )));
        }
        offset = end;
    }
    let mut json = serde_json::to_vec(&header)
        .map_err(|e| Error::invalid(format!("safetensors header: {e}")))?;
    json.resize(json.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + json.len() + offset as usize);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    Ok(out)
}

/// A byte count for messages: the number, or "more than 2^64" when it
/// overflowed (not Rust's `Some(4160)`).
fn bytes_needed(n: Option<u64>) -> String {
    n.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_parse_back() {
        let a: Vec<u8> = (0..24).collect();
        let b = vec![7u8; 6];
        let tensors = [
            TensorGroup {
                name: "layer.0.key".into(),
                dtype: DType::BF16,
                shape: vec![3, 4],
                data: Cow::Borrowed(&a),
            },
            TensorGroup {
                name: "ids".into(),
                dtype: DType::U16,
                shape: vec![3],
                data: Cow::Borrowed(&b),
            },
        ];
        let meta = [("source".to_string(), "test".to_string())].into();
        let bytes = write(&tensors, &meta).unwrap();
        assert_eq!(le_u64(&bytes, 0) % 8, 0);
        assert!(looks_like(&bytes));
        let doc = parse(&bytes, &ParseOptions::default()).unwrap();
        assert_eq!(doc.groups, tensors);
        assert_eq!(doc.restore_to_vec().unwrap(), bytes);

        let mut bad = tensors.clone();
        bad[1].shape = vec![4];
        assert!(write(&bad, &meta).is_err());
        bad[1].shape = vec![3];
        bad[1].name = "layer.0.key".into();
        assert!(write(&bad, &meta).is_err());
    }
}
