//! The installation key: a private file, never shown, and injectable so that stored bytes are
//! reproducible.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ctx_journal::{
    AppendError, Digest, ExpectedRevision, Journal, KeySourceError, NewRecord, OpenError,
    OpenOptions, StreamAppend, Timestamp, files,
};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::support;

const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");

fn test_key(salt: u8) -> [u8; 32] {
    std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11) ^ salt)
}

fn with_key(key: [u8; 32]) -> OpenOptions {
    support::options().key_source(move || Ok(key))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Every way the key's bytes could plausibly be rendered in text.
fn renderings(key: &[u8; 32]) -> Vec<String> {
    let lower = support::hex(key);
    let decimal = format!("{:?}", &key[..6]);
    vec![
        lower[..16].to_owned(),
        lower[..16].to_uppercase(),
        decimal
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        String::from_utf8_lossy(&key[..8]).into_owned(),
    ]
}

fn assert_hidden(text: &str, key: &[u8; 32], what: &str) {
    for r in renderings(key) {
        assert!(!text.contains(&r), "{what} shows the key ({r}): {text}");
    }
}

#[test]
fn the_key_file_is_private_and_the_key_never_shown() {
    let _shared = support::shared();
    let parent = support::tempdir();
    let dir = parent.path().join("data");
    let key = test_key(0);
    let options = with_key(key);
    let journal = Journal::open(&dir, &options).unwrap();
    assert_eq!(mode(&dir), 0o700, "data directory");
    let key_path = dir.join(files::KEY_FILE);
    assert_eq!(mode(&key_path), 0o600, "key file");
    assert_eq!(mode(&dir.join(files::LOCK_FILE)), 0o600, "lock file");
    assert_eq!(
        std::fs::read(&key_path).unwrap(),
        key,
        "the injected key is the key"
    );

    let s = support::stream("key");
    let r = NewRecord::new("k1", "key.kind", Timestamp(1), b"x".to_vec());
    journal
        .append(StreamAppend::new(s, ExpectedRevision::NoStream, vec![r]))
        .unwrap();
    let mut shown = vec![
        ("journal", format!("{journal:?}")),
        ("options", format!("{options:?}")),
        ("verify report", format!("{:?}", journal.verify().unwrap())),
    ];
    let r2 = NewRecord::new("k2", "key.kind", Timestamp(1), b"y".to_vec());
    let err = journal
        .append(StreamAppend::new(s, ExpectedRevision::NoStream, vec![r2]))
        .unwrap_err();
    assert!(matches!(err, AppendError::WrongRevision { .. }));
    shown.push(("append error", format!("{err:?} {err}")));
    drop(journal);

    // Errors about the key file itself do not show it either.
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Journal::open(&dir, &options).unwrap_err();
    assert!(matches!(err, OpenError::KeyInvalid { .. }), "{err:?}");
    shown.push(("open error, mode", format!("{err:?} {err}")));
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut longer = key.to_vec();
    longer.push(0);
    std::fs::write(&key_path, &longer).unwrap();
    let err = Journal::open(&dir, &options).unwrap_err();
    assert!(matches!(err, OpenError::KeyInvalid { .. }), "{err:?}");
    shown.push(("open error, length", format!("{err:?} {err}")));
    std::fs::remove_file(&key_path).unwrap();
    let err = Journal::open(&dir, &options).unwrap_err();
    assert!(matches!(err, OpenError::KeyMissing { .. }), "{err:?}");
    shown.push(("open error, missing", format!("{err:?} {err}")));
    for (what, text) in &shown {
        assert_hidden(text, &key, what);
    }
}

#[test]
fn a_failing_key_source_is_a_typed_error() {
    let parent = support::tempdir();
    let dir = parent.path().join("data");
    let options = support::options().key_source(|| Err(KeySourceError::new("no entropy today")));
    match Journal::open(&dir, &options) {
        Err(OpenError::KeyGeneration { reason }) => assert_eq!(reason, "no entropy today"),
        other => panic!("expected KeyGeneration, got {other:?}"),
    }
    assert!(!dir.join(files::KEY_FILE).exists());
}

/// Writes the same records into a new journal in `dir` and returns their digests.
fn populate(dir: &Path, options: &OpenOptions) -> Vec<Digest> {
    let journal = Journal::open(dir, options).unwrap();
    let mut digests = Vec::new();
    for i in 0..3 {
        let s = support::stream(&format!("key-det-{i}"));
        let records = (0..4)
            .map(|k| {
                let id = format!("det-{i}-{k}");
                NewRecord::new(id.clone(), "key.kind", Timestamp(k), id.into_bytes())
            })
            .collect();
        let o = journal
            .append(StreamAppend::new(s, ExpectedRevision::NoStream, records))
            .unwrap();
        digests.extend(o.records.iter().map(|r| r.digest));
    }
    digests
}

fn stored_values(dir: &Path) -> Vec<Vec<u8>> {
    let db = redb::Database::open(dir.join(files::DATABASE_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(RECORDS).unwrap();
    table
        .iter()
        .unwrap()
        .map(|e| e.unwrap().1.value().to_vec())
        .collect()
}

#[test]
fn an_injected_key_makes_stored_records_reproducible() {
    let _shared = support::shared();
    let (one, two, three) = (support::tempdir(), support::tempdir(), support::tempdir());
    let d1 = populate(one.path(), &with_key(test_key(0)));
    let d2 = populate(two.path(), &with_key(test_key(0)));
    let d3 = populate(three.path(), &with_key(test_key(0x80)));
    assert_eq!(d1, d2, "same key, same records: same digests");
    assert_eq!(d1, d3, "the digest does not depend on the key");
    let (v1, v2, v3) = (
        stored_values(one.path()),
        stored_values(two.path()),
        stored_values(three.path()),
    );
    assert_eq!(v1.len(), 12);
    assert_eq!(v1, v2, "same key, same records: identical stored values");
    for (a, c) in v1.iter().zip(&v3) {
        assert_ne!(a, c, "another key gives another MAC");
        assert_eq!(a.len(), c.len());
    }

    // The key source is used only to create a journal: an existing one keeps its key.
    let journal = Journal::open(one.path(), &with_key(test_key(0x55))).unwrap();
    assert!(journal.verify().unwrap().is_ok());
    assert_eq!(journal.read_all(1, usize::MAX).unwrap().len(), 12);
    drop(journal);
    assert_eq!(
        std::fs::read(one.path().join(files::KEY_FILE)).unwrap(),
        test_key(0)
    );

    // A journal given another installation's key does not authenticate its records.
    std::fs::write(one.path().join(files::KEY_FILE), test_key(0x80)).unwrap();
    std::fs::set_permissions(
        one.path().join(files::KEY_FILE),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let journal = Journal::open(one.path(), &support::options()).unwrap();
    let report = journal.verify().unwrap();
    let failure = report
        .first(ctx_journal::FailureKind::Authentication)
        .unwrap();
    assert_eq!(failure.count, 12, "{report:?}");
    assert!(journal.read_all(1, 1).is_err());
}
