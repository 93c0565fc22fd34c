//! LayerNorm: functional ops, the `LayerNorm` module type, and launch planning.
