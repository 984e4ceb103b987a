//! `PgBackend` at the seam: the `Backend`, `ReadTxn` and `WriteTxn` contracts on a real
//! PostgreSQL server, one database per test on the shared throwaway cluster (or `$CTX_PG_URL`).
//!
//! Without PostgreSQL's binaries each test prints a `skipped:` line and passes, unless
//! `CTX_REQUIRE_PG=1`, which makes it fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ctx_journal::{
    Backend, CommitError, Digest, ExpectedRevision, Finish, IndexKind, Journal, NewRecord,
    OpenOptions, PutRecord, ReadError, ReadTxn, StorageError, StreamAppend, StreamHead, StreamId,
    Timestamp, WriteTxn,
};
use ctx_journal_pg::{PgBackend, PgError, SCHEMA_VERSION, available, gate, shared};
use postgres::{Client, NoTls};

/// A fresh database for `test` (its name must be unique among the tests), or `None` when the
/// test is skipped.
fn database(test: &str, name: &str) -> Option<String> {
    if !gate(test, available()).unwrap() {
        return None;
    }
    let server = shared().unwrap_or_else(|e| panic!("{test}: no PostgreSQL server: {e}"));
    Some(server.create_database(name).unwrap())
}

fn sql(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap()
}

fn stream(n: u8) -> StreamId {
    StreamId::from_bytes([n; 32])
}

fn storage(e: ReadError) -> StorageError {
    StorageError::message(e.to_string())
}

/// Puts a record with made-up bytes at the transaction's next position; returns the position.
fn put(
    txn: &mut dyn WriteTxn,
    stream: &StreamId,
    revision: u64,
    event_id: &str,
) -> Result<u64, StorageError> {
    let position = txn.next_position().map_err(storage)?;
    let bytes = format!("{event_id}@{position}");
    txn.put_record(&PutRecord {
        stream: *stream,
        revision,
        position,
        event_id,
        digest: Digest::from_bytes([revision as u8; 32]),
        bytes: bytes.as_bytes(),
    })?;
    Ok(position)
}

fn records(backend: &PgBackend, from: u64) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    backend
        .read(&mut |txn| {
            out.clear();
            txn.records(from, &mut |position, bytes| {
                out.push((position, bytes.to_vec()));
                ControlFlow::Continue(())
            })
        })
        .unwrap();
    out
}

fn last_position(backend: &PgBackend) -> u64 {
    let mut last = 0;
    backend
        .read(&mut |txn| {
            last = txn.last_position()?;
            Ok(())
        })
        .unwrap();
    last
}

fn kv_scan(txn: &mut dyn ReadTxn, table: &str, after: Option<&[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    txn.kv_scan(table, after, &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

fn commit(
    backend: &PgBackend,
    mut work: impl FnMut(&mut dyn WriteTxn) -> Result<(), StorageError>,
) {
    let finish = backend
        .write(&mut |txn| {
            work(txn)?;
            Ok(Finish::Commit)
        })
        .unwrap();
    assert_eq!(finish, Finish::Commit);
}

#[test]
fn records_heads_and_projection_entries_round_trip() {
    let test = "records_heads_and_projection_entries_round_trip";
    let Some(url) = database(test, "ctx_pgb_round_trip") else {
        return;
    };
    let started = Instant::now();
    let backend = PgBackend::connect(&url).unwrap();
    assert!(backend.is_empty().unwrap());
    assert!(!backend.fail_stop_on_uncertain_commit());
    let (a, b) = (stream(0xaa), stream(0x0b));

    commit(&backend, |txn| {
        assert_eq!(txn.next_position().unwrap(), 1);
        assert_eq!(txn.last_position().unwrap(), 0);
        assert_eq!(put(txn, &a, 1, "e1")?, 1);
        assert_eq!(put(txn, &b, 1, "e2")?, 2);
        assert_eq!(put(txn, &a, 2, "e3")?, 3);
        // The transaction reads its own writes.
        assert_eq!(txn.next_position().unwrap(), 4);
        assert_eq!(txn.last_position().unwrap(), 3);
        assert_eq!(txn.find_event("e3").unwrap(), Some(3));
        assert_eq!(txn.find_event("nope").unwrap(), None);
        assert_eq!(
            txn.head(&a).unwrap(),
            Some(StreamHead {
                revision: 2,
                position: 3,
                digest: Digest::from_bytes([2; 32])
            })
        );
        txn.kv_put("proj.t", b"k2", b"v2")?;
        txn.kv_put("proj.t", b"k1", b"v1")?;
        txn.kv_put("proj.t", b"k3", b"v3")?;
        txn.kv_put("proj.u", b"k1", b"other table")?;
        txn.kv_put("proj.t", b"k2", b"v2'")?;
        Ok(())
    });
    assert!(!backend.is_empty().unwrap());
    assert_eq!(last_position(&backend), 3);
    assert_eq!(
        records(&backend, 1),
        [
            (1, b"e1@1".to_vec()),
            (2, b"e2@2".to_vec()),
            (3, b"e3@3".to_vec())
        ]
    );
    assert_eq!(records(&backend, 3), [(3, b"e3@3".to_vec())]);
    assert!(records(&backend, 4).is_empty());
    assert!(records(&backend, u64::MAX).is_empty());

    backend
        .read(&mut |txn| {
            let mut seen = Vec::new();
            txn.stream_records(&a, 1, 2, &mut |revision, position, bytes| {
                seen.push((revision, position, bytes.to_vec()));
                ControlFlow::Continue(())
            })?;
            assert_eq!(seen, [(1, 1, b"e1@1".to_vec()), (2, 3, b"e3@3".to_vec())]);
            seen.clear();
            txn.stream_records(&a, 1, 2, &mut |revision, position, bytes| {
                seen.push((revision, position, bytes.to_vec()));
                ControlFlow::Break(())
            })?;
            assert_eq!(seen.len(), 1);
            // A revision in the range without a record is an error naming it.
            let missing = txn.stream_records(&b, 1, 2, &mut |_, _, _| ControlFlow::Continue(()));
            match missing {
                Err(ReadError::Corrupt { reason, .. }) => {
                    assert!(reason.contains("revision 2"), "{reason}")
                }
                other => panic!("expected a missing revision, got {other:?}"),
            }
            let mut got = None;
            txn.record(2, &mut |bytes| got = bytes.map(<[u8]>::to_vec))?;
            assert_eq!(got.as_deref(), Some(&b"e2@2"[..]));
            txn.record(9, &mut |bytes| got = bytes.map(<[u8]>::to_vec))?;
            assert_eq!(got, None);
            assert_eq!(txn.head(&stream(7))?, None);

            // Heads in stream order (bytea sorts bytewise): 0x0b… before 0xaa….
            let mut heads = Vec::new();
            txn.heads(&mut |key, head| heads.push((key.to_vec(), head.unwrap())))?;
            assert_eq!(
                heads,
                [
                    (
                        b.as_bytes().to_vec(),
                        StreamHead {
                            revision: 1,
                            position: 2,
                            digest: Digest::from_bytes([1; 32])
                        }
                    ),
                    (
                        a.as_bytes().to_vec(),
                        StreamHead {
                            revision: 2,
                            position: 3,
                            digest: Digest::from_bytes([2; 32])
                        }
                    ),
                ]
            );

            let mut value = None;
            txn.kv_get("proj.t", b"k2", &mut |v| value = v.map(<[u8]>::to_vec))?;
            assert_eq!(value.as_deref(), Some(&b"v2'"[..]));
            txn.kv_get("proj.none", b"k2", &mut |v| value = v.map(<[u8]>::to_vec))?;
            assert_eq!(value, None);
            let keys = |entries: Vec<(Vec<u8>, Vec<u8>)>| -> Vec<Vec<u8>> {
                entries.into_iter().map(|(k, _)| k).collect()
            };
            assert_eq!(
                keys(kv_scan(txn, "proj.t", None)),
                [b"k1".to_vec(), b"k2".to_vec(), b"k3".to_vec()]
            );
            assert_eq!(
                keys(kv_scan(txn, "proj.t", Some(b"k1"))),
                [b"k2".to_vec(), b"k3".to_vec()]
            );
            assert_eq!(
                keys(kv_scan(txn, "proj.t", Some(b"k15"))),
                [b"k2".to_vec(), b"k3".to_vec()]
            );
            assert!(kv_scan(txn, "proj.t", Some(b"k3")).is_empty());
            assert!(kv_scan(txn, "proj.none", None).is_empty());
            let mut first = Vec::new();
            txn.kv_scan("proj.t", None, &mut |k, _| {
                first.push(k.to_vec());
                ControlFlow::Break(())
            })?;
            assert_eq!(first, [b"k1".to_vec()]);
            let mut findings = Vec::new();
            txn.check_indexes(&mut |f| findings.push(f))?;
            // Made-up record bytes do not decode: one finding per record.
            assert_eq!(findings.len(), 3);
            assert!(findings.iter().all(|f| f.kind == IndexKind::Position));
            Ok(())
        })
        .unwrap();

    // Removing and clearing; the next transaction continues at position 4.
    commit(&backend, |txn| {
        assert_eq!(txn.next_position().unwrap(), 4);
        assert!(txn.kv_remove("proj.t", b"k1")?);
        assert!(!txn.kv_remove("proj.t", b"k1")?);
        txn.kv_clear("proj.u")?;
        assert_eq!(put(txn, &b, 2, "e4")?, 4);
        assert_eq!(txn.find_event("e1").unwrap(), Some(1));
        Ok(())
    });
    backend
        .read(&mut |txn| {
            assert_eq!(kv_scan(txn, "proj.t", None).len(), 2);
            assert!(kv_scan(txn, "proj.u", None).is_empty());
            assert_eq!(txn.head(&b)?.map(|h| h.revision), Some(2));
            Ok(())
        })
        .unwrap();
    // Another handle on the same database sees the same journal.
    let again = PgBackend::connect(&url).unwrap();
    assert_eq!(records(&again, 1).len(), 4);
    eprintln!("{test}: {:?}", started.elapsed());
}

#[test]
fn an_aborted_or_failed_transaction_leaves_nothing() {
    let test = "an_aborted_or_failed_transaction_leaves_nothing";
    let Some(url) = database(test, "ctx_pgb_abort") else {
        return;
    };
    let started = Instant::now();
    let backend = PgBackend::connect(&url).unwrap();
    let a = stream(1);

    // Abort.
    let finish = backend
        .write(&mut |txn| {
            put(txn, &a, 1, "e1")?;
            txn.kv_put("proj.t", b"k", b"v")?;
            Ok(Finish::Abort)
        })
        .unwrap();
    assert_eq!(finish, Finish::Abort);

    // An error from the work.
    let result = backend.write(&mut |txn| {
        put(txn, &a, 1, "e1")?;
        Err(StorageError::message("the work refused"))
    });
    assert!(
        matches!(&result, Err(CommitError::NotCommitted(e)) if e.to_string().contains("the work refused")),
        "{result:?}"
    );

    // A failed statement whose error the work ignores: still not committed.
    let result = backend.write(&mut |txn| {
        put(txn, &a, 1, "e1")?;
        let duplicate = put(txn, &stream(2), 1, "e1");
        assert!(duplicate.is_err(), "a duplicate event id is refused");
        Ok(Finish::Commit)
    });
    assert!(
        matches!(&result, Err(CommitError::NotCommitted(e)) if e.to_string().contains("rolled the transaction back")),
        "{result:?}"
    );

    // A head that is not at revision − 1: the compare on the head row refuses it.
    let result = backend.write(&mut |txn| {
        put(txn, &a, 1, "e1")?;
        put(txn, &a, 3, "e2")?;
        Ok(Finish::Commit)
    });
    match &result {
        Err(CommitError::NotCommitted(e)) => {
            let message = e.to_string();
            assert!(message.contains("corruption or a bug"), "{message}");
        }
        other => panic!("expected NotCommitted, got {other:?}"),
    }
    // A first record that is not revision 1.
    let result = backend.write(&mut |txn| {
        put(txn, &a, 2, "e1")?;
        Ok(Finish::Commit)
    });
    assert!(
        matches!(result, Err(CommitError::NotCommitted(_))),
        "{result:?}"
    );
    // A position other than the next one is refused before it reaches the server.
    let result = backend.write(&mut |txn| {
        txn.put_record(&PutRecord {
            stream: a,
            revision: 1,
            position: 5,
            event_id: "e1",
            digest: Digest::ZERO,
            bytes: b"x",
        })?;
        Ok(Finish::Commit)
    });
    assert!(
        matches!(result, Err(CommitError::NotCommitted(_))),
        "{result:?}"
    );

    assert!(backend.is_empty().unwrap());
    assert_eq!(last_position(&backend), 0);
    backend
        .read(&mut |txn| {
            assert_eq!(txn.head(&a)?, None);
            assert!(kv_scan(txn, "proj.t", None).is_empty());
            Ok(())
        })
        .unwrap();
    // Nothing was used up: the next commit gets position 1, on the same (kept) connection.
    commit(&backend, |txn| {
        assert_eq!(put(txn, &a, 1, "e1")?, 1);
        Ok(())
    });
    assert_eq!(records(&backend, 1).len(), 1);
    eprintln!("{test}: {:?}", started.elapsed());
}

/// A projection entry's value through `kv_get`.
fn kv_value(txn: &mut dyn ReadTxn, table: &str, key: &[u8]) -> Option<Vec<u8>> {
    let mut value = None;
    txn.kv_get(table, key, &mut |v| value = v.map(<[u8]>::to_vec))
        .unwrap();
    value
}

/// Every projection table of the model, as `kv_scan` would list it.
fn model_scan(
    model: &std::collections::BTreeMap<(String, Vec<u8>), Vec<u8>>,
    table: &str,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .filter(|((t, _), _)| t == table)
        .map(|((_, k), v)| (k.clone(), v.clone()))
        .collect()
}

/// The backend queues a write transaction's projection writes and caches what it read; every
/// answer inside the transaction, and what a later reader sees, must still equal a plain map's.
/// Random puts, removes, gets, scans and clears over a few keys of two tables, in transactions
/// that commit or abort, with enough puts in one transaction to fill the queue mid-way.
#[test]
fn queued_projection_writes_read_back_like_a_map() {
    let test = "queued_projection_writes_read_back_like_a_map";
    let Some(url) = database(test, "ctx_pgb_kv_queue") else {
        return;
    };
    let backend = PgBackend::connect(&url).unwrap();
    let mut committed = std::collections::BTreeMap::<(String, Vec<u8>), Vec<u8>>::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let tables = ["proj.a", "proj.b"];
    for round in 0..24 {
        let mut model = committed.clone();
        let commit_it = round % 4 != 3;
        // Round 5 writes more distinct entries than the queue holds, so it is sent mid-way.
        let operations = if round == 5 { 2_600 } else { 60 };
        let finish = backend
            .write(&mut |txn| {
                model = committed.clone();
                for i in 0..operations {
                    let table = tables[next(2) as usize];
                    let key = if round == 5 {
                        (i as u32).to_be_bytes().to_vec()
                    } else {
                        vec![next(6) as u8]
                    };
                    let name = (table.to_owned(), key.clone());
                    match if round == 5 { 0 } else { next(10) } {
                        0..=3 => {
                            let value = format!("r{round}i{i}").into_bytes();
                            txn.kv_put(table, &key, &value)?;
                            model.insert(name, value);
                        }
                        4 | 5 => {
                            let removed = txn.kv_remove(table, &key)?;
                            assert_eq!(removed, model.remove(&name).is_some(), "{name:?}");
                        }
                        6 | 7 => {
                            assert_eq!(kv_value(txn, table, &key), model.get(&name).cloned());
                        }
                        8 => assert_eq!(kv_scan(txn, table, None), model_scan(&model, table)),
                        _ => {
                            if next(4) == 0 {
                                txn.kv_clear(table)?;
                                model.retain(|(t, _), _| t != table);
                            }
                        }
                    }
                }
                Ok(if commit_it {
                    Finish::Commit
                } else {
                    Finish::Abort
                })
            })
            .unwrap();
        if finish == Finish::Commit {
            committed = model;
        }
        if round == 5 {
            assert!(committed.len() >= 2_600, "{}", committed.len());
        }
        backend
            .read(&mut |txn| {
                for table in tables {
                    assert_eq!(
                        kv_scan(txn, table, None),
                        model_scan(&committed, table),
                        "round {round}"
                    );
                }
                for ((table, key), value) in committed.iter().take(20) {
                    assert_eq!(kv_value(txn, table, key).as_ref(), Some(value));
                }
                Ok(())
            })
            .unwrap();
    }

    // A queued write the server refuses (an incompressible key past the index entry limit)
    // fails the commit, and nothing of the transaction is written.
    let long_key: Vec<u8> = (0..3_000).map(|_| next(256) as u8).collect();
    let result = backend.write(&mut |txn| {
        put(txn, &stream(9), 1, "queued-refused")?;
        txn.kv_put("proj.a", b"fresh", b"value")?;
        txn.kv_put("proj.a", &long_key, b"value")?;
        Ok(Finish::Commit)
    });
    assert!(
        matches!(&result, Err(CommitError::NotCommitted(e)) if e.to_string().contains("projection")),
        "{result:?}"
    );
    assert!(records(&backend, 1).is_empty());
    backend
        .read(&mut |txn| {
            assert_eq!(kv_value(txn, "proj.a", b"fresh"), None);
            assert_eq!(
                kv_scan(txn, "proj.a", None),
                model_scan(&committed, "proj.a")
            );
            Ok(())
        })
        .unwrap();
}

#[test]
fn concurrent_writers_in_separate_connections_get_dense_positions() {
    let test = "concurrent_writers_in_separate_connections_get_dense_positions";
    let Some(url) = database(test, "ctx_pgb_concurrent") else {
        return;
    };
    let started = Instant::now();
    const WRITERS: usize = 2;
    const TRANSACTIONS: usize = 60;
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let url = url.clone();
            thread::spawn(move || {
                let backend = PgBackend::connect(&url).unwrap();
                let own = stream(w as u8 + 1);
                let mut revision = 0;
                for t in 0..TRANSACTIONS {
                    let count = t % 3 + 1;
                    commit(&backend, |txn| {
                        let head = txn.head(&own).map_err(storage)?.map_or(0, |h| h.revision);
                        assert_eq!(head, revision);
                        for i in 0..count {
                            put(txn, &own, head + 1 + i as u64, &format!("w{w}-t{t}-{i}"))?;
                        }
                        Ok(())
                    });
                    revision += count as u64;
                }
                revision
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let backend = PgBackend::connect(&url).unwrap();
    let all = records(&backend, 1);
    let positions: Vec<u64> = all.iter().map(|(p, _)| *p).collect();
    assert_eq!(positions, (1..=total).collect::<Vec<_>>());
    let events: HashSet<Vec<u8>> = all.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(events.len() as u64, total);
    assert_eq!(last_position(&backend), total);
    // A commit made while the other writer was about was asynchronous; its answer waited for a
    // durability step that covers it (spec/scale-out.md §3.9).
    let (durable, asynchronous, last) = durability(&url);
    assert_eq!(last, total as i64);
    assert!(asynchronous <= durable, "{asynchronous} > {durable}");
    eprintln!(
        "{test}: {WRITERS} writers, {total} records in {} transactions: {:?}",
        WRITERS * TRANSACTIONS,
        started.elapsed()
    );
}

/// The largest position `ctx_durable` records (0 when none), `ctx_meta.async_position` (the last
/// asynchronous commit's last position) and the last position, as the server has them now.
fn durability(url: &str) -> (i64, i64, i64) {
    let row = sql(url)
        .query_one(
            "SELECT (SELECT coalesce(max(position), 0) FROM ctx_durable), async_position, \
             last_position FROM ctx_meta WHERE id = 1",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// `ctx_durable`'s rows with the transaction that wrote each, to see whether anything wrote them.
fn durable_rows(url: &str) -> Vec<(String, i32, i64)> {
    sql(url)
        .query(
            "SELECT xmin::text, slot, position FROM ctx_durable ORDER BY slot",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

/// A writer alone commits synchronously (visible only once durable: nothing to mark, no second
/// transaction); once another writer has committed since its previous transaction, it commits
/// asynchronously, marks `async_position` and answers after a durability step covers it. Reads,
/// lookups, emptiness checks, projection-only commits and aborts that find nothing in flight
/// write nothing
/// (spec/scale-out.md §3.9).
#[test]
fn a_writer_releases_the_lock_before_its_flush_only_while_another_writer_is_about() {
    let test = "a_writer_releases_the_lock_before_its_flush_only_while_another_writer_is_about";
    let Some(url) = database(test, "ctx_pgb_async") else {
        return;
    };
    let first = PgBackend::connect(&url).unwrap();
    let second = PgBackend::connect(&url).unwrap();
    let (a, b) = (stream(1), stream(2));
    let append = |backend: &PgBackend, stream: &StreamId, revision: u64, id: &str| {
        commit(backend, |txn| put(txn, stream, revision, id).map(drop));
        durability(&url)
    };
    // (durable, async_position, last) after each append.
    assert_eq!(
        append(&first, &a, 1, "a1"),
        (0, 0, 1),
        "a first transaction"
    );
    assert_eq!(append(&first, &a, 2, "a2"), (0, 0, 2), "still alone");
    assert_eq!(
        append(&second, &b, 1, "b1"),
        (0, 0, 3),
        "the second's first"
    );
    assert_eq!(append(&first, &a, 3, "a3"), (4, 4, 4), "b1 came in between");
    assert_eq!(append(&first, &a, 4, "a4"), (4, 4, 5), "alone again");

    let rows = durable_rows(&url);
    assert_eq!(last_position(&second), 5);
    second
        .read_single(&mut |txn| {
            assert_eq!(txn.head(&a)?.map(|h| h.revision), Some(4));
            Ok(())
        })
        .unwrap();
    commit(&second, |txn| txn.kv_put("proj.a", b"k", b"v"));
    let aborted = second
        .write(&mut |txn| {
            assert_eq!(txn.head(&a).map_err(storage)?.map(|h| h.revision), Some(4));
            Ok(Finish::Abort)
        })
        .unwrap();
    assert_eq!(aborted, Finish::Abort);
    assert!(!second.is_empty().unwrap());
    assert_eq!(durable_rows(&url), rows);
    assert_eq!(durability(&url), (4, 4, 5));
}

/// A commit whose writer never ran its durability step (the fail point commits asynchronously
/// and skips the step, standing in for a process that died after `COMMIT`) is visible; whoever
/// reads it first makes it durable before answering (spec/scale-out.md §3.9).
#[cfg(feature = "failpoints")]
#[test]
fn whoever_sees_a_commit_not_known_durable_makes_it_durable_before_answering() {
    let test = "whoever_sees_a_commit_not_known_durable_makes_it_durable_before_answering";
    let dbname = "ctx_pgb_in_flight";
    let Some(url) = database(test, dbname) else {
        return;
    };
    let writer = PgBackend::connect(&url).unwrap();
    let reader = PgBackend::connect(&url).unwrap();
    let a = stream(1);
    commit(&writer, |txn| put(txn, &a, 1, "e1").map(drop));
    let mut revision = 1;
    let mut unconfirmed = |writer: &PgBackend| {
        let (durable, _, _) = durability(&url);
        revision += 1;
        fail::cfg("pg-skip-durable", &format!("return({dbname})")).unwrap();
        let result = writer.write(&mut |txn| {
            put(txn, &a, revision, &format!("e{revision}")).map(|_| Finish::Commit)
        });
        fail::remove("pg-skip-durable");
        assert!(
            matches!(result, Err(CommitError::MaybeCommitted(_))),
            "{result:?}"
        );
        let last = revision as i64;
        assert_eq!(durability(&url), (durable, last, last));
        last
    };

    // A read transaction: before its work sees anything.
    let last = unconfirmed(&writer);
    assert_eq!(last_position(&reader) as i64, last);
    assert_eq!(durability(&url), (last, last, last));

    // A single lookup: after it, before it answers.
    let last = unconfirmed(&writer);
    reader
        .read_single(&mut |txn| {
            assert_eq!(txn.head(&a)?.map(|h| h.revision as i64), Some(last));
            Ok(())
        })
        .unwrap();
    assert_eq!(durability(&url), (last, last, last));

    // A write transaction that decides on what it read and abandons itself (a conflict).
    let last = unconfirmed(&writer);
    let aborted = reader
        .write(&mut |txn| {
            assert_eq!(
                txn.head(&a).map_err(storage)?.map(|h| h.revision as i64),
                Some(last)
            );
            Ok(Finish::Abort)
        })
        .unwrap();
    assert_eq!(aborted, Finish::Abort);
    assert_eq!(durability(&url), (last, last, last));

    // A write transaction that commits projection entries alone.
    let last = unconfirmed(&writer);
    commit(&reader, |txn| txn.kv_put("proj.a", b"k", b"v"));
    assert_eq!(durability(&url), (last, last, last));

    // The emptiness check an import makes: "not empty" is an answer acted on too.
    let last = unconfirmed(&writer);
    assert!(!reader.is_empty().unwrap());
    assert_eq!(durability(&url), (last, last, last));
}

/// Every commit before schema 4 was synchronous: after the migration nothing is in flight, so
/// reads write nothing.
#[test]
fn migrating_to_schema_4_leaves_nothing_in_flight() {
    let test = "migrating_to_schema_4_leaves_nothing_in_flight";
    let Some(url) = database(test, "ctx_pgb_durable_migrate") else {
        return;
    };
    let backend = PgBackend::connect(&url).unwrap();
    let a = stream(1);
    for revision in 1..=4 {
        commit(&backend, |txn| {
            put(txn, &a, revision, &format!("e{revision}")).map(drop)
        });
    }
    drop(backend);
    // Back to schema 3, as an older build left the database.
    sql(&url)
        .batch_execute(
            "DROP TABLE ctx_durable; ALTER TABLE ctx_meta DROP COLUMN async_position; \
             DELETE FROM ctx_schema_migrations WHERE version = 4",
        )
        .unwrap();
    let backend = PgBackend::connect(&url).unwrap();
    assert_eq!(durability(&url), (0, 0, 4));
    assert_eq!(records(&backend, 1).len(), 4);
    assert!(durable_rows(&url).is_empty());
}

#[test]
fn a_reader_never_sees_a_partial_transaction_and_does_not_wait() {
    let test = "a_reader_never_sees_a_partial_transaction_and_does_not_wait";
    let Some(url) = database(test, "ctx_pgb_isolation") else {
        return;
    };
    let started = Instant::now();
    let backend = PgBackend::connect(&url).unwrap();
    let a = stream(1);
    commit(&backend, |txn| put(txn, &a, 1, "before").map(drop));

    let (to_reader, from_writer) = mpsc::channel::<()>();
    let (to_writer, from_reader) = mpsc::channel::<()>();
    let writer = {
        let url = url.clone();
        thread::spawn(move || {
            let backend = PgBackend::connect(&url).unwrap();
            commit(&backend, |txn| {
                put(txn, &a, 2, "first-half")?;
                txn.kv_put("proj.t", b"k", b"half")?;
                to_reader.send(()).unwrap();
                // The reader reads while this transaction is open.
                from_reader
                    .recv_timeout(Duration::from_secs(30))
                    .expect("the reader finished while the writer held its transaction");
                put(txn, &a, 3, "second-half")?;
                Ok(())
            });
        })
    };
    from_writer.recv_timeout(Duration::from_secs(30)).unwrap();
    let read_started = Instant::now();
    backend
        .read(&mut |txn| {
            assert_eq!(txn.last_position()?, 1);
            assert_eq!(txn.head(&a)?.map(|h| h.revision), Some(1));
            let mut positions = Vec::new();
            txn.records(1, &mut |p, _| {
                positions.push(p);
                ControlFlow::Continue(())
            })?;
            assert_eq!(positions, [1]);
            assert!(kv_scan(txn, "proj.t", None).is_empty());
            Ok(())
        })
        .unwrap();
    let read_took = read_started.elapsed();
    to_writer.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(
        records(&backend, 1)
            .iter()
            .map(|(p, _)| *p)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    eprintln!(
        "{test}: read during an open write transaction took {read_took:?}; total {:?}",
        started.elapsed()
    );
}

#[test]
fn migrations_are_idempotent_and_safe_for_concurrent_first_connects() {
    let test = "migrations_are_idempotent_and_safe_for_concurrent_first_connects";
    let Some(url) = database(test, "ctx_pgb_migrate") else {
        return;
    };
    let fresh = shared()
        .unwrap()
        .create_database("ctx_pgb_migrate_concurrent")
        .unwrap();
    let started = Instant::now();
    let first = PgBackend::connect(&url).unwrap();
    commit(&first, |txn| put(txn, &stream(1), 1, "e1").map(drop));
    let second = PgBackend::connect(&url).unwrap();
    assert_eq!(records(&second, 1).len(), 1);
    let versions = |url: &str| -> Vec<i32> {
        sql(url)
            .query(
                "SELECT version FROM ctx_schema_migrations ORDER BY version",
                &[],
            )
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    assert_eq!(versions(&url), (1..=SCHEMA_VERSION).collect::<Vec<_>>());

    let handles: Vec<_> = (0..4)
        .map(|_| {
            let url = fresh.clone();
            thread::spawn(move || PgBackend::connect(&url).map(drop))
        })
        .collect();
    for handle in handles {
        handle.join().unwrap().unwrap();
    }
    assert_eq!(versions(&fresh), (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    let meta: i64 = sql(&fresh)
        .query_one("SELECT count(*) FROM ctx_meta", &[])
        .unwrap()
        .get(0);
    assert_eq!(meta, 1);
    eprintln!("{test}: {:?}", started.elapsed());
}

#[test]
fn a_newer_schema_or_format_is_refused() {
    let test = "a_newer_schema_or_format_is_refused";
    let Some(url) = database(test, "ctx_pgb_newer") else {
        return;
    };
    let started = Instant::now();
    drop(PgBackend::connect(&url).unwrap());
    let mut client = sql(&url);
    client
        .execute(
            "INSERT INTO ctx_schema_migrations (version, description) VALUES ($1, 'from the future')",
            &[&(SCHEMA_VERSION + 1)],
        )
        .unwrap();
    match PgBackend::connect(&url) {
        Err(e @ PgError::SchemaTooNew { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains(&format!("version {}", SCHEMA_VERSION + 1))
                    && message.contains(&format!("up to {SCHEMA_VERSION}")),
                "{message}"
            );
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    client
        .execute(
            "DELETE FROM ctx_schema_migrations WHERE version = $1",
            &[&(SCHEMA_VERSION + 1)],
        )
        .unwrap();
    client
        .execute("UPDATE ctx_meta SET format_version = 3", &[])
        .unwrap();
    match PgBackend::connect(&url) {
        Err(PgError::FormatVersion {
            found: 3,
            supported: 2,
            ..
        }) => {}
        other => panic!("expected FormatVersion, got {other:?}"),
    }
    eprintln!("{test}: {:?}", started.elapsed());
}

#[test]
fn journals_in_separate_schemas_share_a_database() {
    let test = "journals_in_separate_schemas_share_a_database";
    let Some(url) = database(test, "ctx_pgb_schemas") else {
        return;
    };
    let started = Instant::now();
    let one = PgBackend::connect_in_schema(&url, "journal_one").unwrap();
    let two = PgBackend::connect_in_schema(&url, "journal_two").unwrap();
    assert_eq!(one.schema(), "journal_one");
    assert!(
        one.location().ends_with("schema journal_one"),
        "{}",
        one.location()
    );
    commit(&one, |txn| put(txn, &stream(1), 1, "same-id").map(drop));
    commit(&two, |txn| {
        assert_eq!(put(txn, &stream(1), 1, "same-id")?, 1);
        put(txn, &stream(1), 2, "more").map(drop)
    });
    assert_eq!(records(&one, 1).len(), 1);
    assert_eq!(records(&two, 1).len(), 2);
    for bad in ["", "Upper", "pg_catalog", "a-b", "1abc", "x\"y"] {
        assert!(
            matches!(
                PgBackend::connect_in_schema(&url, bad),
                Err(PgError::SchemaName { .. })
            ),
            "{bad:?}"
        );
    }
    eprintln!("{test}: {:?}", started.elapsed());
}

#[test]
fn scans_page_through_many_and_large_rows() {
    let test = "scans_page_through_many_and_large_rows";
    let Some(url) = database(test, "ctx_pgb_paging") else {
        return;
    };
    let started = Instant::now();
    let backend = PgBackend::connect(&url).unwrap();
    let (small, large) = (stream(1), stream(2));
    const SMALL: u64 = 2_500;
    let big = vec![7u8; 3 << 20];
    commit(&backend, |txn| {
        for revision in 1..=SMALL {
            put(txn, &small, revision, &format!("s{revision}"))?;
        }
        for revision in 1..=4u64 {
            let position = txn.next_position().map_err(storage)?;
            txn.put_record(&PutRecord {
                stream: large,
                revision,
                position,
                event_id: &format!("l{revision}"),
                digest: Digest::ZERO,
                bytes: &big,
            })?;
        }
        for i in 0..2_100u32 {
            txn.kv_put("proj.many", &i.to_be_bytes(), b"v")?;
        }
        for i in 0..4u8 {
            txn.kv_put("proj.big", &[i], &big)?;
        }
        Ok(())
    });
    let written = started.elapsed();
    let all = records(&backend, 1);
    assert_eq!(
        all.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        (1..=SMALL + 4).collect::<Vec<_>>()
    );
    assert!(
        all[SMALL as usize..]
            .iter()
            .all(|(_, b)| b.len() == big.len())
    );
    backend
        .read(&mut |txn| {
            let mut revisions = Vec::new();
            txn.stream_records(&small, 1, SMALL, &mut |r, _, _| {
                revisions.push(r);
                ControlFlow::Continue(())
            })?;
            assert_eq!(revisions, (1..=SMALL).collect::<Vec<_>>());
            revisions.clear();
            txn.stream_records(&large, 2, 4, &mut |r, _, b| {
                assert_eq!(b.len(), 3 << 20);
                revisions.push(r);
                ControlFlow::Continue(())
            })?;
            assert_eq!(revisions, [2, 3, 4]);
            let mut seen = 0;
            txn.records(1, &mut |_, _| {
                seen += 1;
                if seen == 1_500 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            assert_eq!(seen, 1_500);
            let many = kv_scan(txn, "proj.many", None);
            assert_eq!(many.len(), 2_100);
            assert!(many.windows(2).all(|w| w[0].0 < w[1].0));
            assert_eq!(kv_scan(txn, "proj.big", None).len(), 4);
            assert_eq!(kv_scan(txn, "proj.big", Some(&[1])).len(), 2);
            Ok(())
        })
        .unwrap();
    eprintln!(
        "{test}: wrote {} records and 2,104 entries in {written:?}; total {:?}",
        SMALL + 4,
        started.elapsed()
    );
}

/// Record values as the redb journal seals them, with the fields a backend indexes.
fn sealed_records() -> Vec<(ctx_journal::Record, Vec<u8>)> {
    const RECORDS: redb::TableDefinition<u64, &[u8]> =
        redb::TableDefinition::new("journal.records");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal");
    {
        let journal = Journal::open(&path, &OpenOptions::new()).unwrap();
        let record = |id: &str| NewRecord::new(id, "kind", Timestamp(1), id.as_bytes().to_vec());
        journal
            .append_batch(vec![
                StreamAppend::new(
                    stream(1),
                    ExpectedRevision::NoStream,
                    vec![record("r1"), record("r2")],
                ),
                StreamAppend::new(stream(2), ExpectedRevision::NoStream, vec![record("r3")]),
            ])
            .unwrap();
    }
    use redb::{ReadableDatabase as _, ReadableTable as _};
    let db = redb::Database::open(path.join(ctx_journal::DATABASE_FILE)).unwrap();
    let read = db.begin_read().unwrap();
    let table = read.open_table(RECORDS).unwrap();
    table
        .iter()
        .unwrap()
        .map(|entry| {
            let (_, value) = entry.unwrap();
            let bytes = value.value().to_vec();
            (ctx_journal::decode_record_value(&bytes).unwrap(), bytes)
        })
        .collect()
}

#[test]
fn check_indexes_and_heads_report_rows_that_disagree() {
    let test = "check_indexes_and_heads_report_rows_that_disagree";
    let Some(url) = database(test, "ctx_pgb_check") else {
        return;
    };
    let started = Instant::now();
    let backend = PgBackend::connect(&url).unwrap();
    let sealed = sealed_records();
    assert_eq!(sealed.len(), 3);
    commit(&backend, |txn| {
        for (record, bytes) in &sealed {
            assert_eq!(txn.next_position().unwrap(), record.position);
            txn.put_record(&PutRecord {
                stream: record.stream,
                revision: record.revision,
                position: record.position,
                event_id: &record.event_id,
                digest: record.digest,
                bytes,
            })?;
        }
        Ok(())
    });
    let findings = |backend: &PgBackend| {
        let mut out = Vec::new();
        backend
            .read(&mut |txn| txn.check_indexes(&mut |f| out.push(f)))
            .unwrap();
        out
    };
    assert_eq!(findings(&backend), []);

    let mut client = sql(&url);
    client
        .batch_execute(
            "UPDATE ctx_records SET event_id = 'changed' WHERE position = 1;
             UPDATE ctx_records SET revision = 9 WHERE position = 2;
             UPDATE ctx_records SET record = '\\x00'::bytea WHERE position = 3;",
        )
        .unwrap();
    let found = findings(&backend);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(found[0].kind, IndexKind::Event);
    assert_eq!(found[0].position, Some(1));
    assert!(found[0].detail.contains("changed"), "{}", found[0].detail);
    assert_eq!(found[1].kind, IndexKind::Position);
    assert_eq!(found[1].revision, Some(9));
    assert!(
        found[1].detail.contains("revision column 9"),
        "{}",
        found[1].detail
    );
    assert_eq!(found[2].kind, IndexKind::Position);
    assert!(
        found[2].detail.contains("does not decode"),
        "{}",
        found[2].detail
    );

    // Heads that do not decode are reported, not cast; a broken head is a read error.
    client
        .batch_execute(
            "ALTER TABLE ctx_streams DROP CONSTRAINT ctx_streams_digest_check;
             ALTER TABLE ctx_streams DROP CONSTRAINT ctx_streams_revision_check;
             UPDATE ctx_streams SET digest = '\\x010203'::bytea
               WHERE stream = decode(repeat('01', 32), 'hex');
             UPDATE ctx_streams SET revision = -5 WHERE stream = decode(repeat('02', 32), 'hex');",
        )
        .unwrap();
    backend
        .read(&mut |txn| {
            let mut heads = Vec::new();
            txn.heads(&mut |key, head| heads.push((key.to_vec(), head)))?;
            assert_eq!(heads.len(), 2);
            assert!(
                matches!(&heads[0].1, Err(reason) if reason.reason().contains("3 bytes")),
                "{heads:?}"
            );
            assert!(
                matches!(&heads[1].1, Err(reason) if reason.reason().contains("-5")),
                "{heads:?}"
            );
            assert!(matches!(
                txn.head(&stream(1)),
                Err(ReadError::Corrupt { .. })
            ));
            Ok(())
        })
        .unwrap();
    eprintln!("{test}: {:?}", started.elapsed());
}

/// Terminates the backend's server sessions in `dbname` that are in `state`.
fn terminate(url: &str, dbname: &str, state: &str) -> i64 {
    sql(url)
        .query_one(
            "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity \
             WHERE datname = $1 AND application_name = 'ctx-journal' AND state = $2",
            &[&dbname, &state],
        )
        .unwrap()
        .get(0)
}

#[test]
fn lost_connections_are_replaced_and_a_lost_commit_is_maybe_committed() {
    let test = "lost_connections_are_replaced_and_a_lost_commit_is_maybe_committed";
    let dbname = "ctx_pgb_lost";
    let Some(url) = database(test, dbname) else {
        return;
    };
    let started = Instant::now();
    let backend = PgBackend::connect(&url).unwrap();
    let a = stream(1);
    commit(&backend, |txn| put(txn, &a, 1, "e1").map(drop));
    assert_eq!(records(&backend, 1).len(), 1);
    // Both kept connections (writer and reader) are idle; kill them.
    assert_eq!(terminate(&url, dbname, "idle"), 2);
    // The next read and write replace them.
    assert_eq!(records(&backend, 1).len(), 1);
    commit(&backend, |txn| put(txn, &a, 2, "e2").map(drop));

    // The connection dies inside a write transaction: a later statement fails, not committed.
    let result = backend.write(&mut |txn| {
        put(txn, &a, 3, "e3")?;
        assert_eq!(terminate(&url, dbname, "idle in transaction"), 1);
        put(txn, &a, 4, "e4")?;
        Ok(Finish::Commit)
    });
    assert!(
        matches!(result, Err(CommitError::NotCommitted(_))),
        "{result:?}"
    );

    // The connection dies just before the commit: the backend sees the session end before it
    // sends anything of the commit (the puts go with it), so nothing was committed.
    let result = backend.write(&mut |txn| {
        put(txn, &a, 3, "e3")?;
        assert_eq!(terminate(&url, dbname, "idle in transaction"), 1);
        Ok(Finish::Commit)
    });
    assert!(
        matches!(result, Err(CommitError::NotCommitted(_))),
        "{result:?}"
    );
    assert_eq!(last_position(&backend), 2);

    // The connection dies during the commit (a deferred trigger holds COMMIT, and the session is
    // terminated there): the commit gets no answer, so the outcome is unknown to the backend
    // (here the server rolled it back).
    sql(&url)
        .batch_execute(
            "CREATE FUNCTION ctx_test_slow() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$; \
             CREATE CONSTRAINT TRIGGER ctx_test_slow AFTER INSERT ON ctx_records \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ctx_test_slow()",
        )
        .unwrap();
    let killer = {
        let url = url.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + std::time::Duration::from_secs(20);
            while Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let killed: i64 = sql(&url)
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity \
                         WHERE datname = $1 AND application_name = 'ctx-journal' \
                         AND state = 'active' AND query LIKE '%COMMIT%'",
                        &[&dbname],
                    )
                    .unwrap()
                    .get(0);
                if killed == 1 {
                    return true;
                }
            }
            false
        })
    };
    let result = backend.write(&mut |txn| {
        put(txn, &a, 3, "e3")?;
        Ok(Finish::Commit)
    });
    assert!(
        killer.join().unwrap(),
        "the committing session was not found"
    );
    assert!(
        matches!(result, Err(CommitError::MaybeCommitted(_))),
        "{result:?}"
    );
    sql(&url)
        .batch_execute("DROP TRIGGER ctx_test_slow ON ctx_records; DROP FUNCTION ctx_test_slow()")
        .unwrap();
    assert_eq!(last_position(&backend), 2);
    // The retry succeeds on a new connection.
    commit(&backend, |txn| put(txn, &a, 3, "e3").map(drop));
    assert_eq!(records(&backend, 1).len(), 3);
    eprintln!("{test}: {:?}", started.elapsed());
}

#[test]
fn messages_and_debug_never_show_the_password() {
    let test = "messages_and_debug_never_show_the_password";
    let Some(url) = database(test, "ctx_pgb_password") else {
        return;
    };
    let secret = "s3cret-Pw-7781";
    let with_password = if url.starts_with("postgres") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}password={secret}")
    } else {
        format!("{url} password={secret}")
    };
    // The test cluster trusts loopback connections, so the password is not checked.
    let backend = PgBackend::connect(&with_password).unwrap();
    let shown = format!("{backend:?} {}", backend.location());
    assert!(!shown.contains(secret), "{shown}");
    assert!(shown.contains("ctx_pgb_password"), "{shown}");
    // A server that is not there: the error names where, not the password.
    let error = PgBackend::connect(&format!(
        "host=127.0.0.1 port=1 dbname=nowhere user=u password={secret} connect_timeout=5"
    ))
    .unwrap_err();
    let message = format!("{error} {error:?}");
    assert!(!message.contains(secret), "{message}");
    assert!(message.contains("127.0.0.1:1/nowhere"), "{message}");
    let error = PgBackend::connect("host=127.0.0.1 port=notaport").unwrap_err();
    assert!(matches!(error, PgError::Config { .. }), "{error:?}");
}

#[cfg(feature = "failpoints")]
#[test]
fn fail_points_give_not_committed_and_maybe_committed() {
    let test = "fail_points_give_not_committed_and_maybe_committed";
    let dbname = "ctx_pgb_failpoints";
    let Some(url) = database(test, dbname) else {
        return;
    };
    let started = Instant::now();
    let backend = PgBackend::connect(&url).unwrap();
    let a = stream(1);
    // With an argument, a fail point fires only for the database it names, so the other tests
    // running in this process are not affected.
    fail::cfg("pg-before-commit", &format!("return({dbname})")).unwrap();
    let result = backend.write(&mut |txn| put(txn, &a, 1, "e1").map(|_| Finish::Commit));
    fail::remove("pg-before-commit");
    assert!(
        matches!(result, Err(CommitError::NotCommitted(_))),
        "{result:?}"
    );
    assert!(backend.is_empty().unwrap());

    fail::cfg("pg-after-commit", &format!("return({dbname})")).unwrap();
    let result = backend.write(&mut |txn| put(txn, &a, 1, "e1").map(|_| Finish::Commit));
    fail::remove("pg-after-commit");
    assert!(
        matches!(result, Err(CommitError::MaybeCommitted(_))),
        "{result:?}"
    );
    // It did commit: a retry finds the event id (what the core's idempotency relies on).
    assert_eq!(records(&backend, 1).len(), 1);
    backend
        .write(&mut |txn| {
            assert_eq!(txn.find_event("e1").map_err(storage)?, Some(1));
            assert_eq!(txn.next_position().map_err(storage)?, 2);
            Ok(Finish::Abort)
        })
        .unwrap();
    eprintln!("{test}: {:?}", started.elapsed());
}

/// Not the conformance suite: one pass of the redb journal's core over this backend, so a seam
/// mismatch shows up here first.
#[test]
fn the_journal_core_runs_on_the_backend() {
    let test = "the_journal_core_runs_on_the_backend";
    let Some(url) = database(test, "ctx_pgb_journal") else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let backend = std::sync::Arc::new(PgBackend::connect(&url).unwrap());
    let journal =
        Journal::open_with_backend(dir.path(), &OpenOptions::new(), backend.clone()).unwrap();
    let record = |id: &str| NewRecord::new(id, "kind", Timestamp(5), id.as_bytes().to_vec());
    let (a, b) = (stream(1), stream(2));
    let first = journal
        .append(StreamAppend::new(
            a,
            ExpectedRevision::NoStream,
            vec![record("a1"), record("a2")],
        ))
        .unwrap();
    assert_eq!(
        first.records.iter().map(|r| r.position).collect::<Vec<_>>(),
        [1, 2]
    );
    let batch = journal
        .append_batch(vec![
            StreamAppend::new(a, ExpectedRevision::Exact(2), vec![record("a3")]),
            StreamAppend::new(b, ExpectedRevision::Any, vec![record("b1")]),
        ])
        .unwrap();
    assert_eq!(batch[1].records[0].position, 4);
    // An idempotent retry returns the original result and writes nothing.
    let again = journal
        .append(StreamAppend::new(
            a,
            ExpectedRevision::NoStream,
            vec![record("a1"), record("a2")],
        ))
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.records, first.records);
    assert!(matches!(
        journal.append(StreamAppend::new(
            b,
            ExpectedRevision::NoStream,
            vec![record("b2")]
        )),
        Err(ctx_journal::AppendError::WrongRevision { current: 1, .. })
    ));
    assert_eq!(journal.read_stream(&a, 1, 10).unwrap().len(), 3);
    let all = journal.read_all(1, 100).unwrap();
    assert_eq!(
        all.iter().map(|r| r.position).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let report = journal.verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, 4);
    // A second handle (another process, say) continues the same journal.
    drop(journal);
    let other = Journal::open_with_backend(
        dir.path(),
        &OpenOptions::new(),
        std::sync::Arc::new(PgBackend::connect(&url).unwrap()),
    )
    .unwrap();
    let next = other
        .append(StreamAppend::new(
            b,
            ExpectedRevision::Exact(1),
            vec![record("b2")],
        ))
        .unwrap();
    assert_eq!(next.records[0].position, 5);
    assert!(!backend.is_empty().unwrap());
    eprintln!("{test}: {:?}", started.elapsed());
}

#[test]
fn a_single_append_is_two_round_trips() {
    let test = "a_single_append_is_two_round_trips";
    let Some(url) = database(test, "ctx_pgb_trips") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let backend = std::sync::Arc::new(PgBackend::connect(&url).unwrap());
    let journal =
        Journal::open_with_backend(dir.path(), &OpenOptions::new(), backend.clone()).unwrap();
    let record = |id: &str| NewRecord::new(id, "kind", Timestamp(5), id.as_bytes().to_vec());
    let (a, b) = (stream(1), stream(2));
    // The first append prepares the write connection's statements.
    journal
        .append(StreamAppend::new(
            a,
            ExpectedRevision::NoStream,
            vec![record("a1")],
        ))
        .unwrap();
    let trips = |work: &dyn Fn()| {
        let before = backend.round_trips();
        work();
        backend.round_trips() - before
    };
    // BEGIN + position lock + lookups; puts + last position + COMMIT.
    let single = trips(&|| {
        journal
            .append(StreamAppend::new(
                a,
                ExpectedRevision::Exact(1),
                vec![record("a2")],
            ))
            .unwrap();
    });
    assert_eq!(single, 2);
    // Many records on several streams: still two.
    let batch = trips(&|| {
        journal
            .append_batch(vec![
                StreamAppend::new(
                    a,
                    ExpectedRevision::Exact(2),
                    (3..=9).map(|i| record(&format!("a{i}"))).collect(),
                ),
                StreamAppend::new(b, ExpectedRevision::NoStream, vec![record("b1")]),
            ])
            .unwrap();
    });
    assert_eq!(batch, 2);
    // A refused append: the lookups' round trip and a ROLLBACK.
    let refused = trips(&|| {
        assert!(
            journal
                .append(StreamAppend::new(
                    b,
                    ExpectedRevision::NoStream,
                    vec![record("b2")]
                ))
                .is_err()
        );
    });
    assert_eq!(refused, 2);
    assert_eq!(journal.read_all(1, 100).unwrap().len(), 10);
}
