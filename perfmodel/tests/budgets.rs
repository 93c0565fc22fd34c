//! Issue 11's budgets on the shipped kernels and real plans (never timed): see
//! perfmodel/src/budget.rs. Fails on a case below budget that perfmodel/below_budget.txt does
//! not list, on a listed case that now meets its budget, and on a prediction more than 5% below
//! reports/perf-model.json.

use std::path::PathBuf;

use perfmodel::gpu::{H100, H200};
use perfmodel::{budget, predict_all, tools, Sass};

#[test]
fn budgets_only_tighten() {
    let sass = match Sass::load(&[90]) {
        Ok(s) => s,
        Err(e) if tools::require() => panic!("WARPNORM_REQUIRE_NVCC=1 but {e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let preds = predict_all(&sass, &[H100, H200]).expect("every case plans");
    let list =
        std::fs::read_to_string(root.join("below_budget.txt")).expect("perfmodel/below_budget.txt");
    let listed = budget::parse_list(&list).expect("below_budget.txt parses");
    let mut problems = budget::check_list(&preds, &listed);
    let json = std::fs::read_to_string(root.join("../reports/perf-model.json"))
        .expect("reports/perf-model.json");
    problems.extend(budget::check_regressions(&preds, &json).expect("the JSON parses"));
    assert!(
        problems.is_empty(),
        "{} budget problems (regenerate with `cargo run -p perfmodel -- report`; \
         `cargo run -p perfmodel -- below-budget` prints today's misses):\n{}",
        problems.len(),
        problems.join("\n")
    );
}
