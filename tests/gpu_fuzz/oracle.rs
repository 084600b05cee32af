//! The oracle: what the CPU codec makes of each output row, and the
//! judgement of a GPU output against it.

use super::*;

/// What the CPU codec makes of one output row.
#[derive(Clone, Copy)]
pub(crate) enum Want<'a> {
    Row(&'a [u8]),
    Corrupt,
    BadIndex,
}

pub(crate) fn wants<'a>(rows: &'a [Option<Vec<u8>>], index: &[u64]) -> Vec<Want<'a>> {
    index
        .iter()
        .map(
            |&t| match usize::try_from(t).ok().and_then(|t| rows.get(t)) {
                None => Want::BadIndex,
                Some(Some(r)) => Want::Row(r),
                Some(None) => Want::Corrupt,
            },
        )
        .collect()
}

/// Judge an output buffer (`want.len()` rows of `l` bytes, `stride` apart,
/// then guard bytes if any) and the status's verdict against the CPU.
pub(crate) fn judge(
    host: &[u8],
    l: usize,
    stride: usize,
    want: &[Want],
    verdict: ibp::Result<()>,
) -> Run {
    let count = want.len();
    for (i, w) in want.iter().enumerate() {
        let got = &host[i * stride..i * stride + l];
        match w {
            Want::Row(r) => {
                if got != *r {
                    let j = got.iter().zip(r.iter()).position(|(a, b)| a != b).unwrap();
                    return Err(Fail::Mismatch(format!(
                        "output row {i} differs from the CPU's at byte {j} ({:#04x}, CPU {:#04x}{})",
                        got[j],
                        r[j],
                        if got.iter().all(|&b| b == POISON) {
                            ", the row was never written"
                        } else if got.iter().all(|&b| b == 0) {
                            ", the row was zeroed"
                        } else {
                            ""
                        }
                    )));
                }
            }
            Want::Corrupt | Want::BadIndex => {
                if got.iter().any(|&b| b != 0) {
                    return Err(Fail::Mismatch(format!(
                        "output row {i} ({}) was not zero-filled",
                        if matches!(w, Want::Corrupt) {
                            "corrupt for the CPU"
                        } else {
                            "a bad index"
                        }
                    )));
                }
            }
        }
        let gap_end = if i + 1 < count {
            (i + 1) * stride
        } else {
            host.len()
        };
        if host[i * stride + l..gap_end].iter().any(|&b| b != POISON) {
            return Err(Fail::Mismatch(format!(
                "bytes after output row {i} were written (between rows or past the last)"
            )));
        }
    }
    let first = want
        .iter()
        .position(|w| !matches!(w, Want::Row(_)))
        .map(|i| i as u64);
    let bad = want.iter().any(|w| matches!(w, Want::BadIndex));
    let corrupt = want.iter().any(|w| matches!(w, Want::Corrupt));
    match (first, verdict) {
        (None, Ok(())) => Ok(Outcome::Equal),
        (None, Err(e)) => Err(if e.kind() == ErrorKind::Cuda {
            Fail::Fatal(format!("status: {e}"))
        } else {
            Fail::Mismatch(format!(
                "the status reports an error where the CPU decodes every row: {e}"
            ))
        }),
        (Some(r), Ok(())) => Err(Fail::Mismatch(format!(
            "the status reports nothing; output row {r} is {} for the CPU",
            if bad { "a bad index" } else { "corrupt" }
        ))),
        (Some(r), Err(e)) => {
            let kind = if bad {
                ErrorKind::InvalidArgument
            } else {
                ErrorKind::Corrupt
            };
            if e.kind() == ErrorKind::Cuda {
                return Err(Fail::Fatal(format!("status: {e}")));
            }
            if e.kind() != kind || !e.message().contains(&format!("output row {r} (")) {
                return Err(Fail::Mismatch(format!(
                    "the status says \"{e}\" ({:?}); the CPU expects {kind:?} first at output row {r}",
                    e.kind()
                )));
            }
            Ok(if corrupt {
                Outcome::Corrupt
            } else {
                Outcome::Equal
            })
        }
    }
}
