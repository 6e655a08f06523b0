//! Arbitrary bytes as what a server node or client reads off a connection, selected by the
//! first byte: a peer's Raft request (0), a peer's answer to one (1), a client's request
//! frame (2), a node's frame to a client (3). Each is read by the reader the node or
//! client uses (`fencelock_server::frame::read`, with the length prefix, the wire version
//! and the size limit), then put through the checks made before anything is served: a Raft
//! request's terms and indexes against the bound and its sender; a client request's
//! authorisation under a spread of grants and the limits on its numbers. Nothing panics;
//! what decodes re-encodes to a frame that decodes to the same value; the grants answer
//! consistently (an admin is refused nothing; a grant on a prefix allows no lock outside
//! it).
#![no_main]

use fencelock_server::auth::{Grant, Grants, Role};
use fencelock_server::frame::{self, Wire, MAX_CLIENT_FRAME, MAX_SERVER_FRAME};
use fencelock_server::fuzzing::{self, PeerCall};
use fencelock_server::protocol::{ClientFrame, Request, ServerFrame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            if let Ok(PeerCall::Served { reencoded, .. }) = fuzzing::peer_call(bytes) {
                // What was decoded, written again, is read as the same request.
                match fuzzing::peer_call(&reencoded) {
                    Ok(PeerCall::Served {
                        reencoded: again, ..
                    }) => {
                        assert_eq!(again, reencoded, "a request re-encodes to one frame")
                    }
                    other => panic!("a re-encoded request reads back as {other:?}"),
                }
            }
        }
        1 => {
            if let Ok((past, reencoded)) = fuzzing::peer_answer(bytes) {
                let (past_again, again) =
                    fuzzing::peer_answer(&reencoded).expect("a re-encoded answer reads back");
                assert_eq!(past, past_again);
                assert_eq!(again, reencoded, "an answer re-encodes to one frame");
            }
        }
        2 => {
            if let Some(f) = read_again::<ClientFrame>(bytes, MAX_CLIENT_FRAME) {
                check_grants(&f.req);
                let _ = fuzzing::recordable(&f.req);
            }
        }
        _ => {
            read_again::<ServerFrame>(bytes, MAX_SERVER_FRAME);
        }
    }
});

/// `bytes` read as one frame of a `T`, as a node or client reads it, if it is one; what
/// was decoded, written again, must read back as the same value.
fn read_again<T>(bytes: &[u8], max: u32) -> Option<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Wire + PartialEq + std::fmt::Debug,
{
    let Ok(Some(f)) = fuzzing::read_frame::<T>(bytes, max) else {
        return None;
    };
    let again = frame::encode(&f).expect("a decoded frame re-encodes");
    let back = fuzzing::read_frame::<T>(&again, max).expect("a re-encoded frame reads back");
    assert_eq!(back.as_ref(), Some(&f));
    Some(f)
}

/// The request's lock, for the requests that name one.
fn lock_of(req: &Request) -> Option<&str> {
    match req {
        Request::Acquire { lock, .. }
        | Request::Release { lock, .. }
        | Request::Cancel { lock, .. }
        | Request::Holders { lock }
        | Request::Waiters { lock }
        | Request::Permits { lock }
        | Request::Watch { lock, .. }
        | Request::Unwatch { lock, .. }
        | Request::ForceRelease { lock, .. }
        | Request::ForceReleaseHold { lock, .. }
        | Request::Hold { lock, .. } => Some(lock),
        // Listed, not a wildcard: a request added later must be placed here (and in
        // `admin_only`) before this target builds.
        Request::Open { .. }
        | Request::OpenLabeled { .. }
        | Request::KeepAlive { .. }
        | Request::Close { .. }
        | Request::Attach { .. }
        | Request::Session { .. }
        | Request::Members
        | Request::Status
        | Request::Authenticate { .. }
        | Request::AddLearner { .. }
        | Request::SetVoters { .. }
        | Request::RemoveLearner { .. }
        | Request::ForceClose { .. }
        | Request::Sessions { .. }
        | Request::Export { .. }
        | Request::Backup { .. } => None,
    }
}

/// The requests only an admin may make (membership, forced releases and closes, the list
/// of sessions with their owners, the history, a backup with every credential in it).
fn admin_only(req: &Request) -> bool {
    match req {
        Request::AddLearner { .. }
        | Request::SetVoters { .. }
        | Request::RemoveLearner { .. }
        | Request::ForceRelease { .. }
        | Request::ForceReleaseHold { .. }
        | Request::ForceClose { .. }
        | Request::Sessions { .. }
        | Request::Export { .. }
        | Request::Backup { .. } => true,
        // Listed, not a wildcard, as in `lock_of`.
        Request::Open { .. }
        | Request::OpenLabeled { .. }
        | Request::KeepAlive { .. }
        | Request::Close { .. }
        | Request::Attach { .. }
        | Request::Acquire { .. }
        | Request::Release { .. }
        | Request::Cancel { .. }
        | Request::Watch { .. }
        | Request::Unwatch { .. }
        | Request::Holders { .. }
        | Request::Waiters { .. }
        | Request::Permits { .. }
        | Request::Hold { .. }
        | Request::Session { .. }
        | Request::Members
        | Request::Status
        | Request::Authenticate { .. } => false,
    }
}

/// The requests that act for a session without naming a lock (a `lock` role's, on any
/// prefix: the credential decides whose session).
fn session_write(req: &Request) -> bool {
    matches!(
        req,
        Request::Open { .. }
            | Request::OpenLabeled { .. }
            | Request::KeepAlive { .. }
            | Request::Close { .. }
            | Request::Attach { .. }
    )
}

/// The requests that act on a lock (a `lock` role's, on the lock's prefix).
fn lock_write(req: &Request) -> bool {
    matches!(
        req,
        Request::Acquire { .. }
            | Request::Release { .. }
            | Request::Cancel { .. }
            | Request::Watch { .. }
            | Request::Unwatch { .. }
    )
}

fn check_grants(req: &Request) {
    assert!(
        Grants::all().authorize(req).is_ok(),
        "an admin may do anything"
    );
    assert!(
        Grants::default().authorize(req).is_ok() == matches!(req, Request::Authenticate { .. }),
        "no grants allow authenticating only"
    );
    for role in [Role::Read, Role::Lock] {
        let g = Grants(vec![Grant {
            role,
            prefix: "jobs/".into(),
        }]);
        let allowed = g.authorize(req).is_ok();
        assert!(
            !(allowed && admin_only(req)),
            "{role:?} on jobs/ allowed {req:?}"
        );
        // What each role is for, on its prefix.
        let in_prefix = lock_of(req).is_some_and(|l| l.starts_with("jobs/"));
        let reads = matches!(req, Request::Members | Request::Status)
            || (in_prefix
                && matches!(
                    req,
                    Request::Holders { .. }
                        | Request::Waiters { .. }
                        | Request::Permits { .. }
                        | Request::Hold { .. }
                ));
        let writes = session_write(req) || (in_prefix && lock_write(req));
        if reads || (writes && role == Role::Lock) {
            assert!(allowed, "{role:?} on jobs/ refused {req:?}");
        }
        if allowed {
            if let Some(lock) = lock_of(req) {
                assert!(
                    lock.starts_with("jobs/"),
                    "a grant on jobs/ allowed {req:?} on another lock"
                );
            }
            // (An admin's requests are refused to both roles above.)
            if role == Role::Read {
                assert!(
                    !(session_write(req) || lock_write(req)),
                    "a read grant allowed {req:?}"
                );
            }
        }
    }
    // The same roles on every lock (`*`): still nothing of an admin's (the list of
    // sessions with their openers, a forced close…); a session's state and every lock's
    // reads are allowed; the read role still writes nothing.
    for role in [Role::Read, Role::Lock] {
        let g = Grants(vec![Grant {
            role,
            prefix: String::new(),
        }]);
        let allowed = g.authorize(req).is_ok();
        assert!(
            !(allowed && admin_only(req)),
            "{role:?} on * allowed {req:?}"
        );
        let reads = matches!(
            req,
            Request::Members
                | Request::Status
                | Request::Session { .. }
                | Request::Holders { .. }
                | Request::Waiters { .. }
                | Request::Permits { .. }
                | Request::Hold { .. }
        );
        let writes = session_write(req) || lock_write(req);
        if reads || (writes && role == Role::Lock) {
            assert!(allowed, "{role:?} on * refused {req:?}");
        }
        if allowed && role == Role::Read {
            assert!(!writes, "a read grant on * allowed {req:?}");
        }
    }
}
