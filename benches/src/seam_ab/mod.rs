//! `ctx-bench seam-ab`: "no loss of speed" from the storage-seam refactor. The same workload
//! ([`workload`]: single-record appends from 1 thread and from 8 threads with group commit,
//! 40-record appends, `read_stream` and `scan` of 10k records) is built twice — at HEAD, where
//! the journal's core drives `Backend`/`WriteTxn` trait objects, and at an older revision
//! (default [`DEFAULT_BEFORE`], e880d54, whose core talked to redb directly) in a git worktree
//! with its own target dir — and the two binaries run alternately, one process per figure group
//! (so the two runs compared are seconds apart), [`DEFAULT_ROUNDS`] rounds each (before first in
//! odd rounds, HEAD first in even ones: A,B,B,A,A,B,…), journals on the same disk. Reported per figure: the median of each side's
//! rounds, the ratio HEAD/before of the medians, and the median of the per-round ratios (each
//! round's HEAD run over the before run next to it).
//!
//! ```text
//! cargo run --release -p ctx-benches --bin ctx-bench -- seam-ab [--dir DIR] [--keep-worktree]
//! ```
//!
//! The worktree (default `/tmp/ctx-before`) and its target dir (`/tmp/ctx-before-target`) are
//! created when missing and removed at the end unless `--keep-worktree`; building the old
//! revision takes a few minutes on two cores. `--dir` (default `target/ctx-bench/tmp`) should be
//! a real disk: fsync dominates the append figures, so a shared disk's fsync latency makes them
//! noisy (the per-round ratios show how much). A second run with `--dir /dev/shm` takes fsync out
//! and leaves the CPU cost of the core and the seam, which is what the refactor could change.

pub mod workload;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::BenchResult;
use crate::measure::median;

/// The revision before the refactor: the seam's traits exist, the core still uses redb directly.
pub const DEFAULT_BEFORE: &str = "e880d54";
/// Runs of each side.
pub const DEFAULT_ROUNDS: usize = 5;
/// Budget of each figure's timed loop in one run.
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(2000);
/// The workload binary.
pub const WORKLOAD_BIN: &str = "ctx-seam-workload";
/// The files that make the workload binary, copied into the older revision's worktree.
const WORKLOAD_FILES: [&str; 2] = [
    "benches/src/seam_ab/workload.rs",
    "benches/src/bin/ctx-seam-workload.rs",
];

/// What `seam-ab` compares and how.
#[derive(Debug, Clone)]
pub struct Config {
    /// The "before" side: a workload binary, or a revision to build one at.
    pub before: Side,
    /// The HEAD workload binary.
    pub head_bin: PathBuf,
    /// Base directory of the journals.
    pub dir: PathBuf,
    pub rounds: usize,
    pub budget: Duration,
    pub read_records: u64,
}

/// The "before" side of the comparison.
#[derive(Debug, Clone)]
pub enum Side {
    /// An already built workload binary (the smoke mode passes HEAD's).
    Binary { bin: PathBuf, label: String },
    /// A revision to check out in `worktree` and build with `target_dir`.
    Revision {
        rev: String,
        worktree: PathBuf,
        target_dir: PathBuf,
        keep: bool,
    },
}

/// The workspace root (the parent of this crate's manifest dir).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map_or(manifest.clone(), Path::to_path_buf)
}

fn run_checked(command: &mut Command, what: &str) -> BenchResult<String> {
    let output = command.output()?;
    if !output.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// `cargo build --release -p ctx-benches --bin ctx-seam-workload` in `root` into `target_dir`.
pub fn build_workload(root: &Path, target_dir: &Path) -> BenchResult<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--release", "-p", "ctx-benches"])
        .args(["--bin", WORKLOAD_BIN])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(root)
        .status()?;
    if !status.success() {
        return Err(format!(
            "building {WORKLOAD_BIN} in {} failed: {status}",
            root.display()
        )
        .into());
    }
    let bin = target_dir.join("release").join(WORKLOAD_BIN);
    if !bin.is_file() {
        return Err(format!("no {WORKLOAD_BIN} at {}", bin.display()).into());
    }
    Ok(bin)
}

/// Checks out `rev` in `worktree` (unless it is there already, at that commit), copies the
/// workload's files in and builds it. Returns the binary, the commit and whether the worktree was
/// created here.
fn prepare_revision(
    rev: &str,
    worktree: &Path,
    target_dir: &Path,
) -> BenchResult<(PathBuf, String, bool)> {
    let root = workspace_root();
    let commit = run_checked(
        Command::new("git").arg("-C").arg(&root).args([
            "rev-parse",
            "--verify",
            &format!("{rev}^{{commit}}"),
        ]),
        "git rev-parse",
    )?;
    let created = !worktree.exists();
    if created {
        eprintln!("git worktree add --detach {} {rev}", worktree.display());
        run_checked(
            Command::new("git")
                .arg("-C")
                .arg(&root)
                .args(["worktree", "add", "--detach"])
                .arg(worktree)
                .arg(&commit),
            "git worktree add",
        )?;
    } else {
        let at = run_checked(
            Command::new("git")
                .arg("-C")
                .arg(worktree)
                .args(["rev-parse", "HEAD"]),
            "git rev-parse HEAD in the worktree",
        )?;
        if at != commit {
            return Err(format!(
                "{} is at {at}, not {rev} ({commit}); remove it or name another --worktree",
                worktree.display()
            )
            .into());
        }
    }
    for file in WORKLOAD_FILES {
        let to = worktree.join(file);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(root.join(file), &to)?;
    }
    eprintln!(
        "building {WORKLOAD_BIN} at {rev} in {} (target {}) ...",
        worktree.display(),
        target_dir.display()
    );
    let bin = build_workload(worktree, target_dir)?;
    Ok((bin, commit, created))
}

/// Removes a worktree made by [`prepare_revision`] and its target dir.
fn remove_worktree(worktree: &Path, target_dir: &Path) -> BenchResult<()> {
    run_checked(
        Command::new("git")
            .arg("-C")
            .arg(workspace_root())
            .args(["worktree", "remove", "--force"])
            .arg(worktree),
        "git worktree remove",
    )?;
    if target_dir.exists() {
        std::fs::remove_dir_all(target_dir)?;
    }
    Ok(())
}

/// One figure of one run, as the workload binary printed it.
#[derive(Debug, Clone)]
pub struct RunFigure {
    pub key: String,
    pub unit: String,
    pub value: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// Parses the workload binary's JSON line.
pub fn parse_run(text: &str) -> BenchResult<Vec<RunFigure>> {
    let doc: Value = serde_json::from_str(text.trim())?;
    let figures = doc["figures"]
        .as_array()
        .ok_or("the workload printed no figures")?;
    figures
        .iter()
        .map(|f| {
            let num = |k: &str| f[k].as_f64().ok_or_else(|| format!("figure without {k}"));
            Ok(RunFigure {
                key: f["key"].as_str().ok_or("figure without key")?.to_owned(),
                unit: f["unit"].as_str().unwrap_or_default().to_owned(),
                value: num("value")?,
                p50_us: num("p50_us")?,
                p99_us: num("p99_us")?,
            })
        })
        .collect()
}

fn run_workload(bin: &Path, config: &Config, group: &str) -> BenchResult<Vec<RunFigure>> {
    let stdout = run_checked(
        Command::new(bin)
            .args(["--only", group])
            .arg("--dir")
            .arg(&config.dir)
            .arg("--budget-ms")
            .arg(config.budget.as_millis().to_string())
            .arg("--read-records")
            .arg(config.read_records.to_string()),
        &bin.display().to_string(),
    )?;
    parse_run(&stdout)
}

/// One figure over all rounds of both sides.
#[derive(Debug, Clone, Default)]
pub struct Compared {
    pub key: String,
    pub unit: String,
    pub before: Vec<f64>,
    pub head: Vec<f64>,
    pub before_p50_us: Vec<f64>,
    pub head_p50_us: Vec<f64>,
    pub before_p99_us: Vec<f64>,
    pub head_p99_us: Vec<f64>,
}

impl Compared {
    /// HEAD's median over the before side's.
    pub fn ratio_of_medians(&self) -> f64 {
        let b = median(&self.before);
        if b > 0.0 { median(&self.head) / b } else { 0.0 }
    }

    /// The median of the rounds' HEAD/before ratios.
    pub fn median_round_ratio(&self) -> f64 {
        let ratios: Vec<f64> = self
            .before
            .iter()
            .zip(&self.head)
            .filter(|(b, _)| **b > 0.0)
            .map(|(b, h)| h / b)
            .collect();
        median(&ratios)
    }
}

/// What a `seam-ab` run measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub before_label: String,
    pub head_label: String,
    pub rounds: usize,
    pub budget: Duration,
    pub dir: PathBuf,
    pub fs_type: String,
    pub figures: Vec<Compared>,
}

fn record(figures: &mut Vec<Compared>, run: Vec<RunFigure>, head: bool) {
    for f in run {
        let i = match figures.iter().position(|c| c.key == f.key) {
            Some(i) => i,
            None => {
                figures.push(Compared {
                    key: f.key.clone(),
                    unit: f.unit.clone(),
                    ..Compared::default()
                });
                figures.len() - 1
            }
        };
        let c = &mut figures[i];
        let (values, p50, p99) = if head {
            (&mut c.head, &mut c.head_p50_us, &mut c.head_p99_us)
        } else {
            (&mut c.before, &mut c.before_p50_us, &mut c.before_p99_us)
        };
        values.push(f.value);
        p50.push(f.p50_us);
        p99.push(f.p99_us);
    }
}

/// Prepares the before side (a worktree build when it is a revision), runs both sides
/// alternately for `config.rounds` rounds, and removes a worktree it created (unless kept).
pub fn run(config: &Config) -> BenchResult<Report> {
    std::fs::create_dir_all(&config.dir)?;
    let head_commit = run_checked(
        Command::new("git")
            .arg("-C")
            .arg(workspace_root())
            .args(["rev-parse", "--short", "HEAD"]),
        "git rev-parse HEAD",
    )
    .unwrap_or_else(|_| "HEAD".to_owned());
    let dirty = run_checked(
        Command::new("git").arg("-C").arg(workspace_root()).args([
            "status",
            "--porcelain",
            "--untracked-files=no",
        ]),
        "git status",
    )
    .is_ok_and(|s| !s.is_empty());
    let head_label = format!(
        "HEAD {head_commit}{}",
        if dirty { " + working tree changes" } else { "" }
    );
    let (before_bin, before_label, cleanup) = match &config.before {
        Side::Binary { bin, label } => (bin.clone(), label.clone(), None),
        Side::Revision {
            rev,
            worktree,
            target_dir,
            keep,
        } => {
            let (bin, commit, created) = prepare_revision(rev, worktree, target_dir)?;
            let short: String = commit.chars().take(7).collect();
            let cleanup = (created && !keep).then(|| (worktree.clone(), target_dir.clone()));
            (bin, format!("before {short}"), cleanup)
        }
    };
    let result = (|| -> BenchResult<Vec<Compared>> {
        let mut figures = Vec::new();
        for r in 1..=config.rounds {
            for group in workload::GROUPS {
                let mut sides = [
                    (false, &before_bin, &before_label),
                    (true, &config.head_bin, &head_label),
                ];
                // Before first in odd rounds, HEAD first in even ones (A,B,B,A,A,B,...): a
                // drift of the machine favours neither side over the run.
                if r % 2 == 0 {
                    sides.reverse();
                }
                for (head, bin, label) in sides {
                    let run = run_workload(bin, config, group)?;
                    let line: Vec<String> = run
                        .iter()
                        .map(|f| format!("{} {:.0}", f.key, f.value))
                        .collect();
                    eprintln!(
                        "  round {r}/{}: {label}: {}",
                        config.rounds,
                        line.join(", ")
                    );
                    record(&mut figures, run, head);
                }
            }
        }
        Ok(figures)
    })();
    if let Some((worktree, target_dir)) = cleanup {
        eprintln!("removing the worktree {}", worktree.display());
        remove_worktree(&worktree, &target_dir)?;
    }
    Ok(Report {
        before_label,
        head_label,
        rounds: config.rounds,
        budget: config.budget,
        dir: config.dir.clone(),
        fs_type: crate::hook_latency::fs_type(&config.dir),
        figures: result?,
    })
}

impl Report {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "## ctx-bench seam-ab: {} vs {}\n\n{} rounds; in each, every figure group runs as \
             one process per side, back to back ({} first in odd rounds, HEAD first in even \
             ones); {} ms per figure per run; journals in {} ({}).\n\n\
             | figure | unit | before median | HEAD median | HEAD/before (medians) | median of \
             round ratios | before p50/p99 µs | HEAD p50/p99 µs |\n\
             |---|---|---:|---:|---:|---:|---:|---:|\n",
            self.head_label,
            self.before_label,
            self.rounds,
            self.before_label,
            self.budget.as_millis(),
            self.dir.display(),
            self.fs_type
        );
        for c in &self.figures {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {:.0} | {:.3} | {:.3} | {:.0} / {:.0} | {:.0} / {:.0} |",
                c.key,
                c.unit,
                median(&c.before),
                median(&c.head),
                c.ratio_of_medians(),
                c.median_round_ratio(),
                median(&c.before_p50_us),
                median(&c.before_p99_us),
                median(&c.head_p50_us),
                median(&c.head_p99_us)
            );
        }
        s.push_str(
            "\nLatency columns: medians over rounds of each run's p50 and p99 (appends, commits, \
             or whole 10k-record reads).\n",
        );
        s
    }

    pub fn to_json(&self) -> Value {
        json!({
            "schema": "ctx.bench-seam-ab-v1",
            "before": self.before_label,
            "head": self.head_label,
            "rounds": self.rounds,
            "budget_ms": self.budget.as_millis() as u64,
            "dir": self.dir.display().to_string(),
            "fs_type": self.fs_type,
            "figures": self.figures.iter().map(|c| json!({
                "key": c.key,
                "unit": c.unit,
                "before_median": median(&c.before),
                "head_median": median(&c.head),
                "head_over_before": c.ratio_of_medians(),
                "median_round_ratio": c.median_round_ratio(),
                "before_rounds": c.before,
                "head_rounds": c.head,
                "before_p50_us": c.before_p50_us,
                "head_p50_us": c.head_p50_us,
                "before_p99_us": c.before_p99_us,
                "head_p99_us": c.head_p99_us,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::*;

    /// The workload end to end with tiny budgets (run by `cargo test` and by the benches'
    /// self-test): every figure is measured and its JSON line parses back.
    #[test]
    fn workload_smoke() {
        let dir = tempfile::tempdir().unwrap();
        let figures = workload::run(&workload::Config {
            dir: dir.path().to_owned(),
            budget: Duration::from_millis(30),
            read_records: 300,
            only: Vec::new(),
        })
        .unwrap();
        let keys: Vec<&str> = figures.iter().map(|f| f.key).collect();
        assert_eq!(
            keys,
            [
                "single_1_thread",
                "single_8_threads",
                "batch_40",
                "read_stream_10k",
                "scan_10k"
            ]
        );
        assert!(figures.iter().all(|f| f.value > 0.0 && f.count > 0));
        let only_batch = workload::run(&workload::Config {
            dir: dir.path().to_owned(),
            budget: Duration::from_millis(10),
            read_records: 300,
            only: vec!["batch".to_owned()],
        })
        .unwrap();
        assert_eq!(only_batch.len(), 1);
        assert_eq!(only_batch[0].key, "batch_40");
        let parsed = parse_run(&workload::to_json(&figures)).unwrap();
        assert_eq!(parsed.len(), figures.len());
        let mut compared = Vec::new();
        record(&mut compared, parsed.clone(), false);
        record(&mut compared, parsed, true);
        assert!(
            compared
                .iter()
                .all(|c| (c.ratio_of_medians() - 1.0).abs() < 1e-9)
        );
        // The workload removed its directories.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
