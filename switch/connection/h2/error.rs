//! The h2 crate's errors as the exchange classifies them (exchange/failure.rs): I/O errors of
//! the client side.

use std::io;

/// An h2 error as an I/O error: a stream reset by the client, a GOAWAY or a broken connection
/// is the client going away (`ConnectionReset`); anything else is the client's other failure.
pub(super) fn h2_error(e: h2::Error) -> io::Error {
    if e.is_reset() || e.is_go_away() || e.is_io() {
        io::Error::new(io::ErrorKind::ConnectionReset, e)
    } else {
        io::Error::other(e)
    }
}
