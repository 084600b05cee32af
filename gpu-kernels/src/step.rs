//! The decoder's consumer: each step of a row's decode hands every lane 16
//! decoded bytes through a [`Sink`]; [`RowStore`] is ibp's own sink, which
//! stores the row. The step itself is ibp's internal
//! ([`crate::detail::step`]).

pub use crate::detail::step::{RowStore, Sink};
