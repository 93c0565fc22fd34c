//! Shared by tests/batch_norm/coalescing.rs and examples/traffic_report.rs: describing the
//! uncoalesced requests of a launch with the PTX instruction and its CUDA source line.

use ptxsim::Metrics;
use warpnorm::kernels;

/// The CUDA source location of PTX line `line` (1-based): the closest `.loc` above it, with
/// the file name from its `.file` directive.
pub fn source_of(ptx: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = ptx.lines().collect();
    let loc = lines[..line.min(lines.len())]
        .iter()
        .rev()
        .find_map(|l| l.trim().strip_prefix(".loc"))?;
    let mut it = loc.split_whitespace();
    let (file, src_line) = (it.next()?, it.next()?);
    let name = lines
        .iter()
        .find_map(|l| {
            let rest = l.trim().strip_prefix(".file")?;
            let mut p = rest.split_whitespace();
            (p.next()? == file).then(|| p.next().unwrap_or("?").trim_matches('"').to_string())
        })
        .unwrap_or_else(|| format!("file {file}"));
    let short = name.rsplit('/').next().unwrap_or(&name).to_string();
    Some(format!("{short}:{src_line}"))
}

/// Describes the uncoalesced requests of one launch: kernel, arch, and per PTX line the
/// instruction, its source location and its sector counts.
pub fn describe(kernel: &str, arch: u32, m: &Metrics) -> String {
    let ptx = kernels::family_of(kernel).and_then(|f| kernels::ptx(f.name, arch));
    let mut s = format!(
        "{kernel} on compute_{arch}: {} of {} requests uncoalesced, {} sectors for ideal {}\n",
        m.uncoalesced_requests(),
        m.global_requests(),
        m.global_sectors(),
        m.global_ideal_sectors()
    );
    for l in &m.uncoalesced_lines {
        let text = ptx
            .and_then(|p| p.lines().nth(l.line - 1))
            .unwrap_or("?")
            .trim();
        let src = ptx.and_then(|p| source_of(p, l.line)).unwrap_or_default();
        s += &format!("    {l}\n        {text}   [{src}]\n");
    }
    s
}
