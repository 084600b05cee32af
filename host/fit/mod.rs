//! Fit: count the bits of a dataset and choose a codebook (paper §4.1,
//! `docs/FORMAT.md` §4).
//!
//! [`count`] gives, per bit position, how many tensors have it set;
//! [`choose`] turns counts into a codebook per candidate threshold, weighs
//! every `(threshold, chunk size)` pair on a sample in one pass, and keeps
//! the smallest.

pub mod choose;
pub mod count;

pub use choose::{
    Candidate, ChunkChoice, Fit, FitOptions, Sample, SamplePlan, fit, fit_from_counts,
};
pub use count::{count_bits, count_bits_into};
