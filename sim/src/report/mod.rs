//! Writing a run out: `<name>.csv` (per second), `<name>.md` (its section) and
//! `<name>.png` (admitted/s against the limit), and the summary of several runs.

pub mod csv;
pub mod markdown;
pub mod plot;

use std::path::{Path, PathBuf};

use crate::error::SimError;
use crate::RunReport;

/// Writes the run's CSV, Markdown section and plot into `dir`.
pub fn write(dir: &Path, report: &RunReport) -> Result<(), SimError> {
    std::fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
    let file = |ext: &str| -> PathBuf { dir.join(format!("{}.{ext}", report.name)) };
    let csv = file("csv");
    std::fs::write(&csv, csv::render(&report.figures.seconds))
        .map_err(|e| SimError::io(&csv, e))?;
    let md = file("md");
    let text = format!("{}\n{}", markdown::scenario(report), markdown::DEFINITIONS);
    std::fs::write(&md, text).map_err(|e| SimError::io(&md, e))?;
    plot::draw(&file("png"), report)
}

/// The summary of several runs: the table, each scenario's section, and the
/// definitions; `header` says how the runs were made.
pub fn summary(header: &str, reports: &[RunReport]) -> String {
    let mut out = format!(
        "# meshlimit accuracy\n\n{header}\n\n{}\n",
        markdown::table(reports)
    );
    out.push_str(markdown::DEFINITIONS);
    out.push('\n');
    for r in reports {
        out.push_str(&markdown::scenario(r));
        out.push_str(&format!("![{0}]({0}.png)\n\n", r.name));
    }
    out
}
