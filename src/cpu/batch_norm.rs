//! BatchNorm reference (f64 accumulation).
