//! Arbitrary bytes as an `.ibp` container: opening, every accessor and a
//! full restore must return (an error or the data), never panic, hang or
//! allocate without bound.
//!
//! Q: why also try the input "re-sealed"?
//! A: random bytes almost never pass the checksums, so the fuzzer would
//! spend its time on the first check. Re-sealing recomputes every checksum
//! the way a writer would (`docs/FORMAT.md` §6), so mutations reach the
//! manifest, group and codec checks behind them.
#![no_main]

use ibp::container::{IbpFile, RestoreOptions};
use libfuzzer_sys::fuzz_target;
use xxhash_rust::xxh3::xxh3_64;

fuzz_target!(|data: &[u8]| {
    exercise(data);
    if let Some(sealed) = reseal(data) {
        exercise(&sealed);
    }
});

fn exercise(bytes: &[u8]) {
    let Ok(file) = IbpFile::from_bytes(bytes) else {
        return;
    };
    for g in file.groups() {
        let _ = (
            g.name(),
            g.dtype(),
            g.shape(),
            g.stats(),
            g.codebook(),
            g.threshold(),
        );
        let _ = (g.packed(), g.fixed(), g.raw());
        if let Ok(data) = g.decompress() {
            let l = g.row_bytes() as usize;
            if g.rows() > 0 && l > 0 {
                let mut row = vec![0u8; l];
                g.decompress_rows(0..1, &mut row)
                    .expect("row 0 of a group that decompresses");
                assert_eq!(row[..], data[..l]);
            }
        }
    }
    let _ = file.restore(&mut std::io::sink(), &RestoreOptions::default());
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Recompute the header, section, directory and trailer checksums and the
/// trailer's file length, wherever the structure makes that possible.
fn reseal(data: &[u8]) -> Option<Vec<u8>> {
    let mut b = data.to_vec();
    let len = b.len();
    if len < 128 {
        return None;
    }
    let h = xxh3_64(&b[..56]);
    b[56..64].copy_from_slice(&h.to_le_bytes());
    let t = len - 64;
    let dir_off = usize::try_from(u64_at(&b, t + 8)?).ok()?;
    let count = usize::try_from(u64_at(&b, t + 16)?).ok()?;
    let dir_end = count.checked_mul(48)?.checked_add(dir_off)?;
    if dir_end > t {
        return None;
    }
    for i in 0..count {
        let e = dir_off + 48 * i;
        let (off, n) = (u64_at(&b, e + 16)?, u64_at(&b, e + 24)?);
        let end = off.checked_add(n)?;
        if end <= len as u64 {
            let s = xxh3_64(&b[off as usize..end as usize]);
            b[e + 32..e + 40].copy_from_slice(&s.to_le_bytes());
        }
    }
    let d = xxh3_64(&b[dir_off..dir_end]);
    b[t + 24..t + 32].copy_from_slice(&d.to_le_bytes());
    b[t + 32..t + 40].copy_from_slice(&(len as u64).to_le_bytes());
    let s = xxh3_64(&b[t..t + 56]);
    b[t + 56..t + 64].copy_from_slice(&s.to_le_bytes());
    Some(b)
}
