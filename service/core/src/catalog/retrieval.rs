//! Retrieval over a catalog (spec/catalog.md §5.2, §5.3): the BM25 scorer over the catalog's
//! [`RetrievalIndex`], the relative and absolute evidence cut, the row → [`CapabilityCandidate`]
//! projection and ambiguity removal.
//!
//! Scores are integers in micro-points so that ordering never depends on floating-point
//! summation order; the only floating-point step is one natural logarithm per distinct query
//! term, rounded to micro-units at once. Ties are broken by catalog position (id order, hence
//! kind, then name), so the same catalog and observation always give the same list.

use std::collections::{BTreeMap, BTreeSet};

use ctx_model::{Json, cja_digest};

use super::error::RetrievalError;
use super::format::CatalogEntry;
use super::observation::WorkObservation;
use super::snapshot::{CATALOG_ENTRY_PROJECTION, Catalog, tags_json};
use ctx_model::CapabilityKind;

#[path = "retrieval_index.rs"]
mod index;

pub(crate) use index::{Posting, RetrievalIndex, RetrievalSource};
use index::{is_term, runs, token_terms};

use super::common_words::{COMMON_WORD_IDF_PERCENT, is_common_word};
use super::work::stem;

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
/// A candidate's score must reach this share of the top score, in percent (spec/catalog.md
/// §5.2): evidence much weaker than the best candidate's is not comparable evidence, so the
/// planner's tier order only ever chooses between comparably relevant entries.
pub const RELATIVE_CUT_PERCENT: i64 = 70;
/// The share of its best related candidate's BM25 score a candidate gains, in percent
/// (spec/catalog.md §5.2): a relation is a bonus, never a candidate of its own.
pub const GRAPH_BONUS_PERCENT: i64 = 10;

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
    let work = observation.work_tokens();
    if work.is_empty() {
        return Vec::new();
    }
    let source = catalog.retrieval_source();
    let rows = score(&source, &work, observation.languages(), limit);
    let candidates = rows
        .into_iter()
        .filter_map(|row| {
            let entry = catalog.entry(&source.id(row.entry))?;
            project(catalog, observation, entry, row.ppm)
        })
        .collect();
    remove_ambiguous(candidates)
}

/// A scored entry that passed the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    entry: u32,
    ppm: u32,
}

/// One entry's score before the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scored {
    /// BM25, entity boost and graph bonus, in micro-points.
    score: i64,
    /// The score without the entity boost, in micro-points: what the relative cut compares.
    unboosted: i64,
    /// Whether a matched term is a language of the work.
    language: bool,
    entry: u32,
}

/// Most query terms a retrieval weighs (spec/catalog.md §5.2): the first ones in term order.
/// At most 32 signals and a few languages give far fewer in practice.
pub const QUERY_TERMS_MAX: usize = 256;

/// A set of query term indices below [`QUERY_TERMS_MAX`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct TermSet([u64; QUERY_TERMS_MAX / 64]);

impl TermSet {
    fn insert(&mut self, i: usize) {
        if let Some(word) = self.0.get_mut(i / 64) {
            *word |= 1 << (i % 64);
        }
    }

    fn contains(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn meets(&self, other: &TermSet) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a & b != 0)
    }
}

/// What the scorer accumulates for one entry.
#[derive(Debug, Default)]
struct Evidence {
    /// BM25 over the matched terms, in micro-points.
    bm25: i64,
    /// The matched terms, as indices into the query's terms.
    terms: TermSet,
}

/// `ln(x)` in micro-units.
fn ln_micro(x: f64) -> i64 {
    // Finite and small (x ≤ 200,001 for at most 100,000 entries): the cast cannot saturate.
    (x.ln() * 1e6).round() as i64
}

/// The BM25 idf of a term `df` of `n` entries have, `ln(1 + (n − df + ½) / (df + ½))`, in
/// micro-units: positive however common the term.
fn idf_micro(n: u32, df: u32) -> i64 {
    let (n, df) = (f64::from(n), f64::from(df));
    ln_micro(1.0 + (n - df + 0.5) / (df + 0.5))
}

/// A query term's idf in micro-units: BM25's, damped for an everyday English word
/// (spec/catalog.md §5.2).
fn term_idf(term: &str, n: u32, df: u32) -> i64 {
    let idf = idf_micro(n, df);
    if is_common_word(term) {
        idf * COMMON_WORD_IDF_PERCENT / 100
    } else {
        idf
    }
}

/// BM25's saturation parameter k1, in hundredths.
const K1_HUNDREDTHS: i128 = 120;
/// BM25's length normalization b, in hundredths.
const B_HUNDREDTHS: i128 = 75;

/// BM25's term-frequency factor times `idf`, in micro-points:
/// `idf · tf · (k1 + 1) / (tf + k1 · (1 − b + b · dl / avgdl))` with avgdl = total / n, in
/// integers (k1 and b in hundredths; numerator and denominator multiplied by 10,000 · total).
fn bm25_micro(idf: i64, tf: u32, dl: u32, n: u32, total: u64) -> i64 {
    let (k1, b) = (K1_HUNDREDTHS, B_HUNDREDTHS);
    let (tf, dl, n, total) = (
        i128::from(tf),
        i128::from(dl),
        i128::from(n),
        i128::from(total.max(1)),
    );
    let numerator = i128::from(idf) * tf * (k1 + 100) * 100 * total;
    let denominator = tf * 10_000 * total + k1 * (100 - b) * total + k1 * b * dl * n;
    if denominator <= 0 {
        return 0;
    }
    i64::try_from(numerator / denominator).unwrap_or(i64::MAX)
}

/// The absolute minimum score, in micro-points (spec/catalog.md §5.2): what a term only one
/// entry has earns as one tag of an entry of average length. A word many entries share earns
/// less than that however it occurs, so it cannot carry a candidate alone; a label word alone
/// cannot either.
fn minimum_score<S: RetrievalSource>(source: &S) -> i64 {
    let n = source.entry_count();
    let total = source.total_length();
    let average = u32::try_from(total / u64::from(n.max(1))).unwrap_or(u32::MAX);
    bm25_micro(idf_micro(n, 1), index::TAG_WEIGHT, average, n, total)
}

/// The query terms of the work tokens (spec/catalog.md §5.2): each token's terms, deduplicated.
fn query_terms(work: &[String]) -> Vec<String> {
    let set: BTreeSet<String> = work.iter().flat_map(|t| token_terms(t)).collect();
    set.into_iter().take(QUERY_TERMS_MAX).collect()
}

/// The scorer (spec/catalog.md §5.2): the rows that pass the cut, in score order, at most
/// `limit`.
fn score<S: RetrievalSource>(
    source: &S,
    work: &[String],
    languages: &[String],
    limit: usize,
) -> Vec<Row> {
    let minimum = minimum_score(source);
    let evidence = evidence_scores(source, work, languages);
    // The boost needs the entry's name, so it is computed only for the `limit` entries with the
    // best unboosted evidence among those it could lift to the minimum: a named entry has its
    // name's terms (weighted ×3) among its evidence, so it ranks there, and a catalog of
    // thousands of entries sharing a common word costs `limit` name look-ups, not thousands.
    let mut boostable: Vec<&Scored> = evidence
        .scored
        .iter()
        .filter(|s| s.unboosted.saturating_add(evidence.boost_max) >= minimum)
        .collect();
    boostable.sort_by(|a, b| {
        b.unboosted
            .cmp(&a.unboosted)
            .then_with(|| a.entry.cmp(&b.entry))
    });
    let boosts: BTreeMap<u32, i64> = boostable
        .iter()
        .take(limit)
        .map(|s| (s.entry, evidence.boost(source, s.entry)))
        .filter(|&(_, boost)| boost > 0)
        .collect();
    let mut totals: Vec<(Scored, bool)> = evidence
        .scored
        .iter()
        .filter_map(|s| {
            let boost = boosts.get(&s.entry).copied().unwrap_or(0);
            let score = s.unboosted.saturating_add(boost);
            (s.language || score >= minimum).then_some((Scored { score, ..*s }, boost > 0))
        })
        .collect();
    // The relative cut compares evidence without the entity boost: naming one entry outright
    // ranks it first, but does not make the other entries' evidence less comparable; and an
    // entry the work names is never cut for being less supported than another topic's entries
    // (spec/catalog.md §5.2).
    let best = totals
        .iter()
        .map(|(s, _)| s.unboosted)
        .max()
        .unwrap_or(0)
        .max(1);
    let comparable = |unboosted: i64| {
        i128::from(unboosted) * 100 >= i128::from(best) * i128::from(RELATIVE_CUT_PERCENT)
    };
    totals.retain(|(s, named)| *named || comparable(s.unboosted));
    let mut totals: Vec<Scored> = totals.into_iter().map(|(s, _)| s).collect();
    let top = totals.iter().map(|s| s.score).max().unwrap_or(0).max(1);
    totals.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| a.entry.cmp(&b.entry)));
    totals.truncate(limit);
    totals
        .into_iter()
        .map(
            |Scored {
                 score: s, entry, ..
             }| Row {
                entry,
                ppm: normalized_ppm(s, top),
            },
        )
        .collect()
}

/// The scorer's evidence: every entry with a posting of a query term, unboosted, and what the
/// entity boost of one of them needs.
struct EvidenceScores {
    /// In entry order; `score` is the unboosted score until a boost is added.
    scored: Vec<Scored>,
    terms: Vec<String>,
    idfs: Vec<i64>,
    evidence: BTreeMap<u32, Evidence>,
    /// The largest boost any entry can get: every query term's idf.
    boost_max: i64,
}

impl EvidenceScores {
    /// The entity boost of `entry`.
    fn boost<S: RetrievalSource>(&self, source: &S, entry: u32) -> i64 {
        let Some(evidence) = self.evidence.get(&entry) else {
            return 0;
        };
        let id = source.id(entry);
        let name = id.split_once(':').map_or("", |(_, name)| name);
        entity_boost(name, evidence, &self.terms, &self.idfs)
    }
}

/// Every entry with a posting of a query term and its unboosted score, before any cut, in
/// entry order. Only the postings of the query's terms are read, and only entries with a
/// posting are scored further (spec/catalog.md §5.2).
fn evidence_scores<S: RetrievalSource>(
    source: &S,
    work: &[String],
    languages: &[String],
) -> EvidenceScores {
    let n = source.entry_count();
    let total = source.total_length();
    let terms = query_terms(work);
    let mut language_terms = TermSet::default();
    for l in query_terms(languages) {
        if let Some(i) = terms.iter().position(|t| *t == l) {
            language_terms.insert(i);
        }
    }
    let mut idfs: Vec<i64> = Vec::with_capacity(terms.len());
    let mut scored: BTreeMap<u32, Evidence> = BTreeMap::new();
    for (t, term) in terms.iter().enumerate() {
        let df = source.document_frequency(term);
        if df == 0 {
            idfs.push(0);
            continue;
        }
        // A language is observed in the work, never an everyday word there (§5.2).
        let idf = if language_terms.contains(t) {
            idf_micro(n, df)
        } else {
            term_idf(term, n, df)
        };
        idfs.push(idf);
        for posting in source.postings(term) {
            let evidence = scored.entry(posting.entry).or_default();
            evidence.bm25 = evidence.bm25.saturating_add(bm25_micro(
                idf,
                posting.weight,
                source.doc_length(posting.entry),
                n,
                total,
            ));
            evidence.terms.insert(t);
        }
    }
    let unboosted: Vec<Scored> = scored
        .iter()
        .map(|(&entry, evidence)| {
            let best_neighbour = source
                .neighbours(entry)
                .filter_map(|m| scored.get(&m).map(|e| e.bm25))
                .max()
                .unwrap_or(0);
            let graph = best_neighbour.saturating_mul(GRAPH_BONUS_PERCENT) / 100;
            let unboosted = evidence.bm25.saturating_add(graph);
            Scored {
                score: unboosted,
                unboosted,
                language: evidence.terms.meets(&language_terms),
                entry,
            }
        })
        .collect();
    EvidenceScores {
        scored: unboosted,
        boost_max: idfs.iter().fold(0i64, |a, &b| a.saturating_add(b)),
        terms,
        idfs,
        evidence: scored,
    }
}

/// `score / top` rounded half-up to four decimal places, in parts per million.
fn normalized_ppm(score: i64, top: i64) -> u32 {
    let (score, top) = (i128::from(score.max(0)), i128::from(top.max(1)));
    let ten_thousandths = (score * 20_000 + top) / (2 * top);
    u32::try_from((ten_thousandths * 100).min(i128::from(SCORE_MAX_PPM))).unwrap_or(SCORE_MAX_PPM)
}

/// The explicit-entity boost, in micro-points (spec/catalog.md §5.2): a capability the work
/// names outright gains the idf of its name terms once more. The work names it when it holds
/// the whole compound name (`test-runner`), or every word of a name of two or more words, or
/// the one word of a one-word name when the work is that one term.
///
/// Deviation: the reference's phrase rules look at word order in the host's raw query; here
/// the query is a set of work tokens, where order means nothing.
fn entity_boost(name: &str, evidence: &Evidence, terms: &[String], idfs: &[i64]) -> i64 {
    let words: Vec<String> = runs(name)
        .filter(|r| is_term(r))
        .map(|r| stem(&r))
        .collect();
    if words.is_empty() {
        return 0;
    }
    let index = |term: &str| terms.binary_search_by(|t| t.as_str().cmp(term)).ok();
    let matched = |term: &str| index(term).is_some_and(|i| evidence.terms.contains(i));
    let compound = runs(name).count() > 1 && matched(&stem(name));
    let all_words = words.iter().all(|w| matched(w));
    let ok = compound || (all_words && (words.len() >= 2 || terms.len() == 1));
    if !ok {
        return 0;
    }
    words
        .iter()
        .filter_map(|w| index(w).and_then(|i| idfs.get(i)))
        .sum()
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
    let name_terms: BTreeSet<String> = token_terms(&entry.name).into_iter().collect();
    let tag_terms: BTreeSet<String> = entry.tags.iter().flat_map(|t| token_terms(t)).collect();
    let label_terms: BTreeSet<String> = runs(&entry.label)
        .chain(runs(entry.kind.as_str()))
        .filter(|r| is_term(r))
        .map(|r| stem(&r))
        .collect();
    let matches_in = |terms: &BTreeSet<String>| -> BTreeSet<&str> {
        work.iter()
            .copied()
            .filter(|w| token_terms(w).iter().any(|t| terms.contains(t)))
            .collect()
    };
    let name_matches = matches_in(&name_terms);
    let tag_matches = matches_in(&tag_terms);
    let label_matches = matches_in(&label_terms);
    let matching: BTreeSet<&str> = name_matches
        .iter()
        .chain(&tag_matches)
        .chain(&label_matches)
        .copied()
        .collect();
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
    if !label_matches.is_empty() {
        reasons.push("label-match");
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

#[cfg(test)]
#[path = "retrieval_tests.rs"]
mod tests;
