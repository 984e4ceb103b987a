//! `ctx doctor [--json]`: what ctx has installed with the agent hosts, and what is untrusted,
//! drifted or conflicting (spec/cli.md §8). Reads only: nothing is created or written.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctx_journal::OpenOptions;

use ctx_model::Json;

use crate::error::{CliError, EXIT_OK, EXIT_OUTCOME};
use crate::init::{EventState, Registration, Status, classify, hooks_file, host_directories};
use ctx_hosts::activation::{Actuator, JournalLedger, TargetInspection, TargetStatus};
use ctx_hosts::{AgentHost, HostHome};
use ctx_hosts::{JsonNode, json_text, parse_json, read_host_file};
use ctx_service::{JOURNAL_LOCK_WAIT, Layout};

/// The `schema` of `ctx doctor --json`.
pub(crate) const DOCTOR_SCHEMA: &str = "ctx.doctor.v1";

/// The text Codex's trust records carry (`hooks.state."<key>".trusted_hash`, spec/cli.md §7.2;
/// spec/activation.md §6, §7).
const CODEX_TRUST_MARK: &str = "trusted_hash";

/// What the hooks file of a host holds.
#[derive(Debug)]
enum FileState {
    Absent,
    Present,
    /// Unreadable, or not JSON a host could use: the sentence says why.
    Invalid(String),
}

/// Whether Codex will run ctx's hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trust {
    /// `config.toml` holds no trust record at all, so no hook is trusted.
    Untrusted,
    /// `config.toml` holds trust records, but which hooks and hashes they cover is not
    /// documented; only Codex's `/hooks` can tell.
    Unknown,
}

/// One host's part of the report.
#[derive(Debug)]
struct HostReport {
    host: AgentHost,
    hooks_file: PathBuf,
    file: FileState,
    events: Vec<EventState>,
    /// Codex only.
    trust: Option<(Trust, String)>,
    /// `(role, path, exists)`.
    directories: Vec<(&'static str, PathBuf, bool)>,
    /// The host entries ctx's activation ledger answers for (spec/activation.md): capability,
    /// path and status (`active`, `drifted`, `missing`, `pending`, `unreadable`); `null` when the
    /// data directory has no journal.
    activations: Option<Json>,
}

impl HostReport {
    /// Some ctx hook is registered (exactly or not), or the file is broken: the host counts.
    fn registered(&self) -> bool {
        matches!(self.file, FileState::Invalid(_))
            || self.events.iter().any(|e| e.status != Status::Missing)
    }

    fn ok(&self) -> bool {
        let activations_ok = match &self.activations {
            Some(Json::Arr(items)) => items
                .iter()
                .all(|a| matches!(a.get_str("status"), Some("active" | "missing"))),
            _ => true,
        };
        activations_ok
            && matches!(self.file, FileState::Present | FileState::Absent)
            && self.events.iter().all(|e| e.status == Status::Installed)
            && self.directories.iter().all(|(_, _, exists)| *exists)
            && !matches!(self.trust, Some((Trust::Untrusted, _)))
    }
}

fn host_report(host: AgentHost, home: &HostHome, registration: &Registration<'_>) -> HostReport {
    let path = hooks_file(host, home);
    let (file, events) = match read_hooks(&path, registration) {
        Ok(Some(events)) => (FileState::Present, events),
        Ok(None) => {
            // An absent file reads as an empty object, which always classifies (all missing).
            let events = classify(&JsonNode::Object(Vec::new()), registration).unwrap_or_default();
            (FileState::Absent, events)
        }
        Err(e) => (FileState::Invalid(e.to_string()), Vec::new()),
    };
    let trust = host
        .profile()
        .hooks_need_trust
        .then(|| codex_trust(&home.codex_config()));
    let directories = host_directories(host, home)
        .into_iter()
        .map(|(role, dir)| {
            let exists = dir.is_dir();
            (role, dir, exists)
        })
        .collect();
    HostReport {
        host,
        hooks_file: path,
        file,
        events,
        trust,
        directories,
        activations: None,
    }
}

/// Why a hooks file cannot be classified: unreadable, or not JSON a host could use.
#[derive(Debug, thiserror::Error)]
enum HooksFileError {
    #[error(transparent)]
    Read(#[from] ctx_hosts::HostFileError),
    #[error("{}: {source}", path.display())]
    Invalid {
        path: PathBuf,
        source: ctx_hosts::JsonEditError,
    },
}

/// The events of the hooks file at `path`; `None` when it does not exist.
fn read_hooks(
    path: &Path,
    registration: &Registration<'_>,
) -> Result<Option<Vec<EventState>>, HooksFileError> {
    let Some(bytes) = read_host_file(path)? else {
        return Ok(None);
    };
    let invalid = |source: ctx_hosts::JsonEditError| HooksFileError::Invalid {
        path: path.to_path_buf(),
        source,
    };
    let text = json_text(&bytes).map_err(invalid)?;
    let root = parse_json(text).map_err(invalid)?;
    Ok(Some(classify(&root, registration).map_err(invalid)?))
}

/// Codex records trust as `hooks.state."<key>".trusted_hash` in its configuration. The key and
/// hash formats are not documented, so a record cannot be matched to ctx's hooks; what can be
/// said honestly is that no record at all means nothing is trusted.
fn codex_trust(config: &Path) -> (Trust, String) {
    match read_host_file(config) {
        Ok(None) => (
            Trust::Untrusted,
            format!(
                "{} does not exist, so no hook is trusted; run /hooks in Codex to review and \
                 trust ctx's hooks",
                config.display()
            ),
        ),
        Ok(Some(bytes)) if !contains(&bytes, CODEX_TRUST_MARK.as_bytes()) => (
            Trust::Untrusted,
            format!(
                "{} holds no hook trust record, so no hook is trusted; run /hooks in Codex to \
                 review and trust ctx's hooks",
                config.display()
            ),
        ),
        Ok(Some(_)) => (
            Trust::Unknown,
            "trust unknown (run /hooks in Codex to review)".to_owned(),
        ),
        Err(e) => (
            Trust::Unknown,
            format!("trust unknown ({e}; run /hooks in Codex to review)"),
        ),
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn trust_name(trust: Trust) -> &'static str {
    match trust {
        Trust::Untrusted => "untrusted",
        Trust::Unknown => "unknown",
    }
}

fn host_json(report: &HostReport) -> Json {
    let (state, error) = match &report.file {
        FileState::Absent => ("absent", Json::Null),
        FileState::Present => ("present", Json::Null),
        FileState::Invalid(message) => ("invalid", Json::str(message.as_str())),
    };
    let hooks = report
        .events
        .iter()
        .map(|e| {
            Json::object([
                ("event", Json::str(e.event.host_event)),
                ("ctx_event", Json::str(e.event.ctx_name)),
                ("status", Json::str(e.status.as_str())),
                ("ctx_entries", Json::from(e.ctx_entries as u64)),
                (
                    "differing",
                    Json::Arr(e.differing.iter().map(|d| Json::str(d.as_str())).collect()),
                ),
                ("expected", Json::str(e.expected.as_str())),
            ])
        })
        .collect();
    let directories = report
        .directories
        .iter()
        .map(|(role, path, exists)| {
            Json::object([
                ("role", Json::str(*role)),
                ("path", Json::str(path.display().to_string())),
                ("exists", Json::Bool(*exists)),
            ])
        })
        .collect();
    let trust = match &report.trust {
        None => Json::Null,
        Some((trust, detail)) => Json::object([
            ("state", Json::str(trust_name(*trust))),
            ("detail", Json::str(detail.as_str())),
        ]),
    };
    Json::object([
        ("host", Json::str(report.host.as_str())),
        ("registered", Json::Bool(report.registered())),
        ("ok", Json::Bool(report.ok())),
        (
            "hooks_file",
            Json::object([
                ("path", Json::str(report.hooks_file.display().to_string())),
                ("state", Json::str(state)),
                ("error", error),
            ]),
        ),
        ("hooks", Json::Arr(hooks)),
        ("trust", trust),
        ("directories", Json::Arr(directories)),
        (
            "activations",
            report.activations.clone().unwrap_or(Json::Null),
        ),
    ])
}

fn write_host(report: &HostReport, out: &mut dyn Write) -> std::io::Result<()> {
    let host = report.host;
    match &report.file {
        FileState::Invalid(message) => {
            writeln!(
                out,
                "{host}: hooks file {} is unusable",
                report.hooks_file.display()
            )?;
            writeln!(out, "  invalid      {message}")?;
        }
        FileState::Absent if !report.registered() => {
            writeln!(
                out,
                "{host}: not registered ({} does not exist); `ctx init --host {host}` registers ctx",
                report.hooks_file.display()
            )?;
        }
        FileState::Present if !report.registered() => {
            writeln!(
                out,
                "{host}: not registered (no ctx hook in {}); `ctx init --host {host}` registers \
                 ctx",
                report.hooks_file.display()
            )?;
        }
        FileState::Absent | FileState::Present => {
            writeln!(out, "{host}: hooks in {}", report.hooks_file.display())?;
        }
    }
    if report.registered() {
        for e in &report.events {
            let event = e.event;
            write!(
                out,
                "  {:<12} {} → ctx hook {host} {}",
                e.status.as_str(),
                event.host_event,
                event.ctx_name
            )?;
            match e.status {
                Status::Installed | Status::Missing => writeln!(out)?,
                Status::Drifted => writeln!(
                    out,
                    ": found {}; this ctx would write {}",
                    e.differing.join("; "),
                    e.expected
                )?,
                Status::Conflicting => writeln!(
                    out,
                    ": {} ctx entries{}",
                    e.ctx_entries,
                    if e.differing.is_empty() {
                        String::new()
                    } else {
                        format!(", differing: {}", e.differing.join("; "))
                    }
                )?,
            }
        }
        for (role, path, exists) in &report.directories {
            let state = if *exists { "present" } else { "missing" };
            writeln!(out, "  {state:<12} {role} directory {}", path.display())?;
        }
        if let Some((trust, detail)) = &report.trust {
            writeln!(out, "  {:<12} {detail}", trust_name(*trust))?;
        }
        match &report.activations {
            None => writeln!(
                out,
                "  activations  none (the data directory has no journal)"
            )?,
            Some(Json::Arr(items)) if items.is_empty() => {
                writeln!(out, "  activations  none")?;
            }
            Some(Json::Arr(items)) => {
                for a in items {
                    writeln!(
                        out,
                        "  {:<12} {} at {}{}",
                        a.get_str("status").unwrap_or("?"),
                        a.get_str("capability_id").unwrap_or("?"),
                        a.get_str("target").unwrap_or("?"),
                        a.get_str("detail")
                            .map(|d| format!(" ({d})"))
                            .unwrap_or_default()
                    )?;
                }
            }
            Some(other) => writeln!(out, "  activations  {}", other.to_cja())?,
        }
    }
    Ok(())
}

/// `ctx doctor [--json]`: exit 0 when ctx is registered with at least one host and every
/// registered host is complete and consistent; exit 1 otherwise (the report says what).
pub(crate) fn doctor(
    layout: &Layout,
    data_dir_option: Option<&Path>,
    home: &HostHome,
    exe: &Path,
    json: bool,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let mut reports: Vec<HostReport> = AgentHost::ALL
        .into_iter()
        .map(|host| {
            Registration::new(host, exe, data_dir_option).map(|r| host_report(host, home, &r))
        })
        .collect::<Result<_, _>>()?;
    if let Some(inspections) = activations(layout, home)? {
        for report in &mut reports {
            report.activations = Some(Json::Arr(
                inspections
                    .iter()
                    .filter(|i| i.target.host == report.host)
                    .map(activation_json)
                    .collect(),
            ));
        }
    }
    let any_registered = reports.iter().any(HostReport::registered);
    let (verifiers, warnings) = verifier_warnings(layout, any_registered)?;
    let ok = any_registered
        && reports
            .iter()
            .filter(|r| r.registered())
            .all(HostReport::ok);
    if json {
        let report = Json::object([
            ("schema", Json::str(DOCTOR_SCHEMA)),
            ("ok", Json::Bool(ok)),
            ("exe", Json::str(exe.display().to_string())),
            ("data_dir", Json::str(layout.root().display().to_string())),
            ("hosts", Json::Arr(reports.iter().map(host_json).collect())),
            ("verifiers", Json::Arr(verifiers)),
            (
                "warnings",
                Json::Arr(warnings.iter().map(Json::str).collect()),
            ),
        ]);
        writeln!(out, "{}", report.to_cja())?;
    } else {
        writeln!(
            out,
            "ctx doctor: {} (data directory {})",
            exe.display(),
            layout.root().display()
        )?;
        for report in &reports {
            write_host(report, out)?;
        }
        for verifier in &verifiers {
            writeln!(
                out,
                "verifier {} ({}, {} assurance)",
                verifier.get_str("authenticator_id").unwrap_or_default(),
                verifier.get_str("kind").unwrap_or_default(),
                verifier.get_str("assurance").unwrap_or_default()
            )?;
        }
        for warning in &warnings {
            writeln!(out, "warning: {warning}")?;
        }
        if ok {
            writeln!(out, "ok: ctx's hooks are installed and consistent")?;
        } else if !any_registered {
            writeln!(
                out,
                "needs attention: ctx is registered with no host; run `ctx init --host claude` \
                 or `ctx init --host codex`"
            )?;
        } else {
            writeln!(
                out,
                "needs attention: `ctx init --host <host>` adds missing hooks and directories; \
                 drifted and conflicting entries are the person's to fix by hand"
            )?;
        }
    }
    Ok(if ok { EXIT_OK } else { EXIT_OUTCOME })
}

/// The verifiers the data directory trusts now, and what the person should know about them
/// (spec/decisions.md §15.3): a plain file key is readable by every process of the user, so it
/// is named whenever hooks are registered, and a directory with no presence verifier cannot
/// approve what the hooks ask.
fn verifier_warnings(
    layout: &Layout,
    hooks_registered: bool,
) -> Result<(Vec<Json>, Vec<String>), CliError> {
    if !ctx_service::journal_exists(&layout.journal()) {
        let warnings = if hooks_registered {
            vec![NO_PRESENCE_VERIFIER.to_owned()]
        } else {
            Vec::new()
        };
        return Ok((Vec::new(), warnings));
    }
    let journal = ctx_service::open_journal(
        &layout.journal(),
        &OpenOptions::new().lock_wait(JOURNAL_LOCK_WAIT),
    )?;
    let trust = match ctx_service::read_trust(&journal) {
        Ok(trust) => trust,
        Err(e) => {
            return Ok((
                Vec::new(),
                vec![format!(
                    "the verifier registry is refused ({e}); no consent can be decided until \
                     `ctx audit` is clean"
                )],
            ));
        }
    };
    let mut warnings = Vec::new();
    let verifiers = trust.active().map(|v| v.entry.to_json()).collect();
    if hooks_registered {
        for file_key in trust
            .active()
            .filter(|v| v.entry.kind == ctx_service::VerifierKind::FileKey)
        {
            warnings.push(format!(
                "verifier {} is a plain file key (file assurance): every process of your user, \
                 the agent included, can read it and sign with it; it is never accepted for a \
                 consent a hook asked for, so keep it for CI and the demo only",
                file_key.entry.authenticator_id
            ));
        }
        if !trust.has_presence_verifier() {
            warnings.push(NO_PRESENCE_VERIFIER.to_owned());
        }
    }
    Ok((verifiers, warnings))
}

const NO_PRESENCE_VERIFIER: &str = "no passphrase-sealed device key or passkey is registered, so \
     the consents the hooks ask for cannot be approved; run `ctx key init` in your own terminal";

/// What the activation ledger says about every host entry ctx answers for; `None` when the data
/// directory has no journal (nothing was ever activated from it).
fn activations(
    layout: &Layout,
    home: &HostHome,
) -> Result<Option<Vec<TargetInspection>>, CliError> {
    if !ctx_service::journal_exists(&layout.journal()) {
        return Ok(None);
    }
    let journal = ctx_service::open_journal(
        &layout.journal(),
        &OpenOptions::new().lock_wait(JOURNAL_LOCK_WAIT),
    )?;
    let actuator = Actuator::new(
        home.clone(),
        &layout.activation_store(),
        Arc::new(JournalLedger::new(journal)),
    );
    let inspections = actuator
        .inspect()
        .map_err(|e| CliError::Unexpected(format!("the activation ledger cannot be read: {e}")))?;
    Ok(Some(inspections))
}

fn activation_json(i: &TargetInspection) -> Json {
    let (status, detail) = match &i.status {
        TargetStatus::Active => ("active", None),
        TargetStatus::Drifted => ("drifted", Some("changed since ctx activated it".to_owned())),
        TargetStatus::Missing => ("missing", Some("removed since ctx activated it".to_owned())),
        TargetStatus::Pending {
            operation,
            revision,
        } => (
            "pending",
            Some(format!(
                "{} intent at ledger revision {revision} awaits recovery",
                operation.as_str()
            )),
        ),
        TargetStatus::Unreadable { detail } => ("unreadable", Some(detail.clone())),
    };
    let mut fields = vec![
        ("capability_id", Json::str(&i.capability_id)),
        ("kind", Json::str(i.target.kind.as_str())),
        ("name", Json::str(&i.name)),
        ("status", Json::str(status)),
        ("target", Json::str(i.target.display())),
    ];
    if let Some(detail) = detail {
        fields.push(("detail", Json::str(detail)));
    }
    Json::object(fields)
}
