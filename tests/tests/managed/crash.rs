//! Crash test of pre-approved installs: a child process (this test binary, re-executed) sets up
//! the managed service with three pre-approved installable skills, prepares a query and drives
//! the desired choice of the three skills; the parent kills it with SIGKILL at a random moment
//! (before, during or after the installs), then recovers in its own process on the same files
//! (the same setup, an exact retry of the prepare and of the desired choice) and checks that:
//!
//! - the install driver ran at most once per action: the body source (called by the skill CAS's
//!   `apply_once` only, that is only for a freshly made claim) appends the action id to a log
//!   outside the data directory, and no id appears twice;
//! - every install claim has exactly one outcome and one settlement, and every capability ended
//!   installed (or, at most one, verified absent and failed: a kill between the claim and the
//!   staged body);
//! - the skill file holds the exact body and no stage file is left;
//! - the journal verifies, the engine, query-store and consent-store projections equal a fresh
//!   fold of the journal and the engine's replay audit is clean.
//!
//! `CTX_INSTALL_CRASH_ROUNDS` sets the number of rounds (default 20), `CTX_CRASH_SEED` replays a
//! run (the seed is printed; the kill moments also depend on timing, so a replay draws the same
//! delays, not necessarily the same kill points), `CTX_CRASH_VERBOSE` prints the child's lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ctx_model::{ActionKind, HostAction, Installation, Json};
use ctx_projections::consent_store::{CONSENT_STORE_PROJECTION, ConsentStore};
use ctx_projections::engine::{
    ENGINE_BENEFIT_AUDIT_PROJECTION, ENGINE_EFFECTS_PROJECTION, ENGINE_STATE_PROJECTION, Engine,
    EngineOptions, InstallOutcome,
};
use ctx_projections::query_store::QUERY_STORE_PROJECTION;
use ctx_service::skill_cas::{
    BodySourceError, LOCK_SUFFIX, STAGE_PREFIX, SkillBodySource, SkillCasRuntimeConfig,
};
use ctx_service::{
    DesiredSetRequest, DesiredSetResult, QueryService, ServiceError, open_query_service,
};

use super::fixture::{self, INSTALLABLE_SKILL_BODY, Options, Setup, digest, scope, setup_at};
use crate::support::{self, Lines, Rng};

/// Set (to the round's root directory) in the child process.
const CHILD_ENV: &str = "CTX_INSTALL_CRASH_CHILD";
const CHILD_TEST: &str = "managed::crash::install_crash_child";
/// Prefix of the child's progress lines on its standard output.
const PREFIX: &str = "CRASH ";
const QUERY_LABEL: &str = "crash-query";
const CHOICE_LABEL: &str = "crash-choice";
const SKILLS: [&str; 3] = [
    "skill:installable",
    "skill:installable-2",
    "skill:installable-3",
];
/// The log of body loads (one line per driver run), outside the data directory.
const LOADS_LOG: &str = "loads.log";
/// Exact retries of `set_desired` before a run is declared stuck.
const DESIRED_TRIES: usize = 10;

fn rounds() -> u32 {
    std::env::var("CTX_INSTALL_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn options() -> Options {
    Options {
        installable: true,
        installable_count: 3,
        requested_limit: 3,
        failpoints: false,
        ..Options::default()
    }
}

// ------------------------------------------------------------------------------------------------
// The recording driver
// ------------------------------------------------------------------------------------------------

/// Serves the installable body and first appends `<role> <pid> <action id>` to the loads log
/// (fsynced), so a run of the driver is counted outside the process that made it.
#[derive(Debug)]
struct RecordingSource {
    log: PathBuf,
    role: &'static str,
    /// Reports each load on standard output (the child: the parent may kill right after it).
    announce: bool,
}

impl SkillBodySource for RecordingSource {
    fn load(&self, action: &HostAction, _material: &Json) -> Result<String, BodySourceError> {
        let line = format!(
            "{} {} {}\n",
            self.role,
            std::process::id(),
            action.action_id
        );
        // One small O_APPEND write: a kill leaves the whole line or none of it.
        let written = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .and_then(|mut f| {
                f.write_all(line.as_bytes())?;
                f.sync_all()
            });
        if let Err(e) = written {
            return Err(BodySourceError::new(format!("loads log: {e}")));
        }
        if self.announce {
            progress("loaded");
        }
        Ok(INSTALLABLE_SKILL_BODY.to_owned())
    }
}

/// A service on the setup's files whose skill CAS loads through a [`RecordingSource`]. The
/// fixture's own service is closed first.
fn recording_service(setup: &Setup, role: &'static str, announce: bool) -> QueryService {
    setup.service.close();
    let source: Arc<dyn SkillBodySource> = Arc::new(RecordingSource {
        log: setup.root.join(LOADS_LOG),
        role,
        announce,
    });
    let mut config = setup.full_config();
    config.skill_cas = Some(Arc::new(
        SkillCasRuntimeConfig::new(
            &setup.skill_root,
            source,
            "ctx-skill-installer-v1",
            &digest("managed-service-host"),
        )
        .unwrap(),
    ));
    open_query_service(config).unwrap()
}

fn desired_request(query_ref: &str) -> DesiredSetRequest {
    DesiredSetRequest::new(query_ref, &digest(CHOICE_LABEL), &SKILLS, None).unwrap()
}

/// The end of the drive: activations pending, nothing indeterminate, nothing left to install.
fn is_stable(result: &DesiredSetResult) -> bool {
    result.status() == "effect-pending" && result.deferred_capability_ids().is_empty()
}

fn describe(result: &DesiredSetResult) -> String {
    format!(
        "{} {} deferred={} failed={}",
        result.status(),
        result.reason_code().unwrap_or("-"),
        result.deferred_capability_ids().join(","),
        result.failed_capability_ids().join(",")
    )
}

// ------------------------------------------------------------------------------------------------
// The child
// ------------------------------------------------------------------------------------------------

fn progress(line: &str) {
    let mut out = std::io::stdout().lock();
    // A parent that is gone cannot read it; the child goes on until killed or done.
    let _ = out
        .write_all(format!("{PREFIX}{line}\n").as_bytes())
        .and_then(|()| out.flush());
}

/// The hidden child: drives the installs to the end (unless killed). Without its environment
/// variable it does nothing.
#[test]
fn install_crash_child() {
    let Some(root) = support::child_role(CHILD_ENV) else {
        return;
    };
    let setup = setup_at(Path::new(&root), options());
    let service = recording_service(&setup, "child", true);
    progress("ready");
    setup.preapprove_skills();
    progress("policy");
    let prepared = service
        .prepare(&fixture::request(QUERY_LABEL, "work-one"))
        .unwrap();
    progress(&format!("prepared {}", prepared.query_ref()));
    let request = desired_request(prepared.query_ref());
    for n in 1..=DESIRED_TRIES {
        let result = service.set_desired(&request).unwrap();
        progress(&format!("desired {n} {}", describe(&result)));
        if is_stable(&result) {
            progress("done");
            return;
        }
    }
    panic!("the child's installs did not settle in {DESIRED_TRIES} tries");
}

// ------------------------------------------------------------------------------------------------
// The parent
// ------------------------------------------------------------------------------------------------

/// When the parent kills the child.
#[derive(Debug, Clone)]
enum KillAt {
    /// This long after the spawn.
    AfterSpawn(Duration),
    /// This long after the child reported the line that starts with the text.
    AfterLine(&'static str, Duration),
    /// Never: the child runs to its end (the calibration round).
    Never,
}

impl fmt::Display for KillAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KillAt::AfterSpawn(d) => write!(f, "{d:?} after spawn"),
            KillAt::AfterLine(line, d) => write!(f, "{d:?} after \"{line}\""),
            KillAt::Never => f.write_str("never"),
        }
    }
}

/// What one child run reported.
#[derive(Debug)]
struct ChildRun {
    /// Progress lines with their time since the spawn.
    lines: Vec<(Duration, String)>,
    killed: bool,
    /// From the spawn to the child reaped.
    elapsed: Duration,
}

impl ChildRun {
    fn at(&self, prefix: &str) -> Option<Duration> {
        self.lines
            .iter()
            .find(|(_, l)| l.starts_with(prefix))
            .map(|(t, _)| *t)
    }

    fn query_ref(&self) -> Option<String> {
        self.lines
            .iter()
            .find_map(|(_, l)| l.strip_prefix("prepared "))
            .map(str::to_owned)
    }
}

fn run_child(root: &Path, kill_at: &KillAt, context: &str) -> ChildRun {
    let spawned = Instant::now();
    let mut child = support::spawn_child(CHILD_TEST, &[(CHILD_ENV, root.to_str().unwrap())], false);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<(Duration, String)>();
    let reader = std::thread::spawn(move || {
        let mut lines = Lines::new(stdout, PREFIX);
        while let Some(line) = lines.next_line() {
            if tx.send((spawned.elapsed(), line)).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = spawned + Duration::from_secs(120);
    match kill_at {
        KillAt::AfterSpawn(delay) => std::thread::sleep(*delay),
        KillAt::AfterLine(prefix, delay) => loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((t, line)) => {
                    let hit = line.starts_with(prefix);
                    lines.push((t, line));
                    if hit {
                        std::thread::sleep(*delay);
                        break;
                    }
                }
                // The child ended without the line (it cannot: every run reports every line).
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    panic!("{context}: the child never reported \"{prefix}\": {lines:?}");
                }
            }
        },
        KillAt::Never => {}
    }
    let killed = match kill_at {
        KillAt::Never => false,
        // SIGKILL on unix; an already finished child is reaped below either way.
        _ => child.kill().is_ok(),
    };
    let status = if killed {
        child.wait().unwrap()
    } else {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{context}: the child did not finish in time");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    let elapsed = spawned.elapsed();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    // Killed, or finished cleanly: a child that failed (exit 101) found a bug in its own run.
    let killed_by_us = status.signal() == Some(9);
    assert!(
        killed_by_us || status.success(),
        "{context}: the child failed on its own ({status}); its lines: {lines:?}"
    );
    let done = lines.iter().any(|(_, l)| l == "done");
    assert!(
        killed_by_us || done,
        "{context}: the child exited without finishing: {lines:?}"
    );
    ChildRun {
        lines,
        killed: killed_by_us,
        elapsed,
    }
}

/// Where the child was when it died, read from the durable state before any recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Nothing of the query is durable (the child died before or during prepare's first append).
    BeforePrepare,
    /// The query is registered (and maybe planned) but no desired choice is reserved.
    Prepared,
    /// The desired choice is reserved or committed, no install is claimed.
    Desired,
    /// At least one install is claimed, not all are settled.
    Installing,
    /// Every install is settled (killed after the installs, or finished).
    Installed,
}

/// The durable state the child left.
#[derive(Debug)]
struct Left {
    phase: Phase,
    claims: u64,
    outcomes: u64,
    settlements: u64,
    loads: usize,
    skill_file: bool,
    stages: usize,
}

fn read_left(setup: &Setup, context: &str) -> Left {
    if setup.data_dir.exists() {
        // The kill may have hit the journal's creation (the child's first prepare).
        if let Err(e) = ctx_service::open_journal(&setup.data_dir, &support::options()) {
            panic!("{context}: the journal does not reopen after the kill: {e} ({e:?})");
        }
    }
    let claims = setup.install_claims();
    let outcomes = setup.install_outcomes();
    let settlements = setup.install_settlements();
    let desired = if setup.data_dir.exists() {
        setup.desired_count()
    } else {
        0
    };
    let phase = if setup.query_count() == 0 {
        Phase::BeforePrepare
    } else if desired == 0 {
        Phase::Prepared
    } else if claims == 0 {
        Phase::Desired
    } else if settlements < SKILLS.len() as u64 {
        Phase::Installing
    } else {
        Phase::Installed
    };
    Left {
        phase,
        claims,
        outcomes,
        settlements,
        loads: read_loads(&setup.root).len(),
        skill_file: setup.installed_skill_path().exists(),
        stages: stage_files(&setup.skill_root).len(),
    }
}

/// The loads log: `(role, pid, action id)` per line. Every line must be complete.
fn read_loads(root: &Path) -> Vec<(String, u32, String)> {
    let text = match fs::read_to_string(root.join(LOADS_LOG)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("loads log: {e}"),
    };
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the loads log ends with a partial line: {text:?}"
    );
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let [role, pid, action_id] = fields.as_slice() else {
                panic!("malformed loads log line {line:?}");
            };
            (
                (*role).to_owned(),
                pid.parse().unwrap(),
                (*action_id).to_owned(),
            )
        })
        .collect()
}

/// Names in the skill root that are neither the published file nor a content lock.
fn stage_files(skill_root: &Path) -> Vec<String> {
    fs::read_dir(skill_root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with(STAGE_PREFIX))
        .collect()
}

/// What recovery saw and did.
#[derive(Debug, Default)]
struct Recovery {
    /// The parent's prepare was refused as busy (a desired choice was pending).
    prepare_busy: bool,
    /// Statuses of the parent's `set_desired` tries.
    statuses: Vec<String>,
    failed: Vec<String>,
}

/// Recovers in this process: the same setup, the policy, an exact retry of prepare and of the
/// desired choice until it is stable.
fn recover(setup: &Setup, child: &ChildRun, context: &str) -> Recovery {
    let service = recording_service(setup, "parent", false);
    setup.preapprove_skills();
    let mut recovery = Recovery::default();
    let query_ref = match service.prepare(&fixture::request(QUERY_LABEL, "work-one")) {
        Ok(prepared) => {
            if let Some(reported) = child.query_ref() {
                assert_eq!(
                    prepared.query_ref(),
                    reported,
                    "{context}: prepare's retry returned another query reference"
                );
            }
            prepared.query_ref().to_owned()
        }
        // A reserved desired choice must be recovered (by its exact retry) before prepare.
        Err(ServiceError::Busy(message)) => {
            recovery.prepare_busy = true;
            child.query_ref().unwrap_or_else(|| {
                panic!("{context}: prepare is busy ({message}) but the child never prepared")
            })
        }
        Err(e) => panic!("{context}: prepare after the kill failed: {e:?} ({e})"),
    };
    let request = desired_request(&query_ref);
    let mut stable = false;
    for _ in 0..DESIRED_TRIES {
        let result = service
            .set_desired(&request)
            .unwrap_or_else(|e| panic!("{context}: set_desired after the kill: {e:?} ({e})"));
        recovery.statuses.push(describe(&result));
        if is_stable(&result) {
            recovery.failed = result.failed_capability_ids().to_vec();
            stable = true;
            break;
        }
    }
    assert!(
        stable,
        "{context}: the installs did not settle after the kill: {:?}",
        recovery.statuses
    );
    if recovery.prepare_busy {
        // Once the choice is recovered, prepare's retry answers again, with the same reference.
        let prepared = service
            .prepare(&fixture::request(QUERY_LABEL, "work-one"))
            .unwrap_or_else(|e| panic!("{context}: prepare after recovery: {e:?} ({e})"));
        assert_eq!(prepared.query_ref(), query_ref, "{context}");
    }
    // A further exact retry runs no driver (checked through the loads log) and writes nothing.
    let head = setup.head_position();
    let again = service.set_desired(&request).unwrap();
    assert_eq!(
        setup.head_position(),
        head,
        "{context}: a retry after recovery appended"
    );
    assert!(
        is_stable(&again),
        "{context}: a retry after recovery is {}",
        describe(&again)
    );
    assert_eq!(
        again.failed_capability_ids(),
        recovery.failed.as_slice(),
        "{context}"
    );
    service.close();
    recovery
}

/// The install actions of the engine stream, by capability.
fn install_actions(setup: &Setup) -> BTreeMap<String, Vec<HostAction>> {
    let mut actions: BTreeMap<String, Vec<HostAction>> = BTreeMap::new();
    for event in setup.engine_events() {
        for action in &event.transition.actions {
            if action.kind == ActionKind::InstallCapability {
                let id = action.entity_id.clone().unwrap_or_default();
                let list = actions.entry(id).or_default();
                if !list.iter().any(|a| a.action_id == action.action_id) {
                    list.push(action.clone());
                }
            }
        }
    }
    actions
}

/// The invariants after recovery.
fn check_recovered(setup: &Setup, recovery: &Recovery, context: &str) {
    // 1. The driver ran at most once per action.
    let loads = read_loads(&setup.root);
    let mut seen = BTreeSet::new();
    for (role, pid, action_id) in &loads {
        assert!(
            seen.insert(action_id.clone()),
            "{context}: the install driver ran twice for {action_id} (again by the {role}, pid \
             {pid}); loads: {loads:?}"
        );
    }
    assert!(
        seen.len() <= SKILLS.len(),
        "{context}: more driver runs than installs: {loads:?}"
    );
    // Someone wrote the skill file, and only a driver run writes it.
    assert!(!loads.is_empty(), "{context}: no driver run at all");

    // 2. Claims, outcomes and settlements: one each per install action.
    let actions = install_actions(setup);
    assert_eq!(
        actions.keys().map(String::as_str).collect::<Vec<_>>(),
        SKILLS.to_vec(),
        "{context}: install actions by capability"
    );
    let journal = setup.journal();
    let clock: Arc<dyn ctx_projections::engine::Clock> = setup.clock.clone();
    let engine = Engine::open(journal.clone(), EngineOptions::new(clock)).unwrap();
    let mut install_ids = BTreeSet::new();
    for (capability, list) in &actions {
        assert_eq!(
            list.len(),
            1,
            "{context}: {capability} has one install action"
        );
        let action = &list[0];
        install_ids.insert(action.action_id.clone());
        let status = engine.install_execution_status(action).unwrap();
        assert!(
            status.claimed && status.outcome_recorded && status.settled,
            "{context}: {capability}'s install is not settled: {status:?}"
        );
    }
    for (_, _, action_id) in &loads {
        assert!(
            install_ids.contains(action_id),
            "{context}: a driver run for an unknown action {action_id}"
        );
    }
    let (claims, outcomes, settlements) = (
        setup.install_claims(),
        setup.install_outcomes(),
        setup.install_settlements(),
    );
    assert!(
        settlements <= claims,
        "{context}: more settlements than claims"
    );
    assert_eq!(
        (claims, outcomes, settlements),
        (3, 3, 3),
        "{context}: claims, outcomes and settlements"
    );

    // Every capability is installed, or verified absent and failed (a kill between the claim and
    // the staged body); at most one can fail, since the others then find or publish the file.
    let snapshot = engine.snapshot(&scope()).unwrap();
    let state = snapshot.state().unwrap();
    assert!(
        state
            .pending_effects
            .iter()
            .all(|e| !install_ids.iter().any(|id| *id == e.action.action_id)),
        "{context}: an install is still pending"
    );
    let mut failed = Vec::new();
    for (capability, list) in &actions {
        let installation = state.capability(capability).unwrap().installation;
        let outcome = engine.install_execution_status(&list[0]).unwrap().outcome;
        match (installation, outcome) {
            (Installation::Installed, Some(InstallOutcome::Applied)) => {}
            (Installation::Absent, Some(InstallOutcome::Failed)) => {
                failed.push(capability.clone());
            }
            other => panic!("{context}: {capability} ended {other:?}"),
        }
    }
    assert!(failed.len() <= 1, "{context}: failed installs {failed:?}");
    assert_eq!(failed, recovery.failed, "{context}: the reported failures");

    // 3. The skill file, exact, and no stage left.
    let path = setup.installed_skill_path();
    assert_eq!(
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{context}: skill file: {e}")),
        INSTALLABLE_SKILL_BODY,
        "{context}: skill body"
    );
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600,
        "{context}: skill file mode"
    );
    let file_name = path.file_name().unwrap().to_str().unwrap().to_owned();
    for entry in fs::read_dir(&setup.skill_root).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name == file_name || name == format!("{file_name}{LOCK_SUFFIX}"),
            "{context}: leftover {name:?} in the skill root"
        );
    }

    // 4. The journal and the projections.
    let report = journal.verify().unwrap();
    assert!(report.is_ok(), "{context}: journal verify: {report:?}");
    for name in [
        ENGINE_STATE_PROJECTION,
        ENGINE_EFFECTS_PROJECTION,
        ENGINE_BENEFIT_AUDIT_PROJECTION,
    ] {
        let check = engine.projections().check(name).unwrap();
        assert!(check.is_equal(), "{context}: {name}: {check:?}");
    }
    let audit = engine.replay_audit(&scope()).unwrap();
    assert!(
        audit.is_clean(),
        "{context}: replay audit: {:?}",
        audit.divergence()
    );
    assert_eq!(
        audit.revisions_checked(),
        setup.engine_records(),
        "{context}: replay audit length"
    );
    let store = setup.store();
    let check = store.projections().check(QUERY_STORE_PROJECTION).unwrap();
    assert!(check.is_equal(), "{context}: query store: {check:?}");
    assert_eq!(setup.query_count(), 1, "{context}: one query");
    assert_eq!(setup.committed_desired_count(), 1, "{context}: one choice");
    let consent = ConsentStore::open(journal, fixture::CONSENT_AUDIENCE).unwrap();
    let check = consent
        .projections()
        .check(CONSENT_STORE_PROJECTION)
        .unwrap();
    assert!(check.is_equal(), "{context}: consent store: {check:?}");
}

/// Counts of where the kills landed.
#[derive(Debug, Default)]
struct Tally {
    phases: BTreeMap<Phase, u32>,
    finished: u32,
    claim_without_outcome: u32,
    outcome_without_settlement: u32,
    loaded_unpublished: u32,
    stage_left: u32,
    prepare_busy: u32,
    failed_installs: u32,
    recovery_loads: u32,
}

#[test]
fn sigkill_during_preapproved_installs_runs_each_driver_at_most_once() {
    if support::child_role(CHILD_ENV).is_some() {
        return;
    }
    let rounds = rounds();
    let seed = std::env::var("CTX_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| Rng::from_time().next_u64());
    let mut rng = Rng::new(seed);
    eprintln!("install crash test: {rounds} rounds, seed {seed} (CTX_CRASH_SEED replays)");
    let started = Instant::now();
    let mut tally = Tally::default();
    // Round 0 calibrates: the child runs to its end, and its timings bound the kill delays.
    let mut full = Duration::ZERO;
    let mut prepared = Duration::ZERO;
    let mut drive = Duration::ZERO;
    let mut first_load = Duration::ZERO;
    for round in 0..=rounds {
        let kill_at = if round == 0 {
            KillAt::Never
        } else {
            match rng.below(10) {
                // Anywhere from the spawn (process start, setup, prepare, installs) to a little
                // past the child's end.
                0 | 1 => KillAt::AfterSpawn(fraction(&mut rng, full, 110)),
                // Anywhere in the drive of the desired choice (reservation, commit, grants,
                // claims, driver runs, outcomes, receipts) or a little after it.
                2..=5 => KillAt::AfterLine("prepared", fraction(&mut rng, drive, 110)),
                // Around the first install's claim and driver run (from 15 ms before the
                // calibration run's first body load to 5 ms after it).
                6 | 7 => {
                    let early = first_load.saturating_sub(Duration::from_millis(15));
                    KillAt::AfterLine("prepared", early + Duration::from_micros(rng.below(20_000)))
                }
                // Right after a given step: the policy persisted (the first prepare creates the
                // journal), the query prepared, the first body loaded (the driver is staging
                // and publishing it).
                _ => {
                    let lines = ["policy", "prepared", "loaded"];
                    let line = lines[rng.below(lines.len() as u64) as usize];
                    KillAt::AfterLine(line, Duration::from_micros(rng.below(3000)))
                }
            }
        };
        let context = format!("round {round} (seed {seed}, kill {kill_at})");
        let dir = support::tempdir();
        let round_started = Instant::now();
        let child = run_child(dir.path(), &kill_at, &context);
        if std::env::var_os("CTX_CRASH_VERBOSE").is_some() {
            eprintln!("  {context}: the child's lines {:?}", child.lines);
        }
        let setup = setup_at(dir.path(), options());
        let left = read_left(&setup, &context);
        if round == 0 {
            full = child.elapsed;
            prepared = child.at("prepared").unwrap();
            drive = child.at("done").unwrap() - prepared;
            first_load = child.at("loaded").unwrap() - prepared;
            assert_eq!(left.phase, Phase::Installed, "{context}: {left:?}");
            eprintln!("  calibration: the child's lines {:?}", child.lines);
        }
        if child.killed {
            *tally.phases.entry(left.phase).or_default() += 1;
        } else if round > 0 {
            tally.finished += 1;
        }
        tally.claim_without_outcome += u32::from(left.claims > left.outcomes);
        tally.outcome_without_settlement += u32::from(left.outcomes > left.settlements);
        tally.loaded_unpublished += u32::from(left.loads > 0 && !left.skill_file);
        tally.stage_left += u32::from(left.stages > 0);
        let loads_before = read_loads(&setup.root).len();
        let recovery = recover(&setup, &child, &context);
        check_recovered(&setup, &recovery, &context);
        // Only a claim the child made and could not finish may end verified absent.
        assert!(
            recovery.failed.is_empty() || left.claims > left.outcomes,
            "{context}: {:?} failed though the child left no open claim ({left:?})",
            recovery.failed
        );
        tally.prepare_busy += u32::from(recovery.prepare_busy);
        tally.failed_installs += recovery.failed.len() as u32;
        tally.recovery_loads += (read_loads(&setup.root).len() - loads_before) as u32;
        eprintln!(
            "  {context}: left {:?} claims/outcomes/settlements {}/{}/{} loads {} file {} \
             stages {}; recovery {:?} {:?}; {:?}",
            left.phase,
            left.claims,
            left.outcomes,
            left.settlements,
            left.loads,
            left.skill_file,
            left.stages,
            recovery.statuses,
            recovery.failed,
            round_started.elapsed()
        );
        drop(setup);
    }
    let elapsed = started.elapsed();
    eprintln!(
        "install crash test: {rounds} rounds + calibration in {elapsed:?} ({:?} per round); a \
         full child run takes {full:?} (prepared after {prepared:?}, then the drive \
         {drive:?}); kills by phase left: {:?}, finished before the kill: {}; claim without \
         outcome {}, outcome without settlement {}, body loaded but unpublished {}, stage left \
         {}; prepare busy {}; failed installs {}; driver runs during recovery {}",
        elapsed / (rounds + 1),
        tally.phases,
        tally.finished,
        tally.claim_without_outcome,
        tally.outcome_without_settlement,
        tally.loaded_unpublished,
        tally.stage_left,
        tally.prepare_busy,
        tally.failed_installs,
        tally.recovery_loads,
    );
}

/// A duration in `0..d * percent / 100`.
fn fraction(rng: &mut Rng, d: Duration, percent: u64) -> Duration {
    let bound = (d.as_micros() as u64).saturating_mul(percent) / 100;
    Duration::from_micros(rng.below(bound.max(1)))
}
