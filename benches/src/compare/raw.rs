//! The raw disk limit: 4 KiB written and `fdatasync`ed per operation, in place or appended.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use crate::BenchResult;
use crate::compare::{Limits, Round};
use crate::measure::{Sample, Timebox};

const BLOCK: usize = 4096;
const WARMUP_OPS: u64 = 20;

fn rounds(
    mut file: File,
    mut op: impl FnMut(&mut File, u64) -> std::io::Result<()> + 'static,
) -> BenchResult<Round<'static>> {
    for n in 0..WARMUP_OPS {
        op(&mut file, n)?;
    }
    let mut n = WARMUP_OPS;
    Ok(Box::new(move |limits: &Limits| {
        let tb = Timebox::start(limits.budget, limits.single_ops_max);
        let mut sample = Sample::default();
        while tb.running(sample.units) {
            sample.time(1, || op(&mut file, n))?;
            n += 1;
        }
        Ok(sample)
    }))
}

/// Overwrites the same 4 KiB at offset 0 and calls `sync_data` (fdatasync) each time.
pub fn overwrite_4k(dir: &Path) -> BenchResult<Round<'static>> {
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(dir.join("overwrite.bin"))?;
    file.write_all(&[0u8; BLOCK])?;
    file.sync_all()?;
    let mut block = [0u8; BLOCK];
    rounds(file, move |file, n| {
        block[..8].copy_from_slice(&n.to_le_bytes());
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&block)?;
        file.sync_data()
    })
}

/// Appends 4 KiB to a growing file and calls `sync_data` each time (the file size changes, so
/// each fdatasync also flushes the inode).
pub fn append_4k(dir: &Path) -> BenchResult<Round<'static>> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("append.bin"))?;
    let mut block = [0u8; BLOCK];
    rounds(file, move |file, n| {
        block[..8].copy_from_slice(&n.to_le_bytes());
        file.write_all(&block)?;
        file.sync_data()
    })
}
