//! The one orchestrator: a group planned ([`super::plan`]), fitted and
//! compressed on a [`GroupDevice`] (the caller's, or the CPU when there is
//! none or it declines the group), verified, and written. How it is stored
//! is the plan's [`Storage`], matched once here; what differs by layout is
//! in `super::layouts`.

use std::io::Write;

use super::clustered::{self, ClusteredGroup};
use super::cpu::CpuGroups;
use super::device::{DeviceSeconds, GroupDevice, timed};
use super::float::{self, Coding, float_file_bytes};
use super::layouts::{coded_sections, verify_rows};
use super::plan::{ClusterSizes, Facts, Plan, Step, Storage, plan};
use super::{CompressOptions, GroupReport, popcount};
use crate::container::{
    ContainerWriter, GroupData, GroupLayout, GroupMeta, GroupSections, SectionKind,
    sections_file_bytes,
};
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::fit::Fit;
use crate::float_code::FloatCoded;
use crate::layout::{Layout, decompress_packed_row};
use crate::progress::Progress;

/// One group to store: its description, its bytes, and what is known of it
/// before any work.
pub(super) struct Group<'r> {
    pub meta: GroupMeta,
    pub data: &'r [u8],
    pub facts: Facts,
}

/// Store `g` as the plan decides, on `device` when it takes the group and
/// on the CPU otherwise; fills `report` (which arrives with the group's
/// sizes) and returns the group's number. `progress` hears of the group's
/// bytes done.
pub(super) fn store<'r, W: Write>(
    w: &mut ContainerWriter<W>,
    device: Option<&mut dyn GroupDevice<'r>>,
    g: Group<'r>,
    opts: &CompressOptions,
    report: &mut GroupReport,
    progress: Progress<'r>,
) -> Result<u32> {
    if let Step::Store(Plan { storage, note }) = plan(&g.facts) {
        // Stored raw before any work: nothing to load.
        let Storage::Raw(why) = storage else {
            return Err(Error::invalid("a group planned before it was fitted"));
        };
        report.note = note;
        report.raw_reason = Some(why);
        return w.add_group(g.meta, GroupData::Raw(g.data));
    }
    let rows = Rows::new(g.data, g.facts.row_bytes as usize)?;
    let float = float_form(&g.meta, rows, opts, report)?;
    if opts.coding == Coding::Float
        && let Some(f) = &float
    {
        return write_float(w, g.meta, f, report);
    }
    let mut secs = DeviceSeconds::default();
    let mut cpu = CpuGroups::new(opts.batch_bytes, opts.verify);
    let taken = match device {
        Some(d) => timed(&mut secs.load, || d.load(rows, progress))?.then_some(d),
        None => None,
    };
    let on_device = taken.is_some();
    let dev: &mut dyn GroupDevice<'r> = match taken {
        Some(d) => d,
        None => {
            cpu.load(rows, progress)?;
            &mut cpu
        }
    };
    report.on_device = on_device;
    let mut job = Job {
        w,
        rows,
        opts,
        report,
        secs,
    };
    let r = job.run(dev, g.meta, g.facts, float);
    dev.unload();
    if on_device {
        job.report.device_seconds = Some(job.secs);
    }
    r
}

/// One group being stored on a device: where it goes, its rows, and what
/// is reported of it.
struct Job<'a, 'r, W: Write> {
    w: &'a mut ContainerWriter<W>,
    rows: Rows<'r>,
    opts: &'a CompressOptions<'a>,
    report: &'a mut GroupReport,
    secs: DeviceSeconds,
}

/// What the steps of the plan produced.
#[derive(Default)]
struct Work {
    fit: Option<Fit>,
    clustered: Option<ClusteredGroup>,
}

impl<'r, W: Write> Job<'_, 'r, W> {
    /// Follow the plan for the rows loaded on `dev`, then write the group.
    /// A float-coded form, when given, is written instead when it takes
    /// fewer bytes of file than the plan's form.
    fn run(
        &mut self,
        dev: &mut dyn GroupDevice<'r>,
        meta: GroupMeta,
        facts: Facts,
        float: Option<FloatCoded>,
    ) -> Result<u32> {
        let (n, l) = (facts.rows, facts.row_bytes);
        let (decided, work) = self.follow(dev, facts)?;
        add_note(self.report, decided.note);
        let (ibp_stored, ibp_file) = ibp_sizes(&decided.storage, &work, n, l)?;
        self.report.ibp_bytes = Some(ibp_stored);
        // Q: why compare padded sections? A: that is what each form adds
        // to the file. The float form also has fewer directory entries (1
        // against 4 or 5) and a shorter manifest entry (no chunk size or
        // threshold), so choosing it never makes the file larger than IBP
        // alone; on a tie IBP is kept.
        if let Some(f) = float.filter(|f| float_file_bytes(f.stored_bytes()) < ibp_file) {
            return write_float(self.w, meta, &f, self.report);
        }
        match decided.storage {
            Storage::Raw(why) => {
                self.report.raw_reason = Some(why);
                self.w.add_group(meta, GroupData::Raw(self.rows.bytes()))
            }
            Storage::Coded {
                layout,
                data,
                stored,
            } => {
                let (id, encoded) = self.write_coded(dev, meta, fitted(&work)?, layout, data)?;
                self.report.layout = GroupLayout::Coded(layout);
                self.report.stats.encoded_rows = encoded;
                self.report.stats.stored_bytes = stored;
                Ok(id)
            }
            Storage::Clustered => {
                let c = work
                    .clustered
                    .ok_or_else(|| Error::invalid("a group planned clustered without clusters"))?;
                write_clustered(self.w, meta, c, self.rows, self.opts.verify, self.report)
            }
        }
    }

    /// Do the plan's steps on `dev` until it decides; returns the decision
    /// and what the steps produced.
    fn follow(&mut self, dev: &mut dyn GroupDevice<'r>, mut facts: Facts) -> Result<(Plan, Work)> {
        let opts = self.opts;
        let mut work = Work::default();
        loop {
            match plan(&facts) {
                Step::Fit => {
                    let fitted = timed(&mut self.secs.fit, || dev.fit(&opts.fit))?;
                    facts.chunk = Some(fitted.codebook.chunk());
                    self.report.threshold = Some(fitted.threshold);
                    self.report.chunk = Some(fitted.codebook.chunk());
                    work.fit = Some(fitted);
                }
                Step::Compress(layout) => {
                    let cb = &fitted(&work)?.codebook;
                    let data = timed(&mut self.secs.compress, || dev.compress(cb, layout))?;
                    facts.data = Some(data);
                }
                Step::Cluster => {
                    let copts = opts.cluster_options.clone().with_fit(opts.fit.clone());
                    let c = clustered::choose(self.rows, opts.clusters, &copts)?;
                    facts.clustered = Some(c.as_ref().map(|c| ClusterSizes {
                        file_bytes: c.file_bytes(),
                        stored_bytes: c.packed.total_bytes(c.clusters.k()),
                    }));
                    work.clustered = c;
                }
                Step::Store(decided) => return Ok((decided, work)),
            }
        }
    }

    /// Write a group stored with one codebook, its sections read from `dev`
    /// about a batch at a time; returns its number and its encoded rows.
    fn write_coded(
        &mut self,
        dev: &mut dyn GroupDevice<'r>,
        meta: GroupMeta,
        fit: &Fit,
        layout: Layout,
        data: u64,
    ) -> Result<(u32, u64)> {
        let (rows, opts, secs) = (self.rows, self.opts, &mut self.secs);
        let piece = opts.batch_bytes.max(1 << 16);
        let sections = coded_sections(layout, rows.rows() as u64, data);
        let mut encoded = 0;
        let cb = &fit.codebook;
        let kind = GroupLayout::Coded(layout);
        let id = self
            .w
            .add_group_in_pieces(meta, cb, Some(fit.threshold), kind, |s| {
                timed(&mut secs.read, || -> Result<()> {
                    for &(kind, len) in &sections {
                        s.start(kind)?;
                        let ones = copy(dev, s, kind, len, piece)?;
                        if kind == SectionKind::Flags {
                            encoded = ones;
                        }
                    }
                    Ok(())
                })?;
                if opts.verify {
                    timed(&mut secs.verify, || dev.verify(rows, piece))?;
                }
                Ok(())
            })?;
        Ok((id, encoded))
    }
}

/// The bytes of the plan's form of a group of `n` rows of `l`: its
/// sections, and what they take in the file (padded; a clustered group's
/// overhead included).
fn ibp_sizes(storage: &Storage, work: &Work, n: u64, l: u64) -> Result<(u64, u64)> {
    Ok(match storage {
        Storage::Raw(_) => (n * l, sections_file_bytes(&[n * l])),
        Storage::Coded { layout, data, .. } => {
            let mut lens = vec![2 * l];
            lens.extend(coded_sections(*layout, n, *data).iter().map(|&(_, b)| b));
            (lens.iter().sum(), sections_file_bytes(&lens))
        }
        Storage::Clustered => {
            let c = work
                .clustered
                .as_ref()
                .ok_or_else(|| Error::invalid("a group planned clustered without clusters"))?;
            (c.packed.total_bytes(c.clusters.k()), c.file_bytes())
        }
    })
}

/// The float-coded form of a group, when `opts.coding` asks for one and
/// float coding applies to its dtype (and, for `auto`, its size); records
/// its size, or why there is none, in `report`.
fn float_form(
    meta: &GroupMeta,
    rows: Rows<'_>,
    opts: &CompressOptions,
    report: &mut GroupReport,
) -> Result<Option<FloatCoded>> {
    // Q: why does `auto` leave a fixed-stride group alone? A: that layout
    // is asked for its slots of full size (random access by index, never
    // smaller than the input); `auto` would always trade them away.
    if opts.coding == Coding::Ibp
        || (opts.coding == Coding::Auto && opts.layout != GroupLayout::Coded(Layout::Packed))
    {
        return Ok(None);
    }
    let Some(t) = float::float_type(&meta.dtype) else {
        if opts.coding == Coding::Float {
            let why = format!("float coding does not apply to {} (IBP used)", meta.dtype);
            add_note(report, Some(why));
        }
        return Ok(None);
    };
    let bytes = rows.bytes().len() as u64;
    if opts.coding == Coding::Auto && bytes > opts.batch_bytes as u64 {
        add_note(
            report,
            Some(format!(
                "float coding not tried: its {:.1} MiB are over the {:.1} MiB batch it would hold at once (--coding float codes it anyway)",
                bytes as f64 / (1 << 20) as f64,
                opts.batch_bytes as f64 / (1 << 20) as f64
            )),
        );
        return Ok(None);
    }
    let f = float::code(t, rows, opts.verify, opts.batch_bytes)?;
    report.float_bytes = Some(f.stored_bytes());
    Ok(Some(f))
}

/// Write a float-coded group and say so in `report`.
fn write_float<W: Write>(
    w: &mut ContainerWriter<W>,
    meta: GroupMeta,
    f: &FloatCoded,
    report: &mut GroupReport,
) -> Result<u32> {
    let id = w.add_group(meta, GroupData::Float(f))?;
    report.layout = GroupLayout::Float;
    report.stats.encoded_rows = f.coded_rows() as u64;
    report.stats.stored_bytes = f.stored_bytes();
    report.threshold = None;
    report.chunk = None;
    report.clusters = None;
    report.raw_reason = None;
    Ok(id)
}

/// Add `note` to the report's note.
fn add_note(report: &mut GroupReport, note: Option<String>) {
    report.note = match (report.note.take(), note) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
}

fn fitted(work: &Work) -> Result<&Fit> {
    work.fit
        .as_ref()
        .ok_or_else(|| Error::invalid("a group compressed before it was fitted"))
}

/// Copy `len` bytes of section `kind` from the device into the open
/// section, about `piece` bytes at a time; returns the bits set in the
/// flags section (its encoded rows), 0 for any other.
fn copy<'r, W: Write>(
    dev: &mut dyn GroupDevice<'r>,
    s: &mut GroupSections<'_, W>,
    kind: SectionKind,
    len: u64,
    piece: usize,
) -> Result<u64> {
    let mut ones = 0u64;
    let flags = kind == SectionKind::Flags;
    dev.read_section(kind, len, piece, &mut |b| {
        if flags {
            ones += popcount(b);
        }
        s.write(b)
    })?;
    Ok(ones)
}

/// Write a clustered group (compressed on the CPU by [`clustered::choose`]),
/// checked first when `verify`.
fn write_clustered<W: Write>(
    w: &mut ContainerWriter<W>,
    meta: GroupMeta,
    c: ClusteredGroup,
    rows: Rows<'_>,
    verify: bool,
    report: &mut GroupReport,
) -> Result<u32> {
    let p = &c.packed.packed;
    let codebooks = c.clusters.codebooks();
    if verify {
        let view = p.view();
        verify_rows(rows, 0, |i, buf| {
            let cb = c
                .packed
                .ids
                .get(i)
                .and_then(|id| codebooks.get(id as usize))
                .ok_or_else(|| Error::invalid(format!("tensor {i} has no cluster")))?;
            decompress_packed_row(cb, &view, i, buf)
        })?;
    }
    let k = c.clusters.k();
    let id = w.add_group(
        meta,
        GroupData::Clustered {
            codebooks,
            ids: &c.packed.ids,
            threshold: None,
            packed: p.view(),
        },
    )?;
    report.layout = GroupLayout::Clustered;
    report.chunk = codebooks.first().map(|cb| cb.chunk());
    report.threshold = None;
    report.clusters = Some(k);
    report.stats.encoded_rows = popcount(&p.flags);
    report.stats.stored_bytes = c.packed.total_bytes(k);
    Ok(id)
}
