//! Criterion benches of the engine: events per second through the reducer (a replay audit of
//! recorded sessions), through the reducer and into the projections (a rebuild of
//! `engine.state`), and through `Engine::process` with its durable appends.
//!
//! Sessions are full managed lifecycles (`ctx_projections::testkit::lifecycle`): plan, desired
//! set, consent, one install and four activations with their claims, outcomes and settlements,
//! exposure, evidence, session end and deactivation. Setup is not timed.

// A bench has no caller to hand an error to; failing loudly with a message is right here.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ctx_journal::{Journal, OpenOptions};
use ctx_model::testkit::Session;
use ctx_projections::engine::{ENGINE_STATE_PROJECTION, Engine, EngineOptions, ManualClock};
use ctx_projections::testkit::lifecycle::{OpaqueNormalizer, run_lifecycle};
use tempfile::TempDir;

/// Sessions recorded before the replay benches run.
const SESSIONS: usize = 20;

struct Recorded {
    _dir: TempDir,
    engine: Engine,
    sessions: Vec<Session>,
    engine_records: u64,
}

fn engine_in(dir: &TempDir) -> (Engine, Arc<ManualClock>) {
    let journal =
        Arc::new(Journal::open(dir.path(), &OpenOptions::new()).expect("open the journal"));
    let clock = Arc::new(ManualClock::new(Session::new("clock").now));
    let options = EngineOptions::new(clock.clone())
        .normalizer(Arc::new(OpaqueNormalizer), "ctx-normalizer-structured-v1");
    (
        Engine::open(journal, options).expect("open the engine"),
        clock,
    )
}

fn record_sessions(n: usize) -> Recorded {
    let dir = tempfile::Builder::new()
        .prefix("ctx-bench-engine-")
        .tempdir()
        .expect("create a temp dir");
    let (engine, clock) = engine_in(&dir);
    let mut sessions = Vec::new();
    for i in 0..n {
        let mut s = Session::new(&format!("bench-{i}"));
        run_lifecycle(&engine, &clock, &mut s);
        sessions.push(s);
    }
    let engine_records = sessions
        .iter()
        .map(|s| engine.snapshot(&s.scope).expect("snapshot").revision())
        .sum();
    Recorded {
        _dir: dir,
        engine,
        sessions,
        engine_records,
    }
}

/// Re-reduces every recorded session from revision 1 and compares every transition and state.
fn replay_audit(c: &mut Criterion) {
    let r = record_sessions(SESSIONS);
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(r.engine_records));
    group.bench_function("replay_audit", |b| {
        b.iter(|| {
            for s in &r.sessions {
                let report = r.engine.replay_audit(&s.scope).expect("audit");
                assert!(report.is_clean(), "recorded sessions replay cleanly");
                black_box(report.revisions_checked());
            }
        })
    });
    group.finish();
}

/// Drops `engine.state` and replays the whole journal into it, in one write transaction.
fn rebuild(c: &mut Criterion) {
    let r = record_sessions(SESSIONS);
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(r.engine_records));
    group.bench_function("rebuild_engine_state", |b| {
        b.iter(|| {
            black_box(
                r.engine
                    .projections()
                    .rebuild(ENGINE_STATE_PROJECTION)
                    .expect("rebuild"),
            )
        })
    });
    group.finish();
}

/// One full session per iteration through `Engine::process` and the effect protocols; every
/// append is durable before it returns.
fn process(c: &mut Criterion) {
    let dir = tempfile::Builder::new()
        .prefix("ctx-bench-engine-process-")
        .tempdir()
        .expect("create a temp dir");
    let (engine, clock) = engine_in(&dir);
    let mut probe = Session::new("probe");
    run_lifecycle(&engine, &clock, &mut probe);
    let per_session = engine.snapshot(&probe.scope).expect("snapshot").revision();
    let mut i = 0;
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(per_session));
    group.bench_function("process_lifecycle", |b| {
        b.iter(|| {
            i += 1;
            let mut s = Session::new(&format!("process-{i}"));
            black_box(run_lifecycle(&engine, &clock, &mut s))
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = replay_audit, rebuild, process
}
criterion_main!(benches);
