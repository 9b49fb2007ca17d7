//! HTTP/1.1 for forwarding, sans I/O: heads parsed in place ([`head`]), bodies delimited and
//! `chunked` read incrementally ([`body`]), the heads the proxy sends written from those
//! received with its edits ([`forward`]). Plain functions and types over byte buffers, no
//! socket, no clock and no allocation once a connection's buffers have grown: the engine that
//! replaces hyper on the proxy's path drives them, and the fuzz target `http_head` feeds them.

pub mod body;
pub mod forward;
pub mod head;
