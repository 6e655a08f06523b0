//! The named fields of replies and events (`Reply::fields`, `Output::fields`): every kind
//! hands out exactly the names, values and order the recording format and the wasm
//! binding's objects use.

use fencelock::{
    Change, Field, Label, LockName, Mode, Output, ReleaseReason, Reply, SessionId, Tick, Token,
};

fn reply_fields(r: &Reply) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    r.fields(|k, f| v.push((k, show(f))));
    v
}

fn event_fields(o: &Output) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    o.fields(|k, f| v.push((k, show(f))));
    v
}

fn show(f: Field<'_>) -> String {
    match f {
        Field::Number(n) => n.to_string(),
        Field::Text(t) => format!("'{t}'"),
        Field::Mode(m) => format!("{m:?}"),
    }
}

fn kv(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

#[test]
fn every_reply_kind_hands_out_its_fields_in_order() {
    let permits = Mode::Permits { count: 2, limit: 5 };
    let cases: Vec<(Reply, Vec<(&'static str, String)>)> = vec![
        (
            Reply::Opened {
                session: SessionId(3),
                expires_at: Tick(110),
            },
            kv(&[("session", "3"), ("expiresAt", "110")]),
        ),
        (
            Reply::KeptAlive {
                expires_at: Tick(200),
            },
            kv(&[("expiresAt", "200")]),
        ),
        (Reply::Closed, kv(&[])),
        (
            Reply::Granted {
                mode: permits,
                token: Token(9),
            },
            kv(&[("mode", "Permits { count: 2, limit: 5 }"), ("token", "9")]),
        ),
        (
            Reply::Queued {
                mode: Mode::Shared,
                position: 4,
            },
            kv(&[("mode", "Shared"), ("position", "4")]),
        ),
        (Reply::Busy, kv(&[])),
        (Reply::Released { token: Token(7) }, kv(&[("token", "7")])),
        (Reply::Cancelled, kv(&[])),
        (Reply::HoldEnded { token: Token(8) }, kv(&[("token", "8")])),
        (Reply::WaitEnded, kv(&[])),
        (Reply::Ticked { now: Tick(42) }, kv(&[("now", "42")])),
        (Reply::Watching { holders: 2 }, kv(&[("holders", "2")])),
        (Reply::Unwatched, kv(&[])),
    ];
    let mut kinds: Vec<&str> = cases.iter().map(|(r, _)| r.kind()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), 13, "one case per reply kind");
    for (r, want) in &cases {
        assert_eq!(&reply_fields(r), want, "{}", r.kind());
    }
}

#[test]
fn every_event_kind_hands_out_its_session_first_then_its_fields() {
    let lock = LockName::new("jobs/reindex").unwrap();
    let cases: Vec<(Output, Vec<(&'static str, String)>)> = vec![
        (
            Output::Granted {
                session: SessionId(2),
                lock: lock.clone(),
                mode: Mode::Exclusive,
                token: Token(35),
            },
            kv(&[
                ("session", "2"),
                ("lock", "'jobs/reindex'"),
                ("mode", "Exclusive"),
                ("token", "35"),
            ]),
        ),
        (
            Output::Released {
                session: SessionId(1),
                lock: lock.clone(),
                token: Token(34),
                reason: ReleaseReason::Expired,
            },
            kv(&[
                ("session", "1"),
                ("lock", "'jobs/reindex'"),
                ("token", "34"),
                ("reason", "'expired'"),
            ]),
        ),
        (
            Output::SessionExpired {
                session: SessionId(1),
            },
            kv(&[("session", "1")]),
        ),
        (
            Output::WaitTimedOut {
                session: SessionId(5),
                lock: lock.clone(),
            },
            kv(&[("session", "5"), ("lock", "'jobs/reindex'")]),
        ),
        (
            Output::HolderChanged {
                session: SessionId(6),
                lock,
                holder: SessionId(2),
                mode: Mode::Shared,
                token: Token(36),
                change: Change::Closed,
                label: Label::new("host-b:77").unwrap(),
            },
            kv(&[
                ("session", "6"),
                ("lock", "'jobs/reindex'"),
                ("holder", "2"),
                ("mode", "Shared"),
                ("token", "36"),
                ("change", "'closed'"),
                ("label", "'host-b:77'"),
            ]),
        ),
    ];
    for (o, want) in &cases {
        assert_eq!(&event_fields(o), want, "{}", o.kind());
    }
}

#[test]
fn release_reasons_are_words() {
    assert_eq!(ReleaseReason::Released.kind(), "released");
    assert_eq!(ReleaseReason::Closed.kind(), "closed");
    assert_eq!(ReleaseReason::Expired.kind(), "expired");
}

/// Labels order as their text does, by `<` as by `cmp`.
#[test]
fn labels_order_as_their_text() {
    let (a, b) = (Label::new("alpha").unwrap(), Label::new("beta").unwrap());
    assert!(a < b);
    assert!(b >= a);
    assert_eq!(a.partial_cmp(&b), Some(core::cmp::Ordering::Less));
    assert_eq!(a.cmp(&b), core::cmp::Ordering::Less);
}
