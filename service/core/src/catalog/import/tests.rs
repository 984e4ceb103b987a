//! Tests of the importers, the merge rule and the catalog writer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use std::fs;
use std::path::{Path, PathBuf};

use ctx_model::CapabilityKind;

use super::super::load_catalog_dir;
use super::*;

fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn skill_md(name: &str, description: &str, extra: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n{extra}---\n\n# {name}\n\nSteps.\n")
}

/// A skills directory with one skill of every case spec/catalog-build.md §2.1 names.
fn skills_fixture(root: &Path) -> PathBuf {
    let skills = root.join("skills");
    let s = |rel: &str, text: &str| write(&skills, rel, text);
    s(
        "tiny/SKILL.md",
        &skill_md("tiny", "Formats small tables", ""),
    );
    s(
        "runner/SKILL.md",
        &skill_md(
            "runner",
            "Runs the tests",
            "allowed-tools: Bash(cargo test:*)\n",
        ),
    );
    s("tooling/SKILL.md", &skill_md("tooling", "Uses scripts", ""));
    s("tooling/scripts/run.sh", "#!/bin/sh\necho hi\n");
    {
        use std::os::unix::fs::PermissionsExt as _;
        let run = skills.join("tooling/scripts/run.sh");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).unwrap();
    }
    s("tooling/references/api.md", "# API\n");
    s("tooling/LICENSE.txt", "MIT\n");
    s("notes/SKILL.md", &skill_md("notes", "Keeps notes", ""));
    s("notes/references/style.md", "# Style\n");
    // A body larger than ctx.catalog-v1 allowed (6,000 bytes) and below the SKILL.md limit.
    let padding = "x".repeat(7000 - skill_md("huge", "Too big", "").len());
    s(
        "huge/SKILL.md",
        &format!("{}{padding}", skill_md("huge", "Too big", "")),
    );
    s(
        "broken/SKILL.md",
        "---\nname: broken\ndescription: [unclosed\n---\nbody\n",
    );
    s(
        "versioned/SKILL.md",
        &skill_md("versioned", "Has a version", "version: 1.2.0\n"),
    );
    s(
        "mismatch/SKILL.md",
        &skill_md("other-name", "Named otherwise", ""),
    );
    s(
        "Stripe_Integration/SKILL.md",
        &skill_md("stripe-integration", "Stripe payments", ""),
    );
    skills
}

fn agents_fixture(root: &Path) -> PathBuf {
    let agents = root.join("agents");
    write(
        &agents,
        "reviewer.md",
        "---\nname: reviewer\ndescription: Reviews diffs\ntools: Read, Grep, Glob\n---\nReview.\n",
    );
    write(
        &agents,
        "nested/fixer.md",
        "---\nname: fixer\ndescription: Fixes anything\npermissionMode: bypassPermissions\n---\nFix.\n",
    );
    write(
        &agents,
        "colon.md",
        "---\nname: colon\ndescription: Use when: the build fails\n---\nHelp.\n",
    );
    agents
}

fn problems(import: &Import, entry: &str) -> Vec<(FindingSeverity, String)> {
    import
        .findings
        .iter()
        .filter(|f| f.entry.as_deref() == Some(entry))
        .map(|f| (f.severity, f.problem.clone()))
        .collect()
}

fn names(import: &Import, kind: CapabilityKind) -> Vec<String> {
    import
        .entries
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.name.clone())
        .collect()
}

#[test]
fn catalog_build_skills_are_imported_or_refused_with_sentences() {
    let dir = tempfile::tempdir().unwrap();
    let skills = skills_fixture(dir.path());
    let import = import_sources(std::slice::from_ref(&skills));
    assert_eq!(
        names(&import, CapabilityKind::Skill),
        // Directories in byte order: `Stripe_Integration` sorts before the lowercase names.
        [
            "stripe-integration",
            "huge",
            "mismatch",
            "notes",
            "runner",
            "tiny",
            "tooling",
            "versioned"
        ]
    );
    // Skill trees and bodies past the old 6,000 bytes import without a finding.
    assert_eq!(problems(&import, "skill:tooling"), []);
    assert_eq!(problems(&import, "skill:huge"), []);
    let tree_of = |name: &str| {
        import
            .entries
            .iter()
            .find(|e| e.name == name)
            .and_then(|e| e.tree.as_ref())
            .map(|t| {
                t.files()
                    .iter()
                    .map(|f| f.path().to_owned())
                    .collect::<Vec<_>>()
            })
    };
    assert_eq!(
        tree_of("tooling").unwrap(),
        [
            "LICENSE.txt",
            "SKILL.md",
            "references/api.md",
            "scripts/run.sh"
        ]
    );
    assert_eq!(tree_of("huge"), None, "a lone SKILL.md stays one body");
    let broken = problems(&import, "skill:broken");
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert_eq!(broken[0].0, FindingSeverity::Refused);
    assert!(
        broken[0]
            .1
            .starts_with("the frontmatter is not valid YAML at line 4: "),
        "{}",
        broken[0].1
    );
    assert_eq!(
        problems(&import, "skill:versioned"),
        [(
            FindingSeverity::Warning,
            "the frontmatter key version is outside the six keys of the open spec".to_owned()
        )]
    );
    assert_eq!(
        problems(&import, "skill:mismatch"),
        [(
            FindingSeverity::Warning,
            "the name \"other-name\" differs from its directory name \"mismatch\"".to_owned()
        )]
    );
    let stripe = import
        .findings
        .iter()
        .find(|f| f.entry.as_deref() == Some("skill:stripe-integration"))
        .unwrap();
    assert_eq!(stripe.severity, FindingSeverity::Warning);
    assert_eq!(stripe.action, "normalized to \"stripe-integration\"");
    let tiny = import.entries.iter().find(|e| e.name == "tiny").unwrap();
    assert_eq!(tiny.label, "Formats small tables");
    assert_eq!(tiny.tags, ["tiny"]);
    assert_eq!(
        tiny.provenance.path,
        skills.join("tiny/SKILL.md").display().to_string()
    );
}

#[test]
fn catalog_build_agents_keep_their_names_and_warn_about_quoted_values() {
    let dir = tempfile::tempdir().unwrap();
    let agents = agents_fixture(dir.path());
    let import = import_sources(&[agents]);
    assert_eq!(
        names(&import, CapabilityKind::Agent),
        ["colon", "fixer", "reviewer"]
    );
    assert_eq!(
        problems(&import, "agent:colon"),
        [(
            FindingSeverity::Warning,
            "the value of \"description\" at line 3 has an unquoted `: `, which is not valid \
             YAML; it was read as one quoted string"
                .to_owned()
        )]
    );
    let colon = import.entries.iter().find(|e| e.name == "colon").unwrap();
    assert_eq!(colon.label, "Use when: the build fails");
}

#[test]
fn catalog_build_labels_are_cut_at_a_character_boundary() {
    let long = "é".repeat(150);
    let (label, cut) = discover::label_of(&format!("  {long}\n  more  "));
    assert_eq!(label.len(), 200);
    assert_eq!(cut, Some(305));
    assert_eq!(discover::label_of("a\n b"), ("a b".to_owned(), None));
    let (tags, dropped) = discover::tags_of("pdf-forms-pdf", &["Bad Tag".into(), "x".into()]);
    assert_eq!(
        (tags, dropped),
        (vec!["forms".into(), "pdf".into(), "x".into()], 0)
    );
}

/// A marketplace with one local plugin and one git plugin, and a second plugin whose skill
/// collides with the first's.
fn plugins_fixture(root: &Path) -> (PathBuf, PathBuf) {
    let market = root.join("market");
    write(
        &market,
        ".claude-plugin/marketplace.json",
        r#"{"name": "team", "plugins": [
            {"name": "tools", "source": "./plugins/tools", "keywords": ["Rust"]},
            {"name": "remote", "source": {"source": "git-subdir", "url": "https://example.invalid/x.git"}}
        ]}"#,
    );
    write(
        &market,
        "plugins/tools/.claude-plugin/plugin.json",
        r#"{"name": "tools", "version": "1.0.0", "keywords": ["lint", "Not A Token"]}"#,
    );
    write(
        &market,
        "plugins/tools/skills/format/SKILL.md",
        &skill_md("format", "Formats code", ""),
    );
    write(
        &market,
        "plugins/tools/agents/helper.md",
        "---\nname: helper\ndescription: Helps\n---\nHelp.\n",
    );
    let other = root.join("other");
    write(
        &other,
        ".claude-plugin/plugin.json",
        r#"{"name": "other", "version": "2.0.0"}"#,
    );
    write(
        &other,
        "skills/format/SKILL.md",
        &skill_md("format", "Formats differently", ""),
    );
    (market, other)
}

#[test]
fn catalog_build_marketplaces_plugins_and_collisions() {
    let dir = tempfile::tempdir().unwrap();
    let (market, other) = plugins_fixture(dir.path());
    let import = import_sources(&[market.clone(), other.clone()]);
    assert_eq!(
        names(&import, CapabilityKind::Skill),
        ["format", "other-format"]
    );
    assert_eq!(names(&import, CapabilityKind::Agent), ["helper"]);
    let format = &import.entries[0];
    assert_eq!(format.provenance.plugin.as_deref(), Some("tools"));
    assert_eq!(format.provenance.marketplace.as_deref(), Some("team"));
    assert_eq!(format.provenance.version.as_deref(), Some("1.0.0"));
    assert_eq!(format.tags, ["format", "lint", "rust"]);
    let remote = import
        .findings
        .iter()
        .find(|f| f.problem.contains("remote"))
        .unwrap();
    assert_eq!(remote.severity, FindingSeverity::Warning);
    assert_eq!(
        remote.problem,
        "the plugin \"remote\" comes from a \"git-subdir\" source, which is not fetched: ctx \
         imports local paths only"
    );
    let renamed = import
        .entries
        .iter()
        .find(|e| e.name == "other-format")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&renamed.body).starts_with("---\nname: other-format\n"),
        "the body names the entry as the catalog does"
    );
    let collision = problems(&import, "skill:format");
    assert_eq!(
        collision,
        [(
            FindingSeverity::Warning,
            format!(
                "the id skill:format is already taken by {}, from an earlier source",
                market
                    .join("plugins/tools/skills/format/SKILL.md")
                    .display()
            )
        )]
    );
    // The same sources in the other order give the plain name to the other plugin.
    let swapped = import_sources(&[other, market]);
    let format = swapped.entries.iter().find(|e| e.name == "format").unwrap();
    assert_eq!(format.provenance.plugin.as_deref(), Some("other"));
    // And the same order gives the same result.
    let dir2 = dir.path();
    let (m, o) = (dir2.join("market"), dir2.join("other"));
    assert_eq!(
        import_sources(&[m.clone(), o.clone()]),
        import_sources(&[m, o])
    );
}

#[test]
fn catalog_build_a_collision_without_a_plugin_is_refused_naming_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    write(&a, "same/SKILL.md", &skill_md("same", "First", ""));
    write(&b, "same/SKILL.md", &skill_md("same", "Second", ""));
    let import = import_sources(&[a.clone(), b.clone()]);
    assert_eq!(import.entries.len(), 1);
    let refused = &import.findings[0];
    assert_eq!(refused.severity, FindingSeverity::Refused);
    assert_eq!(refused.path, b.join("same/SKILL.md").display().to_string());
    assert_eq!(
        refused.problem,
        format!(
            "the id skill:same is already taken by {}, from an earlier source",
            a.join("same/SKILL.md").display()
        )
    );
}

#[test]
fn catalog_build_unreadable_and_empty_sources_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let import = import_sources(&[missing.clone(), empty.clone()]);
    assert!(import.entries.is_empty());
    assert_eq!(import.findings.len(), 2);
    assert!(
        import.findings[0].problem.starts_with(&format!(
            "the source {} could not be read: ",
            missing.display()
        )),
        "{}",
        import.findings[0].problem
    );
    assert_eq!(
        import.findings[1].problem,
        format!(
            "the source {} holds no skill, subagent, plugin, marketplace or MCP server file ctx \
             recognizes",
            empty.display()
        )
    );
}

fn mtimes(dir: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            found.push((entry.path(), meta.modified().unwrap()));
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn catalog_build_writes_a_catalog_that_loads_with_derived_flags_and_rebuilds_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let skills = skills_fixture(dir.path());
    let agents = agents_fixture(dir.path());
    let import = import_sources(&[skills, agents]);
    let out = dir.path().join("out");
    let report = write_catalog(&import, "local", &out).unwrap();
    assert_eq!((report.entries, report.unchanged), (11, false));
    let loaded = load_catalog_dir(&out).unwrap();
    let catalog = loaded.catalog();
    let tiny = catalog.entry("skill:tiny").unwrap();
    let material = tiny.material.as_ref().unwrap();
    assert_eq!(material.body.path, "skills/tiny/SKILL.md");
    assert_eq!(
        material.estimated_tokens,
        (material.body.size_bytes + 3) / 4
    );
    assert!(tiny.install.is_none());
    let runner = catalog
        .entry("skill:runner")
        .unwrap()
        .install
        .as_ref()
        .unwrap();
    assert!(runner.permission_expansion);
    assert_eq!(runner.installer_id, CATALOG_BUILD_INSTALLER_ID);
    assert_eq!(
        runner.plan_digest,
        write::plan_digest("skill:runner", &runner.result.sha256)
    );
    let fixer = catalog
        .entry("agent:fixer")
        .unwrap()
        .install
        .as_ref()
        .unwrap();
    assert!(fixer.permission_expansion);
    assert_eq!(fixer.result.path, "agents/fixer.md");
    let reviewer = catalog
        .entry("agent:reviewer")
        .unwrap()
        .install
        .as_ref()
        .unwrap();
    assert!(!reviewer.permission_expansion);
    assert!(out.join(BUILD_MARKER_FILE).is_file());
    // A tree with an executable script is an install that expands permissions, written file by
    // file with the executable bit; a tree without one is loadable material.
    let tooling = catalog.entry("skill:tooling").unwrap();
    let install = tooling.install.as_ref().unwrap();
    assert!(install.result.tree && install.permission_expansion);
    assert_eq!(install.result.path, "skills/tooling");
    let pinned = loaded.install_result_tree("skill:tooling").unwrap();
    assert_eq!(
        crate::catalog::skill_pack_identity(pinned).0,
        install.result.sha256
    );
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |rel: &str| fs::metadata(out.join(rel)).unwrap().permissions().mode() & 0o111;
        assert_ne!(mode("skills/tooling/scripts/run.sh"), 0);
        assert_eq!(mode("skills/tooling/references/api.md"), 0);
    }
    let notes = catalog.entry("skill:notes").unwrap();
    let material = notes.material.as_ref().unwrap();
    assert!(material.body.tree);
    assert_eq!(
        material.estimated_tokens,
        (skill_md("notes", "Keeps notes", "").len() as i64 + 3) / 4
    );
    // Every entry says where it came from.
    let source = tooling.source.as_ref().unwrap();
    assert!(source.origin.ends_with("tooling/SKILL.md"), "{source:?}");
    assert_eq!(
        catalog
            .entry("skill:huge")
            .unwrap()
            .material
            .as_ref()
            .unwrap()
            .body
            .size_bytes,
        7000
    );

    let before = mtimes(&out);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = write_catalog(&import, "local", &out).unwrap();
    assert!(again.unchanged);
    assert_eq!(again.content_digest, report.content_digest);
    assert_eq!(mtimes(&out), before, "an unchanged rebuild touches nothing");

    // A smaller rebuild replaces the directory's catalog and drops the old bodies.
    let fewer = Import {
        entries: import.entries[..1].to_vec(),
        findings: Vec::new(),
    };
    let smaller = write_catalog(&fewer, "local", &out).unwrap();
    assert_eq!((smaller.entries, smaller.unchanged), (1, false));
    assert!(!out.join("agents").exists());
    let leftovers: Vec<_> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".ctx-build-") || n.starts_with(".ctx-old-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn catalog_build_refuses_a_foreign_directory_an_empty_import_and_a_bad_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("foreign");
    write(&foreign, "notes.txt", "mine\n");
    let skills = dir.path().join("skills");
    write(&skills, "tiny/SKILL.md", &skill_md("tiny", "Tiny", ""));
    let import = import_sources(&[skills]);
    assert_eq!(
        write_catalog(&import, "local", &foreign)
            .unwrap_err()
            .to_string(),
        format!(
            "the output directory {} holds files that ctx catalog build did not write (it has \
             no .ctx-catalog-build file); name an empty or new directory",
            foreign.display()
        )
    );
    assert_eq!(
        fs::read_to_string(foreign.join("notes.txt")).unwrap(),
        "mine\n"
    );
    let error = write_catalog(&Import::default(), "local", &dir.path().join("o")).unwrap_err();
    assert!(error.is_bad_input());
    assert_eq!(
        error.to_string(),
        "no entry could be imported from the sources, so no catalog was written"
    );
    assert!(matches!(
        write_catalog(&import, "Bad NS", &dir.path().join("o")),
        Err(BuildError::Namespace { .. })
    ));
}

#[test]
fn catalog_build_mcp_files_of_every_kind_are_routed_to_the_mcp_importer() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        ".mcp.json",
        r#"{"mcpServers":{"fetch":{"command":"uvx","args":["mcp-server-fetch"]}}}"#,
    );
    write(
        root,
        "codex/config.toml",
        "model = \"x\"\n[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"docs-mcp\"]\n",
    );
    write(
        root,
        "registry/server.json",
        r#"{"name":"io.github.example/weather","description":"Weather forecasts","version":"1.2.0","packages":[{"registryType":"npm","identifier":"weather-mcp","version":"1.2.0","transport":{"type":"stdio"}}]}"#,
    );
    let import = import_sources(&[
        root.join(".mcp.json"),
        root.join("codex/config.toml"),
        root.join("registry/server.json"),
    ]);
    assert_eq!(
        names(&import, CapabilityKind::McpServer),
        ["fetch", "docs", "weather"]
    );
    let refused: Vec<_> = import
        .findings
        .iter()
        .filter(|f| f.severity == FindingSeverity::Refused)
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
    // Another TOML file is not a source ctx imports.
    write(root, "Cargo.toml", "[package]\nname = \"x\"\n");
    let import = import_sources(&[root.join("Cargo.toml")]);
    assert!(import.entries.is_empty());
    assert_eq!(import.findings.len(), 1);
    assert!(
        import.findings[0]
            .problem
            .ends_with("a subagent .md file, an .mcp.json, a server.json or a config.toml"),
        "{:?}",
        import.findings[0]
    );
}
