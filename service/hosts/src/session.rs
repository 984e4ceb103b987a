//! The hook session of an agent host (spec/cli.md §7), as a library: one call per host hook
//! event, with a typed input ([`HookInput`]), a typed reply ([`HookReply`]) and a typed error
//! ([`SessionError`]). The `ctx hook` command is stdin/stdout glue over this module; a host that
//! embeds ctx calls [`run_hook`] directly.
//!
//! Every hook call is recorded on the session's stream of the journal (kind
//! [`HOST_SESSION_KIND`], namespace [`HOST_SESSION_NAMESPACE`]); the record's event id is a
//! digest of the host's input, so a host that runs one hook twice with the same input records it
//! once.

use std::io::Read;

use ctx_journal::{
    AppendError, ExpectedRevision, InputError, Journal, NewRecord, OpenError, OpenOptions,
    ReadError, StreamAppend, StreamId, Timestamp,
};
use ctx_model::{Json, JsonError, UtcMicros, is_token, sha256_hex, sha256_hex_bytes};
use ctx_projections::consent_store::ChallengeState;
use ctx_projections::streams::{HOST_SESSION_KIND, HOST_SESSION_NAMESPACE};
use ctx_service::{
    ActivationReport, ChallengeReader, DesiredSetRequest, IngestError, InstallConsentPolicy,
    JOURNAL_LOCK_WAIT, Layout, PolicyStoreError, QueryRequest, Runtime, RuntimeError, ServiceError,
    TrustState, WorkRequest, challenge_record, ingest_catalog, logical_id, uninstallable,
};

use crate::host_actuator::HostActivationDriver;
use crate::hosts::{AgentHost, HookEvent, HostHome, HostHomeError};

/// The largest hook input ctx reads; tool outcomes carry the tool's response, so this is larger
/// than the JSON commands' limit.
pub const HOOK_INPUT_MAX_BYTES: usize = 1024 * 1024;
/// The hosts cap `additionalContext` and `systemMessage` at 10,000 characters (longer text is
/// moved to a file the model may never read), so ctx never writes more.
pub const HOOK_TEXT_MAX_CHARS: usize = 10_000;
/// The longest host session id: with the host's name and a prompt's digest it must stay a
/// 128-byte token.
pub const HOOK_SESSION_ID_MAX_BYTES: usize = 96;
/// How many of a session's records a hook reads.
const SESSION_RECORDS_READ_MAX: usize = 1024;
/// How many of a session's latest queries a hook advances activations of.
const SESSION_QUERIES_MAX: usize = 16;
/// Most challenges one prompt resolves for the person from their earlier decisions: a plan has
/// at most five selections.
const DELEGATED_PER_PROMPT_MAX: usize = 5;

/// Why a hook call did nothing for the host. The sentence is what the person sees
/// (spec/cli.md §7: a hook never blocks the host; its glue turns this into a `systemMessage`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("could not read the hook input: {0}")]
    Read(std::io::Error),
    #[error("the hook input is larger than {max_bytes} bytes")]
    TooLarge { max_bytes: usize },
    #[error("the hook input is not UTF-8 text")]
    NotUtf8,
    #[error("the hook input is not JSON: {0}")]
    NotJson(JsonError),
    #[error("the hook input is not a JSON object")]
    NotObject,
    /// The input's `hook_event_name` is not one this call was registered for.
    #[error("hook_event_name {name:?} is not an event `ctx hook {host} {event}` handles")]
    UnregisteredEvent {
        name: String,
        host: AgentHost,
        event: &'static str,
    },
    #[error("the hook input has no string field \"{0}\"")]
    MissingField(&'static str),
    #[error(
        "session_id {session_id:?} is not a token of letters, digits and . _ : @ - (at most \
         {HOOK_SESSION_ID_MAX_BYTES} bytes)"
    )]
    SessionId { session_id: String },
    #[error("the hook input's cwd {cwd:?} is not an absolute path")]
    RelativeCwd { cwd: String },
    #[error("ctx has no handler for hook event {0:?}")]
    NoHandler(String),
    #[error("session {session:?} has no stream: {source}")]
    Stream { session: String, source: InputError },
    #[error("could not open the journal: {0}")]
    Journal(OpenError),
    #[error("could not record the hook call: {0}")]
    Record(AppendError),
    #[error("could not read the session: {0}")]
    ReadSession(ReadError),
    /// The sample catalog could not be ingested into a data directory that had none.
    #[error("{0}")]
    Catalog(IngestError),
    /// The service refused; the sentence carries its stable code (spec/cli.md §4).
    #[error("{0} ({code})", code = .0.code())]
    Service(ServiceError),
    /// The data directory's runtime refused; the sentence carries its stable code.
    #[error("{0} ({code})", code = .0.code())]
    Runtime(RuntimeError),
    #[error("the install policy cannot be read: {0}")]
    PolicyRead(PolicyStoreError),
    #[error("the install policy cannot be persisted: {0}")]
    PolicyPersist(PolicyStoreError),
}

impl From<ServiceError> for SessionError {
    fn from(e: ServiceError) -> SessionError {
        SessionError::Service(e)
    }
}

impl From<RuntimeError> for SessionError {
    fn from(e: RuntimeError) -> SessionError {
        SessionError::Runtime(e)
    }
}

/// Who calls: the host, the data directory, the host's home (without one ctx plans and records
/// but activates nothing) and the time of the call.
#[derive(Debug)]
pub struct HookContext<'a> {
    pub host: AgentHost,
    pub layout: &'a Layout,
    pub home: Result<HostHome, HostHomeError>,
    pub now: Timestamp,
}

/// What a hook call asks of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HookReply {
    /// Nothing: the host reads no output.
    Silent,
    /// Context for the model (`hookSpecificOutput.additionalContext`) and, optionally, a message
    /// for the person (`systemMessage`); `reload_skills` asks the host to re-scan its skills.
    Context {
        host_event: &'static str,
        context: String,
        message: Option<String>,
        reload_skills: bool,
    },
}

impl HookReply {
    /// The one JSON object the host reads, if any (spec/cli.md §7); texts are cut to
    /// [`HOOK_TEXT_MAX_CHARS`].
    pub fn to_json(&self) -> Option<Json> {
        match self {
            HookReply::Silent => None,
            HookReply::Context {
                host_event,
                context,
                message,
                reload_skills,
            } => {
                let mut specific = vec![
                    ("additionalContext", Json::str(clip(context))),
                    ("hookEventName", Json::str(*host_event)),
                ];
                if *reload_skills {
                    specific.push(("reloadSkills", Json::Bool(true)));
                }
                let mut fields = vec![("hookSpecificOutput", Json::object(specific))];
                if let Some(message) = message {
                    fields.push(("systemMessage", Json::str(clip(message))));
                }
                Some(Json::object(fields))
            }
        }
    }
}

/// The JSON object that tells the person why a hook call did nothing: `systemMessage` with the
/// sentence, cut to [`HOOK_TEXT_MAX_CHARS`].
pub fn failure_json(message: &str) -> Json {
    Json::object([("systemMessage", Json::str(clip(&format!("ctx: {message}"))))])
}

/// One hook call's input, checked: the parts every event uses, and the rest of the host's JSON.
#[derive(Debug, Clone)]
pub struct HookInput {
    /// `<host>:<session_id>`: the session id the journal and work observations use.
    session: String,
    /// The host's `hook_event_name`.
    host_event: &'static str,
    value: Json,
    digest: String,
}

impl HookInput {
    /// Reads at most [`HOOK_INPUT_MAX_BYTES`] (plus one, to tell a larger input) from `input`
    /// and checks it with [`HookInput::parse`].
    pub fn read(
        host: AgentHost,
        event: &HookEvent,
        input: &mut dyn Read,
    ) -> Result<HookInput, SessionError> {
        let mut bytes = Vec::new();
        input
            .take(HOOK_INPUT_MAX_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(SessionError::Read)?;
        HookInput::parse(host, event, &bytes)
    }

    /// Checks the host's JSON: an object of at most [`HOOK_INPUT_MAX_BYTES`] whose `session_id`
    /// is a token and whose `hook_event_name` (when present) is one `event` was registered for.
    /// Unknown fields are kept: hosts add fields between releases.
    pub fn parse(
        host: AgentHost,
        event: &HookEvent,
        bytes: &[u8],
    ) -> Result<HookInput, SessionError> {
        if bytes.len() > HOOK_INPUT_MAX_BYTES {
            return Err(SessionError::TooLarge {
                max_bytes: HOOK_INPUT_MAX_BYTES,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|_| SessionError::NotUtf8)?;
        let value = Json::parse(text.trim()).map_err(SessionError::NotJson)?;
        if value.as_obj().is_none() {
            return Err(SessionError::NotObject);
        }
        let registered = |name: &str| {
            host.hook_events()
                .iter()
                .find(|e| e.ctx_name == event.ctx_name && e.host_event == name)
        };
        let host_event = match value.get_str("hook_event_name") {
            Some(name) => {
                registered(name)
                    .ok_or_else(|| SessionError::UnregisteredEvent {
                        name: name.to_owned(),
                        host,
                        event: event.ctx_name,
                    })?
                    .host_event
            }
            None => event.host_event,
        };
        let session_id = value
            .get_str("session_id")
            .ok_or(SessionError::MissingField("session_id"))?;
        let session = format!("{host}:{session_id}");
        if session_id.len() > HOOK_SESSION_ID_MAX_BYTES || !is_token(&session) {
            return Err(SessionError::SessionId {
                session_id: session_id.to_owned(),
            });
        }
        let digest = sha256_hex_bytes(bytes);
        Ok(HookInput {
            session,
            host_event,
            value,
            digest,
        })
    }

    /// `<host>:<session_id>`.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The host's `hook_event_name` (the registered one when the input names none).
    pub fn host_event(&self) -> &'static str {
        self.host_event
    }

    /// The host's JSON, unknown fields included.
    pub fn value(&self) -> &Json {
        &self.value
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.value.get_str(key)
    }

    /// The absolute working directory of the session.
    fn cwd(&self) -> Result<&str, SessionError> {
        let cwd = self.str("cwd").ok_or(SessionError::MissingField("cwd"))?;
        if !std::path::Path::new(cwd).is_absolute() {
            return Err(SessionError::RelativeCwd {
                cwd: cwd.to_owned(),
            });
        }
        Ok(cwd)
    }
}

/// Runs one hook call: the event's flow (spec/cli.md §7) on the data directory, recorded on the
/// session's stream. `event` is the registration the host called (`ctx_name` picks the flow).
pub fn run_hook(
    ctx: &HookContext<'_>,
    event: &HookEvent,
    input: &HookInput,
) -> Result<HookReply, SessionError> {
    match event.ctx_name {
        "session-start" => session_start(ctx, input),
        "user-prompt-submit" => prompt(ctx, input),
        "tool-outcome" => tool_outcome(ctx, input),
        "subagent" => subagent(ctx, input),
        "session-end" => session_end(ctx, input),
        other => Err(SessionError::NoHandler(other.to_owned())),
    }
}

// ------------------------------------------------------------------------------------------------
// Events
// ------------------------------------------------------------------------------------------------

/// SessionStart: records the session's scope (host, session, workspace digest of `cwd`), makes
/// sure a catalog is there, and tells the model what still awaits the person's consent.
fn session_start(ctx: &HookContext<'_>, input: &HookInput) -> Result<HookReply, SessionError> {
    let cwd = input.cwd()?;
    ensure_catalog(ctx.layout)?;
    let journal = open_journal(ctx.layout)?;
    let earlier = read_session(&journal, ctx.host, &input.session)?;
    let queries = session_queries(&earlier);
    // What the person approved since the session's last prompt becomes visible now, what rests
    // on a grant they revoked is taken away, and what still awaits them is listed.
    let (activations, pending, retired) = if queries.is_empty() {
        (Activations::default(), Vec::new(), Vec::new())
    } else {
        let runtime = Runtime::open(ctx.layout, UtcMicros(ctx.now.0))?;
        let (retired, notes) = retire_revoked(&runtime, &earlier);
        let mut activations = activate(ctx, cwd, &runtime, &queries);
        activations.errors.extend(notes);
        let pending = pending_challenges(&runtime, &queries, ctx.layout, UtcMicros(ctx.now.0));
        (activations, pending, retired)
    };
    record(
        &journal,
        ctx,
        input,
        "session-start",
        vec![
            (
                "ended_query_refs",
                Json::Arr(retired.iter().map(Json::str).collect()),
            ),
            ("source", opt_str(input.str("source"))),
            ("workspace_digest", Json::str(workspace_digest(cwd))),
        ],
    )?;
    let mut context = format!(
        "ctx manages the capabilities of this session (data directory {}).",
        ctx.layout.root().display()
    );
    activations.describe(&mut context);
    // The model learns only that the person has not decided; the challenges and the commands go
    // to the person alone (spec/decisions.md §15.1: the agent is never told how to approve).
    let mut message = None;
    if !pending.is_empty() {
        let ids: Vec<&str> = pending.iter().map(|(id, _)| id.as_str()).collect();
        context.push_str(&format!(
            " Not decided by the person yet: {}. Only the person can decide, outside this \
             session; carry on without them.",
            ids.join(", ")
        ));
        message = Some(format!(
            "ctx: Awaiting the person's consent: {}. In your own terminal: `ctx consent approve \
             <challenge>` or `ctx consent deny <challenge>`.",
            pending
                .iter()
                .map(|(id, digest)| format!("{id} (challenge {digest})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(HookReply::Context {
        host_event: input.host_event,
        context,
        message,
        // A host that re-scans its skills on request (Claude Code) is asked to when this
        // SessionStart activated some (spec/cli.md §7).
        reload_skills: ctx.host.profile().reloads_skills && activations.skill_activated,
    })
}

/// UserPromptSubmit: the prompt and working directory become a work observation; ctx plans at
/// most five capabilities, chooses the ones this data directory can act on, installs what the
/// policy pre-approves and publishes a consent challenge for the next one.
fn prompt(ctx: &HookContext<'_>, input: &HookInput) -> Result<HookReply, SessionError> {
    let cwd = input.cwd()?.to_owned();
    let prompt = input.str("prompt").unwrap_or_default().to_owned();
    ensure_catalog(ctx.layout)?;
    let runtime = Runtime::open(ctx.layout, UtcMicros(ctx.now.0))?;
    ensure_policy(&runtime)?;
    // The engine keys a planning session by its session id and plans it once, so each prompt
    // is its own engine session: the host session with the input's digest.
    let work = WorkRequest {
        session_id: format!("{}:{}", input.session, &input.digest[..16]),
        workspace: cwd.clone(),
        prompt,
        signals: Vec::new(),
        languages: Vec::new(),
        requested_limit: 5,
    };
    // What the person was already asked in this host session (spec/cli.md §7.3): a capability
    // whose challenge waits, was granted or was denied is not chosen again, so no second
    // challenge is published for it; only an expired one may be asked again.
    let journal = open_journal(ctx.layout)?;
    let earlier = read_session(&journal, ctx.host, &input.session)?;
    // What rests on a grant the person revoked is taken away first (spec/cli.md §7.3).
    let (retired, retire_notes) = retire_revoked(&runtime, &earlier);
    let work_ref = runtime.observe_work(&work)?;
    let query = QueryRequest::new(&logical_id("query", &work_ref), &work_ref)?;
    let prepared = runtime.service().prepare(&query)?;
    let plan_id = prepared.prepared().plan_id();
    let query_ref = prepared.query_ref().to_owned();
    let selections = prepared.prepared().selections();
    // This very prompt delivered again is an exact retry of its own choice, not a second ask.
    let (asked, waiting_queries) = asked_before(
        earlier
            .iter()
            .filter(|r| r.get_str("query_ref") != Some(query_ref.as_str())),
        ctx.layout,
        runtime.trust(),
        UtcMicros(ctx.now.0),
    );
    // The person must set up manual capabilities; everything else this data directory can
    // install (or load from the catalog) is chosen.
    // A capability whose exact install the person denied for this session, this workspace or
    // always is not offered (spec/cli.md §7.3, spec/decisions.md §16).
    let workspace_id = format!("ws-{}", &workspace_digest(&cwd)[..16]);
    let standing_denied: Vec<&str> = selections
        .iter()
        .filter(|s| {
            s.install_descriptor_digest().is_some_and(|d| {
                runtime
                    .trust()
                    .denial_for(s.capability_id(), d, &input.session, &workspace_id)
                    .is_some()
            })
        })
        .map(|s| s.capability_id())
        .collect();
    let chosen: Vec<&str> = selections
        .iter()
        .filter(|s| matches!(s.actionability(), "load" | "install"))
        .map(|s| s.capability_id())
        .filter(|id| uninstallable(runtime.loaded(), id).is_none())
        .filter(|id| !asked.iter().any(|a| a.capability_id == *id))
        .filter(|id| !standing_denied.contains(id))
        .collect();
    let manual: Vec<&str> = selections
        .iter()
        .filter(|s| s.actionability() == "manual")
        .map(|s| s.capability_id())
        .collect();
    // The engine acts on one desired set in order and stops at a consent: a skill loaded from
    // the catalog would wait behind an install the person has not decided. So when a prompt
    // chooses both, the catalog-loaded ones get an engine session of their own (spec/cli.md
    // §7.3) and are active at once.
    let loads: Vec<&str> = chosen
        .iter()
        .copied()
        .filter(|id| {
            selections
                .iter()
                .any(|s| s.capability_id() == *id && s.actionability() == "load")
        })
        .collect();
    let split = !loads.is_empty() && loads.len() < chosen.len();
    let load_query_ref = if split {
        let load_work = WorkRequest {
            session_id: format!("{}:{}:load", input.session, &input.digest[..16]),
            ..work.clone()
        };
        let load_ref = runtime.observe_work(&load_work)?;
        let load_query = QueryRequest::new(&logical_id("query", &load_ref), &load_ref)?;
        let load_prepared = runtime.service().prepare(&load_query)?;
        let load_query_ref = load_prepared.query_ref().to_owned();
        let planned: Vec<&str> = loads
            .iter()
            .copied()
            .filter(|id| {
                load_prepared
                    .prepared()
                    .selections()
                    .iter()
                    .any(|s| s.capability_id() == *id)
            })
            .collect();
        if !planned.is_empty() {
            let request = DesiredSetRequest::new(
                &load_query_ref,
                &logical_id("choice", &load_query_ref),
                &planned,
                None,
            )?;
            runtime.service().set_desired(&request)?;
        }
        Some(load_query_ref)
    } else {
        None
    };
    let main: Vec<&str> = if split {
        chosen
            .iter()
            .copied()
            .filter(|id| !loads.contains(id))
            .collect()
    } else {
        chosen.clone()
    };
    let desired = if main.is_empty() {
        None
    } else {
        // One choice per query: a repeated prompt is an exact retry, which resumes installs and
        // publication instead of minting a new choice.
        let request =
            DesiredSetRequest::new(&query_ref, &logical_id("choice", &query_ref), &main, None)?;
        Some(runtime.service().set_desired(&request)?)
    };
    // A challenge the person already decided — by a standing decision that covers it, or by a
    // grant they signed for the same exact install before — is resolved for them at once, and
    // the plan moves on to its next (spec/decisions.md §16.3). What is left asks the person.
    let mut challenge: Option<(String, String)> =
        desired.as_ref().and_then(|d| d.challenge()).map(|c| {
            (
                c.capability_id().to_owned(),
                c.challenge_digest().to_owned(),
            )
        });
    let mut delegated: Vec<(String, &'static str, String)> = Vec::new();
    let mut delegation_note = None;
    while let Some((id, digest)) = challenge.clone() {
        if delegated.len() >= DELEGATED_PER_PROMPT_MAX {
            break;
        }
        match runtime.resolve_delegated(&digest, &is_hook_session) {
            Ok(Some((basis, result))) => {
                delegated.push((id, result.outcome(), basis.reference().to_owned()));
                challenge = result.next_challenge().map(|c| {
                    (
                        c.capability_id().to_owned(),
                        c.challenge_digest().to_owned(),
                    )
                });
            }
            Ok(None) => break,
            Err(e) => {
                delegation_note = Some(format!("{id} waits for the person: {e}"));
                break;
            }
        }
    }
    let challenge_id = challenge.as_ref().map(|(id, _)| id.as_str());
    let challenge_digest = challenge.as_ref().map(|(_, d)| d.as_str());
    // This prompt's choice, and the earlier prompts' that waited for a consent (the person may
    // have decided meanwhile). An earlier prompt without a challenge had its activations carried
    // out at the time; the session start retries everything.
    // A query whose challenge still waits cannot move: it is not advanced again, so a prompt's
    // cost does not grow with the session's open questions (spec/cli.md §7.3).
    let mut queries = session_queries(
        &earlier
            .iter()
            .filter(|r| r.get_str("challenge_digest").is_some())
            .filter(|r| {
                r.get_str("query_ref")
                    .is_none_or(|q| !waiting_queries.iter().any(|w| w == q))
            })
            .cloned()
            .collect::<Vec<_>>(),
    );
    for q in std::iter::once(&query_ref).chain(load_query_ref.as_ref()) {
        if !queries.contains(q) {
            queries.push(q.clone());
        }
    }
    // A query ended for a revocation is advanced once more, by this call, to carry out its
    // deactivations; later prompts leave it to the session's end.
    let ended_before = ended_queries(&earlier);
    queries.retain(|q| !ended_before.contains(&q.as_str()));
    for q in &retired {
        if !queries.contains(q) {
            queries.push(q.clone());
        }
    }
    let mut activations = activate(ctx, &cwd, &runtime, &queries);
    activations.errors.extend(retire_notes);
    // A denial is told to the model once: ids already reported by an earlier prompt are not.
    let reported: Vec<&str> = earlier
        .iter()
        .filter_map(|r| r.get("declined_capability_ids").and_then(Json::as_arr))
        .flatten()
        .filter_map(Json::as_str)
        .collect();
    let declined: Vec<&str> = selections
        .iter()
        .map(|s| s.capability_id())
        .filter(|id| {
            asked
                .iter()
                .any(|a| a.capability_id == *id && a.outcome == Asked::Denied)
        })
        .chain(standing_denied.iter().copied())
        .filter(|id| !reported.contains(id))
        .collect();
    let delegated_granted: Vec<&str> = delegated
        .iter()
        .filter(|(_, outcome, _)| *outcome != "denied")
        .map(|(id, _, _)| id.as_str())
        .collect();
    record(
        &journal,
        ctx,
        input,
        "prompt",
        vec![
            ("challenge_capability_id", opt_str(challenge_id)),
            ("challenge_digest", opt_str(challenge_digest)),
            (
                "chosen_capability_ids",
                Json::Arr(chosen.iter().map(|id| Json::str(*id)).collect()),
            ),
            (
                "declined_capability_ids",
                Json::Arr(declined.iter().map(|id| Json::str(*id)).collect()),
            ),
            (
                "delegated",
                Json::Arr(
                    delegated
                        .iter()
                        .filter(|(_, outcome, _)| *outcome != "denied")
                        .map(|(id, _, basis)| {
                            Json::object([
                                ("basis", Json::str(basis)),
                                ("capability_id", Json::str(id)),
                            ])
                        })
                        .collect(),
                ),
            ),
            (
                "ended_query_refs",
                Json::Arr(retired.iter().map(Json::str).collect()),
            ),
            ("load_query_ref", opt_str(load_query_ref.as_deref())),
            ("plan_id", Json::str(plan_id)),
            ("query_ref", Json::str(&query_ref)),
            ("status", opt_str(desired.as_ref().map(|d| d.status()))),
            ("workspace_digest", Json::str(workspace_digest(&cwd))),
        ],
    )?;
    let mut context = format!("ctx plan {plan_id}:");
    if selections.is_empty() {
        context.push_str(" no capability is worth offering for this prompt.");
    }
    let failed: &[String] = desired.as_ref().map_or(&[], |d| d.failed_capability_ids());
    for s in selections {
        let id = s.capability_id();
        let before = asked.iter().find(|a| a.capability_id == id);
        let denied_before = before.is_some_and(|a| a.outcome == Asked::Denied)
            || standing_denied.contains(&id)
            || delegated.iter().any(|(d, o, _)| d == id && *o == "denied");
        // A denial reported once is not repeated; the model simply does not get it.
        if denied_before && !declined.contains(&id) {
            continue;
        }
        let label = runtime
            .loaded()
            .catalog()
            .entries()
            .iter()
            .find(|e| e.id == id)
            .map_or("", |e| e.label.as_str());
        let state = if Some(id) == challenge_id
            || before.is_some_and(|a| a.outcome == Asked::Waiting)
        {
            "awaits the person's decision, which only they can give outside this session".to_owned()
        } else if denied_before {
            "was declined by the person; ctx will not offer it again in this session".to_owned()
        } else if before.is_some_and(|a| a.outcome == Asked::Granted) {
            "was approved by the person earlier in this session".to_owned()
        } else if failed.iter().any(|f| f == id) {
            "could not be installed".to_owned()
        } else if manual.contains(&id) {
            "needs manual setup by the person".to_owned()
        } else if activations.is_active(id) {
            "is active".to_owned()
        } else if delegated_granted.contains(&id) {
            "is installed on the person's earlier approval".to_owned()
        } else if chosen.contains(&id) {
            match s.actionability() {
                "load" => "is available from the catalog".to_owned(),
                _ => "is chosen for install".to_owned(),
            }
        } else {
            "cannot be installed by this data directory".to_owned()
        };
        context.push_str(&format!(" {id} ({label}) {state}."));
    }
    activations.describe(&mut context);
    if let Some(note) = delegation_note {
        context.push_str(&format!(" {note}."));
    }
    let message = match (challenge_id, challenge_digest) {
        (Some(id), Some(digest)) => Some(format!(
            "ctx: {id} awaits your consent. In your own terminal run `ctx consent approve \
             {digest}` (or `ctx consent deny {digest}`)."
        )),
        _ => None,
    };
    Ok(HookReply::Context {
        host_event: input.host_event,
        context,
        message,
        reload_skills: false,
    })
}

/// PostToolUse / PostToolUseFailure: records the use of a skill, an agent or an MCP tool and
/// whether it succeeded. Other tools are not ctx's business and are not recorded.
fn tool_outcome(ctx: &HookContext<'_>, input: &HookInput) -> Result<HookReply, SessionError> {
    let tool = input.str("tool_name").unwrap_or_default();
    if !is_capability_tool(tool) {
        return Ok(HookReply::Silent);
    }
    let journal = open_journal(ctx.layout)?;
    let duration = match input.value.get("duration_ms") {
        Some(Json::Int(n)) => Json::Int(*n),
        _ => Json::Null,
    };
    record(
        &journal,
        ctx,
        input,
        "tool-outcome",
        vec![
            ("duration_ms", duration),
            (
                "succeeded",
                Json::Bool(input.host_event != "PostToolUseFailure"),
            ),
            ("tool_name", Json::str(clip_bytes(tool, 128))),
            (
                "tool_use_id",
                opt_str(input.str("tool_use_id").map(|s| clip_bytes(s, 128))),
            ),
        ],
    )?;
    Ok(HookReply::Silent)
}

/// SubagentStart / SubagentStop: records which agent ran, and how long its last message was.
fn subagent(ctx: &HookContext<'_>, input: &HookInput) -> Result<HookReply, SessionError> {
    let journal = open_journal(ctx.layout)?;
    let message_chars = input.str("last_assistant_message").map_or(Json::Null, |m| {
        Json::Int(i64::try_from(m.chars().count()).unwrap_or(i64::MAX))
    });
    let what = if input.host_event == "SubagentStart" {
        "subagent-start"
    } else {
        "subagent-stop"
    };
    record(
        &journal,
        ctx,
        input,
        what,
        vec![
            (
                "agent_id",
                opt_str(input.str("agent_id").map(|s| clip_bytes(s, 128))),
            ),
            (
                "agent_type",
                opt_str(input.str("agent_type").map(|s| clip_bytes(s, 128))),
            ),
            ("last_message_chars", message_chars),
        ],
    )?;
    Ok(HookReply::Silent)
}

/// SessionEnd: ends the engine session of every prompt of the session, takes away what they
/// activated (unless another session still holds it), and records that the scope closed.
fn session_end(ctx: &HookContext<'_>, input: &HookInput) -> Result<HookReply, SessionError> {
    let journal = open_journal(ctx.layout)?;
    let queries = session_queries(&read_session(&journal, ctx.host, &input.session)?);
    let mut notes = Vec::new();
    if !queries.is_empty() {
        let runtime = Runtime::open(ctx.layout, UtcMicros(ctx.now.0))?;
        for query_ref in &queries {
            if let Err(e) = runtime.service().end_session(query_ref) {
                notes.push(format!("{query_ref}: {e}"));
            }
        }
        let cwd = input.cwd().unwrap_or("/");
        let activations = activate(ctx, cwd, &runtime, &queries);
        notes.extend(activations.errors);
    }
    record(
        &journal,
        ctx,
        input,
        "session-end",
        vec![
            (
                "reason",
                opt_str(input.str("reason").map(|s| clip_bytes(s, 64))),
            ),
            (
                "notes",
                Json::Arr(
                    notes
                        .iter()
                        .map(|n| Json::str(clip_bytes(n, 256)))
                        .collect(),
                ),
            ),
        ],
    )?;
    Ok(HookReply::Silent)
}

// ------------------------------------------------------------------------------------------------
// Activation
// ------------------------------------------------------------------------------------------------

/// What the activations of one hook call did.
#[derive(Debug, Default)]
struct Activations {
    report: ActivationReport,
    skill_activated: bool,
    /// Sentences about queries the driver could not advance.
    errors: Vec<String>,
}

impl Activations {
    fn is_active(&self, id: &str) -> bool {
        self.report.activated.iter().any(|a| a == id)
    }

    /// Appends what changed on the host to the model's context.
    fn describe(&self, context: &mut String) {
        let r = &self.report;
        if !r.activated.is_empty() {
            context.push_str(&format!(" Activated now: {}.", r.activated.join(", ")));
        }
        if !r.deactivated.is_empty() {
            context.push_str(&format!(" Deactivated: {}.", r.deactivated.join(", ")));
        }
        for (id, why) in r.refused.iter().chain(&r.indeterminate) {
            context.push_str(&format!(" {id} was not activated: {why}."));
        }
        for e in &self.errors {
            context.push_str(&format!(" {e}."));
        }
    }
}

/// Carries out the pending activations (and, after a session end, deactivations) of `queries`
/// with this host's actuator. Failures are reported, never fatal: planning already happened.
fn activate(
    ctx: &HookContext<'_>,
    cwd: &str,
    runtime: &Runtime,
    queries: &[String],
) -> Activations {
    let mut out = Activations::default();
    let home = match &ctx.home {
        Ok(home) => home.clone(),
        Err(e) => {
            out.errors.push(format!("ctx activates nothing here: {e}"));
            return out;
        }
    };
    let journal = match open_journal(ctx.layout) {
        Ok(j) => j,
        Err(e) => {
            out.errors.push(e.to_string());
            return out;
        }
    };
    let driver = HostActivationDriver::new(
        ctx.host,
        home,
        Some(std::path::Path::new(cwd)),
        &ctx.layout.activation_store(),
        journal,
        runtime.loaded(),
        ctx.now,
    );
    for query_ref in queries {
        match runtime.service().advance_activations(query_ref, &driver) {
            Ok(report) => {
                out.skill_activated |= report.activated.iter().any(|id| id.starts_with("skill:"));
                out.report.activated.extend(report.activated);
                out.report.deactivated.extend(report.deactivated);
                out.report.refused.extend(report.refused);
                out.report.indeterminate.extend(report.indeterminate);
            }
            Err(e) => out.errors.push(format!("activation stopped: {e}")),
        }
    }
    out
}

// ------------------------------------------------------------------------------------------------
// The session stream
// ------------------------------------------------------------------------------------------------

/// True when `session_id` (an engine session's) is one a host hook opened: its challenges need
/// presence (spec/decisions.md §12.4).
pub fn is_hook_session(session_id: &str) -> bool {
    AgentHost::ALL
        .iter()
        .any(|host| session_id.starts_with(&format!("{}:", host.as_str())))
}

/// The journal stream of a host session (`session` is `<host>:<session_id>`).
pub fn session_stream(host: AgentHost, session: &str) -> Result<StreamId, SessionError> {
    StreamId::derive(
        HOST_SESSION_NAMESPACE,
        format!("{host}\n{session}").as_bytes(),
    )
    .map_err(|source| SessionError::Stream {
        session: session.to_owned(),
        source,
    })
}

fn open_journal(layout: &Layout) -> Result<Journal, SessionError> {
    ctx_service::open_journal(
        &layout.journal(),
        &OpenOptions::new().lock_wait(JOURNAL_LOCK_WAIT),
    )
    .map_err(SessionError::Journal)
}

/// Appends one hook call to the session's stream. The event id is a digest of the host's input,
/// so the same call delivered twice is recorded once (the journal replays the first append).
fn record(
    journal: &Journal,
    ctx: &HookContext<'_>,
    input: &HookInput,
    what: &str,
    fields: Vec<(&str, Json)>,
) -> Result<(), SessionError> {
    let host = ctx.host;
    let stream = session_stream(host, &input.session)?;
    let mut payload = vec![
        ("event", Json::str(what)),
        ("hook_event_name", Json::str(input.host_event)),
        ("host", Json::str(host.as_str())),
        ("input_digest", Json::str(&input.digest)),
        ("schema", Json::str(HOST_SESSION_KIND)),
        ("session_id", Json::str(&input.session)),
    ];
    payload.extend(fields);
    let payload = Json::object(payload).to_string().into_bytes();
    let event_id = format!(
        "hook-{}",
        sha256_hex(&format!("{host}\n{what}\n{}", input.digest))
    );
    let append = StreamAppend::new(
        stream,
        ExpectedRevision::Any,
        vec![NewRecord::new(
            event_id,
            HOST_SESSION_KIND,
            ctx.now,
            payload,
        )],
    );
    match journal.append(append) {
        // The host delivered this very input before (at another time, or after the plan moved
        // on): the first delivery's record stands.
        Ok(_) | Err(AppendError::Conflict { .. }) => Ok(()),
        Err(e) => Err(SessionError::Record(e)),
    }
}

/// The payloads of a session's records, oldest first (at most [`SESSION_RECORDS_READ_MAX`]).
/// `session` is `<host>:<session_id>`.
pub fn read_session(
    journal: &Journal,
    host: AgentHost,
    session: &str,
) -> Result<Vec<Json>, SessionError> {
    let stream = session_stream(host, session)?;
    let records = journal
        .read_stream(&stream, 1, SESSION_RECORDS_READ_MAX)
        .map_err(SessionError::ReadSession)?;
    Ok(records
        .iter()
        .filter_map(|r| std::str::from_utf8(&r.payload).ok())
        .filter_map(|t| Json::parse(t).ok())
        .collect())
}

/// The queries of a session's prompts, oldest first, without repeats, the last
/// [`SESSION_QUERIES_MAX`].
fn session_queries(session: &[Json]) -> Vec<String> {
    let mut queries: Vec<String> = Vec::new();
    for value in session {
        for q in [value.get_str("query_ref"), value.get_str("load_query_ref")]
            .into_iter()
            .flatten()
        {
            if !queries.iter().any(|known| known == q) {
                queries.push(q.to_owned());
            }
        }
    }
    let skip = queries.len().saturating_sub(SESSION_QUERIES_MAX);
    queries.split_off(skip)
}

/// The capabilities a prompt record says were granted for the person from an earlier decision,
/// with the basis each rested on (a standing decision id or a challenge digest).
fn delegated_of(record: &Json) -> impl Iterator<Item = (&str, &str)> {
    record
        .get("delegated")
        .and_then(Json::as_arr)
        .into_iter()
        .flatten()
        .filter_map(|d| Some((d.get_str("capability_id")?, d.get_str("basis")?)))
}

/// The queries a session's prompts ended for a revocation.
fn ended_queries(session: &[Json]) -> Vec<&str> {
    session
        .iter()
        .filter_map(|r| r.get("ended_query_refs").and_then(Json::as_arr))
        .flatten()
        .filter_map(Json::as_str)
        .collect()
}

/// The queries of a session that rest on a grant the person revoked since and were not ended
/// yet: the challenge its prompt asked, or a basis a grant of it rested on (spec/cli.md §7.3).
fn revoked_queries(session: &[Json], trust: &TrustState) -> Vec<String> {
    let ended = ended_queries(session);
    let mut revoked: Vec<String> = Vec::new();
    for record in session {
        let Some(query_ref) = record.get_str("query_ref") else {
            continue;
        };
        let asked_revoked = record
            .get_str("challenge_digest")
            .is_some_and(|d| trust.challenge_revoked(d, u64::MAX));
        let basis_revoked = delegated_of(record).any(|(_, basis)| trust.basis_revoked(basis));
        if (asked_revoked || basis_revoked)
            && !ended.contains(&query_ref)
            && !revoked.iter().any(|q| q == query_ref)
        {
            revoked.push(query_ref.to_owned());
        }
    }
    revoked
}

/// Ends the engine sessions of the queries whose grant the person revoked (their capabilities
/// are deactivated by the activation pass that follows) and returns them, with a sentence for
/// each that could not be ended.
fn retire_revoked(runtime: &Runtime, session: &[Json]) -> (Vec<String>, Vec<String>) {
    let mut ended = Vec::new();
    let mut notes = Vec::new();
    for query_ref in revoked_queries(session, runtime.trust()) {
        match runtime.service().end_session(&query_ref) {
            Ok(_) => ended.push(query_ref),
            Err(e) => notes.push(format!("a revoked grant stays active for now: {e}")),
        }
    }
    (ended, notes)
}

/// How an earlier challenge of a host session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Waiting,
    Granted,
    Denied,
}

/// A capability the person was already asked about in this host session.
#[derive(Debug, Clone)]
struct AskedBefore {
    capability_id: String,
    outcome: Asked,
}

/// The capabilities the session's earlier prompts published a challenge for, with how each
/// stands now; an expired challenge (or one that cannot be read) is not listed, so it may be
/// asked again. The newest challenge of a capability wins. Also the queries whose challenge still
/// waits for the person: nothing in them can move until the person decides.
fn asked_before<'a>(
    session: impl Iterator<Item = &'a Json>,
    layout: &Layout,
    trust: &TrustState,
    now: UtcMicros,
) -> (Vec<AskedBefore>, Vec<String>) {
    let mut asked: Vec<AskedBefore> = Vec::new();
    let mut waiting_queries: Vec<String> = Vec::new();
    let mut session = session
        .filter(|v| {
            v.get_str("challenge_digest").is_some()
                || v.get("delegated")
                    .and_then(Json::as_arr)
                    .is_some_and(|a| !a.is_empty())
        })
        .peekable();
    // Most prompts follow none that asked: the consent store is opened only when one did.
    if session.peek().is_none() {
        return (asked, waiting_queries);
    }
    let Ok(reader) = ChallengeReader::open(layout) else {
        return (asked, waiting_queries);
    };
    for value in session {
        // Granted for the person from their earlier decision, and activated by that prompt.
        // A grant the person revoked since counts as never given: it may be asked again.
        for (id, basis) in delegated_of(value) {
            asked.retain(|a| a.capability_id != id);
            if !trust.basis_revoked(basis) {
                asked.push(AskedBefore {
                    capability_id: id.to_owned(),
                    outcome: Asked::Granted,
                });
            }
        }
        let (Some(id), Some(digest)) = (
            value.get_str("challenge_capability_id"),
            value.get_str("challenge_digest"),
        ) else {
            continue;
        };
        let Ok(record) = reader.get(digest, now) else {
            continue;
        };
        let outcome = match (record.state(), record.decision()) {
            (ChallengeState::Expired, _) => None,
            (_, Some("granted")) if trust.challenge_revoked(digest, u64::MAX) => None,
            (ChallengeState::Pending | ChallengeState::ReauthenticationRequired, _) => {
                Some(Asked::Waiting)
            }
            (_, Some("denied")) => Some(Asked::Denied),
            (_, _) => Some(Asked::Granted),
        };
        if outcome == Some(Asked::Waiting)
            && let Some(query_ref) = value.get_str("query_ref")
        {
            waiting_queries.push(query_ref.to_owned());
        }
        asked.retain(|a| a.capability_id != id);
        if let Some(outcome) = outcome {
            asked.push(AskedBefore {
                capability_id: id.to_owned(),
                outcome,
            });
        }
    }
    (asked, waiting_queries)
}

/// The consent challenges the session's queries wait on now: (capability id, challenge digest),
/// oldest query first. A query publishes its next challenge when the person decides the one
/// before, so the engine's current state is asked, not the prompts' records.
fn pending_challenges(
    runtime: &Runtime,
    queries: &[String],
    layout: &Layout,
    now: UtcMicros,
) -> Vec<(String, String)> {
    let mut pending: Vec<(String, String)> = Vec::new();
    for query_ref in queries {
        let Ok(result) = runtime.service().reopen(query_ref) else {
            continue;
        };
        let Some(challenge) = result.challenge() else {
            continue;
        };
        let digest = challenge.challenge_digest();
        // A challenge that expired or was decided awaits nothing.
        let waiting = challenge_record(layout, digest, now)
            .is_ok_and(|r| r.state() == ChallengeState::Pending);
        if waiting && !pending.iter().any(|(_, d)| d == digest) {
            pending.push((challenge.capability_id().to_owned(), digest.to_owned()));
        }
    }
    pending
}

// ------------------------------------------------------------------------------------------------
// Helpers
// ------------------------------------------------------------------------------------------------

/// Ingests the sample catalog compiled into ctx when the data directory has none yet, so a host
/// that registered ctx's hooks works from its first session.
fn ensure_catalog(layout: &Layout) -> Result<(), SessionError> {
    if layout.catalog().join("catalog.json").is_file() {
        return Ok(());
    }
    ingest_catalog(layout, None)
        .map(|_| ())
        .map_err(SessionError::Catalog)
}

/// Persists the safe default install policy (every install asks the person) when none is: a
/// signed consent is only accepted under an explicitly persisted policy, so without this the
/// person could never approve what the hook asks for.
fn ensure_policy(runtime: &Runtime) -> Result<(), SessionError> {
    let store = runtime.policy_store();
    let persisted = store.has_persisted().map_err(SessionError::PolicyRead)?;
    if !persisted {
        store
            .persist(&InstallConsentPolicy::safe_default())
            .map_err(SessionError::PolicyPersist)?;
    }
    Ok(())
}

fn opt_str(value: Option<&str>) -> Json {
    value.map_or(Json::Null, Json::str)
}

/// Whether a tool is a capability ctx may have activated: a skill, an agent, or an MCP tool.
fn is_capability_tool(name: &str) -> bool {
    matches!(name, "Skill" | "Agent" | "Task") || name.starts_with("mcp__")
}

fn workspace_digest(cwd: &str) -> String {
    sha256_hex(&format!("ctx-workspace:{cwd}"))
}

/// At most [`HOOK_TEXT_MAX_CHARS`] characters, marked when cut.
fn clip(text: &str) -> String {
    if text.chars().count() <= HOOK_TEXT_MAX_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(HOOK_TEXT_MAX_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// At most `max` bytes, cut at a character boundary: for host-supplied names stored in records.
fn clip_bytes(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_keeps_the_hosts_limit_and_character_boundaries() {
        let long = "é".repeat(HOOK_TEXT_MAX_CHARS + 5);
        let clipped = clip(&long);
        assert_eq!(clipped.chars().count(), HOOK_TEXT_MAX_CHARS);
        assert!(clipped.ends_with('…'));
        assert_eq!(clip("short"), "short");
        assert_eq!(clip_bytes("aé", 2), "a");
        assert_eq!(clip_bytes("abc", 8), "abc");
    }

    #[test]
    fn only_capability_tools_are_recorded() {
        for tool in ["Skill", "Agent", "Task", "mcp__github__create_issue"] {
            assert!(is_capability_tool(tool), "{tool}");
        }
        for tool in ["Bash", "Read", "mcp", "skill"] {
            assert!(!is_capability_tool(tool), "{tool}");
        }
    }
}
