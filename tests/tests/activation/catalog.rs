//! Every material of the sample catalog through both hosts: each activates, or is refused
//! with a typed reason before anything is written; deactivating everything leaves the host
//! directories as they were.

use std::fs;
use std::time::Instant;

use ctx_hosts::AgentHost;
use ctx_hosts::activation::{ActivationError, ActivationTarget};
use ctx_model::CapabilityKind;

use super::fixture::{Fixture, names};
use crate::support;

/// `(kind, name, body)` of every skill, agent and MCP server material in the sample catalog.
fn materials() -> Vec<(CapabilityKind, String, Vec<u8>)> {
    let root = ctx_service::sample_catalog_dir();
    let mut out = Vec::new();
    for (dir, kind) in [
        ("skills", CapabilityKind::Skill),
        ("agents", CapabilityKind::Agent),
        ("mcp-servers", CapabilityKind::McpServer),
    ] {
        let mut entries: Vec<_> = fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let (name, body) = match kind {
                CapabilityKind::Skill => (
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    fs::read(path.join("SKILL.md")).unwrap(),
                ),
                _ => (
                    path.file_stem().unwrap().to_string_lossy().into_owned(),
                    fs::read(&path).unwrap(),
                ),
            };
            out.push((kind, name, body));
        }
    }
    out
}

#[test]
fn every_catalog_material_activates_or_is_refused_with_a_reason() {
    let _shared = support::shared();
    let f = Fixture::new();
    let mut activated = Vec::new();
    let mut refused = Vec::new();
    let started = Instant::now();
    for host in AgentHost::ALL {
        for (kind, name, body) in materials() {
            let project = f.project();
            let result = ActivationTarget::new(host, kind, &name, Some(&project)).and_then(|t| {
                let id = format!("{}:{name}", kind.as_str());
                let request = ctx_hosts::activation::ActivationRequest::new(t, &id, body)?;
                f.actuator.activate(&request)
            });
            match result {
                Ok(_) => activated.push((host, kind, name)),
                Err(
                    e @ (ActivationError::InvalidName { .. }
                    | ActivationError::UnsupportedForHost { .. }),
                ) => refused.push(format!("{host} {kind} {name}: {e}")),
                Err(e) => panic!("{host} {kind} {name}: {e:?}"),
            }
        }
    }
    let activation_time = started.elapsed();
    // Claude Code takes every material; Codex refuses exactly the ones it would read differently
    // (an agent's guarding hook, `${VAR}` in an MCP server's arguments). No sample skill shadows a
    // skill bundled with Claude Code.
    let refused_names: Vec<&str> = refused
        .iter()
        .map(|r| r.split(':').next().unwrap_or_default())
        .collect();
    assert_eq!(
        refused_names,
        [
            "codex agent db-reader",
            "codex mcp-server dbhub",
            "codex mcp-server filesystem",
            "codex mcp-server git",
        ],
        "{refused:#?}"
    );
    let inspected = f.actuator.inspect().unwrap();
    assert_eq!(inspected.len(), activated.len());
    let started = Instant::now();
    for (host, kind, name) in &activated {
        f.deactivate(*host, *kind, name).unwrap();
    }
    let deactivation_time = started.elapsed();
    assert!(f.actuator.inspect().unwrap().is_empty());
    for dir in [
        ".claude/skills",
        ".claude/agents/ctx",
        ".agents/skills",
        ".codex/agents",
    ] {
        assert!(names(&f.home().join(dir)).is_empty(), "{dir}");
    }
    assert_eq!(
        fs::read_to_string(f.project().join(".mcp.json")).unwrap(),
        "{\n  \"mcpServers\": {}\n}\n"
    );
    assert_eq!(
        fs::read_to_string(f.codex_home().join("config.toml")).unwrap(),
        ""
    );
    eprintln!(
        "catalog sweep: {} activated in {} ms, deactivated in {} ms ({} journal records); \
         refused:\n  {}",
        activated.len(),
        activation_time.as_millis(),
        deactivation_time.as_millis(),
        f.head(),
        refused.join("\n  ")
    );
}
