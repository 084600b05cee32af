//! Float coding in the pipeline: the [`Coding`] a writer asks for, the
//! float-coded form of a group (`docs/FORMAT.md` §6.9, §7) and its size in
//! the file, for the orchestrator to weigh against IBP's.

use crate::container::sections_file_bytes;
use crate::dataset::Rows;
use crate::error::{Error, Result};
use crate::float_code::{self, FitOptions, FloatCoded, FloatType};
use crate::io::DType;

/// Which coding [`super::compress_document`] stores groups with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Coding {
    /// IBP only (ibp's library default): files every version-1 reader
    /// opens, whatever their dtypes.
    #[default]
    Ibp,
    /// Per group, whichever of IBP and float coding takes fewer bytes in
    /// the file (IBP on a tie, and for dtypes float coding does not know).
    ///
    /// Only groups of at most one batch
    /// ([`super::CompressOptions::batch_bytes`], 64 MiB by default) are
    /// float-coded, and only in the packed layout.
    ///
    /// Q: why one batch? A: the float coder holds a group's coded form
    /// (about the group) while IBP's size is found, where the IBP writer
    /// streams its sections a batch at a time; within a batch, compression
    /// still holds about `batch_bytes` whatever the input's size
    /// (`docs/GUARANTEES.md`). A larger group keeps IBP, and its report
    /// says why.
    Auto,
    /// Float coding for every group of a float dtype (bf16, f16, f32,
    /// FP8) whatever its size (holding its coded form in memory); IBP for
    /// the others.
    Float,
}

impl Coding {
    /// Parse `auto`, `ibp` or `float`. Errors with
    /// [`crate::ErrorKind::InvalidArgument`] otherwise.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Coding::Auto),
            "ibp" => Ok(Coding::Ibp),
            "float" => Ok(Coding::Float),
            _ => Err(Error::invalid(format!(
                "--coding {s}: use auto, ibp or float"
            ))),
        }
    }

    /// The name [`Coding::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Auto => "auto",
            Coding::Ibp => "ibp",
            Coding::Float => "float",
        }
    }
}

/// The float type a group of `dtype` is coded as, if float coding applies.
pub(super) fn float_type(dtype: &DType) -> Option<FloatType> {
    FloatType::of_dtype(dtype)
}

/// Bytes a float-coded group of `stored` bytes takes in the file: its one
/// section, padded.
pub(super) fn float_file_bytes(stored: u64) -> u64 {
    sections_file_bytes(&[stored])
}

/// Fit a table to `rows` of type `t` and code them; checked against the
/// input when `verify`, about `batch_bytes` of rows at a time.
pub(super) fn code(
    t: FloatType,
    rows: Rows<'_>,
    verify: bool,
    batch_bytes: usize,
) -> Result<FloatCoded> {
    let table = float_code::fit(t, rows, &FitOptions::default())?;
    let coded = float_code::compress(&table, rows)?;
    if verify {
        check(&coded, rows, batch_bytes)?;
    }
    Ok(coded)
}

/// Decode `coded` a batch of rows at a time and compare with `rows`.
fn check(coded: &FloatCoded, rows: Rows<'_>, batch_bytes: usize) -> Result<()> {
    let (n, l) = (rows.rows(), rows.row_bytes());
    if l == 0 || n == 0 {
        return Ok(());
    }
    let per = (batch_bytes / l).clamp(1, n);
    let mut buf = crate::error::try_vec(per * l, 0u8, "the float-coded rows checked")?;
    let mut start = 0;
    while start < n {
        let end = (start + per).min(n);
        let out = &mut buf[..(end - start) * l];
        coded.decompress_rows(start..end, out)?;
        if *out != rows.bytes()[start * l..end * l] {
            // Q: why not call it a bug outright? A: the rows were read
            // twice (coded, then compared); an input changed in between
            // fails here too, and the caller knows which it was.
            return Err(Error::corrupt(format!(
                "verification failed: float-coded rows {start}..{end} do not decode to the rows read when coding them (the input changed, or the float coder is wrong: please report it)"
            )));
        }
        start = end;
    }
    Ok(())
}
