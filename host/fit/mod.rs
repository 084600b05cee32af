//! Fit: count the bits of a dataset and choose a codebook (paper §4.1,
//! `docs/FORMAT.md` §4).
//!
//! [`count_bits`] gives, per bit position, how many tensors have it set;
//! [`fit`] turns counts into a codebook per candidate threshold, weighs
//! every `(threshold, chunk size)` pair on a sample in one pass, and keeps
//! the smallest. [`fit_clusters`] and [`sweep_clusters`] fit one codebook per
//! cluster of tensors, found by k-means ([`KMeansOptions`]) on their bit
//! patterns.
//!
//! The stages live in private modules (`count`, `choose`, `cluster`,
//! `kmeans`); everything a caller needs is re-exported here.

pub(crate) mod choose;
mod cluster;
mod count;
pub(crate) mod kmeans;

pub use choose::{
    Candidate, ChunkChoice, Fit, FitOptions, Sample, SamplePlan, fit, fit_from_counts,
};
pub use cluster::{
    CLUSTER_TABLES_BUDGET, ClusterOptions, ClusterPoint, ClusterSweep, fit_clusters,
    max_clusters_for, sweep_clusters, sweep_clusters_with,
};
pub use count::{count_bits, count_bits_into};
pub use kmeans::KMeansOptions;
