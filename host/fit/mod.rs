//! Fit: count the bits of a dataset and choose a codebook (paper §4.1).

pub mod count;

pub use count::{count_bits, count_bits_into};
