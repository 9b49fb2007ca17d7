//! stator-wire (skeleton; see issue 2).
#![forbid(unsafe_code)]
