//! The decode tables of a codebook in device memory ([`DeviceBook`]), apart
//! from any rows: a dataset, a KV store's segment, a DMA piece and a cache
//! slab each describe their own rows and decode with a book.

use cust::memory::DeviceBuffer;

use super::cuda_err;
use crate::codebook::Codebook;
use crate::error::{Error, Result};
use crate::kernel_tables::{book_is_uniform, book_period, decode_book, decoder_table};

/// The tables the decode kernels read for one codebook, or for the `k`
/// codebooks of a clustering back to back: the decode book
/// (`ibp_kernels::detail::book`) and the per-chunk entry table
/// (`ibp_kernels::detail::table`), in device memory.
pub struct DeviceBook {
    pub(crate) table: DeviceBuffer<u8>,
    pub(crate) book: DeviceBuffer<u8>,
    /// Bytes of one codebook's decode book.
    pub(crate) book_bytes: usize,
    /// Codebooks held (1, or a clustering's `k`).
    pub(crate) k: u32,
    pub(crate) row_bytes: u64,
    pub(crate) chunk: u32,
    /// Every step of every book is uniform (the uniform kernels may decode
    /// it; `ibp_kernels::detail::book::CLASS_UNIFORM`).
    pub(crate) uniform: bool,
    /// Every step of every book is periodic (the periodic kernel may
    /// decode it; `ibp_kernels::detail::book::CLASS_PERIODIC`).
    pub(crate) periodic: bool,
    /// With `periodic`: the pattern repeats by the 16-bit half, not the
    /// byte (`CLASS_PERIODIC_HALVES`, the kernel's `DECODE_FLAG_HALVES`).
    pub(crate) halves: bool,
}

impl DeviceBook {
    /// Upload the tables of `cb`. Allocates device memory and copies.
    pub fn new(cb: &Codebook) -> Result<Self> {
        Self::clustered(std::slice::from_ref(cb))
    }

    /// Upload the tables of a clustering's codebooks, back to back (tensor
    /// `t` decodes with codebook `ids[t]`). Allocates device memory and
    /// copies.
    ///
    /// Errors with [`crate::ErrorKind::InvalidArgument`] for no codebooks or
    /// codebooks of different tensor lengths or chunk sizes, and with
    /// [`crate::ErrorKind::Unsupported`] when the books would pass the
    /// 4 GiB the decoder addresses.
    pub fn clustered(codebooks: &[Codebook]) -> Result<Self> {
        let first = Self::check(codebooks)?;
        let k = codebooks.len();
        let books: Vec<Vec<u8>> = codebooks.iter().map(decode_book).collect();
        let uniform = codebooks
            .iter()
            .zip(&books)
            .all(|(cb, b)| book_is_uniform(cb, b));
        // One piece for every book: the kernel takes it from a launch flag.
        let pieces: Vec<Option<u32>> = codebooks.iter().map(book_period).collect();
        let periodic = pieces.iter().all(|&p| p.is_some() && p == pieces[0]);
        let halves = periodic && pieces[0] == Some(16);
        let book: Vec<u8> = books.concat();
        let table: Vec<u8> = codebooks.iter().flat_map(decoder_table).collect();
        if u32::try_from(book.len()).is_err() || u32::try_from(table.len()).is_err() {
            return Err(Error::unsupported(format!(
                "{k} codebooks of {}-byte tensors need {} bytes of decode books; the GPU decoder addresses 4 GiB",
                first.row_bytes(),
                book.len()
            )));
        }
        Ok(DeviceBook {
            table: DeviceBuffer::from_slice(&table).map_err(cuda_err("uploading the codebook"))?,
            book_bytes: book.len() / k,
            book: DeviceBuffer::from_slice(&book).map_err(cuda_err("uploading the codebook"))?,
            k: k as u32,
            row_bytes: first.row_bytes() as u64,
            chunk: first.chunk().bytes(),
            uniform,
            periodic,
            halves,
        })
    }

    /// The first of `codebooks`, once they are checked to be a clustering's:
    /// at least one, all of one row length and chunk size
    /// ([`crate::ErrorKind::InvalidArgument`] otherwise).
    pub(crate) fn check(codebooks: &[Codebook]) -> Result<&Codebook> {
        let first = codebooks
            .first()
            .ok_or_else(|| Error::invalid("no codebooks; a clustering has at least one"))?;
        for (i, cb) in codebooks.iter().enumerate() {
            if cb.row_bytes() != first.row_bytes() || cb.chunk() != first.chunk() {
                return Err(Error::invalid(format!(
                    "codebook {i} is for {}-byte tensors in {}-byte chunks and codebook 0 for {}-byte tensors in {}-byte chunks; a clustering's codebooks share both",
                    cb.row_bytes(),
                    cb.chunk().bytes(),
                    first.row_bytes(),
                    first.chunk().bytes()
                )));
            }
        }
        Ok(first)
    }

    /// Bytes per decoded tensor.
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Codebooks held: 1, or a clustering's `k`.
    pub fn codebooks(&self) -> usize {
        self.k as usize
    }

    /// Bytes of every decode book together (what batch mode copies into
    /// shared memory).
    pub(crate) fn all_book_bytes(&self) -> u64 {
        self.book_bytes as u64 * self.k as u64
    }

    /// The device addresses of the book and the entry table.
    pub(crate) fn addrs(&self) -> (u64, u64) {
        (
            self.book.as_device_ptr().as_raw(),
            self.table.as_device_ptr().as_raw(),
        )
    }
}
