//! `Request::Export` on an in-process three-node cluster whose nodes snapshot every 100
//! entries (and purge the log before): a window the leader compacted away is refused
//! naming what it can still export, an empty one too, and what it holds comes as a
//! recording in pages that fit together. (The whole path — CLI, real processes, the demo
//! page replaying the file in Chromium — is web-demo/tests/export.test.mjs.)

mod common;

use std::time::{Duration, Instant};

use common::{acquire, keep_alive, open, release, session_of, Cluster};
use fencelock::Wait;
use fencelock_server::protocol::{ClientError, ExportPage, Reply, Request};
use fencelock_server::state_machine::PushSink;

async fn export(
    c: &Cluster,
    from_index: Option<u64>,
    to_index: Option<u64>,
    skip: u64,
) -> Result<ExportPage, ClientError> {
    export_at(c, from_index, to_index, None, skip).await
}

async fn export_at(
    c: &Cluster,
    from_index: Option<u64>,
    to_index: Option<u64>,
    from_time: Option<u64>,
    skip: u64,
) -> Result<ExportPage, ClientError> {
    let node = c.nodes[&c.leader().await].clone();
    let (sink, _rx, _) = PushSink::new(8);
    let req = Request::Export {
        from_index,
        to_index,
        from_time,
        to_time: None,
        skip,
    };
    match node.handle_request(req, node.next_conn_id(), &sink).await? {
        Reply::Export(p) => Ok(p),
        r => panic!("unexpected {r:?}"),
    }
}

/// The JSON of a line, after checking its CRC-32.
fn body(line: &str) -> &str {
    let (json, crc) = line.rsplit_once('\t').expect("JSON, a tab, a checksum");
    assert_eq!(
        format!("{:08x}", crc32fast::hash(json.as_bytes())),
        crc,
        "{line}"
    );
    json
}

/// The first `"key":NUMBER` of a JSON text.
fn number(json: &str, key: &str) -> u64 {
    let at = json.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
    json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_compacted_window_is_refused_naming_what_is_left_and_the_rest_comes_in_pages_from_any_line(
) {
    let c = Cluster::start("export", 300).await;
    let s = session_of(&c.propose(open(600_000)).await);
    // A new leader's logical time starts after its grace period: until then every entry is
    // stamped 0, and a window "from time 0" would not reach before the snapshot. Wait until
    // entries carry a later time, so the compacted prefix covers a stretch of time.
    let start = Instant::now();
    while c.propose(keep_alive(s)).await.now == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "logical time never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // a long lock name makes long lines: more than one page
    let lock = format!("jobs/{}", "x".repeat(58));
    for k in 0..200u64 {
        c.propose(acquire(s, &lock, Wait::None, Some(2 * k + 1)))
            .await;
        c.propose(release(s, &lock, Some(2 * k + 2))).await;
    }
    c.propose(keep_alive(s)).await;
    // the leader snapshots every 100 entries and purges the log before
    let start = Instant::now();
    let purged = loop {
        let l = c.nodes[&c.leader().await].clone();
        if let Some(p) = l.log.last_purged() {
            break p.index;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no purge");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(purged > 1);

    // from the first index: gone, and the message says what is left
    let e = export(&c, Some(1), None, 0).await.expect_err("compacted");
    let ClientError::BadRequest(m) = e else {
        panic!("{e:?}")
    };
    assert!(m.starts_with("log index 1 was compacted away"), "{m}");
    assert!(m.contains("this leader can export log indices "), "{m}");
    let first: u64 = m
        .rsplit("log indices ")
        .next()
        .and_then(|t| t.split([' ', '(']).next())
        .and_then(|n| n.parse().ok())
        .expect("the first index it can export");
    assert!(first > purged, "{m}");

    // by time: from the cluster's first moment is gone too
    let e = export_at(&c, None, None, Some(0), 0)
        .await
        .expect_err("compacted");
    assert!(
        matches!(&e, ClientError::BadRequest(m) if m.starts_with("the history before logical time")),
        "{e:?}"
    );

    // an empty window
    let e = export(&c, Some(first + 5), Some(first + 1), 0)
        .await
        .expect_err("empty");
    assert!(
        matches!(&e, ClientError::BadRequest(m) if m.starts_with("nothing to export")),
        "{e:?}"
    );

    // what is left, page by page, pinned to the first page's window (a page holds about
    // 40 KiB; after a purge at most 100 entries are left, which may fit one page, so a
    // page from the middle is asked for too: it must be the same lines)
    let p1 = export(&c, None, None, 0).await.expect("exports");
    assert_eq!(p1.from_index, first);
    let mut lines = p1.lines.clone();
    while (lines.len() as u64) < p1.total {
        let p = export(
            &c,
            Some(p1.from_index),
            Some(p1.to_index),
            lines.len() as u64,
        )
        .await
        .expect("a page");
        assert_eq!(
            (p.total, p.from_index, p.to_index),
            (p1.total, p1.from_index, p1.to_index)
        );
        assert!(!p.lines.is_empty());
        lines.extend(p.lines);
    }
    let mid = p1.total / 2;
    let p = export(&c, Some(p1.from_index), Some(p1.to_index), mid)
        .await
        .expect("a page from the middle");
    assert_eq!(p.total, p1.total);
    assert_eq!(
        p.lines[..],
        lines[mid as usize..mid as usize + p.lines.len()]
    );
    assert_eq!(lines.len() as u64, p1.total);
    // the header, then input lines in time order, each carrying the leader's stamp
    assert!(body(&lines[0]).starts_with(r#"{"format":"fencelock-recording","version":2,"#));
    // ...and last the end line, counting the lines before it
    let (end, lines) = lines.split_last().unwrap();
    assert_eq!(
        body(end),
        format!(r#"{{"end":{{"lines":{}}}}}"#, lines.len())
    );
    let mut last = 0;
    let mut released = 0;
    for l in &lines[1..] {
        let j = body(l);
        let now = number(j, "now");
        assert!(now >= last, "time goes back at {j}");
        last = now;
        if j.contains(r#""reply":{"kind":"released""#) {
            released += 1;
        }
    }
    assert!(released > 0, "the releases after the snapshot are there");
    let ((i0, _), (i1, _)) = p1.span.expect("something was applied");
    assert!(i0 >= first && i1 <= p1.to_index && i0 <= i1);
    c.shutdown().await;
}

/// Numbers a client chooses cannot make the history unexportable. A recording holds
/// numbers up to 2^53 - 1 (what a JavaScript number holds exactly); a request number, a
/// ttl or a wait past that used to be applied and recorded, and from then on every export
/// of a window holding it was refused (`not_recordable`) — any lock token, even without a
/// session of its own (an input for a session that is not open still reaches the core),
/// could keep an incident out of the administrators' hands. Such numbers are now refused
/// before anything is proposed (a wait that long is kept as the longest a recording
/// holds), and the window exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_a_client_chooses_cannot_make_the_history_unexportable() {
    use fencelock_server::auth::SessionSecret;
    use fencelock_server::protocol::WaitSpec;
    let c = Cluster::start("export-numbers", 300).await;
    let leader = c.nodes[&c.leader().await].clone();
    let (sink, _rx, _) = PushSink::new(64);
    let conn = leader.next_conn_id();
    let ask = |req: Request| {
        let (leader, sink) = (leader.clone(), sink.clone());
        async move { leader.handle_request(req, conn, &sink).await }
    };
    let huge = 1u64 << 60;
    // A session opened through the leader: (id, credential).
    let open = || async {
        match ask(Request::Open {
            ttl_ms: 60_000,
            key: None,
        })
        .await
        .unwrap()
        {
            Reply::Opened { reply, secret, .. } => (reply.opened().unwrap().0, secret),
            r => panic!("{r:?}"),
        }
    };
    // A session of its own, and one that is not open.
    let (s, secret) = open().await;
    let tries = [
        Request::Acquire {
            session: s + 1000,
            secret: SessionSecret([1; 16]),
            lock: "x".into(),
            mode: fencelock::Mode::Exclusive,
            wait: WaitSpec::None,
            request: Some(huge),
        },
        Request::Acquire {
            session: s,
            secret,
            lock: "x".into(),
            mode: fencelock::Mode::Exclusive,
            wait: WaitSpec::None,
            request: Some(huge),
        },
        Request::Open {
            ttl_ms: huge,
            key: None,
        },
    ];
    for req in tries {
        let r = ask(req.clone()).await;
        assert!(
            matches!(
                r,
                Err(ClientError::Limit { .. } | ClientError::BadRequest(_))
            ),
            "{req:?}: {r:?}"
        );
    }
    // A session id is a number a client chooses too: one past what a recording holds,
    // for a session that is not open (whatever the credential), is refused before it is
    // proposed, by every request that carries one.
    let bad = SessionSecret([1; 16]);
    let lock = || "x".to_string();
    let by_session = [
        Request::KeepAlive {
            session: huge,
            secret: bad,
        },
        Request::Close {
            session: huge,
            secret: bad,
            request: Some(1),
        },
        Request::Acquire {
            session: huge,
            secret: bad,
            lock: lock(),
            mode: fencelock::Mode::Exclusive,
            wait: WaitSpec::None,
            request: Some(1),
        },
        Request::Release {
            session: huge,
            secret: bad,
            lock: lock(),
            request: None,
        },
        Request::Cancel {
            session: huge,
            secret: bad,
            lock: lock(),
            request: Some(1),
        },
        Request::Watch {
            session: huge,
            secret: bad,
            lock: lock(),
            request: Some(1),
        },
        Request::Unwatch {
            session: huge,
            secret: bad,
            lock: lock(),
            request: None,
        },
        Request::ForceRelease {
            session: huge,
            lock: lock(),
        },
        Request::ForceReleaseHold {
            session: huge,
            lock: lock(),
            token: 1,
        },
    ];
    for req in by_session {
        let r = ask(req.clone()).await;
        assert!(
            matches!(&r, Err(ClientError::Limit { kind, .. }) if kind == "session_id_too_large"),
            "{req:?}: {r:?}"
        );
    }
    // A forced release's token is written too: past the bound it is refused, at the bound
    // it is applied (no hold has it: not_holder) and recorded.
    const MAX: u64 = fencelock_server::export::MAX_NUMBER;
    let r = ask(Request::ForceReleaseHold {
        session: s,
        lock: "x".into(),
        token: MAX + 1,
    })
    .await;
    assert!(
        matches!(&r, Err(ClientError::Limit { kind, .. }) if kind == "token_too_large"),
        "{r:?}"
    );
    let r = ask(Request::ForceReleaseHold {
        session: s,
        lock: "x".into(),
        token: MAX,
    })
    .await;
    assert!(
        matches!(&r, Err(ClientError::Core(e)) if e.kind == "not_holder"),
        "{r:?}"
    );
    // A wait far past what a recording holds is accepted, as the longest it holds.
    let other = open().await;
    let r = ask(Request::Acquire {
        session: s,
        secret,
        lock: "y".into(),
        mode: fencelock::Mode::Exclusive,
        wait: WaitSpec::None,
        request: Some(1),
    })
    .await;
    assert!(matches!(r, Ok(Reply::Done { .. })), "{r:?}");
    let r = ask(Request::Acquire {
        session: other.0,
        secret: other.1,
        lock: "y".into(),
        mode: fencelock::Mode::Exclusive,
        wait: WaitSpec::ForMs(u64::MAX),
        request: Some(1),
    })
    .await;
    assert!(
        matches!(&r, Ok(Reply::Done { reply, .. }) if matches!(reply, fencelock::Reply::Queued { .. })),
        "{r:?}"
    );
    let page = export(&c, None, None, 0)
        .await
        .expect("the history exports");
    assert!(page.total > 1);
    c.shutdown().await;
}
