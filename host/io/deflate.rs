//! Raw deflate (RFC 1951) streams: inflating zip members with a size limit,
//! and finding the zlib level that reproduces a stream exactly.
//!
//! Q: why does re-deflating ever reproduce the original bytes?
//! A: Python's `zipfile` (and so `numpy.savez_compressed`) deflates with the
//! C zlib at level 6, window 15, memLevel 8, default strategy, and zlib is
//! deterministic. flate2 built on the same C zlib gives the same stream; we
//! build it from libz-sys's bundled source so every machine gets the same
//! zlib. Measured on `cora-features.npz` (15.5 MB member): zlib 1.2.13 and
//! 1.3.2 reproduce it at level 6; miniz_oxide (flate2's default) and zlib-rs
//! reproduce it at no level.
#![forbid(unsafe_code)]

use std::io::Write;

use flate2::{Compression, Decompress, FlushDecompress, Status};

use super::{PieceSource, Segment, restore_segments, write_error};
use crate::error::{Error, Result};

/// The compressor every [`Segment::Deflate`] means: zlib's deflate with
/// window bits 15, memLevel 8 and the default strategy.
pub(crate) const DEFLATE_ENGINE: &str = "zlib";

/// Deflate cannot expand data more than about 1032 times; a claimed
/// uncompressed size beyond this is a lie, and we refuse to allocate it.
const MAX_RATIO: u64 = 1032;

/// A raw deflate encoder at `level` writing into `out`.
pub(crate) fn encoder(
    out: &mut dyn Write,
    level: u32,
) -> Result<flate2::write::DeflateEncoder<&mut dyn Write>> {
    if !(1..=9).contains(&level) {
        return Err(Error::corrupt(format!("deflate level {level} is not 1-9")));
    }
    Ok(flate2::write::DeflateEncoder::new(
        out,
        Compression::new(level),
    ))
}

/// Inflate `compressed`, which must decode to exactly `expected` bytes and
/// end exactly at its last byte. `what` names the stream in errors.
pub(crate) fn inflate_exact(compressed: &[u8], expected: u64, what: &str) -> Result<Vec<u8>> {
    let limit = (compressed.len() as u64)
        .saturating_mul(MAX_RATIO)
        .saturating_add(1024);
    if expected > limit {
        return Err(Error::corrupt(format!(
            "{what}: claims {expected} uncompressed bytes from {} compressed, more than deflate can produce",
            compressed.len()
        )));
    }
    let cap = usize::try_from(expected)
        .map_err(|_| Error::unsupported(format!("{what}: too large for this machine")))?;
    let mut out = Vec::new();
    out.try_reserve_exact(cap)
        .map_err(|_| Error::out_of_memory(expected, &format!("inflating {what}")))?;
    let mut d = Decompress::new(false);
    loop {
        let consumed = d.total_in() as usize;
        let before = out.len();
        // Ask for one byte more than expected so that overlong streams show.
        if out.len() == out.capacity() {
            out.try_reserve_exact(1)
                .map_err(|_| Error::out_of_memory(1, &format!("inflating {what}")))?;
        }
        let status = d
            .decompress_vec(
                &compressed[consumed.min(compressed.len())..],
                &mut out,
                FlushDecompress::Finish,
            )
            .map_err(|e| Error::corrupt(format!("{what}: bad deflate data ({e})")))?;
        if out.len() as u64 > expected {
            return Err(Error::corrupt(format!(
                "{what}: inflates to more than the {expected} bytes its header says"
            )));
        }
        match status {
            Status::StreamEnd => break,
            Status::Ok | Status::BufError => {
                if d.total_in() as usize == consumed && out.len() == before {
                    return Err(Error::truncated(format!(
                        "{what}: deflate stream ends early"
                    )));
                }
            }
        }
    }
    if out.len() as u64 != expected {
        return Err(Error::corrupt(format!(
            "{what}: inflates to {} bytes but its header says {expected}",
            out.len()
        )));
    }
    if d.total_in() != compressed.len() as u64 {
        return Err(Error::corrupt(format!(
            "{what}: {} bytes follow the end of the deflate stream",
            compressed.len() as u64 - d.total_in()
        )));
    }
    Ok(out)
}

/// The first zlib level (most likely first) at which deflating `inner`, as a
/// restore would write it, gives exactly `original`; `None` if none does.
pub(crate) fn find_level<R>(
    inner: &[Segment<R>],
    src: &mut dyn PieceSource<R>,
    original: &[u8],
) -> Result<Option<u32>> {
    // 6 is zlib's (and Python's) default; 9 and 1 are the other usual
    // choices. A wrong level is rejected within its first output block, so
    // the misses cost little.
    //
    // Q: why never level 0?
    // A: at levels 1-9 zlib's output does not depend on how the input is
    // split across calls (it only compresses once it has a full lookahead),
    // so a restore may write a large group in blocks. Level 0 emits stored
    // blocks sized by whatever input each call brings, so its output does
    // depend on the splitting; such members are kept verbatim.
    for level in [6, 9, 1, 5, 4, 3, 2, 7, 8] {
        let mut cmp = Compare {
            expected: original,
            pos: 0,
        };
        // The same walk a restore runs, so the compressor sees the same
        // sequence of writes and so produces the same stream.
        let mut enc = encoder(&mut cmp, level)?;
        let walked = restore_segments(inner, src, &mut enc)
            .and_then(|()| enc.finish().map(|_| ()).map_err(write_error));
        match walked {
            Ok(()) if cmp.pos == original.len() => return Ok(Some(level)),
            Ok(()) => {}
            Err(e) if e.kind() == crate::ErrorKind::Io => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// A writer that only checks that what it is given is `expected`, and fails
/// at the first difference.
struct Compare<'e> {
    expected: &'e [u8],
    pos: usize,
}

impl Write for Compare<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let rest = &self.expected[self.pos..];
        if buf.len() > rest.len() || rest[..buf.len()] != *buf {
            return Err(std::io::Error::other(
                "differs from the original deflate stream",
            ));
        }
        self.pos += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
