//! Skills: a link from the host's skills directory to the content store, for both hosts.

use std::fs;
use std::os::unix::fs::symlink;

use ctx_hosts::AgentHost;
use ctx_hosts::activation::{
    ActivationError, ActivationOutcome, ActivationTarget, ConflictReason, DeactivationOutcome,
    STAGING_DIR_NAME, TargetStatus,
};
use ctx_model::CapabilityKind;

use super::fixture::{Fixture, catalog, mode, names, skill_body};
use crate::support;

const SKILL: CapabilityKind = CapabilityKind::Skill;

#[test]
fn claude_skill_is_a_link_to_the_store_and_deactivation_leaves_nothing() {
    let _shared = support::shared();
    let f = Fixture::new();
    let body = catalog("skills/rust/SKILL.md");
    let report = f.activate(AgentHost::Claude, SKILL, "rust", &body).unwrap();
    assert_eq!(report.outcome, ActivationOutcome::Activated);
    let skills = f.home().join(".claude/skills");
    let link = skills.join("rust");
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The link text is the store directory named by the body's SHA-256, which holds exactly
    // SKILL.md with the body's bytes; the store directory is private to the person.
    let store_dir = f.store_dir(&body);
    assert_eq!(fs::read_link(&link).unwrap(), store_dir);
    assert_eq!(fs::read(link.join("SKILL.md")).unwrap(), body);
    assert_eq!(names(&store_dir), ["SKILL.md"]);
    assert_eq!(mode(&store_dir), 0o700);
    assert_eq!(names(&skills), ["rust"]);
    assert!(names(&f.home().join(".claude").join(STAGING_DIR_NAME)).is_empty());
    let canonical = fs::canonicalize(&skills).unwrap().join("rust");
    assert_eq!(report.target.path, canonical.to_str().unwrap());
    assert_eq!(report.target.entry, None);

    // Activating what is already exactly active records nothing.
    let head = f.head();
    let again = f.activate(AgentHost::Claude, SKILL, "rust", &body).unwrap();
    assert_eq!(again.outcome, ActivationOutcome::AlreadyActive);
    assert_eq!(f.head(), head);
    let inspected = f.actuator.inspect().unwrap();
    assert_eq!(inspected.len(), 1);
    assert_eq!(inspected[0].status, TargetStatus::Active);
    assert_eq!(inspected[0].capability_id, "skill:rust");

    let removed = f.deactivate(AgentHost::Claude, SKILL, "rust").unwrap();
    assert_eq!(removed.outcome, DeactivationOutcome::Removed);
    assert!(fs::symlink_metadata(&link).is_err());
    assert!(names(&skills).is_empty());
    // The store is write-once: its directory stays for the next activation.
    assert_eq!(fs::read(store_dir.join("SKILL.md")).unwrap(), body);
    assert!(f.actuator.inspect().unwrap().is_empty());
    assert!(matches!(
        f.deactivate(AgentHost::Claude, SKILL, "rust"),
        Err(ActivationError::NotActive { .. })
    ));
}

#[test]
fn codex_skill_links_the_same_store_directory() {
    let _shared = support::shared();
    let f = Fixture::new();
    let body = catalog("skills/python/SKILL.md");
    f.activate(AgentHost::Claude, SKILL, "python", &body)
        .unwrap();
    let report = f
        .activate(AgentHost::Codex, SKILL, "python", &body)
        .unwrap();
    assert_eq!(report.outcome, ActivationOutcome::Activated);
    let codex_link = f.home().join(".agents/skills/python");
    assert_eq!(fs::read_link(&codex_link).unwrap(), f.store_dir(&body));
    assert_eq!(fs::read(codex_link.join("SKILL.md")).unwrap(), body);
    assert_eq!(names(&f.store()), [ctx_model::sha256_hex_bytes(&body)]);

    f.deactivate(AgentHost::Codex, SKILL, "python").unwrap();
    assert!(fs::symlink_metadata(&codex_link).is_err());
    // The Claude link is another target and stays.
    let claude_link = f.home().join(".claude/skills/python");
    assert_eq!(fs::read(claude_link.join("SKILL.md")).unwrap(), body);
}

#[test]
fn a_new_version_replaces_ctxs_own_link() {
    let _shared = support::shared();
    let f = Fixture::new();
    let v1 = skill_body("notes", "First version.");
    let v2 = skill_body("notes", "Second version.");
    f.activate(AgentHost::Claude, SKILL, "notes", &v1).unwrap();
    let report = f.activate(AgentHost::Claude, SKILL, "notes", &v2).unwrap();
    assert_eq!(report.outcome, ActivationOutcome::Replaced);
    let link = f.home().join(".claude/skills/notes");
    assert_eq!(fs::read_link(&link).unwrap(), f.store_dir(&v2));
    assert_eq!(fs::read(link.join("SKILL.md")).unwrap(), v2);
    assert!(names(&f.home().join(".claude").join(STAGING_DIR_NAME)).is_empty());
}

#[test]
fn a_persons_own_skill_directory_is_never_replaced() {
    let _shared = support::shared();
    let f = Fixture::new();
    let mine = f.home().join(".claude/skills/rust");
    fs::create_dir_all(&mine).unwrap();
    let own = b"---\nname: rust\ndescription: my own\n---\nMine.\n";
    fs::write(mine.join("SKILL.md"), own).unwrap();
    let head = f.head();
    let err = f
        .activate(
            AgentHost::Claude,
            SKILL,
            "rust",
            &catalog("skills/rust/SKILL.md"),
        )
        .unwrap_err();
    match &err {
        ActivationError::Conflict { path, reason, .. } => {
            assert_eq!(*reason, ConflictReason::Foreign);
            assert!(path.ends_with(".claude/skills/rust"), "{}", path.display());
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains(".claude/skills/rust"), "{err}");
    assert_eq!(fs::read(mine.join("SKILL.md")).unwrap(), own);
    assert!(fs::symlink_metadata(&mine).unwrap().is_dir());
    assert_eq!(f.head(), head, "no intent was recorded");
    assert_eq!(f.ledger_targets(), 0);
}

#[test]
fn an_identical_link_ctx_did_not_write_is_left_alone_and_not_owned() {
    let _shared = support::shared();
    let f = Fixture::new();
    let body = skill_body("shared", "Shared by hand.");
    // Materialize through another host, then let the person link Claude by hand.
    f.activate(AgentHost::Codex, SKILL, "shared", &body)
        .unwrap();
    let skills = f.home().join(".claude/skills");
    fs::create_dir_all(&skills).unwrap();
    symlink(f.store_dir(&body), skills.join("shared")).unwrap();
    let head = f.head();
    let report = f
        .activate(AgentHost::Claude, SKILL, "shared", &body)
        .unwrap();
    assert_eq!(report.outcome, ActivationOutcome::PresentNotOwned);
    assert_eq!(f.head(), head);
    assert!(matches!(
        f.deactivate(AgentHost::Claude, SKILL, "shared"),
        Err(ActivationError::NotActive { .. })
    ));
    assert!(fs::symlink_metadata(skills.join("shared")).is_ok());
}

#[test]
fn deactivation_is_refused_after_the_person_replaced_the_link() {
    let _shared = support::shared();
    let f = Fixture::new();
    let body = catalog("skills/go/SKILL.md");
    f.activate(AgentHost::Claude, SKILL, "go", &body).unwrap();
    let link = f.home().join(".claude/skills/go");
    fs::remove_file(&link).unwrap();
    fs::create_dir(&link).unwrap();
    fs::write(
        link.join("SKILL.md"),
        b"---\nname: go\ndescription: edited\n---\n",
    )
    .unwrap();
    let head = f.head();
    let err = f.deactivate(AgentHost::Claude, SKILL, "go").unwrap_err();
    assert!(
        matches!(
            &err,
            ActivationError::Conflict {
                reason: ConflictReason::EditedSinceActivation,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(f.head(), head);
    assert!(link.join("SKILL.md").is_file());
    assert_eq!(
        f.actuator.inspect().unwrap()[0].status,
        TargetStatus::Drifted
    );
    // Activating again is refused too: it is no longer what ctx wrote.
    let err = f
        .activate(AgentHost::Claude, SKILL, "go", &body)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ActivationError::Conflict {
                reason: ConflictReason::EditedSinceActivation,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_skill_the_person_removed_is_missing_and_deactivates_as_already_absent() {
    let _shared = support::shared();
    let f = Fixture::new();
    let body = catalog("skills/sql/SKILL.md");
    f.activate(AgentHost::Codex, SKILL, "sql", &body).unwrap();
    fs::remove_file(f.home().join(".agents/skills/sql")).unwrap();
    assert_eq!(
        f.actuator.inspect().unwrap()[0].status,
        TargetStatus::Missing
    );
    let report = f.deactivate(AgentHost::Codex, SKILL, "sql").unwrap();
    assert_eq!(report.outcome, DeactivationOutcome::AlreadyAbsent);
    assert!(f.actuator.inspect().unwrap().is_empty());
    // And it can be activated afresh.
    let again = f.activate(AgentHost::Codex, SKILL, "sql", &body).unwrap();
    assert_eq!(again.outcome, ActivationOutcome::Activated);
}

#[test]
fn names_that_would_shadow_or_escape_are_refused_before_anything_is_touched() {
    for name in [
        "code-review",
        "doctor",
        "synced",
        "../etc",
        "Rust",
        "claude-helper",
    ] {
        assert!(
            matches!(
                ActivationTarget::new(AgentHost::Claude, SKILL, name, None),
                Err(ActivationError::InvalidName { .. })
            ),
            "{name}"
        );
    }
    // Codex has no bundled skill of that name: nothing to shadow there.
    assert!(ActivationTarget::new(AgentHost::Codex, SKILL, "code-review", None).is_ok());
    let _shared = support::shared();
    let f = Fixture::new();
    // A body whose frontmatter names another skill would be loaded under two names.
    let err = f
        .activate(AgentHost::Claude, SKILL, "rust", &skill_body("python", "x"))
        .unwrap_err();
    assert!(
        matches!(err, ActivationError::InvalidMaterial { .. }),
        "{err:?}"
    );
    assert!(
        !f.store()
            .join(ctx_model::sha256_hex_bytes(&skill_body("python", "x")))
            .exists()
    );
}
