//! Exactly-once effects: install and activation claims, outcomes and settlements
//! (spec/engine-store.md §6; spec/engine-store.md §4).
//!
//! Claims and outcomes are journal records on a per-action stream: revision 1 is the claim
//! (appended with `NoStream`), revision 2 the outcome (appended with `Exact(1)`), so the journal
//! itself allows one claim and one outcome per action. A settlement is not a record of its own: it
//! is derived from the engine receipt record that carries a [`SettlementGuard`], in that record's
//! transaction, so a receipt and its settlement commit together or not at all.
//!
//! The `engine.effects` projection reads only its own tables and the journal's records, so
//! rebuilding it alone is correct. Its claims and outcomes tables hold fixed 73-byte entries (a
//! record's position and digest, [`EffectEntry`]), not copies of the records: readers fetch the
//! record from the journal and check its digest (spec/engine-store.md §4).

use std::fmt;

use ctx_journal::{HookError, HookTxn, RecordView, StreamId, Timestamp};
use ctx_model::{
    ActionKind, EngineEvent, HostAction, InstallExecutionBinding, Json, ReplayInput, UtcMicros,
    cj_digest, is_canonical_timestamp, is_sha, is_token,
};

use crate::archive;
use crate::framework::Projection;
use crate::streams::{
    ACTIVATION_CLAIM_KIND, ACTIVATION_EFFECT_NAMESPACE, ACTIVATION_OUTCOME_KIND,
    ENGINE_RECORD_KIND, ENGINE_STREAM_NAMESPACE, INSTALL_CLAIM_KIND, INSTALL_EFFECT_NAMESPACE,
    INSTALL_OUTCOME_KIND,
};

use super::codes::{self, EffectRefusal};
use super::effect_entry::{EffectEntry, EffectEntryError, EffectEntryKind};
use super::record::{EngineRecord, GuardEffect, GuardMode, SettlementGuard};
/// The only `format_version` of the claim and outcome layouts of this build.
pub const EFFECT_FORMAT_VERSION: u32 = 1;

/// Name of the projection.
pub const ENGINE_EFFECTS_PROJECTION: &str = "engine.effects";
/// Version of the projection's tables (spec/projections.md): a table built by another version is
/// rebuilt when the projection is attached.
pub const ENGINE_EFFECTS_PROJECTION_VERSION: u32 = 3;
/// Every effects table is keyed by engine stream id (32 bytes) ‖ action id bytes.
pub const INSTALL_CLAIMS_TABLE: &str = "proj.engine.install_claims";
pub const INSTALL_OUTCOMES_TABLE: &str = "proj.engine.install_outcomes";
pub const INSTALL_SETTLEMENTS_TABLE: &str = "proj.engine.install_settlements";
pub const INSTALL_EXPIRIES_TABLE: &str = "proj.engine.install_expiries";
pub const ACTIVATION_CLAIMS_TABLE: &str = "proj.engine.activation_claims";
pub const ACTIVATION_OUTCOMES_TABLE: &str = "proj.engine.activation_outcomes";
pub const ACTIVATION_SETTLEMENTS_TABLE: &str = "proj.engine.activation_settlements";
pub const ACTIVATION_EXPIRIES_TABLE: &str = "proj.engine.activation_expiries";

/// The four tables of one effect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EffectTables {
    pub claims: &'static str,
    pub outcomes: &'static str,
    pub settlements: &'static str,
    pub expiries: &'static str,
}

pub(crate) fn tables_of(effect: GuardEffect) -> EffectTables {
    match effect {
        GuardEffect::Install => EffectTables {
            claims: INSTALL_CLAIMS_TABLE,
            outcomes: INSTALL_OUTCOMES_TABLE,
            settlements: INSTALL_SETTLEMENTS_TABLE,
            expiries: INSTALL_EXPIRIES_TABLE,
        },
        GuardEffect::Activation => EffectTables {
            claims: ACTIVATION_CLAIMS_TABLE,
            outcomes: ACTIVATION_OUTCOMES_TABLE,
            settlements: ACTIVATION_SETTLEMENTS_TABLE,
            expiries: ACTIVATION_EXPIRIES_TABLE,
        },
    }
}

fn claim_kind(effect: GuardEffect) -> &'static str {
    match effect {
        GuardEffect::Install => INSTALL_CLAIM_KIND,
        GuardEffect::Activation => ACTIVATION_CLAIM_KIND,
    }
}

fn outcome_kind(effect: GuardEffect) -> &'static str {
    match effect {
        GuardEffect::Install => INSTALL_OUTCOME_KIND,
        GuardEffect::Activation => ACTIVATION_OUTCOME_KIND,
    }
}

/// The action kind an effect claims.
pub(crate) fn action_kind_of(effect: GuardEffect) -> ActionKind {
    match effect {
        GuardEffect::Install => ActionKind::InstallCapability,
        GuardEffect::Activation => ActionKind::ActivateCapability,
    }
}

/// The per-action effect stream.
pub fn effect_stream(
    effect: GuardEffect,
    stream_key: &str,
    action_id: &str,
) -> Result<StreamId, ctx_journal::InputError> {
    let namespace = match effect {
        GuardEffect::Install => INSTALL_EFFECT_NAMESPACE,
        GuardEffect::Activation => ACTIVATION_EFFECT_NAMESPACE,
    };
    StreamId::derive(namespace, format!("{stream_key}\n{action_id}").as_bytes())
}

/// Journal event id of a claim: `install-claim~<effect stream hex>`. The `~` is outside the
/// token alphabet, so no engine event id (always a token) can take it.
pub fn claim_event_id(effect: GuardEffect, effect_stream: &StreamId) -> String {
    format!("{}-claim~{}", effect.as_str(), effect_stream.to_hex())
}

/// Journal event id of an outcome: `install-outcome~<effect stream hex>`.
pub fn outcome_event_id(effect: GuardEffect, effect_stream: &StreamId) -> String {
    format!("{}-outcome~{}", effect.as_str(), effect_stream.to_hex())
}

/// Key of every effects table: engine stream id ‖ action id.
pub fn effect_key(engine_stream: &StreamId, action_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(32 + action_id.len());
    key.extend_from_slice(engine_stream.as_bytes());
    key.extend_from_slice(action_id.as_bytes());
    key
}

/// The payload of a claim record (a claims table entry points at the record, [`EffectEntry`]).
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ClaimRecord {
    pub format_version: u32,
    /// CJ of the scope's four session fields (the engine stream key).
    pub stream_key: String,
    pub action_id: String,
    /// `InstallCapability` or `ActivateCapability`.
    pub action_kind: String,
    pub action_content_digest: String,
    pub precondition_revision: u64,
    /// CJ of the claimed action, byte-equal to what its issuing record emitted.
    pub action_json: String,
    /// Journal digest (hex) of the engine record at `precondition_revision`.
    pub issuing_record_digest: String,
    /// The engine head when the claim was made.
    pub claimed_head_revision: u64,
    pub claimed_head_record_digest: String,
    pub claimed_head_state_digest: String,
    pub action_expires_at: String,
    /// Trusted time of the claim, canonical UTC; strictly before `action_expires_at`.
    pub claimed_at: String,
    pub authorization_digest: String,
    /// Canonical (ASCII) JSON of the execution binding, with its digest.
    pub execution_binding_json: String,
    pub execution_binding_digest: String,
    /// H(CJ(the fields above)), spec/engine.md §1.
    pub claim_digest: String,
}

/// Why an effect record is not self-consistent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectInvalid(pub String);

impl fmt::Display for EffectInvalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn bad<T>(message: impl Into<String>) -> Result<T, EffectInvalid> {
    Err(EffectInvalid(message.into()))
}

fn check_sha(name: &str, value: &str) -> Result<(), EffectInvalid> {
    if is_sha(value) {
        Ok(())
    } else {
        bad(format!("{name} must be a SHA-256 digest"))
    }
}

fn check_time(name: &str, value: &str) -> Result<UtcMicros, EffectInvalid> {
    if !is_canonical_timestamp(value) {
        return bad(format!("{name} must be a canonical RFC 3339 UTC timestamp"));
    }
    UtcMicros::parse(value)
        .map_err(|_| EffectInvalid(format!("{name} must be a canonical RFC 3339 UTC timestamp")))
}

impl ClaimRecord {
    /// H(CJ(...)) of spec/engine.md §1; the activation digest omits `action_kind`.
    pub fn compute_digest(&self, effect: GuardEffect) -> String {
        let mut fields = vec![
            (
                "action_content_digest",
                Json::str(&self.action_content_digest),
            ),
            ("action_expires_at", Json::str(&self.action_expires_at)),
            ("action_id", Json::str(&self.action_id)),
            ("action_json", Json::str(&self.action_json)),
            (
                "authorization_digest",
                Json::str(&self.authorization_digest),
            ),
            ("claimed_at", Json::str(&self.claimed_at)),
            (
                "claimed_head_record_digest",
                Json::str(&self.claimed_head_record_digest),
            ),
            (
                "claimed_head_revision",
                Json::from(self.claimed_head_revision),
            ),
            (
                "claimed_head_state_digest",
                Json::str(&self.claimed_head_state_digest),
            ),
            (
                "execution_binding_digest",
                Json::str(&self.execution_binding_digest),
            ),
            (
                "execution_binding_json",
                Json::str(&self.execution_binding_json),
            ),
            (
                "issuing_record_digest",
                Json::str(&self.issuing_record_digest),
            ),
            (
                "precondition_revision",
                Json::from(self.precondition_revision),
            ),
            ("stream_key", Json::str(&self.stream_key)),
        ];
        if effect == GuardEffect::Install {
            fields.push(("action_kind", Json::str(&self.action_kind)));
        }
        cj_digest(&Json::object(fields))
    }

    /// Checks the claim on its own (reference "claim row validity", the parts that need no
    /// journal or state): returns the decoded action.
    pub fn validate(&self, effect: GuardEffect) -> Result<HostAction, EffectInvalid> {
        if self.format_version != EFFECT_FORMAT_VERSION {
            return bad(format!(
                "claim format version {} is not supported; this build reads version 1",
                self.format_version
            ));
        }
        let action = HostAction::from_canonical_text(&self.action_json)
            .map_err(|e| EffectInvalid(format!("claimed action_json is invalid: {e}")))?;
        if action.kind != action_kind_of(effect) || self.action_kind != action.kind.as_str() {
            return bad(format!(
                "a {} claim must claim a {} action",
                effect.as_str(),
                action_kind_of(effect)
            ));
        }
        if action.action_id != self.action_id
            || action.content_digest() != self.action_content_digest
            || action.precondition_revision != self.precondition_revision
            || action.expires_at.as_deref() != Some(self.action_expires_at.as_str())
            || action.scope.stream_key() != self.stream_key
        {
            return bad("the claim does not match its action_json");
        }
        if self.precondition_revision == 0
            || self.claimed_head_revision < self.precondition_revision
        {
            return bad("the claimed head precedes the action's issuing revision");
        }
        for (name, value) in [
            ("issuing_record_digest", &self.issuing_record_digest),
            (
                "claimed_head_record_digest",
                &self.claimed_head_record_digest,
            ),
            ("claimed_head_state_digest", &self.claimed_head_state_digest),
            ("authorization_digest", &self.authorization_digest),
            ("execution_binding_digest", &self.execution_binding_digest),
            ("claim_digest", &self.claim_digest),
        ] {
            check_sha(name, value)?;
        }
        let claimed_at = check_time("claimed_at", &self.claimed_at)?;
        let expires_at = check_time("action_expires_at", &self.action_expires_at)?;
        if claimed_at >= expires_at {
            return bad("the claim was made at or after the action's expiry");
        }
        let binding = InstallExecutionBinding::from_canonical_text(&self.execution_binding_json)
            .map_err(|e| EffectInvalid(format!("execution_binding_json is invalid: {e}")))?;
        if binding.binding_digest() != self.execution_binding_digest {
            return bad("execution_binding_digest does not match execution_binding_json");
        }
        if self.compute_digest(effect) != self.claim_digest {
            return bad("claim_digest does not match the claim fields");
        }
        Ok(action)
    }
}

/// The payload of an outcome record (an outcomes table entry points at the record).
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct OutcomeRecord {
    pub format_version: u32,
    pub stream_key: String,
    pub action_id: String,
    pub action_content_digest: String,
    pub claim_digest: String,
    pub execution_binding_digest: String,
    /// `applied`, `failed` or `indeterminate` (install); always `applied` (activation).
    pub outcome: GuardMode,
    /// Present exactly when applied: failed and indeterminate outcomes observed no material.
    pub observed_material_identity_digest: Option<String>,
    pub verification_digest: String,
    /// Trusted time of the observation, canonical UTC; never before the claim.
    pub observed_at: String,
    /// H(CJ(the fields above)), spec/engine.md §1.
    pub outcome_digest: String,
}

impl OutcomeRecord {
    /// H(CJ(...)); the activation digest has no `outcome` key.
    pub fn compute_digest(&self, effect: GuardEffect) -> String {
        let mut fields = vec![
            (
                "action_content_digest",
                Json::str(&self.action_content_digest),
            ),
            ("action_id", Json::str(&self.action_id)),
            ("claim_digest", Json::str(&self.claim_digest)),
            (
                "execution_binding_digest",
                Json::str(&self.execution_binding_digest),
            ),
            ("observed_at", Json::str(&self.observed_at)),
            (
                "observed_material_identity_digest",
                Json::opt_str(self.observed_material_identity_digest.as_deref()),
            ),
            ("stream_key", Json::str(&self.stream_key)),
            ("verification_digest", Json::str(&self.verification_digest)),
        ];
        if effect == GuardEffect::Install {
            fields.push(("outcome", Json::str(self.outcome.as_str())));
        }
        cj_digest(&Json::object(fields))
    }

    pub fn validate(&self, effect: GuardEffect) -> Result<UtcMicros, EffectInvalid> {
        if self.format_version != EFFECT_FORMAT_VERSION {
            return bad(format!(
                "outcome format version {} is not supported; this build reads version 1",
                self.format_version
            ));
        }
        if !is_token(&self.action_id) {
            return bad("outcome action_id must be an opaque token");
        }
        for (name, value) in [
            ("action_content_digest", &self.action_content_digest),
            ("claim_digest", &self.claim_digest),
            ("execution_binding_digest", &self.execution_binding_digest),
            ("verification_digest", &self.verification_digest),
            ("outcome_digest", &self.outcome_digest),
        ] {
            check_sha(name, value)?;
        }
        match (
            effect,
            self.outcome,
            &self.observed_material_identity_digest,
        ) {
            (_, GuardMode::Applied, Some(d)) if is_sha(d) => {}
            (_, GuardMode::Applied, _) => {
                return bad("applied outcome requires an observed material identity");
            }
            (GuardEffect::Install, GuardMode::Failed, None) => {}
            (GuardEffect::Install, GuardMode::Failed, Some(_)) => {
                return bad("failed outcome requires verified material absence");
            }
            (GuardEffect::Install, GuardMode::Indeterminate, None) => {}
            (GuardEffect::Install, GuardMode::Indeterminate, Some(_)) => {
                return bad("indeterminate outcome cannot carry an observed material identity");
            }
            _ => return bad("an outcome is applied or (install only) failed or indeterminate"),
        }
        let observed_at = check_time("observed_at", &self.observed_at)?;
        if self.compute_digest(effect) != self.outcome_digest {
            return bad("outcome_digest does not match the outcome fields");
        }
        Ok(observed_at)
    }

    /// The guard a receipt for this outcome must carry.
    pub fn guard(&self, effect: GuardEffect) -> SettlementGuard {
        SettlementGuard {
            effect,
            action_id: self.action_id.clone(),
            action_content_digest: self.action_content_digest.clone(),
            mode: self.outcome,
            execution_outcome_digest: Some(self.outcome_digest.clone()),
        }
    }
}

/// The value of a settlements table entry: derived from the receipt record that settled a claim.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct SettlementEntry {
    pub action_content_digest: String,
    pub claim_digest: String,
    /// The terminal outcome: `applied` or `failed` (never `indeterminate`: an indeterminate
    /// outcome settles as failed).
    pub outcome: GuardMode,
    /// True when the recorded outcome was `indeterminate` and this settlement made it `failed`.
    pub from_indeterminate: bool,
    pub outcome_digest: String,
    pub receipt_event_id: String,
    pub receipt_event_content_digest: String,
    /// Journal digest (hex) of the receipt record.
    pub receipt_record_digest: String,
    pub settlement_digest: String,
}

impl SettlementEntry {
    /// H(CJ(...)) of spec/engine.md §1: install binds the outcome, activation its digest.
    /// An install settled from an indeterminate outcome also binds `from_indeterminate: true`; the
    /// key is absent otherwise, so every settlement of an observed outcome keeps the reference's
    /// digest.
    pub fn compute_digest(&self, effect: GuardEffect, stream_key: &str, action_id: &str) -> String {
        let mut fields = vec![
            (
                "action_content_digest",
                Json::str(&self.action_content_digest),
            ),
            ("action_id", Json::str(action_id)),
            ("claim_digest", Json::str(&self.claim_digest)),
            (
                "receipt_event_content_digest",
                Json::str(&self.receipt_event_content_digest),
            ),
            ("receipt_event_id", Json::str(&self.receipt_event_id)),
            (
                "receipt_record_digest",
                Json::str(&self.receipt_record_digest),
            ),
            ("stream_key", Json::str(stream_key)),
        ];
        match effect {
            GuardEffect::Install => {
                fields.push(("outcome", Json::str(self.outcome.as_str())));
                if self.from_indeterminate {
                    fields.push(("from_indeterminate", Json::Bool(true)));
                }
            }
            GuardEffect::Activation => {
                fields.push(("outcome_digest", Json::str(&self.outcome_digest)));
            }
        }
        cj_digest(&Json::object(fields))
    }
}

/// The value of an expiries table entry: the receipt that retired an action nobody claimed.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ExpiryEntry {
    pub action_content_digest: String,
    pub receipt_event_id: String,
    pub receipt_event_content_digest: String,
    pub receipt_record_digest: String,
}

/// The reference's sentence for each refusal, naming the action.
pub(crate) fn refusal_message(
    effect: GuardEffect,
    refusal: EffectRefusal,
    action_id: &str,
) -> String {
    let e = effect.as_str();
    match (effect, refusal) {
        (GuardEffect::Install, EffectRefusal::AlreadyClaimed) => {
            format!("install action '{action_id}' has already been claimed")
        }
        (GuardEffect::Activation, EffectRefusal::AlreadyClaimed) => {
            format!("activation action '{action_id}' is already claimed")
        }
        (GuardEffect::Install, EffectRefusal::ClaimExpired) => {
            format!("install action '{action_id}' expired before it was claimed")
        }
        (GuardEffect::Activation, EffectRefusal::ClaimExpired) => {
            format!("activation action '{action_id}' expired before claim")
        }
        (_, EffectRefusal::ClaimRequired) => {
            format!("{e} action '{action_id}' must be claimed before receipt commit")
        }
        (GuardEffect::Install, EffectRefusal::ClaimSettled) => {
            format!("install action '{action_id}' already has a terminal settlement")
        }
        (GuardEffect::Activation, EffectRefusal::ClaimSettled) => {
            format!("activation action '{action_id}' is already settled")
        }
        (GuardEffect::Install, EffectRefusal::OutcomeRequired) => {
            format!("install action '{action_id}' has no durable execution claim")
        }
        (GuardEffect::Activation, EffectRefusal::OutcomeRequired) => {
            format!("activation action '{action_id}' has no durable claim")
        }
        (GuardEffect::Install, EffectRefusal::OutcomeConflict) => {
            format!("install action '{action_id}' already has a different outcome")
        }
        (GuardEffect::Activation, EffectRefusal::OutcomeConflict) => {
            format!("activation action '{action_id}' already has a different verified outcome")
        }
        (_, EffectRefusal::AuthorityCorrupt) => {
            format!("{e} action '{action_id}' has invalid persisted claim authority")
        }
    }
}

fn refuse(effect: GuardEffect, refusal: EffectRefusal, message: String) -> HookError {
    HookError::with_code(refusal.code(effect), message)
}

fn invalid(kind: &str, event_id: &str, e: impl fmt::Display) -> HookError {
    HookError::with_code(
        codes::EFFECT_RECORD_INVALID,
        format!("{kind} record {event_id} is invalid: {e}"),
    )
}

/// The result material identity digest an install action authorizes.
pub(crate) fn install_result_material_digest(action: &HostAction) -> Option<&str> {
    action
        .payload
        .get("result_material")
        .and_then(|m| m.get_str("identity_digest"))
}

/// The material identity digest an activation action authorizes.
pub(crate) fn activation_material_digest(action: &HostAction) -> Option<&str> {
    action
        .payload
        .get("material_identity")
        .and_then(|m| m.get_str("identity_digest"))
}

/// True when `event` is the receipt `guard` settles: the receipt kind of its mode (an
/// indeterminate outcome's is `ActionFailed`), naming the guard's action id, action kind and
/// content digest.
fn receipt_names(event: &EngineEvent, guard: &SettlementGuard) -> bool {
    let p = &event.payload;
    event.kind == guard.mode.receipt_kind()
        && p.get_str("action_id") == Some(guard.action_id.as_str())
        && p.get_str("action_kind") == Some(action_kind_of(guard.effect).as_str())
        && p.get_str("action_content_digest") == Some(guard.action_content_digest.as_str())
}

/// The `engine.effects` projection.
#[derive(Debug)]
pub(crate) struct EffectsProjection;

fn exists(tx: &HookTxn<'_>, table: &'static str, key: &[u8]) -> Result<bool, HookError> {
    Ok(tx.get(table, key, |v| v.is_some())?)
}

/// The entry stored under `key` in the `kind` table of `effect`; an entry that does not decode
/// refuses with `-authority-corrupt` (spec/engine-store.md §4, invariant 2).
fn load_entry(
    tx: &HookTxn<'_>,
    effect: GuardEffect,
    kind: EffectEntryKind,
    key: &[u8],
    engine: &StreamId,
    action_id: &str,
) -> Result<Option<EffectEntry>, HookError> {
    let t = tables_of(effect);
    let table = match kind {
        EffectEntryKind::Claim => t.claims,
        EffectEntryKind::Outcome => t.outcomes,
    };
    tx.get(table, key, |v| {
        v.map(|v| EffectEntry::decode(kind, v)).transpose()
    })?
    .map_err(|e| entry_corrupt(effect, kind, engine, action_id, &e))
}

fn entry_corrupt(
    effect: GuardEffect,
    kind: EffectEntryKind,
    engine: &StreamId,
    action_id: &str,
    e: &EffectEntryError,
) -> HookError {
    refuse(
        effect,
        EffectRefusal::AuthorityCorrupt,
        format!(
            "the {} {} entry of action '{action_id}' on engine stream {engine} is corrupt: {e}",
            effect.as_str(),
            kind.as_str()
        ),
    )
}

/// Reads the record `entry` names inside this transaction (`HookTxn::replay` of its one
/// position, which verifies D and M) and decodes it with `decode`, which checks that it is the
/// record the entry names (spec/engine-store.md §4, invariant 3).
fn fetch<T>(
    tx: &HookTxn<'_>,
    effect: GuardEffect,
    entry: &EffectEntry,
    engine: &StreamId,
    action_id: &str,
    decode: impl Fn(&RecordView<'_>) -> Result<T, EffectEntryError>,
) -> Result<T, HookError> {
    let mut found = None;
    tx.replay(
        entry.position,
        entry.position.saturating_add(1),
        |_, view| {
            found = Some(decode(view));
            Ok(())
        },
    )?;
    found
        .unwrap_or(Err(EffectEntryError::Missing {
            position: entry.position,
        }))
        .map_err(|e| entry_corrupt(effect, entry.kind, engine, action_id, &e))
}

/// The claim stored for `key`, fetched from the journal, if any.
fn load_claim(
    tx: &HookTxn<'_>,
    effect: GuardEffect,
    key: &[u8],
    engine: &StreamId,
    action_id: &str,
) -> Result<Option<ClaimRecord>, HookError> {
    let Some(entry) = load_entry(tx, effect, EffectEntryKind::Claim, key, engine, action_id)?
    else {
        return Ok(None);
    };
    let kind = claim_kind(effect);
    fetch(tx, effect, &entry, engine, action_id, |view| {
        entry.claim_from(view, kind, engine, action_id)
    })
    .map(Some)
}

/// The outcome stored for `key`, fetched from the journal, if any.
fn load_outcome(
    tx: &HookTxn<'_>,
    effect: GuardEffect,
    key: &[u8],
    engine: &StreamId,
    action_id: &str,
) -> Result<Option<OutcomeRecord>, HookError> {
    let Some(entry) = load_entry(tx, effect, EffectEntryKind::Outcome, key, engine, action_id)?
    else {
        return Ok(None);
    };
    let kind = outcome_kind(effect);
    fetch(tx, effect, &entry, engine, action_id, |view| {
        entry.outcome_from(view, kind, engine, action_id)
    })
    .map(Some)
}

fn engine_stream_of(stream_key: &str) -> Result<StreamId, EffectInvalid> {
    StreamId::derive(ENGINE_STREAM_NAMESPACE, stream_key.as_bytes())
        .map_err(|e| EffectInvalid(format!("stream_key is invalid: {e}")))
}

/// Checks that a claim or outcome record sits exactly where its content says it belongs.
fn check_place(
    record: &RecordView<'_>,
    effect: GuardEffect,
    stream_key: &str,
    action_id: &str,
    revision: u64,
    at: UtcMicros,
) -> Result<(), EffectInvalid> {
    let stream = effect_stream(effect, stream_key, action_id)
        .map_err(|e| EffectInvalid(format!("the effect stream cannot be derived: {e}")))?;
    let event_id = if revision == 1 {
        claim_event_id(effect, &stream)
    } else {
        outcome_event_id(effect, &stream)
    };
    if record.stream != stream || record.revision != revision || record.event_id != event_id {
        return bad(format!(
            "the record is not at revision {revision} of its action's effect stream"
        ));
    }
    if record.occurred_at != Timestamp(at.0) {
        return bad("the journal timestamp is not the record's trusted time");
    }
    Ok(())
}

impl EffectsProjection {
    fn apply_claim(
        tx: &HookTxn<'_>,
        record: &RecordView<'_>,
        effect: GuardEffect,
    ) -> Result<(), HookError> {
        let kind = claim_kind(effect);
        let claim = archive::from_bytes::<ClaimRecord>(record.payload)
            .map_err(|e| invalid(kind, record.event_id, e))?;
        claim
            .validate(effect)
            .map_err(|e| invalid(kind, record.event_id, e))?;
        let claimed_at = UtcMicros::parse(&claim.claimed_at)
            .map_err(|_| invalid(kind, record.event_id, "claimed_at does not parse"))?;
        check_place(
            record,
            effect,
            &claim.stream_key,
            &claim.action_id,
            1,
            claimed_at,
        )
        .map_err(|e| invalid(kind, record.event_id, e))?;
        let engine =
            engine_stream_of(&claim.stream_key).map_err(|e| invalid(kind, record.event_id, e))?;
        let key = effect_key(&engine, &claim.action_id);
        let t = tables_of(effect);
        let refused = if exists(tx, t.claims, &key)? {
            Some(EffectRefusal::AlreadyClaimed)
        } else if exists(tx, t.settlements, &key)? {
            Some(EffectRefusal::ClaimSettled)
        } else if exists(tx, t.expiries, &key)? {
            Some(EffectRefusal::ClaimExpired)
        } else {
            None
        };
        if let Some(refusal) = refused {
            return Err(refuse(
                effect,
                refusal,
                refusal_message(effect, refusal, &claim.action_id),
            ));
        }
        // The entry names the record (validated above) by position and digest: a function of the
        // record only, identical on every rebuild (spec/engine-store.md §4, invariant 1).
        let entry =
            EffectEntry::of_record(EffectEntryKind::Claim, record, &claim.action_content_digest)
                .map_err(|e| invalid(kind, record.event_id, e))?;
        tx.insert(t.claims, &key, &entry.encode())?;
        Ok(())
    }

    fn apply_outcome(
        tx: &HookTxn<'_>,
        record: &RecordView<'_>,
        effect: GuardEffect,
    ) -> Result<(), HookError> {
        let kind = outcome_kind(effect);
        let outcome = archive::from_bytes::<OutcomeRecord>(record.payload)
            .map_err(|e| invalid(kind, record.event_id, e))?;
        let observed_at = outcome
            .validate(effect)
            .map_err(|e| invalid(kind, record.event_id, e))?;
        check_place(
            record,
            effect,
            &outcome.stream_key,
            &outcome.action_id,
            2,
            observed_at,
        )
        .map_err(|e| invalid(kind, record.event_id, e))?;
        let engine =
            engine_stream_of(&outcome.stream_key).map_err(|e| invalid(kind, record.event_id, e))?;
        let key = effect_key(&engine, &outcome.action_id);
        let t = tables_of(effect);
        let id = outcome.action_id.as_str();
        let fail = |refusal: EffectRefusal, message: String| Err(refuse(effect, refusal, message));
        let Some(claim) = load_claim(tx, effect, &key, &engine, id)? else {
            return fail(
                EffectRefusal::OutcomeRequired,
                refusal_message(effect, EffectRefusal::OutcomeRequired, id),
            );
        };
        if claim.action_content_digest != outcome.action_content_digest
            || claim.claim_digest != outcome.claim_digest
        {
            return fail(
                EffectRefusal::AuthorityCorrupt,
                "execution outcome does not match claimed action".into(),
            );
        }
        if claim.execution_binding_digest != outcome.execution_binding_digest {
            return fail(
                EffectRefusal::OutcomeConflict,
                match effect {
                    GuardEffect::Install => {
                        "execution outcome binding does not match the claimed driver and target"
                    }
                    GuardEffect::Activation => {
                        "activation outcome does not match its durable claim"
                    }
                }
                .into(),
            );
        }
        if exists(tx, t.settlements, &key)? {
            return fail(
                EffectRefusal::ClaimSettled,
                refusal_message(effect, EffectRefusal::ClaimSettled, id),
            );
        }
        let action = claim
            .validate(effect)
            .map_err(|e| refuse(effect, EffectRefusal::AuthorityCorrupt, e.0))?;
        if outcome.outcome == GuardMode::Applied {
            let authorized = match effect {
                GuardEffect::Install => install_result_material_digest(&action),
                GuardEffect::Activation => activation_material_digest(&action),
            };
            if authorized != outcome.observed_material_identity_digest.as_deref() {
                return fail(
                    EffectRefusal::OutcomeConflict,
                    match effect {
                        GuardEffect::Install => {
                            "applied execution outcome does not match authorized result material"
                        }
                        GuardEffect::Activation => {
                            "activation outcome does not match authorized material"
                        }
                    }
                    .into(),
                );
            }
        }
        let claimed_at = UtcMicros::parse(&claim.claimed_at).map_err(|_| {
            refuse(
                effect,
                EffectRefusal::AuthorityCorrupt,
                "claimed_at does not parse".into(),
            )
        })?;
        if observed_at < claimed_at {
            return fail(
                EffectRefusal::AuthorityCorrupt,
                format!(
                    "the outcome of {} action '{id}' precedes its claim",
                    effect.as_str()
                ),
            );
        }
        if effect == GuardEffect::Activation {
            let expires_at = UtcMicros::parse(&claim.action_expires_at).map_err(|_| {
                refuse(
                    effect,
                    EffectRefusal::AuthorityCorrupt,
                    "action_expires_at does not parse".into(),
                )
            })?;
            if observed_at >= expires_at {
                return fail(
                    EffectRefusal::ClaimExpired,
                    format!("activation action '{id}' expired before observation"),
                );
            }
        }
        if exists(tx, t.outcomes, &key)? {
            return fail(
                EffectRefusal::OutcomeConflict,
                refusal_message(effect, EffectRefusal::OutcomeConflict, id),
            );
        }
        let entry = EffectEntry::of_record(
            EffectEntryKind::Outcome,
            record,
            &outcome.action_content_digest,
        )
        .map_err(|e| invalid(kind, record.event_id, e))?;
        tx.insert(t.outcomes, &key, &entry.encode())?;
        Ok(())
    }

    /// A receipt carrying a settlement guard settles (or, `expired`, retires) its action.
    fn apply_receipt(tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        let engine_record = EngineRecord::decode(record.payload).map_err(|e| {
            HookError::with_code(
                codes::ENGINE_RECORD_INVALID,
                format!("engine record {} is invalid: {e}", record.event_id),
            )
        })?;
        let Some(guard) = engine_record.settlement_guard else {
            return Ok(());
        };
        let effect = guard.effect;
        let t = tables_of(effect);
        let key = effect_key(&record.stream, &guard.action_id);
        let id = guard.action_id.as_str();
        let fail = |refusal: EffectRefusal, message: String| Err(refuse(effect, refusal, message));
        // The guard is not part of the reducer's output, so the projection itself checks that the
        // record is this action's receipt (spec/engine-store.md §6, "exact reducer
        // receipt"): a guard on any other record settles nothing.
        let receipt = ReplayInput::from_canonical_text(&engine_record.replay_json)
            .ok()
            .map(|replay| replay.reducer_event)
            .filter(|event| receipt_names(event, &guard));
        let Some(receipt) = receipt else {
            return fail(
                EffectRefusal::AuthorityCorrupt,
                format!(
                    "{} settlement does not match its exact reducer receipt",
                    effect.as_str()
                ),
            );
        };
        if exists(tx, t.settlements, &key)? || exists(tx, t.expiries, &key)? {
            return fail(
                EffectRefusal::ClaimSettled,
                refusal_message(effect, EffectRefusal::ClaimSettled, id),
            );
        }
        let receipt_record_digest = record.digest.to_hex();
        if guard.mode == GuardMode::Expired {
            // An activation claimed but never observed before its expiry lapses like an unclaimed
            // one: its authority is lease-bounded, no outcome can be recorded any more, and the
            // host must be reconciled by a later deactivation (spec/engine-store.md §7). An
            // install claim never expires: its driver may have run, so it settles through an
            // outcome (observed or indeterminate).
            let claimed = exists(tx, t.claims, &key)?;
            let lapsed_activation =
                effect == GuardEffect::Activation && claimed && !exists(tx, t.outcomes, &key)?;
            if claimed && !lapsed_activation {
                return fail(
                    EffectRefusal::AlreadyClaimed,
                    format!(
                        "claimed {} action '{id}' cannot expire as unclaimed",
                        effect.as_str()
                    ),
                );
            }
            let entry = ExpiryEntry {
                action_content_digest: guard.action_content_digest,
                receipt_event_id: record.event_id.to_owned(),
                receipt_event_content_digest: engine_record.source_event_content_digest,
                receipt_record_digest,
            };
            tx.insert(t.expiries, &key, &archive::to_bytes(&entry)?)?;
            return Ok(());
        }
        let Some(claim) = load_claim(tx, effect, &key, &record.stream, id)? else {
            return fail(
                EffectRefusal::ClaimRequired,
                refusal_message(effect, EffectRefusal::ClaimRequired, id),
            );
        };
        if guard.action_content_digest != claim.action_content_digest
            || receipt.payload.get("action_precondition_revision")
                != Some(&Json::from(claim.precondition_revision))
        {
            return fail(
                EffectRefusal::AuthorityCorrupt,
                format!(
                    "{} receipt guard does not match claimed action content",
                    effect.as_str()
                ),
            );
        }
        let Some(outcome) = load_outcome(tx, effect, &key, &record.stream, id)? else {
            return fail(
                EffectRefusal::OutcomeRequired,
                match effect {
                    GuardEffect::Install => {
                        format!("install action '{id}' has no verified execution outcome")
                    }
                    GuardEffect::Activation => {
                        format!("activation action '{id}' has no verified outcome")
                    }
                },
            );
        };
        let mismatch = match effect {
            GuardEffect::Install => {
                "install receipt guard does not match the durable execution outcome"
            }
            GuardEffect::Activation => "activation receipt guard does not match durable outcome",
        };
        if outcome.claim_digest != claim.claim_digest
            || outcome.action_content_digest != claim.action_content_digest
            || outcome.execution_binding_digest != claim.execution_binding_digest
            || outcome.outcome != guard.mode
            || guard.execution_outcome_digest.as_deref() != Some(outcome.outcome_digest.as_str())
        {
            return fail(EffectRefusal::OutcomeConflict, mismatch.into());
        }
        if effect == GuardEffect::Activation {
            // The host reports the activation at the time the verifier observed it
            // (spec/engine-store.md §6), so the receipt pins the observation in the chain.
            let observed = UtcMicros::parse(&outcome.observed_at).map_err(|_| {
                refuse(
                    effect,
                    EffectRefusal::AuthorityCorrupt,
                    "observed_at does not parse".into(),
                )
            })?;
            if record.occurred_at != Timestamp(observed.0) {
                return fail(
                    EffectRefusal::OutcomeConflict,
                    "activation settlement receipt is not exact: its occurred_at is not the outcome's observed_at".into(),
                );
            }
        }
        // An indeterminate outcome is reported as such until this receipt, which settles it as
        // failed: the entry keeps both facts (DESIGN.md, "Exactly-once effects").
        let from_indeterminate = outcome.outcome == GuardMode::Indeterminate;
        let mut entry = SettlementEntry {
            action_content_digest: claim.action_content_digest.clone(),
            claim_digest: claim.claim_digest.clone(),
            outcome: if from_indeterminate {
                GuardMode::Failed
            } else {
                outcome.outcome
            },
            from_indeterminate,
            outcome_digest: outcome.outcome_digest.clone(),
            receipt_event_id: record.event_id.to_owned(),
            receipt_event_content_digest: engine_record.source_event_content_digest,
            receipt_record_digest,
            settlement_digest: String::new(),
        };
        entry.settlement_digest = entry.compute_digest(effect, &claim.stream_key, id);
        tx.insert(t.settlements, &key, &archive::to_bytes(&entry)?)?;
        Ok(())
    }
}

impl Projection for EffectsProjection {
    fn name(&self) -> &'static str {
        ENGINE_EFFECTS_PROJECTION
    }

    /// 2: settlement entries carry `from_indeterminate` (indeterminate install outcomes).
    /// 3: claims and outcomes entries are fixed 73-byte [`EffectEntry`] values naming the record,
    /// not copies of its payload (spec/engine-store.md §4).
    fn version(&self) -> u32 {
        ENGINE_EFFECTS_PROJECTION_VERSION
    }

    fn tables(&self) -> &'static [&'static str] {
        &[
            INSTALL_CLAIMS_TABLE,
            INSTALL_OUTCOMES_TABLE,
            INSTALL_SETTLEMENTS_TABLE,
            INSTALL_EXPIRIES_TABLE,
            ACTIVATION_CLAIMS_TABLE,
            ACTIVATION_OUTCOMES_TABLE,
            ACTIVATION_SETTLEMENTS_TABLE,
            ACTIVATION_EXPIRIES_TABLE,
        ]
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        match record.kind {
            INSTALL_CLAIM_KIND => Self::apply_claim(tx, record, GuardEffect::Install),
            INSTALL_OUTCOME_KIND => Self::apply_outcome(tx, record, GuardEffect::Install),
            ACTIVATION_CLAIM_KIND => Self::apply_claim(tx, record, GuardEffect::Activation),
            ACTIVATION_OUTCOME_KIND => Self::apply_outcome(tx, record, GuardEffect::Activation),
            ENGINE_RECORD_KIND => Self::apply_receipt(tx, record),
            _ => Ok(()),
        }
    }
}
