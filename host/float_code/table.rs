//! The per-group code table: which bits of an element are the symbol, the
//! length-limited canonical prefix code of the symbols, and its bytes.

use crate::error::{Error, Result};

use super::{FloatType, Split};

/// The longest code length a table may use.
pub const MAX_CODE_LEN: u8 = 15;
/// The widest symbol field: 12 bits, 4096 symbols.
pub const MAX_SYMBOL_BITS: u8 = 12;
/// The most sub-streams a row may be split into.
pub const MAX_SUB_STREAMS: u8 = 32;
/// Bytes of a table before its symbol list (`docs/FORMAT.md` §7.2).
pub(crate) const TABLE_HEADER: usize = 8;

/// A decode-table entry that no code reaches (only in an empty table).
pub(crate) const NO_SYMBOL: u32 = u32::MAX;
/// An encode-table entry of a symbol the table does not code.
pub(crate) const NO_CODE: u64 = u64::MAX;

/// The code of one group: the element type, which bits are coded, how rows
/// are split into sub-streams, and a canonical prefix code of the symbols.
///
/// A table is made by [`super::fit`] or read back with
/// [`Table::from_bytes`]; its bytes are `docs/FORMAT.md` §7.2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub(crate) ftype: FloatType,
    pub(crate) split: Split,
    pub(crate) sub_streams: u8,
    pub(crate) max_len: u8,
    /// The coded symbols and their code lengths, ascending by symbol.
    pub(crate) symbols: Vec<(u16, u8)>,
    /// Per symbol value (`2^width` entries): `rev | code << 16 | len << 32`,
    /// `code` the canonical code and `rev` the same bits reversed (a
    /// forward sub-stream writes `rev` LSB first, a backward one `code`);
    /// [`NO_CODE`] when absent.
    pub(crate) enc: Vec<u64>,
    /// Per `max_len`-bit window (LSB first): `symbol | len << 16`.
    pub(crate) dec: Vec<u32>,
}

impl Table {
    /// Build a table from code lengths (`(symbol, length)`, any order).
    ///
    /// Errors with [`crate::ErrorKind::Corrupt`] when the lengths are not a
    /// complete prefix code within `max_len` (or one symbol of length 0),
    /// a symbol repeats or does not fit the split, or the parameters are
    /// out of range.
    pub(crate) fn from_lengths(
        ftype: FloatType,
        split: Split,
        sub_streams: u8,
        max_len: u8,
        mut symbols: Vec<(u16, u8)>,
    ) -> Result<Self> {
        split
            .check(ftype)
            .map_err(|e| Error::corrupt(e.message()))?;
        if !valid_sub_streams(sub_streams) {
            return Err(Error::corrupt(format!(
                "a float-code table has {sub_streams} sub-streams; 1 or an even number up to {MAX_SUB_STREAMS} are valid"
            )));
        }
        if !(1..=MAX_CODE_LEN).contains(&max_len) {
            return Err(Error::corrupt(format!(
                "a float-code table limits codes to {max_len} bits; 1 to {MAX_CODE_LEN} are valid"
            )));
        }
        symbols.sort_unstable();
        let alphabet = 1usize << split.width;
        let mut kraft = 0u64;
        for (i, &(s, l)) in symbols.iter().enumerate() {
            if usize::from(s) >= alphabet {
                return Err(Error::corrupt(format!(
                    "symbol {s} does not fit a {}-bit field",
                    split.width
                )));
            }
            if i > 0 && symbols[i - 1].0 == s {
                return Err(Error::corrupt(format!("symbol {s} is listed twice")));
            }
            if l > max_len || (l == 0 && symbols.len() != 1) {
                return Err(Error::corrupt(format!(
                    "symbol {s} has a code of {l} bits; 1 to {max_len} are valid"
                )));
            }
            kraft += if l == 0 {
                1 << max_len
            } else {
                1 << (max_len - l)
            };
        }
        if !symbols.is_empty() && kraft != 1 << max_len {
            return Err(Error::corrupt(
                "the code lengths do not form a complete prefix code",
            ));
        }
        // Canonical codes: ascending length, then ascending symbol.
        let mut order: Vec<(u8, u16)> = symbols.iter().map(|&(s, l)| (l, s)).collect();
        order.sort_unstable();
        let mut enc = vec![NO_CODE; alphabet];
        let mut dec = vec![NO_SYMBOL; 1 << max_len];
        let (mut code, mut prev_len) = (0u32, 0u8);
        for &(l, s) in &order {
            code <<= l - prev_len;
            prev_len = l;
            let rev = reverse(code, l);
            enc[usize::from(s)] = u64::from(rev) | u64::from(code) << 16 | u64::from(l) << 32;
            let entry = u32::from(s) | u32::from(l) << 16;
            let mut j = rev as usize;
            while j < dec.len() {
                dec[j] = entry;
                j += 1 << l;
            }
            code += 1;
        }
        Ok(Self {
            ftype,
            split,
            sub_streams,
            max_len,
            symbols,
            enc,
            dec,
        })
    }

    /// The element type.
    pub fn float_type(&self) -> FloatType {
        self.ftype
    }

    /// Which bits of an element are coded.
    pub fn split(&self) -> Split {
        self.split
    }

    /// Sub-streams per row.
    pub fn sub_streams(&self) -> usize {
        usize::from(self.sub_streams)
    }

    /// The longest code, in bits (the decode table has `2^max_code_len`
    /// entries).
    pub fn max_code_len(&self) -> u8 {
        self.max_len
    }

    /// The coded symbols and their code lengths, ascending by symbol.
    pub fn symbols(&self) -> &[(u16, u8)] {
        &self.symbols
    }

    /// The table's length in bytes ([`Table::to_bytes`]).
    pub fn encoded_len(&self) -> usize {
        TABLE_HEADER + 3 * self.symbols.len()
    }

    /// The longest table of any split: a header and 4096 symbols.
    pub const MAX_ENCODED_LEN: usize = TABLE_HEADER + 3 * (1 << MAX_SYMBOL_BITS);

    /// The table's bytes (`docs/FORMAT.md` §7.2).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&[
            self.ftype.code(),
            self.split.low,
            self.split.width,
            self.sub_streams,
            self.max_len,
            0,
        ]);
        // At most 4096 symbols (MAX_SYMBOL_BITS), so the count fits.
        out.extend_from_slice(&(self.symbols.len() as u16).to_le_bytes());
        for &(s, l) in &self.symbols {
            out.extend_from_slice(&s.to_le_bytes());
            out.push(l);
        }
        out
    }

    /// Read a table from the start of `bytes`; returns it and the bytes it
    /// used.
    ///
    /// Errors with [`crate::ErrorKind::Truncated`] when `bytes` ends inside
    /// the table and [`crate::ErrorKind::Corrupt`] when it is not valid.
    pub fn from_bytes(bytes: &[u8]) -> Result<(Self, usize)> {
        let head = bytes
            .get(..TABLE_HEADER)
            .ok_or_else(|| Error::truncated("a float-code table ends inside its header"))?;
        let ftype = FloatType::from_code(head[0])?;
        let split = Split {
            low: head[1],
            width: head[2],
        };
        if head[5] != 0 {
            return Err(Error::corrupt(
                "a float-code table's reserved byte is not 0",
            ));
        }
        let n = usize::from(u16::from_le_bytes([head[6], head[7]]));
        let len = TABLE_HEADER + 3 * n;
        let list = bytes.get(TABLE_HEADER..len).ok_or_else(|| {
            Error::truncated(format!(
                "a float-code table of {n} symbols needs {len} bytes, {} are left",
                bytes.len()
            ))
        })?;
        let symbols = list
            .as_chunks::<3>()
            .0
            .iter()
            .map(|c| (u16::from_le_bytes([c[0], c[1]]), c[2]))
            .collect::<Vec<_>>();
        if symbols.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(Error::corrupt(
                "a float-code table's symbols are not in ascending order",
            ));
        }
        let t = Self::from_lengths(ftype, split, head[3], head[4], symbols)?;
        Ok((t, len))
    }
}

/// Whether a row may be split into `s` sub-streams: 1, or an even number
/// up to [`MAX_SUB_STREAMS`] (they pair up, `docs/FORMAT.md` §7.3).
pub(crate) fn valid_sub_streams(s: u8) -> bool {
    s == 1 || (s.is_multiple_of(2) && (2..=MAX_SUB_STREAMS).contains(&s))
}

/// The low `len` bits of `code`, in reverse order.
fn reverse(code: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        code.reverse_bits() >> (32 - u32::from(len))
    }
}

/// Code lengths of a prefix code for `counts` (one per symbol value; 0 =
/// absent), no longer than `max_len`: Huffman's lengths, then the longest
/// shortened and the Kraft sum repaired. A lone symbol gets length 0.
///
/// Q: why not package-merge, which is optimal under the limit?
/// A: the limit binds only on rare symbols (an exponent seen a few times in
/// millions), where the greedy repair loses a few bits a group; measured in
/// `docs/results/entropy-ratio-cpu.md`.
///
/// Returns the lengths and the limit used: `max_len`, raised to
/// `ceil(log2(symbols))` when more symbols are present than `2^max_len`.
pub(crate) fn code_lengths(counts: &[u64], max_len: u8) -> (Vec<(u16, u8)>, u8) {
    let present: Vec<(u16, u64)> = counts
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c > 0)
        .map(|(s, &c)| (s as u16, c))
        .collect();
    match present.len() {
        0 => return (Vec::new(), max_len),
        1 => return (vec![(present[0].0, 0)], max_len),
        _ => {}
    }
    // Huffman by two queues over leaves sorted by count.
    let mut leaves = present.clone();
    leaves.sort_by_key(|&(s, c)| (c, s));
    let n = leaves.len();
    // Nodes 0..n are leaves, n.. internal; parent[] links upward.
    let mut weight: Vec<u64> = leaves.iter().map(|&(_, c)| c).collect();
    let mut parent = vec![usize::MAX; 2 * n - 1];
    let (mut li, mut qi) = (0usize, n);
    let pick = |weight: &Vec<u64>, li: &mut usize, qi: &mut usize| -> usize {
        let take_leaf = *li < n && (*qi >= weight.len() || weight[*li] <= weight[*qi]);
        if take_leaf {
            *li += 1;
            *li - 1
        } else {
            *qi += 1;
            *qi - 1
        }
    };
    for _ in 0..n - 1 {
        let a = pick(&weight, &mut li, &mut qi);
        let b = pick(&weight, &mut li, &mut qi);
        let id = weight.len();
        weight.push(weight[a] + weight[b]);
        parent[a] = id;
        parent[b] = id;
    }
    let mut depth = vec![0u32; 2 * n - 1];
    for i in (0..2 * n - 2).rev() {
        depth[i] = depth[parent[i]] + 1;
    }
    let ml = u32::from(max_len).max(n.next_power_of_two().trailing_zeros());
    let mut lens: Vec<u32> = depth[..n].iter().map(|&d| d.min(ml)).collect();
    // Repair: while the Kraft sum exceeds 2^max_len, lengthen the rarest
    // symbol that can still grow (leaves are sorted rarest first).
    let cap = 1u64 << ml;
    let mut kraft: u64 = lens.iter().map(|&l| 1u64 << (ml - l)).sum();
    while kraft > cap {
        // Q: why can this not fail? A: n <= 2^ml, so a Kraft sum above
        // 2^ml has a code shorter than ml. A failure would leave an
        // incomplete code, which Table::from_lengths refuses (no panic).
        let Some(i) = (0..n)
            .find(|&i| lens[i] < ml && kraft - (1u64 << (ml - lens[i] - 1)) >= cap)
            .or_else(|| (0..n).find(|&i| lens[i] < ml))
        else {
            break;
        };
        kraft -= 1u64 << (ml - lens[i] - 1);
        lens[i] += 1;
    }
    // Fill the slack: shorten the most frequent symbol that still fits,
    // which also makes the code complete (every decode-table entry used).
    while kraft < cap {
        // The slack is a multiple of the longest code's term, so that code
        // can always be shortened.
        let Some(i) = (0..n)
            .rev()
            .find(|&i| lens[i] > 1 && kraft + (1u64 << (ml - lens[i])) <= cap)
        else {
            break;
        };
        kraft += 1u64 << (ml - lens[i]);
        lens[i] -= 1;
    }
    let out = leaves
        .iter()
        .zip(&lens)
        .map(|(&(s, _), &l)| (s, l as u8))
        .collect();
    (out, ml as u8)
}
