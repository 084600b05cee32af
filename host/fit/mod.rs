//! Fit: count the bits of a dataset and choose a codebook (paper §4.1,
//! `docs/FORMAT.md` §4).
//!
//! [`count`] gives, per bit position, how many tensors have it set;
//! [`choose`] turns counts into a codebook per candidate threshold, weighs
//! every `(threshold, chunk size)` pair on a sample in one pass, and keeps
//! the smallest. [`cluster`] fits one codebook per cluster of tensors,
//! found by [`kmeans`] on their bit patterns.

pub mod choose;
pub mod cluster;
pub mod count;
pub mod kmeans;

pub use choose::{
    Candidate, ChunkChoice, Fit, FitOptions, Sample, SamplePlan, fit, fit_from_counts,
};
pub use cluster::{
    ClusterOptions, ClusterPoint, ClusterSweep, fit_clusters, sweep_clusters, sweep_clusters_with,
    sweep_ks,
};
pub use count::{count_bits, count_bits_into};
pub use kmeans::KMeansOptions;
