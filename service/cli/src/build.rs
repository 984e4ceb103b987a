//! `ctx catalog build SOURCE... --out DIR [--namespace NS]`: a catalog directory from the
//! formats capabilities are published in, with one table of every problem
//! (spec/catalog-build.md, spec/cli.md "ctx catalog build").

use std::io::Write;
use std::path::{Path, PathBuf};

use ctx_service::{Finding, FindingSeverity, import_sources, write_catalog};

use crate::error::{CliError, EXIT_OK};

/// The namespace of a built catalog when `--namespace` is not given.
pub(crate) const DEFAULT_NAMESPACE: &str = "local";

/// The findings table's header.
const TABLE_HEADER: [&str; 5] = ["severity", "entry", "file", "problem", "action"];

/// Imports the sources, prints the findings table and the summary, and writes the catalog.
pub(crate) fn catalog_build(
    sources: &[PathBuf],
    dir: &Path,
    namespace: &str,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let import = import_sources(sources);
    if !import.findings.is_empty() {
        write_table(&import.findings, out)?;
    }
    let refused = import.count(FindingSeverity::Refused);
    let warnings = import.count(FindingSeverity::Warning);
    // The table is printed before the write so a person sees every problem even when nothing
    // could be imported (the error then says so in a sentence).
    let report = write_catalog(&import, namespace, dir)?;
    if report.unchanged {
        writeln!(
            out,
            "{} is unchanged ({} {})",
            dir.display(),
            report.entries,
            entries_word(report.entries)
        )?;
    } else {
        writeln!(
            out,
            "wrote {} {} to {} ({refused} refused, {warnings} {})",
            report.entries,
            entries_word(report.entries),
            dir.display(),
            if warnings == 1 { "warning" } else { "warnings" }
        )?;
    }
    Ok(EXIT_OK)
}

pub(crate) fn entries_word(n: usize) -> &'static str {
    if n == 1 { "entry" } else { "entries" }
}

/// One row per finding, cells separated by ` | `, after a header row.
pub(crate) fn write_table(findings: &[Finding], out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "{}", TABLE_HEADER.join(" | "))?;
    for f in findings {
        let severity = match f.severity {
            FindingSeverity::Warning => "warning",
            FindingSeverity::Refused => "refused",
        };
        // A cell never spans lines, so one finding is always one line of the table.
        let cell = |s: &str| s.replace(['\n', '\r'], " ");
        writeln!(
            out,
            "{severity} | {} | {} | {} | {}",
            cell(f.entry.as_deref().unwrap_or("-")),
            cell(&f.path),
            cell(&f.problem),
            cell(&f.action)
        )?;
    }
    Ok(())
}
