//! Module state by PyTorch's names, as host values: what `LayerNorm::state` /
//! `BatchNorm::state` return and `load_state` takes.

/// The state of a normalization module under PyTorch's `state_dict` names, as host values.
/// `None` means absent: the module has no such entry (`state`), or the entry is not to be
/// loaded (`load_state` loads every entry that is `Some`, so partial loads are allowed, as
/// PyTorch's `load_state_dict(strict=False)`; an entry the module does not have is an error,
/// as PyTorch's unexpected keys).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State<P> {
    /// `weight` (gamma): one value per normalized column or channel.
    pub weight: Option<Vec<P>>,
    /// `bias` (beta).
    pub bias: Option<Vec<P>>,
    /// `running_mean` (BatchNorm with tracked statistics).
    pub running_mean: Option<Vec<P>>,
    /// `running_var` (BatchNorm with tracked statistics).
    pub running_var: Option<Vec<P>>,
    /// `num_batches_tracked` (BatchNorm with tracked statistics).
    pub num_batches_tracked: Option<i64>,
}

impl<P> State<P> {
    /// The names of the entries that are present, in PyTorch's order.
    pub fn names(&self) -> Vec<&'static str> {
        [
            ("weight", self.weight.is_some()),
            ("bias", self.bias.is_some()),
            ("running_mean", self.running_mean.is_some()),
            ("running_var", self.running_var.is_some()),
            ("num_batches_tracked", self.num_batches_tracked.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, p)| p.then_some(n))
        .collect()
    }
}
