//! The error-precedence table (`tests/vectors/precedence.calls`, docs/SPEC.md §5): every
//! row through the typed methods and through frames, the same outcome from both and the
//! one the table names; and the table covers what it claims.

use std::collections::BTreeSet;

use fencelock_tests::calls::{parse, run, Outcome};
use fencelock_tests::vectors::vectors_dir;

fn table() -> String {
    std::fs::read_to_string(vectors_dir().join("precedence.calls")).expect("precedence.calls")
}

#[test]
fn every_row_gives_its_outcome_typed_and_through_frames() {
    let stats = run(&table()).unwrap_or_else(|e| panic!("{e}"));
    println!("precedence: {} rows, {} refusals", stats.rows, stats.errors);
    assert!(stats.errors >= 20, "{stats:?}");
}

/// The table's refusals are exactly the input errors listed below, and a comment says why
/// for each row.
/// (That a row has the several faults its comment names is the comment's claim, read by
/// a person: this test does not judge it.)
#[test]
fn the_table_covers_every_input_error_and_comments_each_row() {
    let text = table();
    let t = parse(&text).unwrap();
    let codes: BTreeSet<u32> = t
        .calls
        .iter()
        .filter_map(|c| match c.expect {
            Outcome::Err(code) => Some(code),
            _ => None,
        })
        .collect();
    let want: BTreeSet<u32> = [
        101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 201, 202, 203, 204, 205, 207, 301,
    ]
    .into();
    assert_eq!(codes, want);
    // Every refused row is introduced by a comment (a `#` line right above it, or above
    // the run of rows it belongs to).
    let lines: Vec<&str> = text.lines().collect();
    for c in &t.calls {
        let above = lines[..c.line - 1]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty() && !l.contains(" -> "));
        assert!(
            above.is_some_and(|l| l.trim_start().starts_with('#')),
            "line {}: no comment above",
            c.line
        );
    }
}

#[test]
fn the_runner_catches_a_wrong_outcome() {
    let text = table();
    for (from, to) in [
        ("-> err 101", "-> err 201"),
        ("-> ok queued", "-> ok granted"),
    ] {
        let broken = text.replacen(from, to, 1);
        assert!(run(&broken).is_err(), "{from} → {to} was not caught");
    }
}
