//! Fit: count the bits of a dataset and choose a codebook (paper §4.1,
//! `docs/FORMAT.md` §4).
//!
//! [`count_bits`] gives, per bit position, how many tensors have it set;
//! [`fit`] turns counts into a codebook per candidate threshold, weighs
//! every `(threshold, chunk size)` pair on a sample in one pass, and keeps
//! the smallest. The k-means over bit patterns ([`KMeansOptions`]) that
//! [`crate::cluster::fit_clusters`] runs lives here too.
//!
//! The stages live in private modules (`count`, `choose`, `kmeans`);
//! everything a caller needs is re-exported here.

pub(crate) mod choose;
mod count;
pub(crate) mod kmeans;

pub use choose::{
    Candidate, ChunkChoice, Fit, FitOptions, Sample, SamplePlan, fit, fit_from_counts,
};
pub use count::{count_bits, count_bits_into};
pub use kmeans::KMeansOptions;
