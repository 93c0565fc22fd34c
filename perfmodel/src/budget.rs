//! Issue 11's budgets, checked against the checked-in list of cases below budget
//! (`perfmodel/below_budget.txt`) and the checked-in predictions (`reports/perf-model.json`).
//!
//! - Every case with a budget (an H100 or H200, >= 4M elements, not the copy) must reach its
//!   share of the copy roofline (`roofline`: 90% LayerNorm forward and BatchNorm eval passes,
//!   85% LayerNorm backward and BatchNorm training) and keep loads in flight per SM at 1.5x
//!   the reads' share of Little's need at 800 ns in each launch that moves >= 10% of its
//!   bytes (`inflight`), unless `below_budget.txt` lists that case and check.
//! - A listed case and check that is now met fails too: take it off the list (it only shrinks).
//! - A prediction more than 5% below the GB/s recorded in `reports/perf-model.json` fails
//!   (regenerate the report when a prediction improves, so the record tightens).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::OpPrediction;

/// Allowed drop of a prediction against the recorded one.
pub const REGRESSION_TOLERANCE: f64 = 0.05;

/// One entry of the list: the prediction's key (`GPU op shape dtypes`) and the check.
pub type Entry = (String, String);

/// Parses `below_budget.txt`: `GPU op shape dtypes check` per line, `#` comments.
pub fn parse_list(text: &str) -> Result<BTreeSet<Entry>, String> {
    let mut out = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 5 || !matches!(f[4], "roofline" | "inflight") {
            return Err(format!(
                "below_budget.txt line {}: expected `GPU op shape dtypes roofline|inflight`, got `{line}`",
                i + 1
            ));
        }
        out.insert((f[..4].join(" "), f[4].to_string()));
    }
    Ok(out)
}

/// The entries the predictions miss today.
pub fn misses(preds: &[OpPrediction]) -> BTreeSet<Entry> {
    preds
        .iter()
        .flat_map(|p| {
            p.misses()
                .into_iter()
                .map(move |m| (p.key(), m.to_string()))
        })
        .collect()
}

/// Writes the list for the current misses (to start or rebuild it by hand).
pub fn format_list(entries: &BTreeSet<Entry>) -> String {
    let mut s = String::from(
        "# Cases below issue 11's budgets (see perfmodel/src/budget.rs): `GPU op shape dtypes check`.\n\
         # This list only shrinks: `cargo test -p perfmodel` fails when a case not listed misses a\n\
         # budget and when a listed case meets it (then delete its line). Cases added to the model\n\
         # enter with their misses (issue 13's BatchNorm shape set, 2026-11-29).\n",
    );
    for (k, c) in entries {
        s.push_str(&format!("{k} {c}\n"));
    }
    s
}

/// Problems of the predictions against the list: unlisted misses, listed entries now met.
pub fn check_list(preds: &[OpPrediction], listed: &BTreeSet<Entry>) -> Vec<String> {
    let now = misses(preds);
    let mut problems = Vec::new();
    for e in now.difference(listed) {
        let p = preds.iter().find(|p| p.key() == e.0);
        let detail = p.map_or(String::new(), |p| match e.1.as_str() {
            "roofline" => format!(
                ": {:.1}% of the copy roofline < {:.0}% ({})",
                p.pct_roofline,
                p.budget_pct.unwrap_or(0.0),
                p.limit.name()
            ),
            _ => p
                .inflight_short
                .iter()
                .map(|s| {
                    format!(
                        ": {} has {:.1} KB of loads in flight per SM < {:.1} KB",
                        s.kernel,
                        s.have / 1e3,
                        s.need / 1e3
                    )
                })
                .collect(),
        });
        problems.push(format!(
            "NEW MISS (not in below_budget.txt): {} {}{detail}",
            e.0, e.1
        ));
    }
    for e in listed.difference(&now) {
        problems.push(format!(
            "NOW MEETS ITS BUDGET (delete its line from below_budget.txt): {} {}",
            e.0, e.1
        ));
    }
    problems
}

/// Problems against the recorded predictions (the `predictions` of reports/perf-model.json):
/// a GB/s more than [`REGRESSION_TOLERANCE`] below the record.
pub fn check_regressions(preds: &[OpPrediction], json: &str) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("reports/perf-model.json: {e}"))?;
    let recorded: BTreeMap<String, f64> = v["predictions"]
        .as_array()
        .ok_or("reports/perf-model.json has no `predictions` array")?
        .iter()
        .filter_map(|p| Some((p["key"].as_str()?.to_string(), p["gbs"].as_f64()?)))
        .collect();
    let mut problems = Vec::new();
    for p in preds {
        if let Some(&old) = recorded.get(&p.key()) {
            if p.gbs < old * (1.0 - REGRESSION_TOLERANCE) {
                problems.push(format!(
                    "REGRESSION: {}: {:.0} GB/s predicted, {:.0} GB/s recorded ({:+.1}%)",
                    p.key(),
                    p.gbs,
                    old,
                    100.0 * (p.gbs / old - 1.0)
                ));
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_parses_and_rejects_garbage() {
        let l =
            parse_list("# c\nH200 LayerNorm-fwd 16384x768 bf16/bf16 roofline # why\n\n").unwrap();
        assert_eq!(l.len(), 1);
        assert!(parse_list("H200 LayerNorm-fwd roofline").is_err());
        assert!(parse_list("H200 LayerNorm-fwd 1x1 f32/f32 speed").is_err());
    }
}
