//! `ctx catalog build SOURCE... --out DIR` (spec/catalog-build.md): a catalog directory built
//! from skill directories, subagent files and a marketplace, with one table of every problem,
//! that `ctx catalog ingest --catalog-dir DIR` accepts, and that an identical rebuild leaves
//! untouched.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::{self, run_ctx};

fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
    fs::write(path, text).expect("a fixture file");
}

fn skill_md(name: &str, description: &str, extra: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n{extra}---\n\n# {name}\n\nSteps.\n")
}

fn mtimes(dir: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).expect("a listing") {
            let entry = entry.expect("an entry");
            let meta = entry.metadata().expect("metadata");
            found.push((entry.path(), meta.modified().expect("an mtime")));
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_built_catalog_prints_its_problems_ingests_and_rebuilds_unchanged() {
    let dir = support::tempdir();
    let root = dir.path();
    let skills = root.join("skills");
    write(
        &skills,
        "tiny/SKILL.md",
        &skill_md("tiny", "Formats tables", ""),
    );
    write(
        &skills,
        "runner/SKILL.md",
        &skill_md(
            "runner",
            "Runs tests",
            "allowed-tools: Bash(cargo test:*)\n",
        ),
    );
    write(
        &skills,
        "tooling/SKILL.md",
        &skill_md("tooling", "Scripts", ""),
    );
    write(&skills, "tooling/scripts/run.sh", "#!/bin/sh\n");
    let agents = root.join("agents");
    write(
        &agents,
        "fixer.md",
        "---\nname: fixer\ndescription: Fixes\npermissionMode: bypassPermissions\n---\nFix.\n",
    );
    let market = root.join("market");
    write(
        &market,
        ".claude-plugin/marketplace.json",
        r#"{"name": "team", "plugins": [
            {"name": "tools", "source": "./plugins/tools"},
            {"name": "remote", "source": {"source": "github", "repo": "example/remote"}}
        ]}"#,
    );
    write(
        &market,
        "plugins/tools/.claude-plugin/plugin.json",
        r#"{"name": "tools", "version": "1.0.0"}"#,
    );
    write(
        &market,
        "plugins/tools/skills/tiny/SKILL.md",
        &skill_md("tiny", "Another tiny", ""),
    );
    let out = root.join("built");
    let data = root.join("ctx");
    let args = |out: &Path| -> Vec<String> {
        vec![
            "catalog".into(),
            "build".into(),
            skills.display().to_string(),
            agents.display().to_string(),
            market.display().to_string(),
            "--out".into(),
            out.display().to_string(),
            "--namespace".into(),
            "team.local".into(),
        ]
    };
    let owned = args(&out);
    let argv: Vec<&str> = owned.iter().map(String::as_str).collect();
    let run = run_ctx(&data, &argv, "");
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines[0], "severity | entry | file | problem | action");
    // A skill with a script is a skill tree now (spec/catalog.md §1.4): imported whole.
    assert!(
        lines.iter().all(|l| !l.contains("skill:tooling")),
        "{}",
        run.stdout
    );
    assert!(
        lines.contains(
            &format!(
                "warning | - | {} | the plugin \"remote\" comes from a \"github\" source, which is \
             not fetched: ctx imports local paths only | plugin skipped",
                market.join(".claude-plugin/marketplace.json").display()
            )
            .as_str()
        ),
        "{}",
        run.stdout
    );
    assert!(
        lines.contains(
            &format!(
                "warning | skill:tiny | {} | the id skill:tiny is already taken by {}, from an \
             earlier source | imported as skill:tools-tiny, namespaced by its plugin",
                market.join("plugins/tools/skills/tiny/SKILL.md").display(),
                skills.join("tiny/SKILL.md").display()
            )
            .as_str()
        ),
        "{}",
        run.stdout
    );
    assert_eq!(
        lines.last().copied(),
        Some(
            format!(
                "wrote 5 entries to {} (0 refused, 2 warnings)",
                out.display()
            )
            .as_str()
        )
    );

    let catalog_dir = out.display().to_string();
    let ingest = run_ctx(
        &data,
        &["catalog", "ingest", "--catalog-dir", &catalog_dir],
        "",
    );
    assert_eq!(ingest.code, 0, "{}\n{}", ingest.stdout, ingest.stderr);
    let value = ctx_model::Json::parse(ingest.stdout.trim_end()).expect("one JSON line");
    assert_eq!(value.get("ok"), Some(&ctx_model::Json::Bool(true)));
    let listed = run_ctx(&data, &["catalog", "show", "skill:tooling"], "");
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(
        listed.stdout.contains(" scripts/run.sh"),
        "{}",
        listed.stdout
    );

    let before = mtimes(&out);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = run_ctx(&data, &argv, "");
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    assert_eq!(
        again.stdout.lines().last(),
        Some(format!("{} is unchanged (5 entries)", out.display()).as_str())
    );
    assert_eq!(mtimes(&out), before, "an unchanged rebuild touches nothing");
}

#[test]
fn a_build_with_nothing_to_import_is_bad_input_with_a_sentence() {
    let dir = support::tempdir();
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).expect("a directory");
    let out = dir.path().join("out");
    let run = run_ctx(
        &dir.path().join("ctx"),
        &[
            "catalog",
            "build",
            &empty.display().to_string(),
            "--out",
            &out.display().to_string(),
        ],
        "",
    );
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.stderr.lines().next(),
        Some("ctx: error: no entry could be imported from the sources, so no catalog was written")
    );
    assert!(run.stdout.contains(&format!(
        "refused | - | {0} | the source {0} holds no skill, subagent, plugin, marketplace or MCP \
         server file ctx recognizes | source skipped",
        empty.display()
    )));
    assert!(!out.exists(), "nothing is written");
}
