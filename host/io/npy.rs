//! numpy `.npy` files: a magic string, a version, a header that is a Python
//! dict literal (`{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`)
//! and the array bytes.
//!
//! The header is kept verbatim in the envelope; only the dict is parsed, by
//! a small parser for the literals numpy writes (strings, integers, booleans,
//! `None`, tuples, lists, dicts), with a nesting limit so that hostile input
//! cannot exhaust the stack.
#![forbid(unsafe_code)]

use std::borrow::Cow;

use super::{
    DType, Document, Fingerprint, ParseOptions, Segment, SourceFormat, TensorGroup, element_count,
    le_u16, le_u32, take,
};
use crate::error::{Error, Result};

/// The first six bytes of every `.npy` file.
pub const MAGIC: &[u8] = b"\x93NUMPY";

/// What an npy header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// Format version (major, minor): 1.0, 2.0 or 3.0.
    pub version: (u8, u8),
    /// Bytes before the array data (magic, version, length, dict, padding).
    pub data_offset: u64,
    /// Element type.
    pub dtype: DType,
    /// Column-major data (`fortran_order: True`).
    pub fortran_order: bool,
    /// The array's shape as numpy reports it.
    pub shape: Vec<u64>,
}

impl NpyHeader {
    /// The shape in the order the bytes are stored: reversed for Fortran
    /// order, so that the first axis is always the slowest-varying one.
    pub fn storage_shape(&self) -> Vec<u64> {
        let mut s = self.shape.clone();
        if self.fortran_order {
            s.reverse();
        }
        s
    }

    /// Bytes of array data.
    pub fn data_len(&self) -> Result<u64> {
        element_count(&self.shape)?
            .checked_mul(self.dtype.size())
            .ok_or_else(|| {
                Error::corrupt(format!("npy shape {:?} overflows u64 bytes", self.shape))
            })
    }
}

/// Read the header at the start of `bytes`.
pub fn read_header(bytes: &[u8]) -> Result<NpyHeader> {
    let pre = take(bytes, 0, 8, "npy preamble")?;
    if &pre[..6] != MAGIC {
        return Err(Error::corrupt(
            "not an npy file: the magic string \\x93NUMPY is missing",
        ));
    }
    let version = (pre[6], pre[7]);
    let (len_bytes, text_start) = match version.0 {
        1 => (2u64, 10u64),
        2 | 3 => (4, 12),
        0 => {
            return Err(Error::corrupt(format!(
                "npy format version 0.{} does not exist (numpy writes 1.0-3.0); the file is damaged",
                version.1
            )));
        }
        v => {
            return Err(Error::unsupported(format!(
                "npy format version {v}.{} is newer than this reader (1.0-3.0)",
                version.1
            )));
        }
    };
    let len_field = take(bytes, 8, len_bytes, "npy header length")?;
    let header_len = if len_bytes == 2 {
        u64::from(le_u16(len_field, 0))
    } else {
        u64::from(le_u32(len_field, 0))
    };
    let text = take(bytes, text_start, header_len, "npy header")?;
    let text = std::str::from_utf8(text).map_err(|_| Error::corrupt("npy header is not text"))?;
    if version.0 < 3 && !text.is_ascii() {
        return Err(Error::corrupt("npy header of version 1/2 is not ASCII"));
    }
    let dict = parse_literal(text)?;
    let Lit::Dict(entries) = dict else {
        return Err(Error::corrupt("npy header is not a dict"));
    };
    let get = |key: &str| {
        entries
            .iter()
            .find(|(k, _)| matches!(k, Lit::Str(s) if s == key))
            .map(|(_, v)| v)
            .ok_or_else(|| Error::corrupt(format!("npy header has no {key:?}")))
    };
    let dtype = match get("descr")? {
        Lit::Str(d) => DType::from_numpy_descr(d)?,
        _ => {
            return Err(Error::unsupported(
                "npy array has a structured dtype; ibp reads plain arrays only",
            ));
        }
    };
    let fortran_order = match get("fortran_order")? {
        Lit::Bool(b) => *b,
        _ => {
            return Err(Error::corrupt(
                "npy header: fortran_order is not True or False",
            ));
        }
    };
    let shape = match get("shape")? {
        Lit::Seq(items) => items
            .iter()
            .map(|d| match d {
                Lit::Int(n) => Ok(*n),
                _ => Err(Error::corrupt(
                    "npy header: shape holds something other than integers",
                )),
            })
            .collect::<Result<Vec<u64>>>()?,
        _ => return Err(Error::corrupt("npy header: shape is not a tuple")),
    };
    Ok(NpyHeader {
        version,
        data_offset: text_start + header_len,
        dtype,
        fortran_order,
        shape,
    })
}

/// Read a whole `.npy` file: one group (named by `opts.name`, default
/// `"array"`) between the verbatim header and any trailing bytes.
pub fn parse<'a>(bytes: &'a [u8], opts: &ParseOptions) -> Result<Document<'a>> {
    let (group, envelope) = split(Cow::Borrowed(bytes), opts.array_name(), 0)?;
    Ok(Document {
        format: SourceFormat::Npy,
        groups: vec![group],
        envelope,
        original: Fingerprint::of(bytes),
        notes: Vec::new(),
        deferred: Vec::new(),
    })
}

/// A group and the segments around it.
pub(crate) type Split<'a> = (TensorGroup<'a>, Vec<Segment<Cow<'a, [u8]>>>);

/// Split an npy file into its group (to be group number `index`) and the
/// segments that rebuild the file around it. Owned input is split without
/// copying the array data.
pub(crate) fn split<'a>(bytes: Cow<'a, [u8]>, name: &str, index: usize) -> Result<Split<'a>> {
    let header = read_header(&bytes)?;
    let data_len = header.data_len()?;
    // Checks data_offset + data_len <= bytes.len(), so the casts below hold.
    take(&bytes, header.data_offset, data_len, "npy array data")?;
    let start = header.data_offset as usize;
    let end = start + data_len as usize;
    let (head, data, tail) = match bytes {
        Cow::Borrowed(b) => (
            Cow::Borrowed(&b[..start]),
            Cow::Borrowed(&b[start..end]),
            Cow::Borrowed(&b[end..]),
        ),
        Cow::Owned(mut v) => {
            let tail = v[end..].to_vec();
            let head = v[..start].to_vec();
            v.truncate(end);
            v.drain(..start);
            (Cow::Owned(head), Cow::Owned(v), Cow::Owned(tail))
        }
    };
    let mut segments = vec![Segment::Raw(head), Segment::Group(index)];
    if !tail.is_empty() {
        segments.push(Segment::Raw(tail));
    }
    let group = TensorGroup {
        name: name.to_string(),
        dtype: header.dtype.clone(),
        shape: header.storage_shape(),
        data,
    };
    Ok((group, segments))
}

/// A Python literal, as far as npy headers use them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Lit {
    Str(String),
    Int(u64),
    Bool(bool),
    None,
    /// A tuple or a list.
    Seq(Vec<Lit>),
    Dict(Vec<(Lit, Lit)>),
}

/// Nesting deeper than this is not a header numpy wrote.
const MAX_DEPTH: u32 = 16;

fn parse_literal(text: &str) -> Result<Lit> {
    let mut p = LitParser {
        s: text.as_bytes(),
        i: 0,
    };
    let v = p.value(0)?;
    p.skip_ws();
    if p.i != p.s.len() {
        return Err(p.err("unexpected text after the header dict"));
    }
    Ok(v)
}

struct LitParser<'s> {
    s: &'s [u8],
    i: usize,
}

impl LitParser<'_> {
    fn err(&self, what: &str) -> Error {
        Error::corrupt(format!("npy header: {what} at byte {}", self.i))
    }

    fn skip_ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected {:?}", c as char)))
        }
    }

    fn value(&mut self, depth: u32) -> Result<Lit> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        match self.peek() {
            None => Err(self.err("unexpected end")),
            Some(b'\'' | b'"') => self.string(),
            Some(b'(') => self.seq(b')', depth).map(Lit::Seq),
            Some(b'[') => self.seq(b']', depth).map(Lit::Seq),
            Some(b'{') => self.dict(depth),
            Some(c) if c.is_ascii_digit() => self.int(),
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_')
                {
                    self.i += 1;
                }
                match &self.s[start..self.i] {
                    b"True" => Ok(Lit::Bool(true)),
                    b"False" => Ok(Lit::Bool(false)),
                    b"None" => Ok(Lit::None),
                    _ => {
                        self.i = start;
                        Err(self.err("unknown name"))
                    }
                }
            }
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn int(&mut self) -> Result<Lit> {
        let mut n: u64 = 0;
        while let Some(&c) = self.s.get(self.i).filter(|c| c.is_ascii_digit()) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(c - b'0')))
                .ok_or_else(|| self.err("integer too large"))?;
            self.i += 1;
        }
        // Python 2 wrote longs as `3L`.
        if self.s.get(self.i) == Some(&b'L') {
            self.i += 1;
        }
        Ok(Lit::Int(n))
    }

    fn string(&mut self) -> Result<Lit> {
        let quote = self.s[self.i];
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.i) else {
                return Err(self.err("unterminated string"));
            };
            self.i += 1;
            match c {
                _ if c == quote => break,
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("unterminated string"));
                    };
                    self.i += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'0' => 0,
                        other => other,
                    });
                }
                b'\n' => return Err(self.err("newline inside a string")),
                _ => out.push(c),
            }
        }
        String::from_utf8(out)
            .map(Lit::Str)
            .map_err(|_| self.err("string is not UTF-8"))
    }

    fn seq(&mut self, close: u8, depth: u32) -> Result<Vec<Lit>> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.i += 1;
                return Ok(items);
            }
            items.push(self.value(depth + 1)?);
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(c) if c == close => {}
                _ => return Err(self.err("expected ',' or the end of a sequence")),
            }
        }
    }

    fn dict(&mut self, depth: u32) -> Result<Lit> {
        self.i += 1;
        let mut entries = Vec::new();
        loop {
            if self.peek() == Some(b'}') {
                self.i += 1;
                return Ok(Lit::Dict(entries));
            }
            let k = self.value(depth + 1)?;
            self.expect(b':')?;
            let v = self.value(depth + 1)?;
            entries.push((k, v));
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {}
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals() {
        let v = parse_literal("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4L,), 'x': [None, \"a\\'b\"], }  \n")
            .unwrap();
        let Lit::Dict(e) = v else { panic!() };
        assert_eq!(e[2].1, Lit::Seq(vec![Lit::Int(3), Lit::Int(4)]));
        assert_eq!(e[3].1, Lit::Seq(vec![Lit::None, Lit::Str("a'b".into())]));
        assert_eq!(parse_literal("()").unwrap(), Lit::Seq(vec![]));
        for bad in [
            "{",
            "{'a' 1}",
            "(1,,)",
            "'abc",
            "Foo",
            "{'a': 1} x",
            "99999999999999999999999",
            &"(".repeat(100),
        ] {
            assert!(parse_literal(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn descrs() {
        assert_eq!(DType::from_numpy_descr("<f4").unwrap(), DType::F32);
        assert_eq!(DType::from_numpy_descr("|b1").unwrap(), DType::Bool);
        assert_eq!(
            DType::from_numpy_descr("<c8").unwrap(),
            DType::Other {
                name: "<c8".into(),
                size: 8
            }
        );
        assert_eq!(DType::from_numpy_descr("<U3").unwrap().size(), 12);
        assert_eq!(DType::from_numpy_descr("<M8[ns]").unwrap().size(), 8);
        assert_eq!(
            DType::from_numpy_descr(">f4").unwrap_err().kind(),
            crate::ErrorKind::Unsupported
        );
        assert_eq!(
            DType::from_numpy_descr("|O").unwrap_err().kind(),
            crate::ErrorKind::Unsupported
        );
        assert_eq!(DType::from_numpy_descr(">i1").unwrap(), DType::I8);
    }
}
