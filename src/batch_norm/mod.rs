//! BatchNorm: functional ops, the `BatchNorm` module type with running statistics, and launch planning.
