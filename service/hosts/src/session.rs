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
const SESSION_QUERIES_MAX: usize = 64;

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
    /// The journal refuses writes: it failed an integrity check.
    #[error(
        "ctx stopped writing to its journal because it failed an integrity check: {detail}. \
         Nothing is planned, asked or installed until it is repaired; `ctx audit` shows what failed"
    )]
    Integrity { detail: String },
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
    // Temporary files of killed writes in the work directory go at a session's start (the
    // directory grows with every prompt, so not at every open; spec/cli.md §2).
    ctx_service::sweep_work(ctx.layout, UtcMicros(ctx.now.0));
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
    let journal = open_journal(ctx.layout)?;
    // The prompt is one unit of work: its records share one sync, made before its first effect
    // outside the journal and after its last (spec/journal.md §14; spec/service.md §13).
    let unit = PromptUnit::begin(&journal);
    let runtime = Runtime::open(ctx.layout, UtcMicros(ctx.now.0))?;
    ensure_policy(&runtime)?;
    let earlier = read_session(&journal, ctx.host, &input.session)?;
    // The person may type the very same prompt again ("continue", "yes"): Claude Code's input
    // is then byte for byte the same. A prompt whose record exists was answered, so this is a
    // new prompt, told apart by how often it came before; a delivery killed before its record
    // is an exact retry of itself (spec/cli.md §7.1).
    let repeats = earlier
        .iter()
        .filter(|r| r.get_str("event") == Some("prompt"))
        .filter(|r| {
            r.get_str("host_input_digest")
                .or_else(|| r.get_str("input_digest"))
                == Some(input.digest.as_str())
        })
        .count();
    let host_digest = input.digest.clone();
    let repeated;
    let input = if repeats == 0 {
        input
    } else {
        repeated = HookInput {
            digest: sha256_hex(&format!("{}:{repeats}", input.digest)),
            ..input.clone()
        };
        &repeated
    };
    // What rests on a grant the person revoked is taken away first (spec/cli.md §7.3).
    let (retired, retire_notes) = retire_revoked(&runtime, &earlier);
    // The engine keys a planning session by its session id and plans it once, so each prompt
    // is its own engine session: the host session with the input's digest.
    let prompt_session = format!("{}:{}", input.session, &input.digest[..16]);
    let work = WorkRequest {
        session_id: prompt_session.clone(),
        workspace: cwd.clone(),
        prompt,
        signals: Vec::new(),
        languages: Vec::new(),
        requested_limit: 5,
    };
    let work_ref = runtime.observe_work(&work)?;
    let query = QueryRequest::new(&logical_id("query", &work_ref), &work_ref)?;
    let prepared = runtime.service().prepare(&query)?;
    let plan_id = prepared.prepared().plan_id();
    let query_ref = prepared.query_ref().to_owned();
    let selections = prepared.prepared().selections();
    // What the person was already asked in this host session (spec/cli.md §7.3): a capability
    // whose challenge waits, was granted or was denied is not chosen again, so no second
    // challenge is published for it; only an expired or revoked one may be asked again. This
    // very prompt delivered again is an exact retry of its own choice, not a second ask.
    let (asked, waiting_queries) = asked_before(
        earlier
            .iter()
            .filter(|r| r.get_str("query_ref") != Some(query_ref.as_str())),
        ctx.layout,
        runtime.trust(),
        UtcMicros(ctx.now.0),
    );
    // A capability whose exact install the person denied for this session, this workspace or
    // always is not offered (spec/decisions.md §16).
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
    // The person must set up manual capabilities; everything else this data directory can
    // install (or load from the catalog) is chosen.
    let chosen: Vec<(&str, &str)> = selections
        .iter()
        .filter(|s| matches!(s.actionability(), "load" | "install"))
        .map(|s| (s.capability_id(), s.actionability()))
        .filter(|(id, _)| uninstallable(runtime.catalog(), id).is_none())
        .filter(|(id, _)| !asked.iter().any(|a| a.capability_id == *id))
        .filter(|(id, _)| !standing_denied.contains(id))
        .collect();
    let manual: Vec<&str> = selections
        .iter()
        .filter(|s| s.actionability() == "manual")
        .map(|s| s.capability_id())
        .collect();
    // The engine acts on one desired set in order and stops at a consent, so nothing waits
    // behind an install the person has not decided (spec/cli.md §7.3): the prompt's own query
    // holds what loads from the catalog, and every install gets an engine session of its own
    // (`<host session>:<16 hex>:i`), asked, decided and activated on its own.
    let loads: Vec<&str> = chosen
        .iter()
        .filter(|(_, a)| *a == "load")
        .map(|(id, _)| *id)
        .collect();
    let desired = if loads.is_empty() {
        None
    } else {
        // One choice per query: a repeated prompt is an exact retry, which resumes activations
        // instead of minting a new choice.
        let request =
            DesiredSetRequest::new(&query_ref, &logical_id("choice", &query_ref), &loads, None)?;
        Some(runtime.service().set_desired(&request)?)
    };
    // An install's engine session is named by the prompt and the capability, so a redelivered
    // prompt retries each install's own choice exactly.
    let installs: Vec<InstallChoice> = chosen
        .iter()
        .filter(|(_, a)| *a == "install")
        .map(|(id, _)| {
            let key = &sha256_hex(&format!("{prompt_session}\n{id}"))[..16];
            choose_install(&runtime, &work, &format!("{}:{key}:i", input.session), id)
        })
        .collect();
    // This prompt's queries, and the earlier prompts' whose install the person may have decided
    // meanwhile. An earlier prompt's loads were activated at the time; the session start retries
    // everything. A query whose challenge still waits cannot move: it is not advanced again, so
    // a prompt's cost does not grow with the session's open questions (spec/cli.md §7.3).
    let mut queries: Vec<String> = earlier
        .iter()
        .flat_map(install_queries)
        .filter(|(_, q, _)| !waiting_queries.iter().any(|w| w == q))
        .map(|(_, q, _)| q.to_owned())
        .collect();
    queries.extend(legacy_queries(&earlier, &waiting_queries));
    // This prompt's own query goes first, so what it loads again is held by it before an
    // earlier prompt's query lets go of it.
    queries.insert(0, query_ref.clone());
    queries.extend(installs.iter().filter_map(|i| i.query_ref.clone()));
    // A query ended for a revocation or a task shift is advanced once more, by this call, to
    // carry out its deactivations; later prompts leave it to the session's end.
    let ended_before = ended_queries(&earlier);
    queries.retain(|q| !ended_before.contains(&q.as_str()));
    queries.extend(retired.iter().cloned());
    // Task shift (spec/cli.md §7.3): a prompt that plans something replaces what the session's
    // earlier prompts loaded from the catalog; what it plans again stays active, the rest is
    // deactivated. A prompt that plans nothing ("yes", "continue") shifts nothing.
    let (shifted, shift_notes) = if selections.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        shift_loads(&runtime, &earlier, &query_ref, &ended_before)
    };
    queries.extend(shifted.iter().cloned());
    let mut unique: Vec<String> = Vec::new();
    for q in queries {
        if !unique.contains(&q) {
            unique.push(q);
        }
    }
    let mut activations = activate(ctx, &cwd, &runtime, &unique);
    // Ended in engine terms, but still held by this prompt: not deactivated on the host.
    activations
        .report
        .deactivated
        .retain(|id| !loads.contains(&id.as_str()));
    activations.errors.extend(retire_notes);
    activations.errors.extend(shift_notes);
    activations
        .errors
        .extend(installs.iter().filter_map(|i| i.note.clone()));
    // A denial is told to the model once: ids already reported by an earlier prompt are not.
    let reported: Vec<&str> = earlier
        .iter()
        .filter_map(|r| r.get("declined_capability_ids").and_then(Json::as_arr))
        .flatten()
        .filter_map(Json::as_str)
        .collect();
    let denied_now: Vec<&str> = installs
        .iter()
        .filter(|i| i.denied)
        .map(|i| i.capability_id.as_str())
        .collect();
    let declined: Vec<&str> = selections
        .iter()
        .map(|s| s.capability_id())
        .filter(|id| {
            asked
                .iter()
                .any(|a| a.capability_id == *id && a.outcome == Asked::Denied)
                || standing_denied.contains(id)
                || denied_now.contains(id)
        })
        .filter(|id| !reported.contains(id))
        .collect();
    record(
        &journal,
        ctx,
        input,
        "prompt",
        vec![
            (
                "chosen_capability_ids",
                Json::Arr(chosen.iter().map(|(id, _)| Json::str(*id)).collect()),
            ),
            (
                "declined_capability_ids",
                Json::Arr(declined.iter().map(|id| Json::str(*id)).collect()),
            ),
            (
                "ended_query_refs",
                Json::Arr(retired.iter().chain(&shifted).map(Json::str).collect()),
            ),
            ("host_input_digest", Json::str(host_digest)),
            (
                "installs",
                Json::Arr(installs.iter().map(InstallChoice::to_json).collect()),
            ),
            ("plan_id", Json::str(plan_id)),
            ("query_ref", Json::str(&query_ref)),
            ("status", opt_str(desired.as_ref().map(|d| d.status()))),
            ("workspace_digest", Json::str(workspace_digest(&cwd))),
        ],
    )?;
    // What the reply tells the person and the model is durable before they read it.
    unit.end().map_err(SessionError::Record)?;
    let mut context = format!("ctx plan {plan_id}:");
    if selections.is_empty() {
        context.push_str(" no capability is worth offering for this prompt.");
    }
    let failed: &[String] = desired.as_ref().map_or(&[], |d| d.failed_capability_ids());
    // The person reads the selections in benefit order, most relevant first, each with the
    // words of the prompt it matched (spec/catalog.md §5.5); the plan keeps its canonical order.
    let mut presented: Vec<_> = selections.iter().collect();
    presented.sort_by_key(|s| {
        (
            std::cmp::Reverse(s.individual_net_benefit_u()),
            std::cmp::Reverse(s.marginal_net_benefit_u()),
        )
    });
    for s in presented {
        let id = s.capability_id();
        let before = asked.iter().find(|a| a.capability_id == id);
        let now = installs.iter().find(|i| i.capability_id == id);
        let denied_before = before.is_some_and(|a| a.outcome == Asked::Denied)
            || standing_denied.contains(&id)
            || denied_now.contains(&id);
        // A denial reported once is not repeated; the model simply does not get it.
        if denied_before && !declined.contains(&id) {
            continue;
        }
        let label = runtime.catalog().entry(id).map_or("", |e| e.label.as_str());
        let state = if now.is_some_and(|i| i.challenge.is_some())
            || before.is_some_and(|a| a.outcome == Asked::Waiting)
        {
            "awaits the person's decision, which only they can give outside this session"
        } else if denied_before {
            "was declined by the person; ctx will not offer it again in this session"
        } else if activations.is_active(id) {
            "is active"
        } else if before.is_some_and(|a| a.outcome == Asked::Granted) {
            "was approved by the person earlier in this session"
        } else if now.is_some_and(|i| i.failed) || failed.iter().any(|f| f == id) {
            "could not be installed"
        } else if now.is_some_and(|i| i.basis.is_some()) {
            "is installed on the person's earlier approval"
        } else if manual.contains(&id) {
            "needs manual setup by the person"
        } else if chosen.iter().any(|(c, _)| *c == id) {
            match s.actionability() {
                "load" => "is available from the catalog",
                _ => "is chosen for install",
            }
        } else {
            "cannot be installed by this data directory"
        };
        let matched = if s.matching_signals().is_empty() {
            String::new()
        } else {
            format!("; matched: {}", s.matching_signals().join(", "))
        };
        context.push_str(&format!(" {id} ({label}{matched}) {state}."));
    }
    activations.describe(&mut context);
    let ask: Vec<(&str, &str)> = installs
        .iter()
        .filter_map(|i| Some((i.capability_id.as_str(), i.challenge.as_deref()?)))
        .collect();
    let message = match ask.as_slice() {
        [] => None,
        [(id, digest)] => Some(format!(
            "ctx: {id} awaits your consent. In your own terminal run `ctx consent approve \
             {digest}` (or `ctx consent deny {digest}`)."
        )),
        several => Some(format!(
            "ctx: {} await your consent. In your own terminal run {}; or `ctx consent pending` \
             to see them all.",
            several
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
                .join(", "),
            several
                .iter()
                .map(|(id, digest)| format!("`ctx consent approve {digest}` ({id})"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    };
    Ok(HookReply::Context {
        host_event: input.host_event,
        context,
        message,
        reload_skills: false,
    })
}

/// What one prompt did about one install it chose, in its own engine session.
#[derive(Debug, Default)]
struct InstallChoice {
    capability_id: String,
    /// The install's query, once it was prepared.
    query_ref: Option<String>,
    /// The challenge that asks the person, when nothing they decided before covers it.
    challenge: Option<String>,
    /// The standing decision id or challenge digest ctx resolved the install on, if it did.
    basis: Option<String>,
    /// The person's earlier decision denied it.
    denied: bool,
    failed: bool,
    /// A sentence for the model when the install could not be chosen.
    note: Option<String>,
}

impl InstallChoice {
    fn to_json(&self) -> Json {
        Json::object([
            ("basis", opt_str(self.basis.as_deref())),
            ("capability_id", Json::str(&self.capability_id)),
            ("challenge_digest", opt_str(self.challenge.as_deref())),
            ("denied", Json::Bool(self.denied)),
            ("query_ref", opt_str(self.query_ref.as_deref())),
        ])
    }
}

/// Plans `work` again as engine session `session`, chooses the install `capability_id` alone,
/// and resolves its challenge for the person when a decision of theirs already covers it
/// (spec/decisions.md §16.3). Failures become a note: planning already happened.
fn choose_install(
    runtime: &Runtime,
    work: &WorkRequest,
    session: &str,
    capability_id: &str,
) -> InstallChoice {
    let mut choice = InstallChoice {
        capability_id: capability_id.to_owned(),
        ..InstallChoice::default()
    };
    if let Err(e) = try_install(runtime, work, session, &mut choice) {
        choice.note = Some(format!("{capability_id} was not offered: {e}"));
    }
    choice
}

fn try_install(
    runtime: &Runtime,
    work: &WorkRequest,
    session: &str,
    choice: &mut InstallChoice,
) -> Result<(), SessionError> {
    let install_work = WorkRequest {
        session_id: session.to_owned(),
        ..work.clone()
    };
    let work_ref = runtime.observe_work(&install_work)?;
    let query = QueryRequest::new(&logical_id("query", &work_ref), &work_ref)?;
    let prepared = runtime.service().prepare(&query)?;
    let query_ref = prepared.query_ref().to_owned();
    choice.query_ref = Some(query_ref.clone());
    let request = DesiredSetRequest::new(
        &query_ref,
        &logical_id("choice", &query_ref),
        &[choice.capability_id.as_str()],
        None,
    )?;
    let desired = runtime.service().set_desired(&request)?;
    choice.failed = desired
        .failed_capability_ids()
        .contains(&choice.capability_id);
    let Some(challenge) = desired.challenge() else {
        return Ok(());
    };
    let digest = challenge.challenge_digest().to_owned();
    match runtime.resolve_delegated(&digest, &is_hook_session)? {
        Some((basis, result)) => {
            choice.basis = Some(basis.reference().to_owned());
            choice.denied = result.outcome() == "denied";
            choice.failed |= result.outcome() == "install-failed";
        }
        None => choice.challenge = Some(digest),
    }
    Ok(())
}

/// Ends the queries of the session's earlier prompts that hold what they loaded from the catalog
/// (the prompt's own query; not those that asked the person something, which older records' own
/// queries did), except `current` and those ended already. Returns them, with a sentence for each
/// that could not be ended.
fn shift_loads(
    runtime: &Runtime,
    session: &[Json],
    current: &str,
    ended: &[&str],
) -> (Vec<String>, Vec<String>) {
    let mut shifted: Vec<String> = Vec::new();
    let mut notes = Vec::new();
    let loads = session
        .iter()
        .filter(|r| r.get_str("event") == Some("prompt"))
        .filter(|r| r.get_str("challenge_digest").is_none())
        .flat_map(|r| [r.get_str("query_ref"), r.get_str("load_query_ref")])
        .flatten();
    for query_ref in loads {
        if query_ref == current
            || ended.contains(&query_ref)
            || shifted.iter().any(|q| q == query_ref)
        {
            continue;
        }
        match runtime.service().end_session(query_ref) {
            Ok(_) => shifted.push(query_ref.to_owned()),
            Err(e) => notes.push(format!("an earlier prompt's skills stay active: {e}")),
        }
    }
    (shifted, notes)
}

/// The install queries a prompt record names: (capability id, query ref, challenge digest).
fn install_queries(record: &Json) -> Vec<(&str, &str, Option<&str>)> {
    record
        .get("installs")
        .and_then(Json::as_arr)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            Some((
                i.get_str("capability_id")?,
                i.get_str("query_ref")?,
                i.get_str("challenge_digest"),
            ))
        })
        .collect()
}

/// The queries of prompt records written before installs had queries of their own (one query
/// that asked `challenge_digest`, and a `load_query_ref`), except those that wait.
fn legacy_queries(session: &[Json], waiting: &[String]) -> Vec<String> {
    session
        .iter()
        .filter(|r| r.get_str("challenge_digest").is_some())
        .filter_map(|r| r.get_str("query_ref"))
        .filter(|q| !waiting.iter().any(|w| w == q))
        .map(str::to_owned)
        .collect()
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
        runtime.catalog(),
        &runtime.catalog_dir(),
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

/// A prompt's unit of work (spec/journal.md §14). It ends on every way out of the prompt, so
/// that a process that goes on (a platform that runs hooks in its own process) appends durably
/// again: [`PromptUnit::end`] on the normal way, reporting a failed sync; on an early return the
/// drop ends it, syncing what the unit committed (each commit is whole, so that is a consistent
/// state). A panic leaves the unit to the journal's close, as a crash would.
struct PromptUnit<'j> {
    journal: &'j Journal,
    ended: bool,
}

impl<'j> PromptUnit<'j> {
    fn begin(journal: &'j Journal) -> PromptUnit<'j> {
        journal.defer_durability();
        PromptUnit {
            journal,
            ended: false,
        }
    }

    fn end(mut self) -> Result<(), AppendError> {
        self.ended = true;
        self.journal.end_unit()
    }
}

impl Drop for PromptUnit<'_> {
    fn drop(&mut self) {
        if !self.ended && !std::thread::panicking() {
            let _ = self.journal.end_unit();
        }
    }
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

/// Opens the data directory's journal; one that refuses writes (a record it builds on failed
/// authentication, or `ctx audit` found it damaged) stops the hook before it plans or writes
/// anything, with one sentence for the person (spec/cli.md §7.4).
fn open_journal(layout: &Layout) -> Result<Journal, SessionError> {
    let journal = ctx_service::open_journal(
        &layout.journal(),
        &OpenOptions::new().lock_wait(JOURNAL_LOCK_WAIT),
    )
    .map_err(SessionError::Journal)?;
    match journal.write_refusal() {
        Some(detail) => Err(SessionError::Integrity {
            detail: detail.to_owned(),
        }),
        None => Ok(journal),
    }
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
        let installs = install_queries(value).into_iter().map(|(_, q, _)| Some(q));
        for q in [value.get_str("query_ref"), value.get_str("load_query_ref")]
            .into_iter()
            .chain(installs)
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
        for asked in asked_installs(record) {
            let Some(query_ref) = asked.query_ref else {
                continue;
            };
            let gone = asked
                .challenge
                .is_some_and(|d| trust.challenge_revoked(d, u64::MAX))
                || asked.basis.is_some_and(|b| trust.basis_revoked(b));
            if gone && !ended.contains(&query_ref) && !revoked.iter().any(|q| q == query_ref) {
                revoked.push(query_ref.to_owned());
            }
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
    let mut reader: Option<Option<ChallengeReader>> = None;
    for value in session {
        for AskedInstall {
            capability_id: id,
            query_ref,
            challenge,
            basis,
            denied,
        } in asked_installs(value)
        {
            let outcome = match (challenge, basis) {
                // Resolved for the person from their earlier decision; a basis they revoked
                // since counts as never given, so it may be asked again.
                (_, Some(basis)) if trust.basis_revoked(basis) => None,
                (_, Some(_)) if denied => Some(Asked::Denied),
                (_, Some(_)) => Some(Asked::Granted),
                (Some(digest), None) => {
                    // Most prompts follow none that asked: the consent store is opened only
                    // when one did.
                    let Some(reader) =
                        reader.get_or_insert_with(|| ChallengeReader::open(layout).ok())
                    else {
                        continue;
                    };
                    let Ok(record) = reader.get(digest, now) else {
                        continue;
                    };
                    match (record.state(), record.decision()) {
                        (ChallengeState::Expired, _) => None,
                        (_, Some("granted")) if trust.challenge_revoked(digest, u64::MAX) => None,
                        (ChallengeState::Pending | ChallengeState::ReauthenticationRequired, _) => {
                            Some(Asked::Waiting)
                        }
                        (_, Some("denied")) => Some(Asked::Denied),
                        (_, _) => Some(Asked::Granted),
                    }
                }
                (None, None) => continue,
            };
            if outcome == Some(Asked::Waiting)
                && let Some(query_ref) = query_ref
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
    }
    (asked, waiting_queries)
}

/// What a prompt record says it asked or resolved about one install. Records written before
/// installs had queries of their own name one challenge for the prompt's query.
#[derive(Debug, Clone, Copy)]
struct AskedInstall<'a> {
    capability_id: &'a str,
    query_ref: Option<&'a str>,
    /// The challenge that asked the person.
    challenge: Option<&'a str>,
    /// The standing decision id or challenge digest ctx resolved it on.
    basis: Option<&'a str>,
    /// That resolution denied it.
    denied: bool,
}

fn asked_installs(record: &Json) -> Vec<AskedInstall<'_>> {
    let mut out: Vec<AskedInstall<'_>> = record
        .get("installs")
        .and_then(Json::as_arr)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            Some(AskedInstall {
                capability_id: i.get_str("capability_id")?,
                query_ref: i.get_str("query_ref"),
                challenge: i.get_str("challenge_digest"),
                basis: i.get_str("basis"),
                denied: i.get("denied").and_then(Json::as_bool) == Some(true),
            })
        })
        .collect();
    if let (Some(id), Some(digest)) = (
        record.get_str("challenge_capability_id"),
        record.get_str("challenge_digest"),
    ) {
        out.push(AskedInstall {
            capability_id: id,
            query_ref: record.get_str("query_ref"),
            challenge: Some(digest),
            basis: None,
            denied: false,
        });
    }
    out
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
