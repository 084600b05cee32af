//! The CPU as a [`GroupDevice`]: ibp's own fit and layouts, run on the
//! caller's rows in place, one batch of rows at a time.
//!
//! Q: why batches, when a device takes the whole group? A: the CPU works on
//! the caller's memory, and a group may be many gigabytes; compressing it
//! whole would hold its compressed form as well. Instead each section is
//! produced by its own pass over the batches ([`CompressOptions::batch_bytes`]):
//! [`GroupDevice::compress`] sizes every batch (the packed payload's length
//! must be known before anything is written), and
//! [`GroupDevice::read_section`] sizes or encodes each batch again and hands
//! it over. Passes that must agree (the flags written first, the sizes, and
//! the encoded rows) are compared, so that a change of the input between
//! them is an error, not a corrupt file.
//!
//! [`CompressOptions::batch_bytes`]: super::CompressOptions::batch_bytes

use super::GroupDevice;
use super::layouts::{batch_data_bytes, encode_batch};
use crate::codebook::Codebook;
use crate::container::SectionKind;
use crate::dataset::Rows;
use crate::error::{Error, ErrorKind, Result};
use crate::fit::{Fit, FitOptions, fit};
use crate::layout::{Layout, LayoutOptions, size_query};
use crate::progress::Progress;

/// [`GroupDevice`] on the CPU: see the module notes. It checks each batch
/// as it encodes it (when made with `verify`), since it never holds the
/// whole compressed group to check afterwards.
pub(super) struct CpuGroups<'r> {
    batch_bytes: usize,
    verify: bool,
    rows: Option<(Batches<'r>, Progress<'r>)>,
    /// The codebook and layout of [`GroupDevice::compress`], and the
    /// bytes of each batch's payload or slots.
    coded: Option<(Codebook, Layout, Vec<u64>)>,
    /// The hash of the flags as written ([`FlagCheck`]).
    flags: Option<u64>,
    /// Whether every batch was encoded and checked.
    checked: bool,
}

impl<'r> CpuGroups<'r> {
    /// Compress in batches of about `batch_bytes`; check every batch
    /// against its input when `verify`.
    pub(super) fn new(batch_bytes: usize, verify: bool) -> Self {
        CpuGroups {
            batch_bytes,
            verify,
            rows: None,
            coded: None,
            flags: None,
            checked: false,
        }
    }

    fn loaded(&self) -> Result<(&Batches<'r>, Progress<'r>)> {
        let (b, p) = self
            .rows
            .as_ref()
            .ok_or_else(|| Error::invalid("no group loaded on the CPU"))?;
        Ok((b, *p))
    }

    fn coded(&self) -> Result<&(Codebook, Layout, Vec<u64>)> {
        self.coded
            .as_ref()
            .ok_or_else(|| Error::invalid("no group compressed on the CPU"))
    }

    /// The flag bitmap, batch by batch, from the match test alone.
    fn flags(&mut self, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let (batches, _) = self.loaded()?;
        let (cb, _, _) = self.coded()?;
        let l = batches.rows.row_bytes() as u64;
        // Q: why carry bits between batches? A: a batch need not be a
        // multiple of 8 rows (one batch may be a single row of a gigabyte),
        // so the bitmap's bytes are assembled across batch boundaries.
        let (mut byte, mut bits) = (0u8, 0u32);
        let mut out = Vec::new();
        let mut check = FlagCheck::default();
        for (_, part) in batches.iter() {
            out.clear();
            let stored = size_query(cb, part)?.stored;
            let mut local = vec![0u8; stored.len().div_ceil(8)];
            for (k, &stored) in stored.iter().enumerate() {
                let flag = u8::from(stored < l);
                local[k / 8] |= flag << (k % 8);
                byte |= flag << bits;
                bits += 1;
                if bits == 8 {
                    out.push(byte);
                    (byte, bits) = (0, 0);
                }
            }
            check.add(&local);
            sink(&out)?;
        }
        if bits > 0 {
            sink(&[byte])?;
        }
        self.flags = Some(check.0.digest());
        Ok(())
    }

    /// The offsets table, batch by batch: stored sizes summed from 0.
    fn offsets(&self, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let (batches, _) = self.loaded()?;
        let (cb, _, totals) = self.coded()?;
        let mut end = 0u64;
        sink(&end.to_le_bytes())?;
        let mut out = Vec::new();
        for ((first, part), &total) in batches.iter().zip(totals) {
            let start = end;
            out.clear();
            for &stored in &size_query(cb, part)?.stored {
                end += stored;
                out.extend_from_slice(&end.to_le_bytes());
            }
            if end - start != total {
                return Err(changed_under_us(Some(first)));
            }
            sink(&out)?;
        }
        Ok(())
    }

    /// The payload (packed) or slots (fixed), encoded batch by batch,
    /// each batch checked against its input when asked to.
    fn data(&mut self, sink: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let (batches, progress) = self.loaded()?;
        let (cb, layout, totals) = self.coded()?;
        let l = batches.rows.row_bytes() as u64;
        let total_bytes = batches.rows.bytes().len() as u64;
        let mut check = FlagCheck::default();
        for ((first, part), &total) in batches.iter().zip(totals) {
            let hook = |done, _| progress.report(first as u64 * l + done, total_bytes);
            let lo = LayoutOptions::default().with_progress(&hook);
            let (flags, data) = encode_batch(cb, *layout, part, first, self.verify, &lo)?;
            if data.len() as u64 != total {
                return Err(changed_under_us(Some(first)));
            }
            check.add(&flags);
            sink(&data)?;
        }
        if self.flags != Some(check.0.digest()) {
            return Err(changed_under_us(None));
        }
        self.checked = self.verify;
        Ok(())
    }
}

impl<'r> GroupDevice<'r> for CpuGroups<'r> {
    fn name(&self) -> String {
        "CPU".to_string()
    }

    fn load(&mut self, rows: Rows<'r>, progress: Progress<'r>) -> Result<bool> {
        self.unload();
        self.rows = Some((Batches::new(rows, self.batch_bytes), progress));
        Ok(true)
    }

    fn fit(&mut self, opts: &FitOptions) -> Result<Fit> {
        fit(self.loaded()?.0.rows, opts)
    }

    /// Sizes every batch; the encoding waits for
    /// [`GroupDevice::read_section`], which hands it over batch by batch.
    fn compress(&mut self, cb: &Codebook, layout: Layout) -> Result<u64> {
        // Q: why copy the codebook first? A: sizing builds its chunk
        // tables (up to some times `L`); built in the copy, they exist once.
        let cb = cb.clone();
        let (batches, _) = self.loaded()?;
        let totals = batches
            .iter()
            .map(|(_, part)| batch_data_bytes(&cb, layout, part))
            .collect::<Result<Vec<u64>>>()?;
        let data = totals.iter().sum();
        self.coded = Some((cb, layout, totals));
        self.flags = None;
        self.checked = false;
        Ok(data)
    }

    /// Not offered: the CPU produces each section in one pass, in order
    /// ([`GroupDevice::read_section`]).
    fn read(&mut self, kind: SectionKind, _at: u64, _buf: &mut [u8]) -> Result<()> {
        Err(Error::invalid(format!(
            "the CPU hands its {kind:?} section over whole, in order"
        )))
    }

    fn read_section(
        &mut self,
        kind: SectionKind,
        _len: u64,
        _piece: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        match kind {
            SectionKind::Flags => self.flags(sink),
            SectionKind::Offsets => self.offsets(sink),
            SectionKind::Payload | SectionKind::Slots => self.data(sink),
            other => Err(Error::invalid(format!(
                "a group compressed on the CPU has no {other:?} section"
            ))),
        }
    }

    fn verify(&mut self, _rows: Rows<'r>, _piece_bytes: usize) -> Result<()> {
        if self.checked {
            Ok(())
        } else {
            Err(Error::invalid(
                "the CPU checks rows as it encodes them: make it with verify, and read the payload or slots first",
            ))
        }
    }

    fn unload(&mut self) {
        self.rows = None;
        self.coded = None;
        self.flags = None;
        self.checked = false;
    }
}

/// A group's rows cut into batches of about `batch_bytes` of compression
/// memory each (at least one row).
struct Batches<'a> {
    rows: Rows<'a>,
    per_batch: usize,
}

impl<'a> Batches<'a> {
    fn new(rows: Rows<'a>, batch_bytes: usize) -> Self {
        // Q: why `L + 24` bytes a row? A: compressing a batch holds, per
        // row, at most `L` bytes of stored form plus its stored size and
        // offset (8 bytes each), and a bit of flags; 24 rounds that up.
        let per_row = rows.row_bytes().saturating_add(24);
        Batches {
            rows,
            per_batch: (batch_bytes / per_row).max(1),
        }
    }

    /// `(first row, rows)` of each batch, in order.
    fn iter(&self) -> impl Iterator<Item = (usize, Rows<'a>)> + '_ {
        let count = self.rows.rows().div_ceil(self.per_batch);
        (0..count).map(|b| {
            let first = b * self.per_batch;
            let last = (first + self.per_batch).min(self.rows.rows());
            (first, self.rows.slice(first, last))
        })
    }
}

/// A hash of a group's flags, batch by batch, each batch's bitmap on its
/// own (as the codec returns it for the batch).
///
/// Q: why? A: the flags are written in a pass before the one that encodes;
/// comparing the two passes' hashes shows that the flags written are those
/// of the payload or slots written, even if the input changed in between.
#[derive(Default)]
struct FlagCheck(xxhash_rust::xxh3::Xxh3);

impl FlagCheck {
    fn add(&mut self, batch_flags: &[u8]) {
        self.0.update(&(batch_flags.len() as u64).to_le_bytes());
        self.0.update(batch_flags);
    }
}

/// The error when a batch sizes differently from one pass to the next:
/// only a change of the input between the passes does that.
/// `first` is the first row of the batch that showed it, when known.
fn changed_under_us(first: Option<usize>) -> Error {
    let rows = match first {
        Some(first) => format!("the rows from {first} on"),
        None => "some rows".to_string(),
    };
    Error::new(
        ErrorKind::Io,
        format!("{rows} changed while they were compressed; is the input still being written?"),
    )
}
