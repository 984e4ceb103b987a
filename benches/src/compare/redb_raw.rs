//! Raw redb: u64 keys to the journal's payload bytes (about 200 B), no journal logic.

use std::path::Path;

use redb::{Database, Durability, TableDefinition};

use crate::BenchResult;
use crate::compare::{Limits, Round};
use crate::measure::{Sample, Timebox};
use crate::workload::{BATCH_RECORDS, Payloads};

const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("raw");

fn insert_commit(db: &Database, payloads: &Payloads, first: u64, count: u64) -> BenchResult<()> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    {
        let mut table = txn.open_table(TABLE)?;
        for key in first..first + count {
            table.insert(key, payloads.get(key).rkyv.as_slice())?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// One record per write transaction, `Durability::Immediate`. Units: commits.
pub fn single<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let db = Database::create(dir.join("raw.redb"))?;
    let mut key = 0;
    for _ in 0..20 {
        insert_commit(&db, payloads, key, 1)?;
        key += 1;
    }
    Ok(Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, limits.single_ops_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            sample.time(1, || insert_commit(&db, payloads, key, 1))?;
            key += 1;
        }
        Ok(sample)
    }))
}

/// 1000 records per write transaction, sequential u64 keys. Units: records.
pub fn batch<'p>(dir: &Path, payloads: &'p Payloads) -> BenchResult<Round<'p>> {
    let db = Database::create(dir.join("raw.redb"))?;
    let n = BATCH_RECORDS as u64;
    let mut key = 0;
    Ok(Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, limits.batch_records_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            sample.time(n, || insert_commit(&db, payloads, key, n))?;
            key += n;
        }
        Ok(sample)
    }))
}
