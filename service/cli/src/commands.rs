//! The JSON commands a host runs: one JSON object on stdin (when the command takes input), one
//! JSON object on stdout, always (spec/cli.md §4). Success: `{"ok": true, "command": …,
//! "result": …}`; a refusal: `{"ok": false, "command": …, "error": {"code": …, "message": …}}`
//! plus the sentence on stderr. `HostCommand` keeps its name: the parsed command line names it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ctx_journal::Timestamp;
use ctx_model::{Json, UtcMicros, is_token, sha256_hex};
use ctx_projections::consent_store::{
    AssertionFields, ChallengeRecord, SignedHumanDecisionAssertion,
};
use ctx_service::Ed25519Signer;
use ctx_service::{
    ActionSummary, CONSENT_AUDIENCE, CONSENT_REQUIRED, CatalogIngest, ConsentChallengeProjection,
    ConsentResolutionResult, DesiredSetRequest, DesiredSetResult, IngestError,
    InstallConsentPolicy, Layout, QueryRequest, QueryServiceResult, Runtime, RuntimeError,
    ServiceError, TrustBasis, TrustChange, TrustRecord, TrustState, VerifierEntry, WorkRequest,
    append_trust, challenge_record, change_digest, fresh_signer, grants_by_itself, ingest_catalog,
    load_catalog_entries, logical_id, read_device_key, sign_trust_assertion, uninstallable,
    unsigned_trust_assertion, write_plain_key,
};

use crate::tty::Terminal;

use crate::error::{CliError, EXIT_INTERNAL, EXIT_OK, EXIT_OUTCOME, EXIT_USAGE};

/// The largest JSON request a JSON command reads from stdin.
pub const HOST_INPUT_MAX_BYTES: usize = 64 * 1024;
/// How long a signed decision made by `ctx key sign` stays valid, in seconds.
pub const SIGNED_DECISION_TTL_SECONDS: i64 = 300;

/// A JSON command (spec/cli.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostCommand {
    CatalogIngest {
        catalog_dir: Option<PathBuf>,
    },
    QueryPrepare,
    QueryReopen,
    DesiredSet,
    ConsentChallenge,
    ConsentResolve,
    ConsentRecover,
    PolicyShow,
    /// `key`: the device key that approves a policy granting installs by itself.
    PolicySet {
        key: Option<PathBuf>,
    },
    KeyGenerate {
        out: PathBuf,
    },
    KeySign {
        key: PathBuf,
    },
}

impl HostCommand {
    /// The command's words, as the JSON's `command` field names it.
    pub fn name(&self) -> &'static str {
        match self {
            HostCommand::CatalogIngest { .. } => "catalog ingest",
            HostCommand::QueryPrepare => "query prepare",
            HostCommand::QueryReopen => "query reopen",
            HostCommand::DesiredSet => "desired set",
            HostCommand::ConsentChallenge => "consent challenge",
            HostCommand::ConsentResolve => "consent resolve",
            HostCommand::ConsentRecover => "consent recover",
            HostCommand::PolicyShow => "policy show",
            HostCommand::PolicySet { .. } => "policy set",
            HostCommand::KeyGenerate { .. } => "key generate",
            HostCommand::KeySign { .. } => "key sign",
        }
    }

    fn reads_input(&self) -> bool {
        !matches!(
            self,
            HostCommand::CatalogIngest { .. }
                | HostCommand::PolicyShow
                | HostCommand::KeyGenerate { .. }
        )
    }
}

/// A JSON command's refusal: a stable code, the exit status it maps to, and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFailure {
    pub code: &'static str,
    pub exit: u8,
    pub message: String,
}

impl CommandFailure {
    fn invalid(message: impl Into<String>) -> CommandFailure {
        CommandFailure {
            code: "invalid",
            exit: EXIT_USAGE,
            message: message.into(),
        }
    }

    fn internal(message: impl Into<String>) -> CommandFailure {
        CommandFailure {
            code: "internal",
            exit: EXIT_INTERNAL,
            message: message.into(),
        }
    }

    fn outcome(code: &'static str, message: impl Into<String>) -> CommandFailure {
        CommandFailure {
            code,
            exit: EXIT_OUTCOME,
            message: message.into(),
        }
    }
}

impl CommandFailure {
    /// A refusal with the stable `code` of the library's error (spec/cli.md §4): `invalid` is
    /// bad input (exit 2), `internal` the machine's fault (exit 3), every other code a domain
    /// outcome the host acts on (exit 1).
    fn coded(code: &'static str, message: String) -> CommandFailure {
        let exit = match code {
            "invalid" => EXIT_USAGE,
            "internal" => EXIT_INTERNAL,
            _ => EXIT_OUTCOME,
        };
        CommandFailure {
            code,
            exit,
            message,
        }
    }
}

impl From<ServiceError> for CommandFailure {
    fn from(e: ServiceError) -> CommandFailure {
        CommandFailure::coded(e.code(), e.to_string())
    }
}

impl From<RuntimeError> for CommandFailure {
    fn from(e: RuntimeError) -> CommandFailure {
        CommandFailure::coded(e.code(), e.to_string())
    }
}

impl From<IngestError> for CommandFailure {
    fn from(e: IngestError) -> CommandFailure {
        CommandFailure::coded(e.code(), e.to_string())
    }
}

/// Runs a JSON command and writes its JSON: returns the exit status.
pub(crate) fn execute(
    command: &HostCommand,
    layout: &Layout,
    now: Timestamp,
    input: &mut dyn Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, CliError> {
    let outcome = read_request(command, input)
        .and_then(|request| dispatch(command, layout, UtcMicros(now.0), &request));
    let (code, document) = match outcome {
        Ok((code, result)) => (
            code,
            Json::object([
                ("command", Json::str(command.name())),
                ("ok", Json::Bool(true)),
                ("result", result),
            ]),
        ),
        Err(failure) => {
            writeln!(err, "ctx: {}: {}", command.name(), failure.message)?;
            (
                failure.exit,
                Json::object([
                    ("command", Json::str(command.name())),
                    (
                        "error",
                        Json::object([
                            ("code", Json::str(failure.code)),
                            ("message", Json::str(&failure.message)),
                        ]),
                    ),
                    ("ok", Json::Bool(false)),
                ]),
            )
        }
    };
    writeln!(out, "{document}")?;
    Ok(code)
}

/// Reads the request of a command that takes one: at most [`HOST_INPUT_MAX_BYTES`] of strict
/// JSON, an object.
fn read_request(command: &HostCommand, input: &mut dyn Read) -> Result<Json, CommandFailure> {
    if !command.reads_input() {
        return Ok(Json::object::<&str>([]));
    }
    let mut bytes = Vec::new();
    input
        .take(HOST_INPUT_MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CommandFailure::internal(format!("could not read the request: {e}")))?;
    if bytes.len() > HOST_INPUT_MAX_BYTES {
        return Err(CommandFailure::invalid(format!(
            "the request is larger than {HOST_INPUT_MAX_BYTES} bytes"
        )));
    }
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| CommandFailure::invalid("the request is not UTF-8 text"))?;
    let value = Json::parse(text.trim_end())
        .map_err(|e| CommandFailure::invalid(format!("the request: {e}")))?;
    if value.as_obj().is_none() {
        return Err(CommandFailure::invalid("the request must be a JSON object"));
    }
    Ok(value)
}

/// Runs a JSON command on a parsed request: the exit status and the `result` JSON, or the refusal.
/// The demo drives the host interface through this, exactly as a host's processes would.
pub(crate) fn dispatch(
    command: &HostCommand,
    layout: &Layout,
    now: UtcMicros,
    request: &Json,
) -> Result<(u8, Json), CommandFailure> {
    let ok = |result: Json| Ok((EXIT_OK, result));
    match command {
        HostCommand::CatalogIngest { catalog_dir } => ok(ingest_json(&ingest_catalog(
            layout,
            catalog_dir.as_deref(),
        )?)),
        // A plain file key, registered nowhere: a key becomes a verifier only through the signed
        // registry, which the person changes at their terminal (spec/decisions.md §14).
        HostCommand::KeyGenerate { out } => {
            check_keys(request, &[])?;
            let entry = write_plain_key(out, &fresh_signer()?)?;
            let mut result = entry.to_json();
            if let Json::Obj(map) = &mut result {
                map.insert("key_file".to_owned(), Json::str(out.display().to_string()));
                map.insert("registered".to_owned(), Json::Bool(false));
            }
            ok(result)
        }
        HostCommand::KeySign { key } => ok(sign(key, now, request)?),
        HostCommand::PolicyShow => {
            let runtime = Runtime::open_for_policy(layout, now)?;
            let policy = runtime
                .policy_store()
                .load_current()
                .map_err(|e| CommandFailure::internal(e.to_string()))?;
            ok(policy.to_json())
        }
        HostCommand::PolicySet { key } => {
            let runtime = Runtime::open_for_policy(layout, now)?;
            let policy = InstallConsentPolicy::from_json(request)
                .map_err(|e| CommandFailure::invalid(e.to_string()))?;
            if grants_by_itself(&policy)
                && !runtime.trust().policy_approved(&policy.policy_digest())
            {
                approve_policy(layout, runtime.trust(), &policy, key.as_deref(), now)?;
            }
            runtime
                .policy_store()
                .persist(&policy)
                .map_err(|e| CommandFailure::internal(e.to_string()))?;
            ok(policy.to_json())
        }
        HostCommand::QueryPrepare => {
            check_keys(
                request,
                &[
                    "label",
                    "languages",
                    "prompt",
                    "requested_limit",
                    "session_id",
                    "signals",
                    "workspace",
                ],
            )?;
            let runtime = Runtime::open(layout, now)?;
            let work = work_request(request)?;
            let work_ref = runtime.observe_work(&work)?;
            let label = request.get_str("label").unwrap_or(work_ref.as_str());
            let query = QueryRequest::new(&logical_id("query", label), &work_ref)?;
            let result = runtime.service().prepare(&query)?;
            ok(query_json(&result, &runtime))
        }
        HostCommand::QueryReopen => {
            check_keys(request, &["query_ref"])?;
            let runtime = Runtime::open(layout, now)?;
            let query_ref = required_str(request, "query_ref")?;
            let result = runtime.service().reopen(query_ref)?;
            ok(query_json(&result, &runtime))
        }
        HostCommand::DesiredSet => {
            let runtime = Runtime::open(layout, now)?;
            let request = desired_request(request)?;
            for id in request.capability_ids() {
                if let Some(reason) = uninstallable(runtime.catalog(), id) {
                    return Err(CommandFailure::outcome(
                        "no-actuator",
                        format!(
                            "{id} cannot be installed by this data directory: {reason}; choose \
                             it in a host that can install it, or leave it out"
                        ),
                    ));
                }
            }
            let result = runtime.service().set_desired(&request)?;
            let code = if result.status() == CONSENT_REQUIRED {
                EXIT_OUTCOME
            } else {
                EXIT_OK
            };
            Ok((code, desired_json(&result)))
        }
        HostCommand::ConsentChallenge => {
            check_keys(request, &["challenge_digest"])?;
            let runtime = Runtime::open(layout, now)?;
            let digest = required_str(request, "challenge_digest")?;
            let record = challenge_record(layout, digest, now)?;
            ok(challenge_json(&record, &runtime))
        }
        HostCommand::ConsentResolve => {
            check_keys(request, &["assertion"])?;
            let runtime = Runtime::open(layout, now)?;
            let assertion = required_str(request, "assertion")?;
            let result = runtime.resolve_consent(assertion.as_bytes(), &hook_session)?;
            ok(resolution_json(&result))
        }
        HostCommand::ConsentRecover => {
            check_keys(request, &["challenge_digest"])?;
            let runtime = Runtime::open(layout, now)?;
            let digest = required_str(request, "challenge_digest")?;
            let result = runtime.service().recover_consent(digest)?;
            ok(resolution_json(&result))
        }
    }
}

/// Runs a JSON command in-process for the demo and the person's commands: its `result`, or the
/// refusal as a [`CliError::Step`] named `step` with the command's exit status.
pub(crate) fn run_step(
    step: &'static str,
    layout: &Layout,
    now: UtcMicros,
    command: HostCommand,
    request: Json,
) -> Result<Json, CliError> {
    dispatch(&command, layout, now, &request)
        .map(|(_, result)| result)
        .map_err(|CommandFailure { exit, message, .. }| CliError::Step {
            step,
            message,
            exit,
        })
}

/// The strings of an array field of a result (non-strings and a missing field are skipped).
pub(crate) fn strings(value: &Json, key: &str) -> Vec<String> {
    match value.get(key) {
        Some(Json::Arr(items)) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// A string field of a result, `?` when absent (for display only).
pub(crate) fn field<'a>(value: &'a Json, key: &str) -> &'a str {
    value.get_str(key).unwrap_or("?")
}

// ------------------------------------------------------------------------------------------------
// Requests
// ------------------------------------------------------------------------------------------------

fn check_keys(request: &Json, allowed: &[&str]) -> Result<(), CommandFailure> {
    if let Some(map) = request.as_obj()
        && let Some(key) = map.keys().find(|k| !allowed.contains(&k.as_str()))
    {
        return Err(CommandFailure::invalid(format!(
            "the request has an unknown field {key:?}"
        )));
    }
    Ok(())
}

fn required_str<'a>(request: &'a Json, key: &str) -> Result<&'a str, CommandFailure> {
    request
        .get_str(key)
        .ok_or_else(|| CommandFailure::invalid(format!("the request needs a string field {key:?}")))
}

fn string_list(request: &Json, key: &str) -> Result<Vec<String>, CommandFailure> {
    match request.get(key) {
        None => Ok(Vec::new()),
        Some(Json::Arr(items)) => items
            .iter()
            .map(|i| {
                i.as_str().map(str::to_owned).ok_or_else(|| {
                    CommandFailure::invalid(format!("field {key:?} must hold only strings"))
                })
            })
            .collect(),
        Some(_) => Err(CommandFailure::invalid(format!(
            "field {key:?} must be an array of strings"
        ))),
    }
}

fn work_request(request: &Json) -> Result<WorkRequest, CommandFailure> {
    let requested_limit = match request.get("requested_limit") {
        None => 5,
        Some(Json::Int(n)) => u8::try_from(*n).map_err(|_| {
            CommandFailure::invalid(format!("requested_limit {n} must be between 1 and 5"))
        })?,
        Some(_) => {
            return Err(CommandFailure::invalid(
                "requested_limit must be an integer",
            ));
        }
    };
    let host_session = required_str(request, "session_id")?;
    if host_session.len() > QUERY_SESSION_ID_MAX_BYTES || !is_token(host_session) {
        return Err(CommandFailure::invalid(format!(
            "session_id {host_session:?} must be a token of letters, digits and . _ : @ - \
             (at most {QUERY_SESSION_ID_MAX_BYTES} bytes)"
        )));
    }
    let mut work = WorkRequest {
        session_id: String::new(),
        workspace: required_str(request, "workspace")?.to_owned(),
        prompt: request.get_str("prompt").unwrap_or_default().to_owned(),
        signals: string_list(request, "signals")?,
        languages: string_list(request, "languages")?,
        requested_limit,
    };
    work.session_id = prompt_session(host_session, &work);
    Ok(work)
}

/// The longest host `session_id` `query prepare` accepts: with the `api:` prefix and the prompt
/// key it stays within the engine's 128-byte session token.
pub const QUERY_SESSION_ID_MAX_BYTES: usize = 96;

/// The engine session of one prompt of a host session, spec/cli.md §3 (Work observations): each
/// distinct request is its own engine session `api:<session_id>:<16 hex>`, so a host may prepare
/// as many prompts on one session as it likes, the same request again is the same query, and
/// session-scoped standing decisions see one host session `api:<session_id>`.
fn prompt_session(host_session: &str, work: &WorkRequest) -> String {
    let observed = Json::object([
        ("workspace", Json::str(&work.workspace)),
        ("prompt", Json::str(&work.prompt)),
        (
            "signals",
            Json::Arr(work.signals.iter().map(Json::str).collect()),
        ),
        (
            "languages",
            Json::Arr(work.languages.iter().map(Json::str).collect()),
        ),
        (
            "requested_limit",
            Json::Int(i64::from(work.requested_limit)),
        ),
    ]);
    let key = sha256_hex(&observed.to_string());
    format!("api:{host_session}:{}", &key[..16])
}

/// The desired-set request: the service's own JSON, where a `choice_label` may stand in for the
/// `logical_choice_id` digest.
fn desired_request(request: &Json) -> Result<DesiredSetRequest, CommandFailure> {
    let mut value = request.clone();
    if let Json::Obj(map) = &mut value
        && let Some(label) = map.remove("choice_label")
    {
        let Some(label) = label.as_str() else {
            return Err(CommandFailure::invalid("choice_label must be a string"));
        };
        if map.contains_key("logical_choice_id") {
            return Err(CommandFailure::invalid(
                "give either choice_label or logical_choice_id, not both",
            ));
        }
        map.insert(
            "logical_choice_id".to_owned(),
            Json::str(logical_id("choice", label)),
        );
    }
    Ok(DesiredSetRequest::from_json(&value)?)
}

/// `ctx key sign`: a signed human decision on a challenge, in its wire form.
fn sign(key: &Path, now: UtcMicros, request: &Json) -> Result<Json, CommandFailure> {
    check_keys(request, &["challenge_digest", "decision"])?;
    let challenge_digest = required_str(request, "challenge_digest")?;
    let decision = required_str(request, "decision")?;
    if !matches!(decision, "granted" | "denied") {
        return Err(CommandFailure::invalid(format!(
            "decision {decision:?} must be \"granted\" or \"denied\""
        )));
    }
    let file = read_device_key(key)?;
    let signer = if file.is_sealed() {
        // The passphrase of a sealed key is typed by the person at the controlling terminal,
        // never given on stdin (spec/decisions.md §12.3).
        let mut tty = Terminal::open("signing with a sealed device key (`ctx key sign`)")
            .map_err(|e| CommandFailure::outcome("no-terminal", e.to_string()))?;
        let passphrase = tty
            .passphrase(&format!("passphrase for {}: ", key.display()))
            .map_err(|e| CommandFailure::internal(e.to_string()))?;
        file.open(Some(&passphrase))?
    } else {
        file.open(None)?
    };
    let entry = file.entry();
    let text = sign_decision(&signer, &entry, challenge_digest, decision, now)?;
    Ok(Json::object([
        ("assertion", Json::str(text)),
        ("authenticator_id", Json::str(&entry.authenticator_id)),
        ("decision", Json::str(decision)),
        ("kind", Json::str(entry.kind.as_str())),
    ]))
}

/// A signed consent decision of `entry`'s key on `challenge_digest`, in its wire form.
pub(crate) fn sign_decision(
    signer: &Ed25519Signer,
    entry: &VerifierEntry,
    challenge_digest: &str,
    decision: &str,
    now: UtcMicros,
) -> Result<String, CommandFailure> {
    let unsigned = unsigned_decision(entry, challenge_digest, decision, now)?;
    let signed = signer
        .sign_assertion(&unsigned)
        .map_err(|e| CommandFailure::invalid(e.to_string()))?;
    let wire = signed
        .encode()
        .map_err(|e| CommandFailure::invalid(e.to_string()))?;
    String::from_utf8(wire)
        .map_err(|_| CommandFailure::internal("the assertion's wire form is not UTF-8"))
}

/// A consent decision by `entry` with a placeholder proof, for a signer outside this process (a
/// passkey) to sign its signing bytes.
pub(crate) fn unsigned_decision(
    entry: &VerifierEntry,
    challenge_digest: &str,
    decision: &str,
    now: UtcMicros,
) -> Result<SignedHumanDecisionAssertion, CommandFailure> {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce)
        .map_err(|e| CommandFailure::internal(format!("no randomness for a nonce: {e}")))?;
    SignedHumanDecisionAssertion::new(AssertionFields {
        challenge_digest: challenge_digest.to_owned(),
        decision: decision.to_owned(),
        principal_digest: entry.principal_digest.clone(),
        authenticator_id: entry.authenticator_id.clone(),
        audience: CONSENT_AUDIENCE.to_owned(),
        nonce: format!(
            "ctx-nonce-{}",
            nonce.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
        issued_at: now.render(),
        expires_at: UtcMicros(
            now.0
                .saturating_add(SIGNED_DECISION_TTL_SECONDS * 1_000_000),
        )
        .render(),
        proof: b"unsigned".to_vec(),
    })
    .map_err(|e| CommandFailure::invalid(e.to_string()))
}

/// True when a consent's session is one an agent host's hook opened (`<host>:…`): such a
/// consent needs presence (spec/decisions.md §12.4).
pub(crate) fn hook_session(session_id: &str) -> bool {
    ctx_hosts::is_hook_session(session_id)
}

/// The person approves a policy that grants installs without asking: at their terminal, signed
/// with a registered device key of at least presence assurance (spec/decisions.md §14.4).
fn approve_policy(
    layout: &Layout,
    trust: &TrustState,
    policy: &InstallConsentPolicy,
    key: Option<&Path>,
    now: UtcMicros,
) -> Result<(), CommandFailure> {
    let refused = |message: String| CommandFailure::outcome("refused", message);
    let digest = policy.policy_digest();
    let mut tty = Terminal::open(&format!(
        "setting install policy {digest}, which grants installs without asking the person,"
    ))
    .map_err(|e| refused(e.to_string()))?;
    let Some(key) = key else {
        return Err(refused(
            "name the device key that approves this policy with --key FILE".to_owned(),
        ));
    };
    let file = read_device_key(key)?;
    let entry = file.entry();
    let change = TrustChange::ApprovePolicy {
        policy_digest: digest.clone(),
    };
    let change_at = change_digest(&change, trust.revision());
    tty.say(&format!(
        "approve: {}\n  skills: {}, agents: {}, MCP servers: {}\n",
        change.describe(),
        policy.skill_mode.as_str(),
        policy.agent_mode.as_str(),
        policy.mcp_server_mode.as_str()
    ))
    .map_err(|e| CommandFailure::internal(e.to_string()))?;
    if !file.is_sealed() {
        return Err(refused(format!(
            "{} is a plain file key; a policy is approved only with a sealed key or a passkey",
            key.display()
        )));
    }
    let passphrase = tty
        .passphrase(&format!("passphrase for {}: ", key.display()))
        .map_err(|e| CommandFailure::internal(e.to_string()))?;
    let signer = file.open(Some(&passphrase))?;
    let approval = unsigned_trust_assertion(&entry, &change_at, now)
        .and_then(|unsigned| sign_trust_assertion(&signer, &unsigned))
        .map_err(RuntimeError::from)?;
    let journal = ctx_service::open_journal(&layout.journal(), &ctx_journal::OpenOptions::new())
        .map_err(|e| CommandFailure::internal(e.to_string()))?;
    let record = TrustRecord {
        change,
        basis: TrustBasis::Approved,
        possession: None,
        approval: Some(approval),
    };
    append_trust(&journal, trust, &record, Timestamp(now.0)).map_err(RuntimeError::from)?;
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Results as JSON
// ------------------------------------------------------------------------------------------------

fn ingest_json(ingest: &CatalogIngest) -> Json {
    Json::object([
        (
            "capabilities",
            Json::Int(i64::try_from(ingest.capabilities).unwrap_or(i64::MAX)),
        ),
        ("changed", Json::Bool(ingest.changed)),
        (
            "installation_snapshot_digest",
            Json::str(&ingest.installation_snapshot_digest),
        ),
        ("namespace", Json::str(&ingest.namespace)),
        (
            "retrieval_snapshot_digest",
            Json::str(&ingest.retrieval_snapshot_digest),
        ),
        ("source", Json::str(&ingest.source)),
    ])
}

fn strs(items: &[String]) -> Json {
    Json::Arr(items.iter().map(Json::str).collect())
}

pub(crate) fn opt_str(value: Option<&str>) -> Json {
    value.map_or(Json::Null, Json::str)
}

fn actions_json(actions: &[ActionSummary]) -> Json {
    Json::Arr(
        actions
            .iter()
            .map(|a| {
                Json::object([
                    ("action_id", Json::str(a.action_id())),
                    ("entity_id", opt_str(a.entity_id())),
                    ("kind", Json::str(a.kind())),
                ])
            })
            .collect(),
    )
}

fn challenge_projection_json(challenge: Option<&ConsentChallengeProjection>) -> Json {
    challenge.map_or(Json::Null, |c| {
        Json::object([
            ("audience", Json::str(c.audience())),
            ("capability_id", Json::str(c.capability_id())),
            ("challenge_digest", Json::str(c.challenge_digest())),
            ("expires_at", Json::str(c.expires_at())),
            ("kind", Json::str(c.kind())),
        ])
    })
}

/// What a capability's install may do, from the catalog.
fn install_flags(runtime: &Runtime, capability_id: &str) -> Json {
    let entry = runtime.catalog().entry(capability_id);
    // The body is read and verified for this entry only (spec/catalog.md §8.4); one that no
    // longer verifies says nothing about what it does, and its install would be refused.
    let loaded =
        load_catalog_entries(&runtime.catalog_dir(), runtime.catalog(), &[capability_id]).ok();
    match entry.and_then(|e| e.install.as_ref()) {
        Some(install) => Json::object([
            (
                "credential_requirement",
                Json::Bool(install.credential_requirement),
            ),
            (
                "permission_expansion",
                Json::Bool(install.permission_expansion),
            ),
            ("result_path", Json::str(&install.result.path)),
            ("result_sha256", Json::str(&install.result.sha256)),
            (
                "what_it_does",
                Json::Arr(
                    loaded
                        .as_ref()
                        .and_then(|l| l.body_at(&install.result.path))
                        .map(|body| what_it_does(capability_id, body))
                        .unwrap_or_default()
                        .into_iter()
                        .map(Json::Str)
                        .collect(),
                ),
            ),
        ]),
        None => Json::Null,
    }
}

/// Most characters one line of [`what_it_does`] shows; longer values are cut with an ellipsis.
const WHAT_IT_DOES_LINE_MAX_CHARS: usize = 160;

/// What an install would let the agent run or use, read from the material it installs, so the
/// person decides on that and not on a name (spec/cli.md §6): for an MCP server its command and
/// arguments or its URL and the *names* of the environment variables and headers it gets (never
/// their values); for an agent its tools, model and permission mode; for a skill its file.
pub(crate) fn what_it_does(capability_id: &str, body: &str) -> Vec<String> {
    let clip = |text: String| -> String {
        if text.chars().count() <= WHAT_IT_DOES_LINE_MAX_CHARS {
            text
        } else {
            let cut: String = text.chars().take(WHAT_IT_DOES_LINE_MAX_CHARS).collect();
            format!("{cut}…")
        }
    };
    let names = |value: Option<&Json>| -> String {
        value
            .and_then(Json::as_obj)
            .map(|m| m.keys().cloned().collect::<Vec<_>>().join(", "))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "none".to_owned())
    };
    let mut lines = Vec::new();
    match capability_id.split_once(':').map(|(kind, _)| kind) {
        Some("mcp-server") => {
            let servers = Json::parse(body)
                .ok()
                .and_then(|v| v.get("mcpServers").and_then(Json::as_obj).cloned())
                .unwrap_or_default();
            for (name, entry) in &servers {
                if let Some(command) = entry.get_str("command") {
                    let args: Vec<&str> = entry
                        .get("args")
                        .and_then(Json::as_arr)
                        .map(|a| a.iter().filter_map(Json::as_str).collect())
                        .unwrap_or_default();
                    lines.push(clip(format!(
                        "{:<23}{command} {}",
                        format!("server {name} runs:"),
                        args.join(" ")
                    )));
                }
                if let Some(url) = entry.get_str("url") {
                    lines.push(clip(format!(
                        "{:<23}{url}",
                        format!("server {name} connects:")
                    )));
                }
                lines.push(clip(format!(
                    "environment names:     {}",
                    names(entry.get("env"))
                )));
                if entry.get("headers").is_some() {
                    lines.push(clip(format!(
                        "header names:          {}",
                        names(entry.get("headers"))
                    )));
                }
            }
        }
        Some("agent") => {
            let front = body
                .strip_prefix("---\n")
                .and_then(|rest| rest.split_once("\n---").map(|(f, _)| f))
                .unwrap_or_default();
            for (key, label) in [
                ("tools", "agent tools:           "),
                ("model", "agent model:           "),
                ("permissionMode", "permission mode:       "),
            ] {
                let value = front
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("{key}:")))
                    .map(str::trim);
                let shown = match (key, value) {
                    (_, Some(v)) if !v.is_empty() => v.to_owned(),
                    ("tools", _) => "all tools (none named)".to_owned(),
                    ("permissionMode", _) => "the session's".to_owned(),
                    _ => "the session's".to_owned(),
                };
                lines.push(clip(format!("{label}{shown}")));
            }
        }
        _ => {}
    }
    lines
}

pub(crate) fn query_json(result: &QueryServiceResult, runtime: &Runtime) -> Json {
    let prepared = result.prepared();
    let label = |id: &str| {
        runtime
            .catalog()
            .entry(id)
            .map_or(Json::Null, |e| Json::str(&e.label))
    };
    let selections = prepared
        .selections()
        .iter()
        .map(|s| {
            Json::object([
                ("actionability", Json::str(s.actionability())),
                ("benefit_tier", Json::str(s.benefit_tier())),
                ("capability_id", Json::str(s.capability_id())),
                ("install", install_flags(runtime, s.capability_id())),
                ("kind", Json::str(s.kind())),
                ("label", label(s.capability_id())),
                (
                    "marginal_net_benefit_u",
                    Json::Int(s.marginal_net_benefit_u()),
                ),
                ("matching_signals", strs(s.matching_signals())),
                ("name", Json::str(s.name())),
                ("reason_codes", strs(s.reason_codes())),
            ])
        })
        .collect();
    Json::object([
        ("abstention_code", opt_str(prepared.abstention_code())),
        ("actions", actions_json(result.actions())),
        ("challenge", challenge_projection_json(result.challenge())),
        ("decision_digest", Json::str(prepared.decision_digest())),
        (
            "journal_record_digest",
            Json::str(prepared.journal_record_digest()),
        ),
        (
            "journal_revision",
            Json::Int(i64::try_from(prepared.journal_revision()).unwrap_or(i64::MAX)),
        ),
        ("plan_id", Json::str(prepared.plan_id())),
        ("query_ref", Json::str(result.query_ref())),
        ("selections", Json::Arr(selections)),
        ("status", Json::str(prepared.status())),
    ])
}

pub(crate) fn desired_json(result: &DesiredSetResult) -> Json {
    Json::object([
        ("actions", actions_json(result.actions())),
        ("capability_ids", strs(result.capability_ids())),
        ("challenge", challenge_projection_json(result.challenge())),
        ("decision_digest", Json::str(result.decision_digest())),
        (
            "deferred_capability_ids",
            strs(result.deferred_capability_ids()),
        ),
        ("desired_set_ref", Json::str(result.desired_set_ref())),
        (
            "failed_capability_ids",
            strs(result.failed_capability_ids()),
        ),
        (
            "journal_record_digest",
            Json::str(result.journal_record_digest()),
        ),
        (
            "journal_revision",
            Json::Int(i64::try_from(result.journal_revision()).unwrap_or(i64::MAX)),
        ),
        ("logical_choice_id", Json::str(result.logical_choice_id())),
        ("plan_id", Json::str(result.plan_id())),
        ("query_ref", Json::str(result.query_ref())),
        ("reason_code", opt_str(result.reason_code())),
        ("status", Json::str(result.status())),
    ])
}

fn resolution_json(result: &ConsentResolutionResult) -> Json {
    Json::object([
        ("actions", actions_json(result.actions())),
        ("capability_id", Json::str(result.capability_id())),
        ("challenge_digest", Json::str(result.challenge_digest())),
        (
            "journal_record_digest",
            Json::str(result.journal_record_digest()),
        ),
        (
            "journal_revision",
            Json::Int(i64::try_from(result.journal_revision()).unwrap_or(i64::MAX)),
        ),
        ("kind", Json::str(result.kind())),
        (
            "next_challenge",
            challenge_projection_json(result.next_challenge()),
        ),
        ("outcome", Json::str(result.outcome())),
        ("reason_code", Json::str(result.reason_code())),
    ])
}

fn challenge_json(record: &ChallengeRecord, runtime: &Runtime) -> Json {
    let challenge = record.challenge();
    Json::object([
        ("capability_id", Json::str(challenge.capability_id())),
        ("challenge", challenge.to_json()),
        ("challenge_digest", Json::str(challenge.challenge_digest())),
        ("decision", opt_str(record.decision())),
        ("install", install_flags(runtime, challenge.capability_id())),
        ("kind", Json::str(challenge.kind())),
        ("state", Json::str(record.state().as_str())),
    ])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::what_it_does;

    #[test]
    fn an_mcp_server_shows_its_command_url_and_only_the_names_of_its_secrets() {
        let body = r#"{"mcpServers": {"gh": {"type": "http", "url": "https://api.example/mcp/", "headers": {"Authorization": "Bearer ${TOKEN}"}}, "fs": {"command": "npx", "args": ["-y", "server-fs", "/srv"], "env": {"API_KEY": "s3cret"}}}}"#;
        let text = what_it_does("mcp-server:gh", body).join("\n");
        assert!(
            text.contains("server fs runs:        npx -y server-fs /srv"),
            "{text}"
        );
        assert!(
            text.contains("server gh connects:    https://api.example/mcp/"),
            "{text}"
        );
        assert!(text.contains("environment names:     API_KEY"), "{text}");
        assert!(
            text.contains("header names:          Authorization"),
            "{text}"
        );
        assert!(
            !text.contains("s3cret") && !text.contains("Bearer"),
            "{text}"
        );
    }

    #[test]
    fn an_agent_shows_its_tools_model_and_permission_mode() {
        let body =
            "---\nname: a\ntools: Read, Bash(git diff *)\npermissionMode: acceptEdits\n---\nbody\n";
        assert_eq!(
            what_it_does("agent:a", body),
            [
                "agent tools:           Read, Bash(git diff *)",
                "agent model:           the session's",
                "permission mode:       acceptEdits",
            ]
        );
        let open = what_it_does("agent:b", "---\nname: b\n---\n");
        assert_eq!(open[0], "agent tools:           all tools (none named)");
        assert!(what_it_does("skill:x", "# x").is_empty());
    }
}
