//! The recovery algorithm (spec/skill-cas.md §6), shared by `apply_once` and `reconcile`. It runs
//! under the content lock on the pinned directory and brings one content address to a verified
//! state: `exact` (the final name holds the material, no stages remain), `absent` (nothing there,
//! no stages remain) or `conflict` (something the store will not touch).
//!
//! Publication is: stage file → hard-link stage to the final name (never replacing) → unlink the
//! stage. Each step is identity-checked, and every durable step is followed by a directory fsync,
//! so a crash at any point leaves a state the next recovery (in any process) finishes.

use std::collections::{BTreeMap, BTreeSet};

use super::error::SkillCasError;
use ctx_fs::{FileId, fsync_dir_fd};

use super::fsops::{
    Durability, Expected, Inspection, PUBLISHED_PAIR, Published, SINGLE_LINK, STAGE_LIMIT,
    STAGE_SUFFIX, TOLERATED_LINKS, durability_error, inspect, list_stages, publish,
    unlink_if_identity,
};
use super::root::PinnedDir;

/// Prefix of every stage name; the content digest and a `-` follow.
pub const STAGE_PREFIX: &str = ".ctx-skill-";
/// Suffix of the content lock file name.
pub const LOCK_SUFFIX: &str = ".lock";

/// The verified state of a content address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CasState {
    Exact,
    Absent,
    Conflict,
}

/// The names of one content address (spec/skill-cas.md §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContentAddress {
    content_sha256: String,
    content_bytes: u64,
}

impl ContentAddress {
    /// `content_sha256` must already be a validated digest (it becomes a file name).
    pub(crate) fn new(content_sha256: &str, content_bytes: u64) -> ContentAddress {
        ContentAddress {
            content_sha256: content_sha256.to_owned(),
            content_bytes,
        }
    }

    pub(crate) fn content_sha256(&self) -> &str {
        &self.content_sha256
    }

    pub(crate) fn content_bytes(&self) -> u64 {
        self.content_bytes
    }

    /// `<content_sha256>`, directly in the root.
    pub(crate) fn final_name(&self) -> &str {
        &self.content_sha256
    }

    /// `.ctx-skill-<content_sha256>-`: the stage namespace shared by every action of this content.
    pub(crate) fn stage_prefix(&self) -> String {
        format!("{STAGE_PREFIX}{}-", self.content_sha256)
    }

    /// `.ctx-skill-<content_sha256>-<action_content_digest>.pending`.
    pub(crate) fn stage_name(&self, action_content_digest: &str) -> String {
        format!(
            "{}{action_content_digest}{STAGE_SUFFIX}",
            self.stage_prefix()
        )
    }

    /// `<content_sha256>.lock`.
    pub(crate) fn lock_name(&self) -> String {
        format!("{}{LOCK_SUFFIX}", self.content_sha256)
    }

    pub(crate) fn expected(&self) -> Expected<'_> {
        Expected {
            sha256: &self.content_sha256,
            bytes: self.content_bytes,
        }
    }
}

/// What one driver already made durable, so a later step of the same driver (or its
/// `reconcile` after its `apply_once`) does not fsync it again: files whose content it fsynced
/// (the stage it wrote, the published file it verified) and the final file whose directory
/// entry it fsynced. Only this driver's own syncs are remembered: what another process left
/// behind is synced as the reference prescribes.
#[derive(Debug, Default)]
pub(crate) struct Synced {
    pub(crate) files: BTreeSet<FileId>,
    pub(crate) final_entry: Option<FileId>,
}

/// Runs recovery once (with the single collision retry of "repair absent final").
pub(crate) fn recover(
    dir: &PinnedDir,
    address: &ContentAddress,
    synced: &mut Synced,
) -> Result<CasState, SkillCasError> {
    recover_pass(dir, address, false, synced)
}

fn recover_pass(
    dir: &PinnedDir,
    address: &ContentAddress,
    retry: bool,
    synced: &mut Synced,
) -> Result<CasState, SkillCasError> {
    let expected = address.expected();
    let names = list_stages(dir, &address.stage_prefix(), STAGE_SUFFIX, STAGE_LIMIT)?;
    let final_state = inspect(
        dir,
        address.final_name(),
        expected,
        &TOLERATED_LINKS,
        Durability::No,
    )?;
    let mut stages = Vec::with_capacity(names.len());
    for name in names {
        let state = inspect(dir, &name, expected, &TOLERATED_LINKS, Durability::No)?;
        stages.push((name, state));
    }
    match final_state {
        Inspection::Exact { id, nlink } => {
            repair_exact_final(dir, address, id, nlink, &stages, synced)
        }
        Inspection::Absent => repair_absent_final(dir, address, &stages, retry, synced),
        Inspection::Conflict { .. } => Ok(CasState::Conflict),
    }
}

/// A conflict stage that is not safely removable blocks every repair.
fn has_blocking_stage(stages: &[(String, Inspection)]) -> bool {
    stages.iter().any(|(_, state)| {
        matches!(
            state,
            Inspection::Conflict {
                removable: false,
                ..
            }
        )
    })
}

/// Exact stages grouped by file: `(names in the group, link counts the members reported)`.
fn exact_groups(stages: &[(String, Inspection)]) -> BTreeMap<FileId, (u64, Vec<u64>)> {
    let mut groups: BTreeMap<FileId, (u64, Vec<u64>)> = BTreeMap::new();
    for (_, state) in stages {
        if let Inspection::Exact { id, nlink } = state {
            let group = groups.entry(*id).or_default();
            group.0 += 1;
            group.1.push(*nlink);
        }
    }
    groups
}

/// Removes one stage during repair: an exact stage (any tolerated link count) or a safely
/// removable conflict. Anything else is a conflict (`Ok(false)`).
fn remove_stage(dir: &PinnedDir, name: &str, state: &Inspection) -> Result<bool, SkillCasError> {
    match state {
        Inspection::Exact { id, .. } => unlink_if_identity(dir, name, *id, &TOLERATED_LINKS)?,
        Inspection::Conflict {
            id,
            removable: true,
            ..
        } => unlink_if_identity(dir, name, *id, &SINGLE_LINK)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The final name is exact: accept stage aliases of it, remove every stage, verify.
fn repair_exact_final(
    dir: &PinnedDir,
    address: &ContentAddress,
    final_id: FileId,
    final_nlink: u64,
    stages: &[(String, Inspection)],
    synced: &mut Synced,
) -> Result<CasState, SkillCasError> {
    if has_blocking_stage(stages) {
        return Ok(CasState::Conflict);
    }
    let groups = exact_groups(stages);
    let aliases = groups.get(&final_id).map_or(0, |(count, _)| *count);
    if final_nlink != 1 + aliases {
        // A hard link outside the stage namespace names the final file.
        return Ok(CasState::Conflict);
    }
    for (id, (count, links)) in &groups {
        let want = if *id == final_id { 1 + count } else { *count };
        if links.iter().any(|n| *n != want) {
            return Ok(CasState::Conflict);
        }
    }
    for (name, state) in stages {
        if !remove_stage(dir, name, state)? {
            return Ok(CasState::Conflict);
        }
    }
    verify_exact_final(dir, address, synced)
}

/// The final name is absent: publish the smallest exact stage (if any), remove the others,
/// verify.
fn repair_absent_final(
    dir: &PinnedDir,
    address: &ContentAddress,
    stages: &[(String, Inspection)],
    retry: bool,
    synced: &mut Synced,
) -> Result<CasState, SkillCasError> {
    if has_blocking_stage(stages) {
        return Ok(CasState::Conflict);
    }
    for (count, links) in exact_groups(stages).values() {
        if links.iter().any(|n| n != count) {
            return Ok(CasState::Conflict);
        }
    }
    let expected = address.expected();
    // Stage names are sorted, so the first exact one is the lexicographically smallest.
    let chosen = stages
        .iter()
        .find(|(_, state)| state.exact_id().is_some())
        .map(|(name, _)| name.as_str());
    let mut chosen_id = None;
    if let Some(name) = chosen {
        // The chosen stage's content must be durable before it is published under the final
        // name. Its directory entry need not be: `publish` fsyncs the directory right after the
        // link, which makes the final entry durable, and the stage entry is garbage from then on.
        let durability = Durability::Unless(&synced.files);
        match inspect(dir, name, expected, &TOLERATED_LINKS, durability)?.exact_id() {
            Some(id) => {
                chosen_id = Some(id);
                synced.files.insert(id);
            }
            None => return Ok(CasState::Conflict),
        }
    }
    let mut removed = false;
    for (name, state) in stages {
        if Some(name.as_str()) != chosen {
            if !remove_stage(dir, name, state)? {
                return Ok(CasState::Conflict);
            }
            removed = true;
        }
    }
    let (Some(name), Some(id)) = (chosen, chosen_id) else {
        return verify_absent(dir, address, removed);
    };
    if inspect(dir, name, expected, &SINGLE_LINK, Durability::No)?.exact_id() != Some(id) {
        return Ok(CasState::Conflict);
    }
    match publish(dir, name, address.final_name(), id)? {
        Published::Created => synced.final_entry = Some(id),
        Published::NotCreated if retry => return Ok(CasState::Conflict),
        Published::NotCreated => return recover_pass(dir, address, true, synced),
    }
    unlink_if_identity(dir, name, id, &PUBLISHED_PAIR)?;
    verify_exact_final(dir, address, synced)
}

/// The final name is exact with one link, durable, the root is still the pinned one, and no
/// stage remains.
fn verify_exact_final(
    dir: &PinnedDir,
    address: &ContentAddress,
    synced: &mut Synced,
) -> Result<CasState, SkillCasError> {
    let expected = address.expected();
    let durability = Durability::Unless(&synced.files);
    let durable = inspect(
        dir,
        address.final_name(),
        expected,
        &SINGLE_LINK,
        durability,
    )?;
    let Some(id) = durable.exact_id() else {
        return Ok(CasState::Conflict);
    };
    synced.files.insert(id);
    if synced.final_entry != Some(id) {
        fsync_dir_fd(dir.fd(), dir.path()).map_err(durability_error)?;
        synced.final_entry = Some(id);
    }
    dir.revalidate()?;
    let again = inspect(
        dir,
        address.final_name(),
        expected,
        &SINGLE_LINK,
        Durability::No,
    )?;
    let stages = list_stages(dir, &address.stage_prefix(), STAGE_SUFFIX, STAGE_LIMIT)?;
    if again.exact_id().is_some() && stages.is_empty() {
        Ok(CasState::Exact)
    } else {
        Ok(CasState::Conflict)
    }
}

/// Nothing is at the final name and no stage remains in the pinned root. The directory is
/// fsynced only when this pass removed stages: an absence nobody changed needs no sync.
fn verify_absent(
    dir: &PinnedDir,
    address: &ContentAddress,
    removed: bool,
) -> Result<CasState, SkillCasError> {
    if removed {
        fsync_dir_fd(dir.fd(), dir.path()).map_err(durability_error)?;
    }
    dir.revalidate()?;
    let state = inspect(
        dir,
        address.final_name(),
        address.expected(),
        &TOLERATED_LINKS,
        Durability::No,
    )?;
    let stages = list_stages(dir, &address.stage_prefix(), STAGE_SUFFIX, STAGE_LIMIT)?;
    if state == Inspection::Absent && stages.is_empty() {
        Ok(CasState::Absent)
    } else {
        Ok(CasState::Conflict)
    }
}
