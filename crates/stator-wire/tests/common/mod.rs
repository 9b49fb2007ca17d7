//! Shared by the integration tests; `exercise` is also included by path by the fuzz targets.
#![allow(dead_code)]

pub mod exercise;
pub mod frames;
