//! The BM25 scorer, its cut and the prompt-word rules (spec/catalog.md §5.2, §5.4).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctx_model::Json;

use super::*;
use crate::catalog::work::{TokenRule, is_screened_word, is_stop_word, stem, tokenize};
use crate::catalog::{load_catalog_dir, sample_catalog_dir};

/// A `ctx.catalog-v1` catalog of manual entries `(id, label, tags, related)`.
fn catalog(entries: &[(&str, &str, &[&str], &[&str])]) -> Catalog {
    let capabilities: Vec<Json> = entries
        .iter()
        .map(|(id, label, tags, related)| {
            let kind = id.split_once(':').map_or("", |(k, _)| k);
            let mut fields = vec![
                ("id", Json::str(*id)),
                ("kind", Json::str(kind)),
                ("label", Json::str(*label)),
                (
                    "tags",
                    Json::Arr(tags.iter().map(|t| Json::str(*t)).collect()),
                ),
            ];
            if !related.is_empty() {
                fields.push((
                    "related",
                    Json::Arr(related.iter().map(|t| Json::str(*t)).collect()),
                ));
            }
            Json::object(fields)
        })
        .collect();
    let document = Json::object([
        ("capabilities", Json::Arr(capabilities)),
        ("namespace", Json::str("test.retrieval")),
        ("schema", Json::str("ctx.catalog-v1")),
    ]);
    Catalog::parse(&document.to_string()).expect("a valid catalog")
}

/// Twelve entries: eight share the generic tag `data`, one is named for Kafka, three carry the
/// common tag `streaming`.
fn data_catalog() -> Catalog {
    catalog(&[
        (
            "skill:csv-cleaning",
            "Clean messy CSV exports",
            &["csv", "data"],
            &[],
        ),
        (
            "skill:pandas",
            "Dataframes in Python",
            &["data", "python"],
            &[],
        ),
        (
            "skill:dbt",
            "Models in the warehouse",
            &["data", "sql"],
            &[],
        ),
        (
            "skill:spark",
            "Cluster jobs",
            &["data", "jobs", "streaming"],
            &[],
        ),
        (
            "skill:charts",
            "Plots and dashboards",
            &["data", "plots"],
            &[],
        ),
        (
            "skill:etl",
            "Extract, transform, load",
            &["data", "pipelines", "streaming"],
            &[],
        ),
        ("skill:warehouse", "Star schemas", &["data", "schemas"], &[]),
        (
            "skill:notebooks",
            "Jupyter notebooks",
            &["data", "jupyter"],
            &[],
        ),
        (
            "skill:kafka-consumers",
            "Consumer groups and offsets",
            &["queues"],
            &[],
        ),
        (
            "skill:flink",
            "Stateful stream processing",
            &["streaming"],
            &[],
        ),
        ("skill:regex", "Regular expressions", &["patterns"], &[]),
        (
            "agent:test-runner",
            "Runs the whole test suite and fixes failures",
            &["ci"],
            &[],
        ),
    ])
}

fn observe(signals: &[&str], languages: &[&str]) -> WorkObservation {
    WorkObservation::new(signals, languages).unwrap()
}

fn ids(candidates: &[CapabilityCandidate]) -> Vec<&str> {
    candidates
        .iter()
        .map(|c| c.capability_id.as_str())
        .collect()
}

#[test]
fn a_generic_word_alone_yields_no_candidate() {
    let c = data_catalog();
    assert!(retrieve(&c, &observe(&["data"], &[])).is_empty());
    // The same word beside a specific one adds to it, but does not bring its own entries.
    let found = retrieve(&c, &observe(&["data", "jupyter"], &[]));
    assert_eq!(ids(&found), ["skill:notebooks"]);
}

#[test]
fn a_rare_name_term_outranks_a_common_tag() {
    let c = data_catalog();
    let found = retrieve(&c, &observe(&["kafka", "streaming"], &[]));
    assert_eq!(
        found.first().map(|c| c.capability_id.as_str()),
        Some("skill:kafka-consumers")
    );
    assert_eq!(found[0].normalized_score_ppm, SCORE_MAX_PPM);
    assert_eq!(found[0].matching_signals, ["kafka"]);
    assert_eq!(
        found[0].reason_codes,
        ["graph-match", "name-match", "signal-match"]
    );
}

#[test]
fn stop_words_and_one_letter_words_are_never_evidence() {
    let c = catalog(&[
        (
            "agent:deploy-with-verification",
            "Deploys and checks",
            &["deploy", "with"],
            &[],
        ),
        ("skill:c-interop", "Calling C from Rust", &["c", "ffi"], &[]),
        ("skill:go", "Idiomatic Go", &["go"], &[]),
    ]);
    assert!(is_stop_word("with") && is_stop_word("the") && !is_stop_word("go"));
    assert!(retrieve(&c, &observe(&["with", "the"], &[])).is_empty());
    assert!(retrieve(&c, &observe(&[], &["c"])).is_empty());
    assert_eq!(ids(&retrieve(&c, &observe(&[], &["go"]))), ["skill:go"]);
    // A compound name still counts whole, stop word and all.
    let found = retrieve(&c, &observe(&["deploy-with-verification"], &[]));
    assert_eq!(ids(&found), ["agent:deploy-with-verification"]);
}

#[test]
fn plurals_meet_their_singular_and_the_signal_is_reported_as_written() {
    let c = catalog(&[
        (
            "skill:xlsx",
            "Excel workbooks",
            &["excel", "spreadsheets"],
            &[],
        ),
        (
            "mcp-server:library-docs",
            "Documentation of libraries",
            &["docs"],
            &[],
        ),
        ("skill:regex", "Regular expressions", &["patterns"], &[]),
    ]);
    let found = retrieve(&c, &observe(&["spreadsheet"], &[]));
    assert_eq!(ids(&found), ["skill:xlsx"]);
    assert_eq!(found[0].matching_signals, ["spreadsheet"]);
    assert_eq!(
        found[0].reason_codes,
        ["graph-match", "signal-match", "tag-match"]
    );
    let found = retrieve(&c, &observe(&["library"], &[]));
    assert_eq!(ids(&found), ["mcp-server:library-docs"]);
    assert_eq!(
        found[0].reason_codes,
        ["graph-match", "label-match", "name-match", "signal-match"]
    );
    for (word, stemmed) in [
        ("spreadsheets", "spreadsheet"),
        ("libraries", "library"),
        ("fixes", "fix"),
        ("classes", "class"),
        ("caches", "cache"),
        ("tests", "test"),
        ("unit-tests", "unit-test"),
        ("status", "status"),
        ("class", "class"),
        ("aws", "aws"),
        ("k8s", "k8s"),
    ] {
        assert_eq!(stem(word), stemmed, "{word}");
    }
}

#[test]
fn hyphenated_work_tokens_match_their_parts_and_their_whole() {
    let c = data_catalog();
    let found = retrieve(&c, &observe(&["test-runner"], &[]));
    assert_eq!(ids(&found), ["agent:test-runner"]);
    assert_eq!(found[0].matching_signals, ["test-runner"]);
    let words = tokenize("ask the Test-Runner to run it test-first", TokenRule::Words);
    for expected in [
        "test-runner",
        "test",
        "runner",
        "test-first",
        "first",
        "run",
        "ask",
    ] {
        assert!(words.iter().any(|w| w == expected), "{expected}: {words:?}");
    }
    assert!(
        !words.iter().any(|w| w == "the" || w == "to" || w == "it"),
        "{words:?}"
    );
}

#[test]
fn prompt_words_are_known_to_the_catalog_in_either_number() {
    let loaded = load_catalog_dir(&sample_catalog_dir()).unwrap();
    let c = loaded.catalog();
    let words = tokenize(
        "a spreadsheet of the pull request and two boxes",
        TokenRule::Words,
    );
    assert_eq!(words, ["spreadsheet", "pull", "request", "two", "boxes"]);
    // `spreadsheets` and `pull-requests` are tags; the singular words meet them.
    for known in ["spreadsheet", "spreadsheets", "pull", "request", "requests"] {
        assert!(c.knows_word(known), "{known}");
    }
    for unknown in ["two", "boxes", "the", "a"] {
        assert!(!c.knows_word(unknown), "{unknown}");
    }
}

#[test]
fn words_the_credential_screen_refuses_are_dropped_and_plain_words_stay() {
    let github = format!("ghp_{}", "a1B2c3D4e5F6".repeat(3));
    let prompt = format!(
        "did we commit the AWS secret key {github} or AKIAIOSFODNN7EXAMPLE? rotate the \
         credentials, the api-key and the passwords"
    );
    let words = tokenize(&prompt, TokenRule::Words);
    for refused in ["secret", "credentials", "api-key", "ghp"] {
        assert!(is_screened_word(refused) || refused == "ghp", "{refused}");
    }
    for word in &words {
        assert!(
            !is_screened_word(word),
            "{word} would make the screen refuse the prompt"
        );
    }
    // The 36-character body of the token is a key-like word the screen refuses, so it is gone.
    assert!(!words.iter().any(|w| w.len() >= 32), "{words:?}");
    assert!(!words.iter().any(|w| w.contains("ghp-")), "{words:?}");
    // The plain plural stays: it names a topic, not a secret.
    assert!(words.iter().any(|w| w == "passwords"), "{words:?}");
    assert!(words.iter().any(|w| w == "commit" && !is_screened_word(w)));
}

#[test]
fn relations_are_a_bonus_and_never_a_candidate_of_their_own() {
    let c = catalog(&[
        (
            "skill:pytest",
            "Python tests with fixtures",
            &["pytest", "python"],
            &["skill:coverage"],
        ),
        (
            "skill:coverage",
            "Coverage reports and gaps",
            &["coverage", "reports"],
            &["skill:pytest"],
        ),
        (
            "skill:lcov",
            "Coverage reports for C",
            &["coverage", "reports"],
            &[],
        ),
        ("skill:regex", "Regular expressions", &["patterns"], &[]),
    ]);
    let found = retrieve(&c, &observe(&["pytest"], &[]));
    assert_eq!(
        ids(&found),
        ["skill:pytest"],
        "a relation brings no candidate"
    );
    let found = retrieve(&c, &observe(&["pytest", "coverage", "reports"], &[]));
    let coverage = found
        .iter()
        .position(|c| c.capability_id == "skill:coverage");
    let lcov = found.iter().position(|c| c.capability_id == "skill:lcov");
    assert!(coverage < lcov && lcov.is_some(), "{:?}", ids(&found));
}

#[test]
fn weak_candidates_are_cut_against_the_top_score() {
    let c = data_catalog();
    // `jupyter` is specific; `streaming` is shared by three entries and carries far less.
    let found = retrieve(&c, &observe(&["jupyter", "notebooks", "streaming"], &[]));
    assert_eq!(ids(&found), ["skill:notebooks"]);
    for c in &found {
        assert!(i64::from(c.normalized_score_ppm) * 100 >= 1_000_000 * RELATIVE_CUT_PERCENT);
    }
}

#[test]
fn the_pool_is_bounded_by_its_limit_in_score_then_catalog_order() {
    let names = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "india",
    ];
    let entries: Vec<(String, String, Vec<&str>)> = names
        .iter()
        .map(|n| (format!("skill:{n}-tool"), format!("The {n} tool"), vec![*n]))
        .collect();
    let rows: Vec<(&str, &str, &[&str], &[&str])> = entries
        .iter()
        .map(|(id, label, tags)| (id.as_str(), label.as_str(), &tags[..], &[][..]))
        .collect();
    let c = catalog(&rows);
    let all = observe(&names, &[]);
    assert_eq!(retrieve(&c, &all).len(), 8);
    let six = retrieve_with_limit(&c, &all, 6).unwrap();
    assert_eq!(
        ids(&six),
        [
            "skill:alpha-tool",
            "skill:bravo-tool",
            "skill:charlie-tool",
            "skill:delta-tool",
            "skill:echo-tool",
            "skill:foxtrot-tool"
        ]
    );
    assert!(retrieve_with_limit(&c, &all, 5).is_err());
}

#[test]
fn the_index_is_plain_data_built_once_and_shared_by_clones() {
    let c = data_catalog();
    let index = c.retrieval_index();
    assert_eq!(index.entry_count(), 12);
    assert_eq!(index.document_frequency("data"), 8);
    assert_eq!(index.document_frequency("streaming"), 3);
    assert!(
        index
            .postings("data")
            .all(|p| p.weight >= index::TAG_WEIGHT)
    );
    assert_eq!(
        index.document_frequency("the"),
        0,
        "stop words are not indexed"
    );
    assert!(c.knows_word("spreadsheet") == c.knows_word("spreadsheets"));
    assert!(c.knows_word("notebook") && c.knows_word("kafka") && !c.knows_word("haiku"));
    let clone = c.clone();
    assert!(std::ptr::eq(clone.retrieval_index(), c.retrieval_index()));
    assert_eq!(RetrievalIndex::build(c.entries()), *c.retrieval_index());
}

#[test]
fn the_sample_catalog_keeps_its_pinned_answers() {
    let loaded = load_catalog_dir(&sample_catalog_dir()).unwrap();
    let c = loaded.catalog();
    let found = retrieve(c, &observe(&["testing"], &["rust"]));
    assert_eq!(found[0].capability_id, "skill:rust-testing");
    let found = retrieve(c, &observe(&["tests"], &["go"]));
    assert!(ids(&found).contains(&"skill:go") && ids(&found).contains(&"skill:go-testing"));
    let found = retrieve(c, &observe(&["terraform"], &[]));
    assert_eq!(ids(&found), ["skill:terraform"]);
}

#[test]
fn an_everyday_word_alone_carries_no_candidate_but_a_specific_one_does() {
    let c = catalog(&[
        ("skill:app-release", "Publish apps", &["store"], &[]),
        (
            "skill:cluster-ops",
            "Operate clusters",
            &["kubernetes"],
            &[],
        ),
        ("skill:pdf-reader", "Read documents", &["pdf"], &[]),
        ("skill:sql-queries", "Query tables", &["sql"], &[]),
    ]);
    // Entries of equal length. `store` and `kubernetes` are each one entry's tag, so the catalog alone rates them the
    // same; only the specific one is evidence on its own.
    assert!(retrieve(&c, &observe(&["store"], &[])).is_empty());
    assert_eq!(
        ids(&retrieve(&c, &observe(&["kubernetes"], &[]))),
        ["skill:cluster-ops"]
    );
    // Beside specific evidence the everyday word still counts.
    let found = retrieve(&c, &observe(&["kubernetes", "store"], &[]));
    assert_eq!(ids(&found)[0], "skill:cluster-ops");
}

#[test]
fn an_entry_the_work_names_survives_the_relative_cut() {
    let c = catalog(&[
        (
            "skill:object-storage",
            "Buckets and objects",
            &["bucket", "s3", "versioning", "lifecycle"],
            &[],
        ),
        ("skill:infra-code", "Infrastructure as code", &["hcl"], &[]),
        ("skill:pdf", "Read documents", &["pdf"], &[]),
        ("skill:sql", "Query tables", &["sql"], &[]),
    ]);
    // Four tags of one entry against the two name words of the other: without the exemption
    // the named entry's evidence is far below 70 % of the storage entry's.
    let found = retrieve(
        &c,
        &observe(
            &["bucket", "code", "infra", "lifecycle", "s3", "versioning"],
            &[],
        ),
    );
    assert!(
        ids(&found).contains(&"skill:infra-code"),
        "{:?}",
        ids(&found)
    );
    assert_eq!(found.len(), 2, "{:?}", ids(&found));
}
