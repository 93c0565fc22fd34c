//! Shared helpers of the integration tests.
#![allow(dead_code)]

pub mod fixtures;
pub mod gpu;
pub mod sim;
