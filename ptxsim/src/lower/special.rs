//! Special registers (`%tid`, `%ntid`, `%ctaid`, `%laneid`, `%lanemask_*`, ...): each becomes
//! an ordinary register slot that the executor fills when a warp starts.

/// A special register whose per-lane value is computed at warp start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Special {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    Laneid,
    Warpid,
    Nwarpid,
    LanemaskEq,
    LanemaskLe,
    LanemaskLt,
    LanemaskGe,
    LanemaskGt,
    /// Constant zero (`%smid`, `%gridid`, `%clock`, cluster ranks, ...).
    Zero,
    /// Constant one (`%nsmid`, `%cluster_nctarank`, ...).
    One,
    DynSmem,
    TotalSmem,
    /// `%cluster_nctaid.*`: a cluster of one CTA.
    ClusterNctaid(u8),
}

/// The special register `name` stands for (`%tid.x`, `%laneid`, ...), if any.
pub(super) fn special(name: &str) -> Option<Special> {
    let dim = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    let (base, d) = match name.rsplit_once('.') {
        Some((b, d)) => (b, dim(d)),
        None => (name, None),
    };
    Some(match (base, d) {
        ("%tid", Some(d)) => Special::Tid(d),
        ("%ntid", Some(d)) => Special::Ntid(d),
        ("%ctaid", Some(d)) | ("%clusterid", Some(d)) => Special::Ctaid(d),
        ("%nctaid", Some(d)) | ("%nclusterid", Some(d)) => Special::Nctaid(d),
        ("%cluster_ctaid", Some(_)) => Special::Zero,
        ("%cluster_nctaid", Some(d)) => Special::ClusterNctaid(d),
        ("%laneid", None) => Special::Laneid,
        ("%warpid", None) => Special::Warpid,
        ("%nwarpid", None) => Special::Nwarpid,
        ("%lanemask_eq", None) => Special::LanemaskEq,
        ("%lanemask_le", None) => Special::LanemaskLe,
        ("%lanemask_lt", None) => Special::LanemaskLt,
        ("%lanemask_ge", None) => Special::LanemaskGe,
        ("%lanemask_gt", None) => Special::LanemaskGt,
        ("%smid", None)
        | ("%gridid", None)
        | ("%clock", None)
        | ("%clock64", None)
        | ("%clock_hi", None)
        | ("%globaltimer", None)
        | ("%globaltimer_lo", None)
        | ("%globaltimer_hi", None)
        | ("%cluster_ctarank", None) => Special::Zero,
        ("%nsmid", None) | ("%cluster_nctarank", None) | ("%is_explicit_cluster", None) => {
            Special::One
        }
        ("%dynamic_smem_size", None) => Special::DynSmem,
        ("%total_smem_size", None) => Special::TotalSmem,
        _ => return None,
    })
}
