//! The sample catalog's `permission_expansion` and `credential_requirement` flags, derived from
//! each entry's material by the rule of spec/catalog.md §7 (from spec/catalog.md §7),
//! without looking at the flags, and compared with them.
//!
//! Why derive: the flags route an install to an interactive human decision
//! (spec/catalog.md §7, `permission-expansion-requires-consent`,
//! `credentials-require-consent`) and keep the skill store from installing on its own
//! (`skill_cas::installs`). A flag hand-written as `false` on material that pre-approves tools or
//! needs a token would skip that decision, and nothing else would notice.
//!
//! The derivation reads the material the install leaves behind (`install.result`) — the activated
//! form, which is what the host acts on — and, for `load` skills, the material itself.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use ctx_model::CapabilityKind;

use super::flags::{
    Derived, ESCALATING_PERMISSION_MODES, derive_agent, derive_mcp_server, derive_skill,
};
use super::*;

/// Derives a sample entry's flags from its installed (or loadable) text, with the sample's files
/// beside it as a skill's siblings.
fn derive(kind: CapabilityKind, path: &str, text: &str) -> Derived {
    match kind {
        CapabilityKind::Skill => {
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            let siblings: Vec<(&str, &str)> = sample_catalog_files()
                .iter()
                .filter(|(p, _)| *p != path && p.starts_with(&format!("{dir}/")))
                .map(|(p, bytes)| (*p, std::str::from_utf8(bytes).expect("UTF-8 sibling")))
                .collect();
            derive_skill(text, &siblings)
        }
        CapabilityKind::Agent => derive_agent(text),
        CapabilityKind::McpServer => derive_mcp_server(text),
        CapabilityKind::Harness => panic!("harnesses carry no material"),
    }
}

fn sample() -> LoadedCatalog {
    load_catalog_dir(&sample_catalog_dir()).expect("the sample catalog loads and verifies")
}

#[test]
fn installable_entries_carry_the_flags_their_material_implies() {
    let loaded = sample();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for entry in loaded.catalog().entries() {
        let Some(install) = &entry.install else {
            continue;
        };
        let text = loaded.install_result_text(&entry.id).expect("install body");
        let derived = derive(entry.kind, &install.result.path, text);
        let declared = (install.permission_expansion, install.credential_requirement);
        if derived.flags() != declared {
            wrong.push(format!(
                "{}: declares (permission_expansion, credential_requirement) = {declared:?}, \
                 the material implies {:?}: {derived:?}",
                entry.id,
                derived.flags()
            ));
        }
        checked += 1;
    }
    assert!(wrong.is_empty(), "dishonest flags:\n{}", wrong.join("\n"));
    // Not vacuous: the sample has installs of every installable kind, with each flag both ways.
    assert!(checked >= 25, "{checked} installs checked");
    let installs = || {
        loaded
            .catalog()
            .entries()
            .iter()
            .filter_map(|e| e.install.as_ref())
    };
    for flag in [
        |i: &InstallSpec| i.permission_expansion,
        |i: &InstallSpec| i.credential_requirement,
    ] {
        assert!(installs().any(flag) && installs().any(|i| !flag(i)));
    }
}

/// A `load` skill reaches the host with no install plan, so no flag and no consent gate; its
/// material must therefore neither expand permissions nor need credentials.
#[test]
fn loadable_skills_neither_expand_permissions_nor_need_credentials() {
    let loaded = sample();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for entry in loaded.catalog().entries() {
        let Some(material) = &entry.material else {
            continue;
        };
        let text = loaded.material_text(&entry.id).expect("material body");
        let derived = derive(entry.kind, &material.body.path, text);
        if derived.flags() != (false, false) {
            wrong.push(format!("{}: {derived:?}", entry.id));
        }
        checked += 1;
    }
    assert!(
        wrong.is_empty(),
        "load material that needs a gate:\n{}",
        wrong.join("\n")
    );
    assert!(checked >= 10, "{checked} loadable skills checked");
}

/// The rule recognizes each marker, and not its harmless look-alikes.
#[test]
fn the_derivation_recognizes_each_marker() {
    let skill = |t: &str| derive_skill(t, &[]).flags();
    let plain = "---\nname: x\ndescription: y\n---\n";
    assert_eq!(
        skill(&format!("{plain}Run `cargo test`.\n")),
        (false, false)
    );
    assert_eq!(
        skill("---\nname: x\nallowed-tools: Bash(git add *)\n---\nbody\n"),
        (true, false)
    );
    assert_eq!(
        skill("---\nname: x\nallowed-tools: Bash(gh pr view *)\n---\nbody\n"),
        (true, true)
    );
    assert_eq!(
        skill("---\nname: x\nhooks:\n  Stop:\n    - hooks: []\n---\nbody\n"),
        (true, false)
    );
    assert_eq!(
        skill(&format!("{plain}Branch: !`git branch`\n")),
        (true, false)
    );
    assert_eq!(skill(&format!("{plain}```!\ndate\n```\n")), (true, false));
    // Claude Code reads `!` before a closing backtick as injection too.
    assert_eq!(skill(&format!("{plain}Avoid (`!`) here.\n")), (true, false));
    assert_eq!(
        skill(&format!("{plain}Avoid (postfix !) here.\n")),
        (false, false)
    );
    assert_eq!(
        derive_skill(
            plain,
            &[(
                "skills/x/agents/openai.yaml",
                "dependencies:\n  tools:\n    - type: mcp\n"
            )]
        )
        .flags(),
        (true, false)
    );
    assert_eq!(
        skill(&format!("{plain}First `gh auth status`.\n")),
        (false, true)
    );
    assert_eq!(
        skill(&format!("{plain}```sh\ncd x && bq query 'select 1'\n```\n")),
        (false, true)
    );
    assert_eq!(skill(&format!("{plain}Then `aws s3 ls`.\n")), (false, true));
    // Not markers: a word `gh` in prose, lower-case shell variables, tools acting on the
    // project's own configuration.
    assert_eq!(
        skill(&format!("{plain}gh is great; `echo $o`.\n")),
        (false, false)
    );
    assert_eq!(
        skill(&format!(
            "{plain}`terraform plan`, `kubectl get pods`, `TF_VAR_x`.\n"
        )),
        (false, false)
    );
    assert_eq!(
        skill(&format!("{plain}Set `$SENTRY_AUTH_TOKEN`.\n")),
        (false, true)
    );
    assert_eq!(
        skill(&format!("{plain}`psql postgres://u:pw@db/app`\n")),
        (false, true)
    );
    assert_eq!(
        skill(&format!("{plain}`psql postgres://db/app`\n")),
        (false, false)
    );

    let agent =
        |fm: &str, body: &str| derive_agent(&format!("---\nname: x\n{fm}---\n{body}")).flags();
    assert_eq!(agent("tools: Read, Bash\n", "Review.\n"), (false, false));
    assert_eq!(
        agent("tools: Bash(gh pr diff *)\n", "Review.\n"),
        (false, false)
    );
    for mode in ["default", "plan", "manual"] {
        assert_eq!(
            agent(&format!("permissionMode: {mode}\n"), ""),
            (false, false)
        );
    }
    for mode in ESCALATING_PERMISSION_MODES {
        assert_eq!(
            agent(&format!("permissionMode: {mode}\n"), ""),
            (true, false)
        );
    }
    assert_eq!(agent("mcpServers:\n  - github\n", ""), (true, false));
    assert_eq!(agent("hooks:\n  PreToolUse: []\n", ""), (true, false));
    assert_eq!(
        agent("", "Query with `psql \"$DATABASE_URL\"`.\n"),
        (false, true)
    );
    assert_eq!(agent("", "Run `gcloud auth list`.\n"), (false, true));

    let mcp =
        |entry: &str| derive_mcp_server(&format!("{{\"mcpServers\": {{\"s\": {entry}}}}}")).flags();
    assert_eq!(
        mcp(r#"{"command": "npx", "args": ["-y", "pkg"]}"#),
        (true, false)
    );
    assert_eq!(
        mcp(r#"{"command": "npx", "args": ["${CLAUDE_PROJECT_DIR}"]}"#),
        (true, false)
    );
    assert_eq!(
        mcp(r#"{"command": "npx", "env": {"K": "${API_KEY}"}}"#),
        (true, true)
    );
    assert_eq!(
        mcp(r#"{"command": "npx", "args": ["--dsn", "${DATABASE_URL:-x}"]}"#),
        (true, true)
    );
    assert_eq!(
        mcp(
            r#"{"type": "http", "url": "https://x/mcp", "headers": {"Authorization": "Bearer ${T}"}}"#
        ),
        (true, true)
    );
    assert_eq!(
        mcp(r#"{"type": "http", "url": "https://x/mcp"}"#),
        (true, false)
    );
    assert_eq!(
        mcp(r#"{"type": "http", "url": "https://x/mcp", "oauth": {"clientId": "c"}}"#),
        (true, true)
    );
    assert_eq!(
        mcp(r#"{"command": "npx", "args": ["--dsn", "postgres://u:pw@h/db"]}"#),
        (true, true)
    );
}

/// The flags of spec/catalog.md §7 (the research table the sample was built from), for
/// the ids the sample ships. `None` = the sample ships the id without an install (manual), so it
/// carries no flags.
#[test]
fn flags_agree_with_the_research_notes_table() {
    const NOTES: &[(&str, Option<(bool, bool)>)] = &[
        ("skill:pdf", None),
        ("skill:xlsx", None),
        ("skill:mcp-builder", Some((false, false))),
        ("skill:webapp-testing", Some((false, false))),
        ("skill:gh-address-comments", Some((false, true))),
        ("skill:commit", Some((true, false))),
        ("skill:pr-summary", Some((true, true))),
        ("skill:cargo-clippy-fix", Some((true, false))),
        ("agent:code-reviewer", Some((false, false))),
        ("agent:code-explorer", Some((false, false))),
        ("agent:silent-failure-hunter", Some((false, false))),
        ("agent:pr-test-analyzer", Some((false, false))),
        ("agent:type-design-analyzer", Some((false, false))),
        ("agent:code-simplifier", Some((false, false))),
        ("agent:debugger", Some((false, false))),
        // The hosts' research table gives (false, true): the sample ships it manual (spec/catalog.md §7).
        ("agent:data-scientist", None),
        ("agent:db-reader", Some((true, true))),
        ("mcp-server:filesystem", Some((true, false))),
        ("mcp-server:git", Some((true, false))),
        ("mcp-server:fetch", Some((true, false))),
        ("mcp-server:memory", Some((true, false))),
        ("mcp-server:sequential-thinking", Some((true, false))),
        ("mcp-server:time", Some((true, false))),
        ("mcp-server:github", Some((true, true))),
        ("mcp-server:playwright", Some((true, false))),
        ("mcp-server:context7", Some((true, false))),
        ("mcp-server:sentry", Some((true, true))),
        ("mcp-server:dbhub", Some((true, true))),
        // The hosts' research table gives (true, true), OAuth: the sample ships it manual
        // (spec/catalog.md §7).
        ("mcp-server:notion", None),
    ];
    let loaded = sample();
    for (id, flags) in NOTES {
        let entry = loaded.catalog().entry(id).expect("the sample ships the id");
        let declared = entry
            .install
            .as_ref()
            .map(|i| (i.permission_expansion, i.credential_requirement));
        assert_eq!(declared, *flags, "{id}");
    }
}
