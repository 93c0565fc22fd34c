//! `perfmodel report`: writes reports/perf-model.md and reports/perf-model.json.
//! `perfmodel below-budget`: prints the list of cases below budget today (the format of
//! perfmodel/below_budget.txt). `perfmodel walk <kernel> [arch]`: the main-loop walk of one
//! kernel, instruction by instruction. `perfmodel walk-file <cubin|fatbin> <kernel> [arch]`: the
//! same walk of a kernel in a file nvcc wrote (a one-file experiment, without the crate build).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use perfmodel::{budget, gpu, predict_all, report, sass, tools, Sass};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// An optional `90` / `sm_90` argument (default 90).
fn arch_arg(a: Option<&String>) -> Result<u32, String> {
    a.map(|a| a.trim_start_matches("sm_").parse())
        .transpose()
        .map_err(|e| format!("arch: {e}"))
        .map(|a| a.unwrap_or(90))
}

fn run(args: &[String]) -> Result<(), String> {
    let cmd = args.first().map(String::as_str).unwrap_or("");
    match cmd {
        "report" | "below-budget" => {
            let archs: Vec<u32> = gpu::GPUS
                .iter()
                .map(|g| g.sass_arch)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter(|a| warpnorm::kernels::SASS_ARCHS.contains(a))
                .collect();
            let s = Sass::load(&archs).map_err(|e| e.to_string())?;
            let preds = predict_all(&s, &gpu::GPUS)?;
            if cmd == "below-budget" {
                print!("{}", budget::format_list(&budget::misses(&preds)));
                return Ok(());
            }
            let list_path = root().join("perfmodel").join("below_budget.txt");
            let listed = match std::fs::read_to_string(&list_path) {
                Ok(t) => budget::parse_list(&t)?,
                Err(_) => BTreeSet::new(),
            };
            let dir = root().join("reports");
            let md = report::markdown(&s, &gpu::GPUS, &preds, &listed);
            let js = report::json(&gpu::GPUS, &preds);
            std::fs::write(dir.join("perf-model.md"), md).map_err(|e| e.to_string())?;
            std::fs::write(dir.join("perf-model.json"), js).map_err(|e| e.to_string())?;
            eprintln!(
                "wrote reports/perf-model.md and reports/perf-model.json ({} predictions)",
                preds.len()
            );
            Ok(())
        }
        "walk" => {
            let kernel = args.get(1).ok_or("usage: perfmodel walk <kernel> [arch]")?;
            let arch = arch_arg(args.get(2))?;
            let s = Sass::load(&[arch]).map_err(|e| e.to_string())?;
            let f = s
                .function(arch, kernel)
                .ok_or_else(|| format!("no kernel {kernel} in the sm_{arch} SASS"))?;
            print!("{}", sass::explain(f));
            Ok(())
        }
        "walk-file" => {
            let usage = "usage: perfmodel walk-file <cubin|fatbin> <kernel> [arch]";
            let file = args.get(1).ok_or(usage)?;
            let kernel = args.get(2).ok_or(usage)?;
            let arch = arch_arg(args.get(3))?;
            let bytes = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
            let tool = tools::cuobjdump().map_err(|e| e.to_string())?;
            let listing =
                tools::disassemble(&tool, &bytes, arch, "walk").map_err(|e| e.to_string())?;
            let f = sass::parse_listing(&listing)
                .into_iter()
                .find(|f| f.name == *kernel)
                .ok_or_else(|| format!("no kernel {kernel} in {file} for sm_{arch}"))?;
            print!("{}", sass::explain(&f));
            Ok(())
        }
        _ => Err(
            "usage: perfmodel report | below-budget | walk <kernel> [arch] | walk-file <file> <kernel> [arch]"
                .into(),
        ),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("perfmodel: {e}");
            ExitCode::FAILURE
        }
    }
}
