//! Damage to a case: its stored forms, codebooks and cluster ids.

use super::*;

/// Rows of the store whose flag says encoded.
pub(crate) fn encoded_rows(flags: &[u8], n: usize) -> Vec<usize> {
    (0..n)
        .filter(|&i| flags[i / 8] >> (i % 8) & 1 == 1)
        .collect()
}

/// A codebook like `cb` with some mask and value bits changed (same
/// length; same chunk size unless `rechunk`).
pub(crate) fn changed_codebook(rng: &mut Rng, cb: &Codebook, rechunk: bool) -> Codebook {
    let mut mask = cb.mask().to_vec();
    for _ in 0..1 + below(rng, 8) {
        let j = below(rng, mask.len() as u64) as usize;
        mask[j] ^= 1 << below(rng, 8);
    }
    let bitval = mask
        .iter()
        .zip(cb.bitval())
        .map(|(m, b)| (b ^ rng.next() as u8 & rng.next() as u8) & m)
        .collect();
    let chunk = if rechunk { chunk_of(rng) } else { cb.chunk() };
    Codebook::new(chunk, mask, bitval).expect("a valid codebook")
}

/// Damage the case one to three ways; each is named in `what`.
pub(crate) fn mutate(rng: &mut Rng, c: &mut Case) {
    for _ in 0..1 + below(rng, 3) {
        let (l, n) = (c.l, c.n);
        let k_bytes = l.div_ceil(c.cb.chunk().bytes() as usize).div_ceil(8);
        let what = match &mut c.store {
            Store::Packed {
                flags,
                offsets,
                payload,
            }
            | Store::Clustered {
                flags,
                offsets,
                payload,
                ..
            } => damage_packed(rng, flags, offsets, payload, (n, k_bytes)),
            Store::Fixed { flags, slots, .. } => damage_fixed(rng, flags, slots, (l, n, k_bytes)),
        };
        let what = damage_books(rng, c, what);
        c.what += &format!("; {what}");
    }
}

/// One damage to a packed (or clustered) store of `n` rows with
/// `k_bytes` participation bytes a row; what was done.
fn damage_packed(
    rng: &mut Rng,
    flags: &mut [u8],
    offsets: &mut [u64],
    payload: &mut Vec<u8>,
    (n, k_bytes): (usize, usize),
) -> String {
    let enc = encoded_rows(flags, n);
    // Damage that leaves the structure valid (bits of stored
    // forms, a moved boundary: corrupt rows for the decoders)
    // twice as often as damage the upload must refuse.
    let kind = below(rng, 12);
    match if kind >= 8 { kind - 8 } else { kind } {
        0 if !payload.is_empty() => {
            let at = below(rng, payload.len() as u64) as usize;
            let bit = below(rng, 8);
            payload[at] ^= 1 << bit;
            format!("payload byte {at} bit {bit} flipped")
        }
        1 if !enc.is_empty() => {
            // A participation bit: the length follows from them.
            let t = enc[below(rng, enc.len() as u64) as usize];
            let at = offsets[t] as usize + below(rng, k_bytes as u64) as usize;
            let bit = below(rng, 8);
            if at < payload.len() {
                payload[at] ^= 1 << bit;
            }
            format!("participation byte {at} bit {bit} of tensor {t} flipped")
        }
        2 if !enc.is_empty() => {
            // The top (padding) bit of a stored form's last byte.
            let t = enc[below(rng, enc.len() as u64) as usize];
            let end = offsets[t + 1] as usize;
            if end > offsets[t] as usize && end <= payload.len() {
                payload[end - 1] ^= 0x80;
            }
            format!("last byte of tensor {t} top bit flipped")
        }
        3 if n >= 2 => {
            // Move the boundary between two tensors.
            let t = 1 + below(rng, n as u64 - 1) as usize;
            let d = 1 + below(rng, 8);
            let o = &mut offsets[t];
            *o = if chance(rng, 2) {
                o.saturating_sub(d)
            } else {
                *o + d
            };
            format!("offset {t} moved by {d}")
        }
        4 => {
            let cut = 1 + below(rng, 64.min(payload.len() as u64 + 1)) as usize;
            payload.truncate(payload.len().saturating_sub(cut));
            format!("payload cut by {cut} bytes")
        }
        5 => {
            let t = below(rng, n as u64) as usize;
            flags[t / 8] ^= 1 << (t % 8);
            format!("flag of tensor {t} flipped")
        }
        6 if !payload.is_empty() => {
            let at = below(rng, payload.len() as u64) as usize;
            let len = (1 + below(rng, 16) as usize).min(payload.len() - at);
            payload[at..at + len]
                .iter_mut()
                .for_each(|b| *b = rng.next() as u8);
            format!("payload bytes {at}..{} overwritten", at + len)
        }
        7 => {
            let last = offsets.len() - 1;
            let d = 1 + below(rng, 4);
            offsets[last] += d;
            format!("last offset raised by {d}")
        }
        _ => "nothing changed (the mutation did not apply)".to_string(),
    }
}

/// One damage to a fixed-stride store of `n` rows of `l` bytes with
/// `k_bytes` participation bytes a row; what was done.
fn damage_fixed(
    rng: &mut Rng,
    flags: &mut [u8],
    slots: &mut [u8],
    (l, n, k_bytes): (usize, usize, usize),
) -> String {
    let enc = encoded_rows(flags, n);
    match below(rng, 6) {
        0 => {
            let at = below(rng, slots.len() as u64) as usize;
            let bit = below(rng, 8);
            slots[at] ^= 1 << bit;
            format!("slot byte {at} bit {bit} flipped")
        }
        1 if !enc.is_empty() => {
            let t = enc[below(rng, enc.len() as u64) as usize];
            let at = t * l + below(rng, k_bytes.min(l) as u64) as usize;
            let bit = below(rng, 8);
            slots[at] ^= 1 << bit;
            format!("participation byte {at} bit {bit} of tensor {t} flipped")
        }
        2 => {
            let t = below(rng, n as u64) as usize;
            flags[t / 8] ^= 1 << (t % 8);
            format!("flag of tensor {t} flipped")
        }
        3 => {
            // A slot's tail zeroed: a stored form cut short.
            let t = below(rng, n as u64) as usize;
            let from = below(rng, l as u64) as usize;
            slots[t * l + from..(t + 1) * l].fill(0);
            format!("slot {t} zeroed from byte {from}")
        }
        4 => {
            let at = below(rng, slots.len() as u64) as usize;
            let len = (1 + below(rng, 16) as usize).min(slots.len() - at);
            slots[at..at + len]
                .iter_mut()
                .for_each(|b| *b = rng.next() as u8);
            format!("slot bytes {at}..{} overwritten", at + len)
        }
        _ => "nothing changed (the mutation did not apply)".to_string(),
    }
}

/// Codebooks and cluster ids, now and then: a cluster id bit flipped, or a
/// codebook changed. `what` with what was done added.
fn damage_books(rng: &mut Rng, c: &mut Case, what: String) -> String {
    match (&mut c.store, below(rng, 8)) {
        (Store::Clustered { ids, books, .. }, 0) if ids.bits() > 0 => {
            let i = below(rng, ids.len() as u64) as usize;
            let b = below(rng, ids.bits() as u64) as usize;
            let p = i * ids.bits() as usize + b;
            let mut bytes = ids.as_bytes().to_vec();
            bytes[p / 8] ^= 1 << (p % 8);
            *ids = ClusterIds::from_bytes(ids.bits(), ids.len(), bytes)
                .expect("an id bit inside the ids");
            format!(
                "{what}; cluster id {i} now {:?} of k={}",
                ids.get(i),
                books.len()
            )
        }
        (Store::Clustered { books, .. }, 1) => {
            let j = below(rng, books.len() as u64) as usize;
            books[j] = changed_codebook(rng, &books[j], false);
            format!("{what}; codebook {j} changed")
        }
        (Store::Packed { .. } | Store::Fixed { .. }, 1) => {
            let rechunk = chance(rng, 2);
            c.cb = changed_codebook(rng, &c.cb, rechunk);
            format!(
                "{what}; codebook changed (now {}-byte chunks)",
                c.cb.chunk().bytes()
            )
        }
        _ => what,
    }
}
