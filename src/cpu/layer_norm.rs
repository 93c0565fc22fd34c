//! LayerNorm reference (f64 accumulation).
