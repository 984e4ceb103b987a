//! The throwaway cluster: databases on the shared cluster, and a synchronous standby that keeps
//! an acknowledged write through a `kill -9` of the primary and a promotion.
//!
//! Without PostgreSQL's binaries each test prints a `skipped:` line and passes, unless
//! `CTX_REQUIRE_PG=1` (CI sets it), which makes it fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::thread;
use std::time::{Duration, Instant};

use ctx_journal_pg::{Cluster, ClusterError, ClusterOptions, available, gate, shared};
use postgres::{Client, NoTls};

/// Whether to run (a skip has printed its line); a failure when CTX_REQUIRE_PG demands PostgreSQL.
fn should_run(test: &str, availability: Result<(), ClusterError>) -> bool {
    gate(test, availability).unwrap_or_else(|e| panic!("{e}"))
}

fn connect(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

fn values(client: &mut Client) -> Vec<String> {
    client
        .query("select v from t order by v", &[])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn each_test_gets_its_own_database_on_the_shared_cluster() {
    let test = "each_test_gets_its_own_database_on_the_shared_cluster";
    if !should_run(test, available()) {
        return;
    }
    let started = Instant::now();
    let server = shared().unwrap_or_else(|e| panic!("{e}"));
    let first = server.create_database("ctx_pg_cluster_first").unwrap();
    let second = server.create_database("ctx_pg_cluster_second").unwrap();
    for (url, value) in [(&first, "one"), (&second, "two")] {
        let mut client = connect(url);
        let one: i32 = client.query_one("select 1", &[]).unwrap().get(0);
        assert_eq!(one, 1);
        client
            .batch_execute("create table t(v text not null)")
            .unwrap();
        client
            .execute("insert into t values ($1)", &[&value])
            .unwrap();
    }
    assert_eq!(values(&mut connect(&first)), ["one"]);
    assert_eq!(values(&mut connect(&second)), ["two"]);

    // Creating it again starts from an empty database.
    let again = server.create_database("ctx_pg_cluster_first").unwrap();
    let mut client = connect(&again);
    let tables: i64 = client
        .query_one("select count(*) from pg_tables where tablename = 't'", &[])
        .unwrap()
        .get(0);
    assert_eq!(tables, 0);
    assert!(server.create_database("not-a-name").is_err());
    eprintln!("shared cluster, two databases: {:?}", started.elapsed());
}

#[test]
fn a_sync_standby_keeps_an_acknowledged_write_through_kill_9_and_promotion() {
    let test = "a_sync_standby_keeps_an_acknowledged_write_through_kill_9_and_promotion";
    if !should_run(test, Cluster::binaries().map(drop)) {
        return;
    }
    let started = Instant::now();
    let primary = Cluster::start(ClusterOptions::new().with_replication(true)).unwrap();
    let primary_started = started.elapsed();
    let mut standby = primary.start_sync_standby().unwrap();
    let standby_started = started.elapsed();
    assert_ne!(primary.port(), standby.port());
    assert_ne!(primary.data_dir(), standby.data_dir());

    let mut on_primary = connect(&primary.url());
    let state: String = on_primary
        .query_one("select sync_state from pg_stat_replication", &[])
        .unwrap()
        .get(0);
    assert_eq!(state, "sync");
    let settings: Vec<String> = ["fsync", "synchronous_commit"]
        .iter()
        .map(|name| {
            on_primary
                .query_one(&format!("show {name}"), &[])
                .unwrap()
                .get(0)
        })
        .collect();
    assert_eq!(settings, ["on", "on"]);
    on_primary
        .batch_execute("create table t(v text not null); insert into t values ('acknowledged')")
        .unwrap();

    // synchronous_commit=on waits for the standby's flush, not its replay: poll the read.
    let mut on_standby = connect(&standby.url());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = on_standby
            .query("select v from t", &[])
            .map(|rows| rows.len());
        if seen.as_ref().is_ok_and(|n| *n == 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the standby never showed the write: {seen:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        on_standby
            .execute("insert into t values ('refused')", &[])
            .is_err()
    );

    let pid = primary.pid().unwrap();
    primary.kill9().unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
            || Client::connect(&primary.url(), NoTls).is_err()
    );
    standby.promote().unwrap();
    let mut promoted = connect(&standby.url());
    assert_eq!(values(&mut promoted), ["acknowledged"]);
    promoted
        .execute("insert into t values ('after failover')", &[])
        .unwrap();
    assert_eq!(values(&mut promoted), ["acknowledged", "after failover"]);
    let failed_over = started.elapsed();

    // Crash recovery: a kill -9 of the promoted server keeps its committed write.
    drop(promoted);
    standby.kill9().unwrap();
    standby.restart().unwrap();
    assert_eq!(
        values(&mut connect(&standby.url())),
        ["acknowledged", "after failover"]
    );
    standby.stop().unwrap();
    eprintln!(
        "primary {primary_started:?}, +sync standby {standby_started:?}, failed over \
         {failed_over:?}, killed and restarted {:?}",
        started.elapsed()
    );
}
