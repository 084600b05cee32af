//! The container's device path (`compress_document_on`) with a device that
//! runs on the CPU: the file is the CPU path's byte for byte, in both
//! layouts, whatever the pieces the sections are read in, whether the
//! device overrides `read_section` or not; a device that declines a group
//! leaves it to the CPU; a failed check fails the compression. The GPU's
//! own device runs the same checks in cli/tests/gpu_cli.rs and
//! tests/gpu_compress.rs.

mod common;

use ibp::Rows;
use ibp::codebook::Codebook;
use ibp::container::{GroupLayout, IbpFile, SectionKind};
use ibp::fit::{Fit, FitOptions, fit};
use ibp::layout::{
    Layout, LayoutOptions, compress_fixed, compress_packed, decompress_fixed, decompress_packed,
};
use ibp::pipeline::{self, CompressOptions, GroupDevice, compress_document_on};
use ibp::{Error, Progress, Result};

use common::container::*;

/// The compressed sections of one group, as a device would hold them.
enum Held {
    Packed(ibp::layout::Packed, Codebook),
    Fixed(ibp::layout::FixedStride, Codebook),
}

/// A [`GroupDevice`] on the CPU: ibp's own fit and layouts.
#[derive(Default)]
struct CpuDevice {
    rows: Option<(Vec<u8>, usize)>,
    held: Option<Held>,
    /// Hand sections over in pieces of this many bytes (an override of
    /// `read_section`), or use the trait's own method when `None`.
    own_pieces: Option<usize>,
    /// Decline groups of more rows than this.
    max_rows: usize,
    /// Flip a bit of the first payload byte read (a device bug).
    corrupt: bool,
    /// Sizes of the pieces handed over, section by section.
    pieces: Vec<(SectionKind, Vec<usize>)>,
    loads: usize,
}

impl CpuDevice {
    fn new() -> Self {
        CpuDevice {
            max_rows: usize::MAX,
            ..Default::default()
        }
    }

    fn section(&self, kind: SectionKind) -> Result<Vec<u8>> {
        let bad = || Error::invalid(format!("no {kind:?} section"));
        Ok(match (self.held.as_ref().ok_or_else(bad)?, kind) {
            (Held::Packed(p, _), SectionKind::Flags) => p.flags.clone(),
            (Held::Packed(p, _), SectionKind::Offsets) => {
                p.offsets.iter().flat_map(|o| o.to_le_bytes()).collect()
            }
            (Held::Packed(p, _), SectionKind::Payload) => p.payload.clone(),
            (Held::Fixed(f, _), SectionKind::Flags) => f.flags.clone(),
            (Held::Fixed(f, _), SectionKind::Slots) => f.slots.clone(),
            _ => return Err(bad()),
        })
    }
}

impl<'r> GroupDevice<'r> for CpuDevice {
    fn name(&self) -> String {
        "CPU stand-in".into()
    }

    fn load(&mut self, rows: Rows<'r>, progress: Progress<'r>) -> Result<bool> {
        if rows.rows() > self.max_rows {
            return Ok(false);
        }
        self.loads += 1;
        self.rows = Some((rows.bytes().to_vec(), rows.row_bytes()));
        progress.report(rows.bytes().len() as u64, rows.bytes().len() as u64);
        Ok(true)
    }

    fn fit(&mut self, opts: &FitOptions) -> Result<Fit> {
        let (b, l) = self
            .rows
            .as_ref()
            .ok_or_else(|| Error::invalid("none loaded"))?;
        fit(Rows::new(b, *l)?, opts)
    }

    fn compress(&mut self, cb: &Codebook, layout: Layout) -> Result<u64> {
        let (b, l) = self
            .rows
            .as_ref()
            .ok_or_else(|| Error::invalid("none loaded"))?;
        let rows = Rows::new(b, *l)?;
        let opts = LayoutOptions::default();
        let (held, len) = match layout {
            Layout::Packed => {
                let p = compress_packed(cb, rows, &opts)?;
                let n = p.payload.len() as u64;
                (Held::Packed(p, cb.clone()), n)
            }
            Layout::FixedStride => {
                let f = compress_fixed(cb, rows, &opts)?;
                let n = f.slots.len() as u64;
                (Held::Fixed(f, cb.clone()), n)
            }
        };
        self.held = Some(held);
        Ok(len)
    }

    fn read(&mut self, kind: SectionKind, at: u64, buf: &mut [u8]) -> Result<()> {
        let s = self.section(kind)?;
        let at = at as usize;
        let part = s
            .get(at..at + buf.len())
            .ok_or_else(|| Error::invalid("read past the section"))?;
        buf.copy_from_slice(part);
        if self.corrupt && kind == SectionKind::Payload && at == 0 && !buf.is_empty() {
            buf[0] ^= 1;
        }
        match self.pieces.last_mut() {
            Some((k, v)) if *k == kind => v.push(buf.len()),
            _ => self.pieces.push((kind, vec![buf.len()])),
        }
        Ok(())
    }

    fn read_section(
        &mut self,
        kind: SectionKind,
        len: u64,
        piece: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let Some(own) = self.own_pieces else {
            // The trait's own method, as a device without an override.
            return default_read_section(self, kind, len, piece, sink);
        };
        let s = self.section(kind)?;
        let s = s
            .get(..len as usize)
            .ok_or_else(|| Error::invalid("read past the section"))?;
        let mut sizes = Vec::new();
        for part in s.chunks(own.max(1)) {
            sizes.push(part.len());
            sink(part)?;
        }
        self.pieces.push((kind, sizes));
        Ok(())
    }

    fn verify(&mut self, rows: Rows<'r>, _piece_bytes: usize) -> Result<()> {
        let mut out = vec![0u8; rows.bytes().len()];
        match self
            .held
            .as_ref()
            .ok_or_else(|| Error::invalid("none held"))?
        {
            Held::Packed(p, cb) => decompress_packed(cb, &p.view(), &mut out)?,
            Held::Fixed(f, cb) => decompress_fixed(cb, &f.view(), &mut out)?,
        }
        if out != rows.bytes() {
            return Err(Error::corrupt("verification failed"));
        }
        Ok(())
    }

    fn unload(&mut self) {
        self.rows = None;
        self.held = None;
    }
}

/// The trait's provided `read_section`, called on a device that overrides
/// it: a second type with no override forwards to the first.
fn default_read_section(
    dev: &mut CpuDevice,
    kind: SectionKind,
    len: u64,
    piece: usize,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    struct Plain<'a>(&'a mut CpuDevice);
    impl<'r> GroupDevice<'r> for Plain<'_> {
        fn name(&self) -> String {
            self.0.name()
        }
        fn load(&mut self, rows: Rows<'r>, p: Progress<'r>) -> Result<bool> {
            self.0.load(rows, p)
        }
        fn fit(&mut self, opts: &FitOptions) -> Result<Fit> {
            self.0.fit(opts)
        }
        fn compress(&mut self, cb: &Codebook, layout: Layout) -> Result<u64> {
            self.0.compress(cb, layout)
        }
        fn read(&mut self, kind: SectionKind, at: u64, buf: &mut [u8]) -> Result<()> {
            self.0.read(kind, at, buf)
        }
        fn verify(&mut self, rows: Rows<'r>, piece_bytes: usize) -> Result<()> {
            self.0.verify(rows, piece_bytes)
        }
        fn unload(&mut self) {
            self.0.unload()
        }
    }
    Plain(dev).read_section(kind, len, piece, sink)
}

fn original() -> Vec<u8> {
    // A large enough feature table to span many 64 KiB pieces, beside the
    // mixed file's small and raw tensors.
    safetensors(&[
        ("big", "F32", vec![2000, 96], features(2000, 96, 7)),
        ("emb", "F32", vec![300, 24], features(300, 24, 1)),
        ("noise", "U8", vec![64, 32], noise(64 * 32, 4)),
        ("bias", "F32", vec![24], features(1, 24, 2)),
    ])
}

fn opts(layout: Layout) -> CompressOptions<'static> {
    CompressOptions::default()
        .with_layout(GroupLayout::Coded(layout))
        // The smallest piece the device path takes (64 KiB): several per
        // section of "big".
        .with_batch_bytes(1)
}

#[test]
fn the_device_path_writes_the_cpu_paths_bytes_in_any_pieces() {
    let data = original();
    let doc = parse_safetensors(&data);
    for layout in [Layout::Packed, Layout::FixedStride] {
        let (want, _) = compress(&doc, &opts(layout));
        for own in [None, Some(1), Some(777), Some(1 << 20)] {
            let mut dev = CpuDevice::new();
            dev.own_pieces = own;
            let (got, report) =
                compress_document_on(&doc, &opts(layout), Vec::new(), &mut dev).unwrap();
            assert!(got == want, "{layout:?}, pieces {own:?}: the files differ");
            assert!(report.groups.iter().any(|g| g.on_device), "{layout:?}");
            assert!(dev.loads >= 2, "{layout:?}: {} groups loaded", dev.loads);
            // The trait's method reads in pieces of the batch size (64 KiB
            // at least); an override hands over its own.
            let sizes: Vec<usize> = dev.pieces.iter().flat_map(|(_, v)| v.clone()).collect();
            match own {
                None => {
                    assert!(sizes.iter().all(|&n| n <= 1 << 16));
                    assert!(
                        sizes.iter().filter(|&&n| n == 1 << 16).count() >= 2,
                        "{sizes:?}"
                    );
                }
                Some(p) => assert!(sizes.iter().all(|&n| n <= p)),
            }
            check_restores(&IbpFile::from_bytes(&got).unwrap(), &data);
        }
    }
}

#[test]
fn a_group_the_device_declines_is_compressed_on_the_cpu() {
    let data = original();
    let doc = parse_safetensors(&data);
    let (want, _) = compress(&doc, &opts(Layout::Packed));
    let mut dev = CpuDevice::new();
    dev.max_rows = 500;
    let (got, report) =
        compress_document_on(&doc, &opts(Layout::Packed), Vec::new(), &mut dev).unwrap();
    assert!(got == want);
    let on = |name: &str| {
        report
            .groups
            .iter()
            .find(|g| g.name == name)
            .unwrap()
            .on_device
    };
    assert!(!on("big"));
    assert!(on("emb"));
}

#[test]
fn a_failed_check_fails_the_compression() {
    let data = original();
    let doc = parse_safetensors(&data);
    let mut dev = CpuDevice::new();
    dev.corrupt = true;
    // The payload written is not the one the device checks: the device's
    // check passes, the restore's hash catches it.
    let (bytes, _) =
        compress_document_on(&doc, &opts(Layout::Packed), Vec::new(), &mut dev).unwrap();
    let file = IbpFile::from_bytes(&bytes).unwrap();
    assert!(file.restore_to_vec().is_err());
    // A check that fails stops the compression with its error.
    struct Failing(CpuDevice);
    impl<'r> GroupDevice<'r> for Failing {
        fn name(&self) -> String {
            self.0.name()
        }
        fn load(&mut self, rows: Rows<'r>, p: Progress<'r>) -> Result<bool> {
            self.0.load(rows, p)
        }
        fn fit(&mut self, opts: &FitOptions) -> Result<Fit> {
            self.0.fit(opts)
        }
        fn compress(&mut self, cb: &Codebook, layout: Layout) -> Result<u64> {
            self.0.compress(cb, layout)
        }
        fn read(&mut self, kind: SectionKind, at: u64, buf: &mut [u8]) -> Result<()> {
            self.0.read(kind, at, buf)
        }
        fn verify(&mut self, _rows: Rows<'r>, _piece_bytes: usize) -> Result<()> {
            Err(Error::corrupt("verification failed: the stand-in says so"))
        }
        fn unload(&mut self) {
            self.0.unload()
        }
    }
    let e = compress_document_on(
        &doc,
        &opts(Layout::Packed),
        Vec::new(),
        &mut Failing(CpuDevice::new()),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ibp::ErrorKind::Corrupt);
    assert!(e.message().contains("stand-in"), "{}", e.message());
    // Without the check, the same device's file is written.
    let no_check = opts(Layout::Packed).with_verify(false);
    let (want, _) = pipeline::compress_document(&doc, &no_check, Vec::new()).unwrap();
    let (got, _) =
        compress_document_on(&doc, &no_check, Vec::new(), &mut Failing(CpuDevice::new())).unwrap();
    assert!(got == want);
}
