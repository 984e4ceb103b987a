//! Retrieval over a catalog (spec/catalog.md §5.2, §5.3): the tag scorer,
//! the row → [`CapabilityCandidate`] projection and ambiguity removal.
//!
//! Scores are integers in micro-points so that ordering never depends on floating-point
//! summation order; the only floating-point step is one natural logarithm per distinct token,
//! rounded to micro-units at once. Ties are broken by kind, then name, then id, so the same
//! catalog and observation always give the same list.

use std::collections::{BTreeMap, BTreeSet};

use ctx_model::{Json, cja_digest};

use super::error::RetrievalError;
use super::format::CatalogEntry;
use super::observation::WorkObservation;
use super::snapshot::{CATALOG_ENTRY_PROJECTION, Catalog, tags_json};
use ctx_model::CapabilityKind;

/// Default size of the candidate pool, in entries (reference `candidate_limit`).
pub const CANDIDATE_POOL_DEFAULT_ENTRIES: usize = 50;
/// Smallest accepted candidate pool, in entries.
pub const CANDIDATE_POOL_MIN_ENTRIES: usize = 6;
/// Largest accepted candidate pool, in entries.
pub const CANDIDATE_POOL_MAX_ENTRIES: usize = 512;
/// Most matching signals a candidate may carry, in tokens.
pub const MATCHING_SIGNALS_MAX_TOKENS: usize = 32;
/// The top normalized score, in parts per million.
pub const SCORE_MAX_PPM: u32 = 1_000_000;

/// One point of score, in micro-points.
const POINT: i64 = 1_000_000;
/// Tokens shorter than this, in characters, do not count toward document frequency (they carry
/// no idf bonus). Two, not the reference's three, so that `go` is a real language token here.
const IDF_TOKEN_MIN_CHARS: usize = 2;

/// How a host can act on a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Actionability {
    /// Catalog material exists and can be exposed directly.
    Load,
    /// A typed install plan exists.
    Install,
    /// Recommend only; the user acts.
    Manual,
}

impl Actionability {
    pub fn as_str(self) -> &'static str {
        match self {
            Actionability::Load => "load",
            Actionability::Install => "install",
            Actionability::Manual => "manual",
        }
    }
}

impl std::fmt::Display for Actionability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A retrieved capability as the planner sees it (spec/catalog.md §5.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CapabilityCandidate {
    pub capability_id: String,
    pub kind: CapabilityKind,
    pub name: String,
    /// Catalog entry digest (spec/catalog.md §5.3).
    pub source_digest: String,
    pub normalized_score_ppm: u32,
    /// Sorted work tokens that matched a tag or a name token.
    pub matching_signals: Vec<String>,
    /// Sorted, non-empty.
    pub reason_codes: Vec<String>,
    pub actionability: Actionability,
    /// Present exactly when `actionability` is `install`.
    pub install_descriptor_digest: Option<String>,
    /// Present exactly when `actionability` is `install`.
    pub install_plan_digest: Option<String>,
    /// Never set by this source; the field exists for the planner's contract.
    pub equivalence_key: Option<String>,
}

impl CapabilityCandidate {
    /// The candidate as a JSON object with the reference's field names.
    pub fn to_json(&self) -> Json {
        let list = |items: &[String]| Json::Arr(items.iter().map(Json::str).collect());
        Json::object([
            ("actionability", Json::str(self.actionability.as_str())),
            ("capability_id", Json::str(&self.capability_id)),
            (
                "equivalence_key",
                Json::opt_str(self.equivalence_key.as_deref()),
            ),
            (
                "install_descriptor_digest",
                Json::opt_str(self.install_descriptor_digest.as_deref()),
            ),
            (
                "install_plan_digest",
                Json::opt_str(self.install_plan_digest.as_deref()),
            ),
            ("kind", Json::str(self.kind.as_str())),
            ("matching_signals", list(&self.matching_signals)),
            ("name", Json::str(&self.name)),
            (
                "normalized_score_ppm",
                Json::Int(i64::from(self.normalized_score_ppm)),
            ),
            ("reason_codes", list(&self.reason_codes)),
            ("source_digest", Json::str(&self.source_digest)),
        ])
    }
}

/// Retrieves candidates with the default pool of [`CANDIDATE_POOL_DEFAULT_ENTRIES`] entries.
/// Rejected, baseline and active ids are not filtered here: those are planner gates.
pub fn retrieve(catalog: &Catalog, observation: &WorkObservation) -> Vec<CapabilityCandidate> {
    retrieve_bounded(catalog, observation, CANDIDATE_POOL_DEFAULT_ENTRIES)
}

/// Retrieves candidates from a pool of at most `limit` scored rows (6 through 512 entries).
pub fn retrieve_with_limit(
    catalog: &Catalog,
    observation: &WorkObservation,
    limit: usize,
) -> Result<Vec<CapabilityCandidate>, RetrievalError> {
    if !(CANDIDATE_POOL_MIN_ENTRIES..=CANDIDATE_POOL_MAX_ENTRIES).contains(&limit) {
        return Err(RetrievalError::CandidateLimit {
            value: limit,
            min: CANDIDATE_POOL_MIN_ENTRIES,
            max: CANDIDATE_POOL_MAX_ENTRIES,
        });
    }
    Ok(retrieve_bounded(catalog, observation, limit))
}

fn retrieve_bounded(
    catalog: &Catalog,
    observation: &WorkObservation,
    limit: usize,
) -> Vec<CapabilityCandidate> {
    let tags = observation.work_tokens();
    if tags.is_empty() {
        return Vec::new();
    }
    let rows = score(catalog, &tags, limit);
    let candidates = rows
        .into_iter()
        .filter_map(|row| project(catalog, observation, row.entry, row.ppm))
        .collect();
    remove_ambiguous(candidates)
}

/// A scored entry.
#[derive(Debug)]
struct Row<'a> {
    entry: &'a CatalogEntry,
    ppm: u32,
}

/// `[a-z0-9]+` runs: the slug tokens of a name, tag or signal.
fn slug_tokens(s: &str) -> Vec<&str> {
    s.split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|t| !t.is_empty())
        .collect()
}

/// `ln(x)` in micro-units.
fn ln_micro(x: f64) -> i64 {
    // Finite and small (x ≤ 513): the cast cannot saturate.
    (x.ln() * 1e6).round() as i64
}

/// The tag scorer (spec/catalog.md §5.2 over this catalog): rows in score order, at most `limit`.
fn score<'a>(catalog: &'a Catalog, tags: &[String], limit: usize) -> Vec<Row<'a>> {
    let entries = catalog.entries();
    let n = entries.len();
    // Document frequency over each entry's name tokens, tags and tag tokens.
    let mut df: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in entries {
        let mut doc: BTreeSet<&str> = slug_tokens(&entry.name).into_iter().collect();
        for tag in &entry.tags {
            doc.insert(tag);
            doc.extend(slug_tokens(tag));
        }
        for token in doc {
            if token.chars().count() >= IDF_TOKEN_MIN_CHARS {
                *df.entry(token).or_default() += 1;
            }
        }
    }
    let idf = |t: &str| -> i64 {
        match df.get(t) {
            Some(&d) if d > 0 => ln_micro(n as f64 / d as f64),
            _ => 0,
        }
    };
    // Undirected degree over `related` links.
    let mut neighbours: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for entry in entries {
        for target in &entry.related {
            neighbours.entry(&entry.id).or_default().insert(target);
            neighbours.entry(target).or_default().insert(&entry.id);
        }
    }

    let signal_set: BTreeSet<&str> = tags.iter().map(String::as_str).collect();
    let signal_slugs: BTreeSet<String> = tags.iter().map(|t| slug_tokens(t).join("-")).collect();
    let query_tokens: BTreeSet<&str> = tags.iter().flat_map(|t| slug_tokens(t)).collect();

    let mut scored: Vec<(i64, &CatalogEntry)> = Vec::new();
    for entry in entries {
        let name_tokens = slug_tokens(&entry.name);
        let mut total: i64 = 0;
        for signal in tags {
            if name_tokens.contains(&signal.as_str()) {
                total += 50 * (POINT + idf(signal));
            } else if entry.name.contains(signal.as_str()) {
                total += 20 * POINT;
            }
        }
        for tag in &entry.tags {
            if signal_set.contains(tag.as_str()) {
                total += 10 * (POINT + idf(tag));
            }
        }
        total += entity_boost(&name_tokens, &signal_slugs, tags.len(), &query_tokens);
        if total <= 0 {
            continue;
        }
        let degree = neighbours.get(entry.id.as_str()).map_or(0, BTreeSet::len);
        total += ln_micro(1.0 + degree as f64);
        scored.push((total, entry));
    }
    scored.sort_by(|(sa, a), (sb, b)| {
        sb.cmp(sa)
            .then_with(|| a.kind.as_str().cmp(b.kind.as_str()))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.id.cmp(&b.id))
    });
    scored.truncate(limit);
    let top = scored.first().map_or(1, |(s, _)| (*s).max(1));
    scored
        .into_iter()
        .map(|(s, entry)| Row {
            entry,
            ppm: normalized_ppm(s, top),
        })
        .collect()
}

/// `score / top` rounded half-up to four decimal places, in parts per million.
fn normalized_ppm(score: i64, top: i64) -> u32 {
    let (score, top) = (i128::from(score.max(0)), i128::from(top.max(1)));
    let ten_thousandths = (score * 20_000 + top) / (2 * top);
    u32::try_from((ten_thousandths * 100).min(i128::from(SCORE_MAX_PPM))).unwrap_or(SCORE_MAX_PPM)
}

/// The explicit-entity boost, in micro-points: a capability named exactly as the work is named
/// outranks one that merely shares tags (spec/catalog.md §5.2). The only alias is the name.
///
/// Deviation: the reference's phrase rules look at word order in the host's raw query; here the
/// query is the sorted set of work tokens, where order means nothing, so "the name occurs as a
/// phrase" becomes "every name token is a work token".
fn entity_boost(
    name_tokens: &[&str],
    signal_slugs: &BTreeSet<String>,
    signal_count: usize,
    query_tokens: &BTreeSet<&str>,
) -> i64 {
    let k = name_tokens.len();
    if k == 0 {
        return 0;
    }
    let bonus = 25 * i64::try_from(k).unwrap_or(0);
    let slug = name_tokens.join("-");
    if signal_slugs.contains(&slug) && (k >= 2 || signal_count == 1) {
        return (2_000 + bonus) * POINT;
    }
    if name_tokens.iter().all(|t| query_tokens.contains(t)) {
        return (1_000 + bonus) * POINT;
    }
    0
}

/// Projects a scored row into a candidate (spec/catalog.md §5.3); `None` drops the row.
fn project(
    catalog: &Catalog,
    observation: &WorkObservation,
    entry: &CatalogEntry,
    ppm: u32,
) -> Option<CapabilityCandidate> {
    let work: BTreeSet<&str> = observation
        .signals()
        .iter()
        .chain(observation.languages())
        .map(String::as_str)
        .collect();
    let tag_matches: BTreeSet<&str> = entry
        .tags
        .iter()
        .map(String::as_str)
        .filter(|t| work.contains(t))
        .collect();
    let name_matches: BTreeSet<&str> = slug_tokens(&entry.name)
        .into_iter()
        .filter(|t| work.contains(t))
        .collect();
    let matching: BTreeSet<&str> = tag_matches.union(&name_matches).copied().collect();
    if matching.len() > MATCHING_SIGNALS_MAX_TOKENS {
        return None;
    }
    let mut reasons = vec!["graph-match"];
    if !name_matches.is_empty() {
        reasons.push("name-match");
    }
    if !tag_matches.is_empty() {
        reasons.push("tag-match");
    }
    if matching
        .iter()
        .any(|m| observation.languages().iter().any(|l| l == m))
    {
        reasons.push("language-match");
    }
    if matching
        .iter()
        .any(|m| observation.signals().iter().any(|s| s == m))
    {
        reasons.push("signal-match");
    }
    reasons.sort_unstable();

    let material = catalog.material_descriptor(&entry.id)?;
    let install = catalog.install_descriptor(&entry.id);
    let (actionability, descriptor_digest, plan_digest) = if entry.material.is_some() {
        (Actionability::Load, None, None)
    } else if let Some(install) = install {
        (
            Actionability::Install,
            install.get_str("descriptor_digest").map(str::to_owned),
            install.get_str("plan_digest").map(str::to_owned),
        )
    } else {
        (Actionability::Manual, None, None)
    };
    if actionability == Actionability::Install
        && (descriptor_digest.is_none() || plan_digest.is_none())
    {
        return None;
    }
    let source_digest = cja_digest(&Json::object([
        ("actionability", Json::str(actionability.as_str())),
        ("capability_id", Json::str(&entry.id)),
        (
            "install_descriptor_digest",
            Json::opt_str(install.and_then(|d| d.get_str("descriptor_digest"))),
        ),
        ("install_plan_digest", Json::opt_str(plan_digest.as_deref())),
        ("kind", Json::str(entry.kind.as_str())),
        (
            "material_descriptor_digest",
            Json::opt_str(material.get_str("descriptor_digest")),
        ),
        ("name", Json::str(&entry.name)),
        ("schema", Json::str(CATALOG_ENTRY_PROJECTION)),
        ("tags", tags_json(entry)),
    ]));
    Some(CapabilityCandidate {
        capability_id: entry.id.clone(),
        kind: entry.kind,
        name: entry.name.clone(),
        source_digest,
        normalized_score_ppm: ppm,
        matching_signals: matching.into_iter().map(str::to_owned).collect(),
        reason_codes: reasons.into_iter().map(str::to_owned).collect(),
        actionability,
        install_descriptor_digest: descriptor_digest,
        install_plan_digest: plan_digest,
        equivalence_key: None,
    })
}

/// Drops every id whose rows disagree on the source digest, keeps one row per remaining id, and
/// sorts by (score descending, id, source digest) (spec/catalog.md §5.3). A catalog has unique ids,
/// so this only matters when pools from several catalogs are merged.
pub fn remove_ambiguous(candidates: Vec<CapabilityCandidate>) -> Vec<CapabilityCandidate> {
    let mut groups: BTreeMap<String, Vec<CapabilityCandidate>> = BTreeMap::new();
    for c in candidates {
        groups.entry(c.capability_id.clone()).or_default().push(c);
    }
    let key = |c: &CapabilityCandidate| {
        (
            std::cmp::Reverse(c.normalized_score_ppm),
            c.capability_id.clone(),
            c.source_digest.clone(),
        )
    };
    let mut out: Vec<CapabilityCandidate> = groups
        .into_values()
        .filter(|g| g.iter().all(|c| c.source_digest == g[0].source_digest))
        .filter_map(|g| g.into_iter().min_by_key(key))
        .collect();
    out.sort_by_key(key);
    out
}
