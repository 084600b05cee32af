//! Element types: their names in each format, sizes and byte orders.

use std::fmt;

use crate::error::{Error, Result};

/// The element type of a tensor.
///
/// ibp compresses bytes and needs only [`DType::size`]; the type is kept so
/// that restored files and `ibp inspect` can say what a group holds, and so
/// the default row split (one row per index of the first axis) is right.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 binary64.
    F64,
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (the upper half of a binary32).
    BF16,
    /// Signed 64-bit integer.
    I64,
    /// Signed 32-bit integer.
    I32,
    /// Signed 16-bit integer.
    I16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 64-bit integer.
    U64,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 8-bit integer.
    U8,
    /// One byte per element, 0 or 1.
    Bool,
    /// Any other fixed-size element (complex numbers, fp8, numpy strings or
    /// void records, ...), kept under the name its file format gave it.
    Other {
        /// The format's own name for the type (`"<c8"`, `"F8_E4M3"`, ...).
        name: String,
        /// Bytes per element, at least 1.
        size: u32,
    },
}

/// The known types with their canonical name, numpy descr and safetensors
/// name, so that the three spellings cannot drift apart.
const KNOWN: [(DType, &str, &str, &str); 13] = [
    (DType::F64, "f64", "<f8", "F64"),
    (DType::F32, "f32", "<f4", "F32"),
    (DType::F16, "f16", "<f2", "F16"),
    (DType::BF16, "bf16", "", "BF16"),
    (DType::I64, "i64", "<i8", "I64"),
    (DType::I32, "i32", "<i4", "I32"),
    (DType::I16, "i16", "<i2", "I16"),
    (DType::I8, "i8", "|i1", "I8"),
    (DType::U64, "u64", "<u8", "U64"),
    (DType::U32, "u32", "<u4", "U32"),
    (DType::U16, "u16", "<u2", "U16"),
    (DType::U8, "u8", "|u1", "U8"),
    (DType::Bool, "bool", "|b1", "BOOL"),
];

impl DType {
    /// Bytes per element.
    pub fn size(&self) -> u64 {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::Other { size, .. } => u64::from(*size),
        }
    }

    fn known(&self) -> Option<&'static (DType, &'static str, &'static str, &'static str)> {
        KNOWN.iter().find(|k| &k.0 == self)
    }

    /// The canonical name (`"f32"`, `"bf16"`, `"bool"`, ...), or the format's
    /// own name for [`DType::Other`]. This is what the container stores.
    pub fn name(&self) -> &str {
        match self {
            DType::Other { name, .. } => name,
            known => known.known().map_or("", |k| k.1),
        }
    }

    /// The type with canonical name `name` (the inverse of [`DType::name`]
    /// for the known types).
    pub fn from_name(name: &str) -> Option<DType> {
        KNOWN.iter().find(|k| k.1 == name).map(|k| k.0.clone())
    }

    /// A type named by a person (`--dtype`): a canonical name, a numpy descr
    /// or type name (`"<f4"`, `"float32"`) or a safetensors name (`"F32"`).
    pub fn parse(name: &str) -> Result<DType> {
        let alias = match name {
            "float64" | "double" => Some(DType::F64),
            "float32" | "float" => Some(DType::F32),
            "float16" | "half" => Some(DType::F16),
            "bfloat16" => Some(DType::BF16),
            "int64" => Some(DType::I64),
            "int32" => Some(DType::I32),
            "int16" => Some(DType::I16),
            "int8" => Some(DType::I8),
            "uint64" => Some(DType::U64),
            "uint32" => Some(DType::U32),
            "uint16" => Some(DType::U16),
            "uint8" | "byte" => Some(DType::U8),
            _ => None,
        };
        alias
            .or_else(|| DType::from_name(name))
            .or_else(|| DType::from_safetensors(name))
            .or_else(|| DType::from_numpy_descr(name).ok())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "unknown dtype {name:?}; use one of f64 f32 f16 bf16 i64 i32 i16 i8 u64 u32 u16 u8 bool"
                ))
            })
    }

    /// The numpy descr of this type (`"<f4"`), if numpy has one. bf16 has
    /// none: numpy stores it (via ml_dtypes) as an opaque `"|V2"`.
    pub fn numpy_descr(&self) -> Option<&str> {
        match self {
            DType::Other { .. } => None,
            known => known.known().map(|k| k.2).filter(|d| !d.is_empty()),
        }
    }

    /// The type of a numpy descr string (`"<f4"`, `"|u1"`, `"<c8"`, ...).
    ///
    /// Numeric types must be little-endian (or single-byte); anything numpy
    /// cannot describe as a fixed-size element (objects, structured dtypes)
    /// is [`crate::ErrorKind::Unsupported`]. Types ibp has no variant for
    /// come back as [`DType::Other`] under the descr itself.
    pub fn from_numpy_descr(descr: &str) -> Result<DType> {
        let bytes = descr.as_bytes();
        if bytes.len() < 2 || !descr.is_ascii() {
            return Err(Error::unsupported(format!(
                "numpy dtype {descr:?} is not a simple type"
            )));
        }
        let (order, rest) = match bytes[0] {
            b'<' | b'>' | b'|' | b'=' => (bytes[0], &descr[1..]),
            _ => (b'=', descr),
        };
        let kind = rest.as_bytes()[0];
        let count = &rest[1..];
        let n: u32 = if count.is_empty() {
            1
        } else if count.bytes().all(|c| c.is_ascii_digit()) && count.len() <= 9 {
            count
                .parse()
                .map_err(|_| Error::unsupported(format!("numpy dtype {descr:?}")))?
        } else {
            // "M8[ns]" and friends: datetime with a unit, 8 bytes.
            return match kind {
                b'M' | b'm' if count.starts_with("8[") && count.ends_with(']') => {
                    check_order(descr, order, 8)?;
                    Ok(DType::Other {
                        name: descr.to_string(),
                        size: 8,
                    })
                }
                _ => Err(Error::unsupported(format!(
                    "numpy dtype {descr:?} is not a simple type"
                ))),
            };
        };
        let size = match kind {
            b'U' => n
                .checked_mul(4)
                .ok_or_else(|| Error::unsupported(format!("numpy dtype {descr:?} is too wide")))?,
            b'O' => {
                return Err(Error::unsupported(format!(
                    "numpy dtype {descr:?} holds Python objects (pickles); ibp only compresses plain arrays"
                )));
            }
            b'f' | b'i' | b'u' | b'b' | b'c' | b'V' | b'S' | b'a' | b'M' | b'm' | b'?' => n,
            _ => {
                return Err(Error::unsupported(format!(
                    "numpy dtype {descr:?} is not a type ibp knows"
                )));
            }
        };
        if size == 0 {
            return Err(Error::unsupported(format!(
                "numpy dtype {descr:?} has zero-size elements"
            )));
        }
        // The byte order only matters for types wider than a byte whose
        // elements are numbers; strings of bytes ('S', 'V') have none.
        if !matches!(kind, b'S' | b'a' | b'V') {
            check_order(
                descr,
                order,
                if kind == b'U' {
                    4
                } else if kind == b'c' {
                    size / 2
                } else {
                    size
                },
            )?;
        }
        let canonical = match (kind, size) {
            (b'f', 8) => Some(DType::F64),
            (b'f', 4) => Some(DType::F32),
            (b'f', 2) => Some(DType::F16),
            (b'i', 8) => Some(DType::I64),
            (b'i', 4) => Some(DType::I32),
            (b'i', 2) => Some(DType::I16),
            (b'i', 1) => Some(DType::I8),
            (b'u', 8) => Some(DType::U64),
            (b'u', 4) => Some(DType::U32),
            (b'u', 2) => Some(DType::U16),
            (b'u', 1) => Some(DType::U8),
            (b'b' | b'?', 1) => Some(DType::Bool),
            _ => None,
        };
        Ok(canonical.unwrap_or_else(|| DType::Other {
            name: descr.to_string(),
            size,
        }))
    }

    /// The safetensors name of this type (`"F32"`), if it has one.
    pub fn safetensors_name(&self) -> Option<&str> {
        match self {
            DType::Other { name, .. } => SAFETENSORS_OTHER.iter().find(|n| *n == name).copied(),
            known => known.known().map(|k| k.3),
        }
    }

    /// The type of a safetensors dtype string. The fp8 types come back as
    /// [`DType::Other`] of one byte; sub-byte types (`"F4"`, ...) are not
    /// fixed-size bytes and give `None`.
    pub fn from_safetensors(name: &str) -> Option<DType> {
        KNOWN
            .iter()
            .find(|k| k.3 == name)
            .map(|k| k.0.clone())
            .or_else(|| {
                SAFETENSORS_OTHER.contains(&name).then(|| DType::Other {
                    name: name.to_string(),
                    size: 1,
                })
            })
    }

    /// The type a container manifest names: a canonical name must have its
    /// canonical size; any other name is [`DType::Other`] of `size` bytes.
    pub(crate) fn from_stored(name: &str, size: u64) -> Result<DType> {
        match DType::from_name(name) {
            Some(d) if d.size() == size => Ok(d),
            Some(d) => Err(Error::corrupt(format!(
                "dtype {name} has {} bytes per element, not {size}",
                d.size()
            ))),
            None => {
                let size = u32::try_from(size)
                    .ok()
                    .filter(|s| *s >= 1)
                    .ok_or_else(|| {
                        Error::corrupt(format!("dtype {name:?} has {size} bytes per element"))
                    })?;
                Ok(DType::Other {
                    name: name.to_string(),
                    size,
                })
            }
        }
    }
}

/// Single-byte safetensors types without a variant of their own.
const SAFETENSORS_OTHER: [&str; 3] = ["F8_E4M3", "F8_E5M2", "F8_E8M0"];

fn check_order(descr: &str, order: u8, width: u32) -> Result<()> {
    let big = order == b'>' || (order == b'=' && cfg!(target_endian = "big"));
    if big && width > 1 {
        return Err(Error::unsupported(format!(
            "numpy dtype {descr:?} is big-endian; ibp reads little-endian arrays only \
             (convert with arr.astype(arr.dtype.newbyteorder('<')))"
        )));
    }
    Ok(())
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
