//! The retrieval index of one catalog (spec/catalog.md §5.2): an inverted index over each
//! entry's name, kind, tags and label, computed once per catalog.
//!
//! It is plain data — sorted terms, flat postings with offsets, per-entry lengths and graph
//! neighbours — so that it can be written as it is into an immutable archive and read back
//! without parsing. The scorer reads it only through [`RetrievalSource`], which the owned
//! [`RetrievalIndex`] implements and an archived form can implement too.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::super::format::CatalogEntry;
use super::super::work::{is_stop_word, stem};

/// Weight of a term occurrence in an entry's name (spec/catalog.md §5.2).
pub(crate) const NAME_WEIGHT: u32 = 3;
/// Weight of a term occurrence in an entry's tags.
pub(crate) const TAG_WEIGHT: u32 = 2;
/// Weight of a term occurrence in an entry's label or kind.
pub(crate) const LABEL_WEIGHT: u32 = 1;
/// Shortest term, in characters: a one-letter word (`c`, `a`, `x`) is too often something else
/// to be evidence.
pub(crate) const TERM_MIN_CHARS: usize = 2;

/// One entry's weighted occurrences of one term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Posting {
    /// Position of the entry in the catalog's id order.
    pub entry: u32,
    /// Weighted term frequency: the sum of the field weights of every occurrence.
    pub weight: u32,
}

/// Read access to a retrieval index: everything the scorer needs, and nothing else.
pub(crate) trait RetrievalSource {
    /// How many entries the catalog holds.
    fn entry_count(&self) -> u32;
    /// Sum of every entry's weighted length.
    fn total_length(&self) -> u64;
    /// The weighted length of `entry`.
    fn doc_length(&self, entry: u32) -> u32;
    /// The postings of `term` (a stemmed term), in entry order; empty when no entry has it.
    fn postings(&self, term: &str) -> impl Iterator<Item = Posting> + '_;
    /// How many entries have `term`.
    fn document_frequency(&self, term: &str) -> u32;
    /// The capability id of `entry`.
    fn id(&self, entry: u32) -> Cow<'_, str>;
    /// The entries `entry` is related to, either way (spec/catalog.md §1.2), in entry order.
    fn neighbours(&self, entry: u32) -> impl Iterator<Item = u32> + '_;

    /// Whether a prompt word stands for some term of the catalog (spec/catalog.md §5.4): the
    /// test a producer of work observations can keep words by, so that only catalog vocabulary
    /// is ever stored as a signal.
    fn knows_word(&self, word: &str) -> bool {
        token_terms(word)
            .iter()
            .any(|t| self.document_frequency(t) > 0)
    }
}

/// The arrays of an owned index, for writing it into a projection (spec/catalog.md §8.2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexParts<'a> {
    pub terms: &'a [String],
    pub term_offsets: &'a [u32],
    pub postings: &'a [Posting],
    pub doc_lengths: &'a [u32],
    pub neighbour_offsets: &'a [u32],
    pub neighbours: &'a [u32],
}

/// The owned retrieval index of one catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RetrievalIndex {
    /// Every stemmed term, sorted and unique.
    terms: Vec<String>,
    /// `postings[term_offsets[i]..term_offsets[i + 1]]` are the postings of `terms[i]`.
    term_offsets: Vec<u32>,
    postings: Vec<Posting>,
    /// Weighted length of each entry.
    doc_lengths: Vec<u32>,
    total_length: u64,
    /// Capability id of each entry.
    ids: Vec<String>,
    /// `neighbours[neighbour_offsets[e]..neighbour_offsets[e + 1]]` are the entries `e` is
    /// related to.
    neighbour_offsets: Vec<u32>,
    neighbours: Vec<u32>,
}

/// The lowercase `[a-z0-9]+` runs of `text`.
pub(crate) fn runs(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|r| !r.is_empty())
        .map(str::to_ascii_lowercase)
}

/// The terms a name, tag or work token stands for (spec/catalog.md §5.2): its stemmed
/// `[a-z0-9]+` runs, and when it has several, the whole token stemmed as well (`test-runner`,
/// `unit-test`), so the exact compound is rarer evidence than its parts. Stop words and
/// one-letter runs are no terms.
pub(crate) fn token_terms(token: &str) -> Vec<String> {
    let lower = token.to_ascii_lowercase();
    let parts: Vec<String> = runs(&lower).collect();
    let mut out: Vec<String> = parts
        .iter()
        .filter(|p| is_term(p))
        .map(|p| stem(p))
        .collect();
    if parts.len() > 1 {
        out.push(stem(&lower));
    }
    out
}

/// Whether a run is a term: at least [`TERM_MIN_CHARS`] characters and not a stop word.
pub(crate) fn is_term(run: &str) -> bool {
    run.chars().count() >= TERM_MIN_CHARS && !is_stop_word(run)
}

impl RetrievalIndex {
    /// Builds the index of `entries` (sorted by id, as a catalog holds them).
    pub(crate) fn build(entries: &[CatalogEntry]) -> RetrievalIndex {
        let position: BTreeMap<&str, u32> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.as_str(), to_u32(i)))
            .collect();
        let mut by_term: BTreeMap<String, BTreeMap<u32, u32>> = BTreeMap::new();
        let mut doc_lengths = Vec::with_capacity(entries.len());
        let mut neighbour_sets: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); entries.len()];
        for (i, entry) in entries.iter().enumerate() {
            let e = to_u32(i);
            let mut occurrences: Vec<(String, u32)> = Vec::new();
            for term in token_terms(&entry.name) {
                occurrences.push((term, NAME_WEIGHT));
            }
            for term in token_terms(entry.kind.as_str()) {
                occurrences.push((term, LABEL_WEIGHT));
            }
            for tag in &entry.tags {
                for term in token_terms(tag) {
                    occurrences.push((term, TAG_WEIGHT));
                }
            }
            for run in runs(&entry.label) {
                if is_term(&run) {
                    occurrences.push((stem(&run), LABEL_WEIGHT));
                }
            }
            let mut length: u32 = 0;
            for (term, weight) in occurrences {
                length = length.saturating_add(weight);
                let slot = by_term.entry(term).or_default().entry(e).or_default();
                *slot = slot.saturating_add(weight);
            }
            doc_lengths.push(length);
            for target in &entry.related {
                if let Some(&t) = position.get(target.as_str())
                    && t != e
                {
                    neighbour_sets[i].insert(t);
                    if let Some(set) = neighbour_sets.get_mut(t as usize) {
                        set.insert(e);
                    }
                }
            }
        }
        let mut terms = Vec::with_capacity(by_term.len());
        let mut term_offsets = Vec::with_capacity(by_term.len() + 1);
        let mut postings = Vec::new();
        term_offsets.push(0);
        for (term, list) in by_term {
            terms.push(term);
            postings.extend(
                list.into_iter()
                    .map(|(entry, weight)| Posting { entry, weight }),
            );
            term_offsets.push(to_u32(postings.len()));
        }
        let mut neighbour_offsets = Vec::with_capacity(entries.len() + 1);
        let mut neighbours = Vec::new();
        neighbour_offsets.push(0);
        for set in neighbour_sets {
            neighbours.extend(set);
            neighbour_offsets.push(to_u32(neighbours.len()));
        }
        RetrievalIndex {
            terms,
            term_offsets,
            postings,
            total_length: doc_lengths.iter().map(|&l| u64::from(l)).sum(),
            doc_lengths,
            ids: entries.iter().map(|e| e.id.clone()).collect(),
            neighbour_offsets,
            neighbours,
        }
    }

    /// The index's arrays (spec/catalog.md §8.2).
    pub(crate) fn parts(&self) -> IndexParts<'_> {
        IndexParts {
            terms: &self.terms,
            term_offsets: &self.term_offsets,
            postings: &self.postings,
            doc_lengths: &self.doc_lengths,
            neighbour_offsets: &self.neighbour_offsets,
            neighbours: &self.neighbours,
        }
    }

    fn term_position(&self, term: &str) -> Option<usize> {
        self.terms.binary_search_by(|t| t.as_str().cmp(term)).ok()
    }

    fn term_postings(&self, term: &str) -> &[Posting] {
        self.term_position(term)
            .and_then(|i| {
                let start = *self.term_offsets.get(i)? as usize;
                let end = *self.term_offsets.get(i + 1)? as usize;
                self.postings.get(start..end)
            })
            .unwrap_or(&[])
    }
}

impl RetrievalSource for RetrievalIndex {
    fn entry_count(&self) -> u32 {
        to_u32(self.ids.len())
    }

    fn total_length(&self) -> u64 {
        self.total_length
    }

    fn doc_length(&self, entry: u32) -> u32 {
        self.doc_lengths.get(entry as usize).copied().unwrap_or(0)
    }

    fn postings(&self, term: &str) -> impl Iterator<Item = Posting> + '_ {
        self.term_postings(term).iter().copied()
    }

    fn document_frequency(&self, term: &str) -> u32 {
        to_u32(self.term_postings(term).len())
    }

    fn id(&self, entry: u32) -> Cow<'_, str> {
        Cow::Borrowed(self.ids.get(entry as usize).map_or("", String::as_str))
    }

    fn neighbours(&self, entry: u32) -> impl Iterator<Item = u32> + '_ {
        let e = entry as usize;
        let range = match (
            self.neighbour_offsets.get(e),
            self.neighbour_offsets.get(e + 1),
        ) {
            (Some(&start), Some(&end)) => start as usize..end as usize,
            _ => 0..0,
        };
        self.neighbours.get(range).unwrap_or(&[]).iter().copied()
    }
}

/// A count as `u32`. A catalog holds at most 100,000 entries of bounded size (spec/catalog.md
/// §1.4), so every count here fits; a larger one saturates rather than wraps.
fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
