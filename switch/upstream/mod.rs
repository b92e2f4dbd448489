//! The server side of an exchange, one implementation per protocol spoken to the servers
//! (exchange/server.rs says what each offers): [`h1`], HTTP/1.1 over a plain connection.
//! The client side's protocols are the front-ends in connection/.

pub(crate) mod h1;
