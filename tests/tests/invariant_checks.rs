//! The invariant checker's own checks, each seen to fire (`src/invariants.rs`).
//!
//! Every other test uses the checker to judge the core; these judge the checker. A check
//! that never fails proves nothing, so each story below runs through the real core and a
//! [`Shadow`] twice: as the core answered it, which must pass, and with one reply or one
//! input's events doctored into what a broken core would have said, which must fail with
//! that check's message — the invariant it names (`"I2:"`, `"I3:"` …) and the words only
//! that check uses, so that another check catching the same doctored output does not
//! count. After every input the shadow's record is compared with the service's queries
//! (`agrees_with`), as the simulation does (in one story only after its last input: see
//! the I2 test).
//!
//! `check_service` reads the service through its queries ([`Queries`]): each of its checks
//! is seen to fire on one query's answer doctored (the real service's answers pass), and
//! its I2 also on a core built with the test-only `fault-injection` feature (grants that
//! reuse a token).

use fencelock::{Capacity, Holder, Permits, SessionInfo, Usage, Waiter};
use fencelock::{
    Config, Error, Input, LockName, LockService, Mode, Output, ReleaseReason, Reply, SessionId,
    Tick, Token, VecStorage, Wait,
};
use fencelock_tests::invariants::{Queries, Shadow};

const X: Mode = Mode::Exclusive;

fn s(id: u64) -> SessionId {
    SessionId(id)
}

fn a() -> LockName {
    LockName::new("a").expect("a name")
}

fn b() -> LockName {
    LockName::new("b").expect("a name")
}

fn open(now: u64, ttl: u64) -> Input {
    Input::OpenSession {
        now: Tick(now),
        ttl,
    }
}

fn keep_alive(now: u64, session: u64, request: Option<u64>) -> Input {
    Input::KeepAlive {
        now: Tick(now),
        session: s(session),
        request,
    }
}

fn close(now: u64, session: u64) -> Input {
    Input::CloseSession {
        now: Tick(now),
        session: s(session),
        request: None,
    }
}

fn acquire(now: u64, session: u64, lock: LockName, mode: Mode, wait: Wait) -> Input {
    Input::Acquire {
        now: Tick(now),
        session: s(session),
        lock,
        mode,
        wait,
        request: None,
    }
}

/// An acquire with request number `request`.
fn acquire_numbered(now: u64, session: u64, mode: Mode, request: u64) -> Input {
    Input::Acquire {
        now: Tick(now),
        session: s(session),
        lock: a(),
        mode,
        wait: Wait::None,
        request: Some(request),
    }
}

fn release(now: u64, session: u64) -> Input {
    Input::Release {
        now: Tick(now),
        session: s(session),
        lock: a(),
        request: None,
    }
}

fn release_hold(now: u64, session: u64, token: u64) -> Input {
    Input::ReleaseHold {
        now: Tick(now),
        session: s(session),
        lock: a(),
        token: Token(token),
        request: None,
    }
}

fn cancel(now: u64, session: u64) -> Input {
    Input::Cancel {
        now: Tick(now),
        session: s(session),
        lock: a(),
        request: None,
    }
}

fn watch(now: u64, session: u64) -> Input {
    Input::Watch {
        now: Tick(now),
        session: s(session),
        lock: a(),
        request: None,
    }
}

fn unwatch(now: u64, session: u64) -> Input {
    Input::Unwatch {
        now: Tick(now),
        session: s(session),
        lock: a(),
        request: None,
    }
}

fn tick(now: u64) -> Input {
    Input::Tick { now: Tick(now) }
}

fn granted(mode: Mode, token: u64) -> Result<Reply, Error> {
    Ok(Reply::Granted {
        mode,
        token: Token(token),
    })
}

/// An exclusive wait at `position`.
fn queued(position: u32) -> Result<Reply, Error> {
    Ok(Reply::Queued { mode: X, position })
}

/// The event that grants `session` lock "a" exclusively with `token`.
fn grant_event(session: u64, token: u64) -> Output {
    Output::Granted {
        session: s(session),
        lock: a(),
        mode: X,
        token: Token(token),
    }
}

fn released_event(session: u64, token: u64, reason: ReleaseReason) -> Output {
    Output::Released {
        session: s(session),
        lock: a(),
        token: Token(token),
        reason,
    }
}

/// What a broken core would have said instead: may change input `i`'s reply (or error)
/// and events before the shadow reads them.
trait Doctor: Fn(usize, &mut Result<Reply, Error>, &mut Vec<Output>) {}
impl<F: Fn(usize, &mut Result<Reply, Error>, &mut Vec<Output>)> Doctor for F {}

/// The core's own answers, untouched.
fn as_answered(_: usize, _: &mut Result<Reply, Error>, _: &mut Vec<Output>) {}

/// Doctors input `at`'s reply (or error) only.
fn reply_at(at: usize, r: Result<Reply, Error>) -> impl Doctor {
    move |i, result: &mut Result<Reply, Error>, _: &mut Vec<Output>| {
        if i == at {
            *result = r;
        }
    }
}

/// Doctors input `at`'s events only.
fn events_at(at: usize, f: impl Fn(&mut Vec<Output>)) -> impl Doctor {
    move |i, _: &mut Result<Reply, Error>, events: &mut Vec<Output>| {
        if i == at {
            f(events);
        }
    }
}

/// Runs `inputs` through a real core (with this lock-delay) and a shadow, the host's
/// clock reading each input's own `now`; see [`drive`].
fn run(lock_delay: u64, inputs: &[Input], doctor: impl Doctor) -> Result<(), String> {
    drive(lock_delay, inputs, |i| inputs[i].now().0, doctor, true)
}

/// As [`run`], with the host's clock reading `host(i)` when it stamped input `i`.
fn run_on_host(
    lock_delay: u64,
    inputs: &[Input],
    host: impl Fn(usize) -> u64,
    doctor: impl Doctor,
) -> Result<(), String> {
    drive(lock_delay, inputs, host, doctor, true)
}

/// As [`run`], comparing the shadow's record with the service's queries only after the
/// last input.
fn run_agreeing_at_end(inputs: &[Input], doctor: impl Doctor) -> Result<(), String> {
    drive(0, inputs, |i| inputs[i].now().0, doctor, false)
}

/// Runs `inputs` through a real core and a shadow told that the host's clock read
/// `host(i)` when it stamped input `i`; `doctor` changes what the shadow reads of each
/// input's outcome. The shadow's record must agree with the service's queries after
/// every input (`every_input`) or after the last. Errors: the shadow's first message,
/// as it gave it.
fn drive(
    lock_delay: u64,
    inputs: &[Input],
    host: impl Fn(usize) -> u64,
    doctor: impl Doctor,
    every_input: bool,
) -> Result<(), String> {
    let config = Config {
        lock_delay,
        ..Config::default()
    };
    let mut svc = LockService::new(VecStorage::new(4, 4, 8), config).expect("a service");
    let mut shadow = Shadow::new(lock_delay);
    for (i, input) in inputs.iter().enumerate() {
        shadow.set_real_now(host(i));
        shadow.before(input);
        let mut events = Vec::new();
        let mut result = svc.handle(input.clone(), &mut events);
        doctor(i, &mut result, &mut events);
        shadow.after(&result, &events)?;
        if every_input || i + 1 == inputs.len() {
            shadow.agrees_with(&svc)?;
        }
    }
    Ok(())
}

/// Asserts that the story passes as the core answered it.
#[track_caller]
fn passes(story: &str, got: Result<(), String>) {
    if let Err(e) = got {
        panic!("{story}, as the core answered it, was refused: {e}");
    }
}

/// Asserts that `got` is the message of one check: it begins with `prefix` (the
/// invariant, `"I2:"`; empty for the checks that name none) and contains `words`, which
/// only that check's message has.
#[track_caller]
fn caught(story: &str, got: Result<(), String>, prefix: &str, words: &str) {
    match got {
        Err(e) if e.starts_with(prefix) && e.contains(words) => {}
        other => panic!("{story}: expected the {prefix:?} check ({words:?}), got {other:?}"),
    }
}

/// s1 holds "a"; s2 asks for it and is refused (`Busy`), or waits for it (`Queued`).
fn second_asker(wait: Wait) -> Vec<Input> {
    vec![
        open(0, 100),
        open(0, 100),
        acquire(1, 1, a(), X, Wait::None),
        acquire(1, 2, a(), X, wait),
    ]
}

#[test]
fn a_grant_beside_a_holder_it_excludes_is_caught_as_i1() {
    let busy = second_asker(Wait::None);
    passes("a try-lock of a held lock", run(0, &busy, as_answered));
    caught(
        "the try-lock answered granted",
        run(0, &busy, reply_at(3, granted(X, 2))),
        "I1:",
        "while held",
    );
    let waiter = [second_asker(Wait::Forever), vec![keep_alive(2, 1, None)]].concat();
    passes("a waiter behind a holder", run(0, &waiter, as_answered));
    caught(
        "the waiter granted by an event while the holder keeps the lock",
        run(0, &waiter, events_at(4, |e| e.push(grant_event(2, 2)))),
        "I1:",
        "while held",
    );
    // A semaphore of 2 permits: s1 holds both, s2's one more does not fit.
    let both = Mode::Permits { count: 2, limit: 2 };
    let one = Mode::Permits { count: 1, limit: 2 };
    let full = [
        open(0, 100),
        open(0, 100),
        acquire(1, 1, a(), both, Wait::None),
        acquire(1, 2, a(), one, Wait::None),
    ];
    passes(
        "a permit more than the limit, refused",
        run(0, &full, as_answered),
    );
    caught(
        "a permit more than the limit, granted",
        run(0, &full, reply_at(3, granted(one, 2))),
        "I1:",
        "while held",
    );
}

#[test]
fn a_token_not_above_every_earlier_one_is_caught_as_i2() {
    let two_locks = [
        open(0, 100),
        open(0, 100),
        acquire(1, 1, a(), X, Wait::None),
        acquire(1, 2, b(), X, Wait::None),
    ];
    passes("grants of two locks", run(0, &two_locks, as_answered));
    caught(
        "the second grant reuses token 1",
        run(0, &two_locks, reply_at(3, granted(X, 1))),
        "I2:",
        "not above the previous",
    );
    let handover = [second_asker(Wait::Forever), vec![release(2, 1)]].concat();
    passes(
        "a release that grants the waiter",
        run(0, &handover, as_answered),
    );
    caught(
        "the waiter granted with the holder's token",
        run(
            0,
            &handover,
            events_at(4, |e| {
                if let Some(Output::Granted { token, .. }) = e.first_mut() {
                    *token = Token(1);
                }
            }),
        ),
        "I2:",
        "not above the previous",
    );
    // The shadow's record of the highest token against the service's `revision()`: a
    // grant answered with token 7 of a revision 1 and released as 7 leaves no holder to
    // disagree about.
    let held = [
        open(0, 100),
        acquire(1, 1, a(), X, Wait::None),
        release(2, 1),
    ];
    passes(
        "a grant and its release",
        run_agreeing_at_end(&held, as_answered),
    );
    caught(
        "a grant and its release, told as token 7",
        run_agreeing_at_end(
            &held,
            |i, r: &mut Result<Reply, Error>, _: &mut Vec<Output>| match i {
                1 => *r = granted(X, 7),
                2 => *r = Ok(Reply::Released { token: Token(7) }),
                _ => {}
            },
        ),
        "I2:",
        "revision 1 but the highest token granted is 7",
    );
}

#[test]
fn a_grant_out_of_queue_order_or_a_wrong_busy_or_queue_position_is_caught_as_i3() {
    // s1 holds "a", s2 waits for it, s3 tries it.
    let line = [
        second_asker(Wait::Forever),
        vec![open(1, 100), acquire(1, 3, a(), X, Wait::None)],
    ]
    .concat();
    passes(
        "a holder, a waiter and a try-lock",
        run(0, &line, as_answered),
    );
    caught(
        "the try-lock granted while s2 waits (barging)",
        run(0, &line, reply_at(5, granted(X, 2))),
        "I3:",
        "directly while",
    );
    caught(
        "the try-lock queued",
        run(0, &line, reply_at(5, queued(2))),
        "I3:",
        "a try-lock was queued",
    );
    caught(
        "the first waiter told it is second",
        run(0, &line, reply_at(3, queued(2))),
        "I3:",
        "queued at 2, shadow says 1",
    );
    caught(
        "the first acquire of a free lock answered busy",
        run(0, &line, reply_at(2, Ok(Reply::Busy))),
        "I3:",
        "busy, but",
    );
    // Two waiters; s1's release grants the first.
    let two_waiting = [
        second_asker(Wait::Forever),
        vec![
            open(1, 100),
            acquire(1, 3, a(), X, Wait::Forever),
            release(2, 1),
        ],
    ]
    .concat();
    passes(
        "a release with two waiters",
        run(0, &two_waiting, as_answered),
    );
    caught(
        "the release grants the second waiter",
        run(
            0,
            &two_waiting,
            events_at(6, |e| {
                if let Some(Output::Granted { session, .. }) = e.first_mut() {
                    *session = s(3);
                }
            }),
        ),
        "I3:",
        "ahead of waiter",
    );
    let no_waiter = [
        open(0, 100),
        open(0, 100),
        acquire(1, 1, a(), X, Wait::None),
        release(2, 1),
    ];
    passes(
        "a release nobody waits for",
        run(0, &no_waiter, as_answered),
    );
    caught(
        "a release that grants a session that never asked",
        run(0, &no_waiter, events_at(3, |e| e.push(grant_event(2, 2)))),
        "I3:",
        "without waiting",
    );
    // A timed wait whose deadline is the input's own `now` is refused, not queued.
    let late = second_asker(Wait::Until(Tick(1)));
    passes("a timed wait that ends at once", run(0, &late, as_answered));
    caught(
        "a timed wait that ends at once, queued",
        run(0, &late, reply_at(3, queued(1))),
        "I3:",
        "not after now",
    );
    // s2 waits until 5.
    let timed = |at: u64| [second_asker(Wait::Until(Tick(5))), vec![tick(at)]].concat();
    passes(
        "a timed wait that times out",
        run(0, &timed(5), as_answered),
    );
    caught(
        "a timed wait still queued at its deadline",
        run(0, &timed(5), events_at(4, |e| e.clear())),
        "I3:",
        "not timed out",
    );
    passes(
        "a timed wait before its deadline",
        run(0, &timed(3), as_answered),
    );
    // Released at its deadline: the advance times s2's wait out before the release could
    // grant it; a core that granted first gave s2 the lock its wait had already ended on.
    let release_at = [second_asker(Wait::Until(Tick(5))), vec![release(5, 1)]].concat();
    passes(
        "a timed wait that ends as the lock is released",
        run(0, &release_at, as_answered),
    );
    caught(
        "a timed wait granted at its deadline instead of timed out",
        run(
            0,
            &release_at,
            events_at(4, |e| {
                e.retain(|o| !matches!(o, Output::WaitTimedOut { .. }));
                e.push(Output::Granted {
                    session: s(2),
                    lock: a(),
                    mode: X,
                    token: Token(2),
                });
            }),
        ),
        "I3:",
        "not timed out first",
    );
    caught(
        "a timed wait that times out before its deadline",
        run(
            0,
            &timed(3),
            events_at(4, |e| {
                e.push(Output::WaitTimedOut {
                    session: s(2),
                    lock: a(),
                })
            }),
        ),
        "I3:",
        "before its deadline",
    );
}

#[test]
fn a_grant_to_a_dead_session_or_an_expiry_left_undone_is_caught_as_i4() {
    // Both sessions die at 5: the holder's release must not reach the waiter.
    let both_die = [
        open(0, 5),
        open(0, 5),
        acquire(1, 1, a(), X, Wait::None),
        acquire(1, 2, a(), X, Wait::Forever),
        tick(5),
    ];
    passes(
        "a holder and its waiter expiring together",
        run(0, &both_die, as_answered),
    );
    caught(
        "the waiter granted before its own expiry",
        run(
            0,
            &both_die,
            events_at(4, |e| {
                let at = e
                    .iter()
                    .position(|e| *e == Output::SessionExpired { session: s(2) })
                    .expect("s2 expires");
                e.insert(at, grant_event(2, 2));
            }),
        ),
        "I4:",
        "granted to dead",
    );
    // A host that stamps an input with 4 when its clock reads 6, past the deadline 5.
    let stamped = [open(0, 5), acquire(4, 1, a(), X, Wait::None)];
    passes(
        "a grant stamped with the host's clock",
        run(0, &stamped, as_answered),
    );
    caught(
        "a grant stamped with an old time",
        run_on_host(0, &stamped, |i| if i == 1 { 6 } else { 0 }, as_answered),
        "I4:",
        "granted to dead session 1 at 6",
    );
    // s1 holds, s2 waits, s3 dies at 5, when s1 releases: the expiry comes first.
    let release_at_expiry = [second_asker(Wait::Forever), vec![open(1, 4), release(5, 1)]].concat();
    passes(
        "a release as another session expires",
        run(0, &release_at_expiry, as_answered),
    );
    caught(
        "the expiry reported after the grant",
        run(0, &release_at_expiry, events_at(5, |e| e.reverse())),
        "I4:",
        "expired after a grant",
    );
    let expires = [open(0, 5), tick(5)];
    passes("a session expiring", run(0, &expires, as_answered));
    caught(
        "a session kept past its deadline",
        run(0, &expires, events_at(1, |e| e.clear())),
        "I4:",
        "not expired at 5",
    );
}

#[test]
fn events_of_an_input_refused_before_its_advance_are_caught_as_i5() {
    let backwards = [open(0, 100), tick(5), tick(3)];
    passes(
        "a tick back in time, refused",
        run(0, &backwards, as_answered),
    );
    caught(
        "a tick back in time that expired a session",
        run(
            0,
            &backwards,
            events_at(2, |e| e.push(Output::SessionExpired { session: s(1) })),
        ),
        "I5:",
        "refused before the advance",
    );
}

#[test]
fn more_events_than_the_bound_are_caught_as_i7() {
    // One session, no claims: one input may emit one event (its expiry).
    let quiet = [open(0, 100), tick(1)];
    passes("a tick with nothing due", run(0, &quiet, as_answered));
    caught(
        "a tick with two events",
        run(
            0,
            &quiet,
            events_at(1, |e| {
                e.extend(vec![Output::SessionExpired { session: s(1) }; 2]);
            }),
        ),
        "I7:",
        "more than max_events = 1",
    );
}

#[test]
fn a_grant_inside_lock_delay_is_caught_as_i8() {
    // Lock-delay 3: s1 dies at 5 holding "a", which nobody may take before 8.
    let delayed = |wait: Wait, last: Input| {
        vec![
            open(0, 5),
            open(0, 100),
            acquire(1, 1, a(), X, Wait::None),
            tick(5),
            acquire(6, 2, a(), X, wait),
            last,
        ]
    };
    let tried = delayed(Wait::None, tick(7));
    passes("a try-lock inside lock-delay", run(3, &tried, as_answered));
    caught(
        "a try-lock inside lock-delay, granted",
        run(3, &tried, reply_at(4, granted(X, 2))),
        "I8:",
        "granted at 6 inside lock-delay until 8",
    );
    let waiting = delayed(Wait::Forever, tick(7));
    passes("a wait inside lock-delay", run(3, &waiting, as_answered));
    caught(
        "a waiter granted by a tick inside lock-delay",
        run(3, &waiting, events_at(5, |e| e.push(grant_event(2, 2)))),
        "I8:",
        "granted at 7 inside lock-delay until 8",
    );
}

#[test]
fn a_request_number_reused_or_stale_or_a_retry_answered_afresh_is_caught_as_i9() {
    let numbered = |latest: u64| {
        [
            open(0, 100),
            keep_alive(1, 1, Some(latest)),
            acquire_numbered(2, 1, X, 1),
        ]
    };
    passes(
        "number 1 reused for an acquire, refused",
        run(0, &numbered(1), as_answered),
    );
    caught(
        "number 1 reused for an acquire, granted",
        run(0, &numbered(1), reply_at(2, granted(X, 1))),
        "I9:",
        "request number 1 reused",
    );
    passes(
        "a stale number 1 after 2, refused",
        run(0, &numbered(2), as_answered),
    );
    caught(
        "a stale number 1 after 2, granted",
        run(0, &numbered(2), reply_at(2, granted(X, 1))),
        "I9:",
        "stale request number 1 (< 2) accepted",
    );
    // Acquire number 1 granted, released without a number, then retried: the hold ended.
    let retried = [
        open(0, 100),
        acquire_numbered(1, 1, X, 1),
        release(2, 1),
        acquire_numbered(3, 1, X, 1),
    ];
    passes(
        "a retry after the hold ended",
        run(0, &retried, as_answered),
    );
    caught(
        "a retry applied afresh (a new grant)",
        run(0, &retried, reply_at(3, granted(X, 2))),
        "I9:",
        "retry of",
    );
}

#[test]
fn a_re_acquire_answered_with_another_grant_is_caught_as_i10() {
    let again = [
        open(0, 100),
        acquire(1, 1, a(), X, Wait::None),
        acquire(2, 1, a(), X, Wait::None),
    ];
    passes("a holder acquiring again", run(0, &again, as_answered));
    caught(
        "a holder acquiring again, given a second token",
        run(0, &again, reply_at(2, granted(X, 2))),
        "I10:",
        "re-acquired",
    );
}

#[test]
fn a_deadline_other_than_now_plus_ttl_or_time_going_back_is_caught_as_i_time() {
    let backwards = [open(0, 100), tick(5), tick(3)];
    passes(
        "a tick back in time, refused",
        run(0, &backwards, as_answered),
    );
    caught(
        "a tick back in time, applied",
        run(
            0,
            &backwards,
            reply_at(2, Ok(Reply::Ticked { now: Tick(3) })),
        ),
        "I-time:",
        "an input at 3 was taken though time is 5",
    );
    let opened = [open(0, 10)];
    passes("an open", run(0, &opened, as_answered));
    caught(
        "an open answered with a deadline one tick late",
        run(
            0,
            &opened,
            reply_at(
                0,
                Ok(Reply::Opened {
                    session: s(1),
                    expires_at: Tick(11),
                }),
            ),
        ),
        "I-time:",
        "opened at 0 with ttl 10",
    );
    let kept = [open(0, 10), keep_alive(4, 1, None)];
    passes("a keep-alive", run(0, &kept, as_answered));
    caught(
        "a keep-alive that kept the old deadline",
        run(
            0,
            &kept,
            reply_at(
                1,
                Ok(Reply::KeptAlive {
                    expires_at: Tick(10),
                }),
            ),
        ),
        "I-time:",
        "keep-alive of session 1 at 4 (ttl 10) gave deadline t10",
    );
    // Applied (the service's deadline moved) but answered as refused: the shadow's record
    // of the deadline and the service's query disagree.
    caught(
        "a keep-alive applied but answered as refused",
        run(0, &kept, reply_at(1, Err(Error::UnknownSession(s(1))))),
        "I-time:",
        "deadline of session 1: service Some(14), replies 10",
    );
    let early = [open(0, 10), tick(3)];
    passes("a tick before a deadline", run(0, &early, as_answered));
    caught(
        "a session expired before its deadline",
        run(
            0,
            &early,
            events_at(1, |e| e.push(Output::SessionExpired { session: s(1) })),
        ),
        "I-time:",
        "expired at 3 before its deadline 10",
    );
}

/// The shadow's checks that name no invariant: what a reply or event says must follow
/// from the shadow's record, and the record must agree with the service's queries.
#[test]
fn replies_and_events_the_record_cannot_explain_are_caught() {
    let mut shadow = Shadow::new(0);
    caught(
        "after() without before()",
        shadow.after(&Ok(Reply::Closed), &[]),
        "",
        "after() without before()",
    );
    let one = [open(0, 10)];
    passes("an open", run(0, &one, as_answered));
    caught(
        "an open refused as going back in time",
        run(
            0,
            &one,
            reply_at(
                0,
                Err(Error::TimeWentBackwards {
                    now: Tick(0),
                    requested: Tick(0),
                }),
            ),
        ),
        "",
        "TimeWentBackwards for 0, but time is 0",
    );
    caught(
        "an open answered with another session's id",
        run(
            0,
            &one,
            reply_at(
                0,
                Ok(Reply::Opened {
                    session: s(2),
                    expires_at: Tick(10),
                }),
            ),
        ),
        "",
        "sessions: service [SessionId(1)], replies and events [SessionId(2)]",
    );
    let twice = [open(0, 10), open(0, 10)];
    passes("two opens", run(0, &twice, as_answered));
    caught(
        "two opens given the same id",
        run(
            0,
            &twice,
            reply_at(
                1,
                Ok(Reply::Opened {
                    session: s(1),
                    expires_at: Tick(10),
                }),
            ),
        ),
        "",
        "session 1 opened, but ids up to 1 were used",
    );
    // Events a tick cannot have: s1 is open and holds nothing.
    let idle = [open(0, 10), tick(3)];
    passes("a tick with nothing due", run(0, &idle, as_answered));
    for (event, words) in [
        (
            Output::SessionExpired { session: s(9) },
            "session 9 expired but was not open",
        ),
        (
            released_event(1, 1, ReleaseReason::Expired),
            "session 1 released a (token 1) it did not hold",
        ),
        (
            Output::WaitTimedOut {
                session: s(1),
                lock: a(),
            },
            "session 1 left a's queue it was not in",
        ),
    ] {
        caught(
            &format!("a tick emitting {event:?}"),
            run(0, &idle, events_at(1, |e| e.push(event.clone()))),
            "",
            words,
        );
    }
    // Events a tick cannot have: s1 is open and holds "a".
    let holding = [open(0, 10), acquire(1, 1, a(), X, Wait::None), tick(3)];
    passes(
        "a tick while s1 holds a lock",
        run(0, &holding, as_answered),
    );
    for (reason, words) in [
        (
            ReleaseReason::Expired,
            "released (expired) while still open",
        ),
        (ReleaseReason::Closed, "but the input was"),
        (
            ReleaseReason::Released,
            "an event for the caller's own release",
        ),
    ] {
        caught(
            &format!("a tick releasing s1's hold ({reason:?})"),
            run(
                0,
                &holding,
                events_at(2, |e| e.push(released_event(1, 1, reason))),
            ),
            "",
            words,
        );
    }
    // Refusals answered as applied.
    let unknown = [open(0, 10), keep_alive(1, 9, None), close(1, 9)];
    passes(
        "inputs for an unknown session, refused",
        run(0, &unknown, as_answered),
    );
    caught(
        "a keep-alive of an unknown session, applied",
        run(
            0,
            &unknown,
            reply_at(
                1,
                Ok(Reply::KeptAlive {
                    expires_at: Tick(11),
                }),
            ),
        ),
        "",
        "kept alive session 9, which is not open",
    );
    caught(
        "a close of an unknown session, applied",
        run(0, &unknown, reply_at(2, Ok(Reply::Closed))),
        "",
        "closed session 9, which is not open",
    );
    let asks_again = [
        second_asker(Wait::Forever),
        vec![acquire(2, 2, a(), X, Wait::Forever)],
    ]
    .concat();
    passes(
        "a waiter asking again, refused",
        run(0, &asks_again, as_answered),
    );
    caught(
        "a waiter asking again, queued a second time",
        run(0, &asks_again, reply_at(4, queued(2))),
        "",
        "session 2 queued twice on a",
    );
    caught(
        "an exclusive wait answered as a shared one",
        run(
            0,
            &asks_again,
            reply_at(
                3,
                Ok(Reply::Queued {
                    mode: Mode::Shared,
                    position: 1,
                }),
            ),
        ),
        "",
        "asked for a exclusive, queued shared",
    );
    let not_holding = [
        open(0, 10),
        open(0, 10),
        acquire(1, 1, a(), X, Wait::None),
        release(2, 2),
        cancel(2, 2),
        unwatch(2, 2),
    ];
    passes(
        "a release, cancel and unwatch of nothing, refused",
        run(0, &not_holding, as_answered),
    );
    caught(
        "an exclusive acquire answered as a shared grant",
        run(0, &not_holding, reply_at(2, granted(Mode::Shared, 1))),
        "",
        "asked for a exclusive, granted shared",
    );
    caught(
        "a release by a session that does not hold, applied",
        run(
            0,
            &not_holding,
            reply_at(3, Ok(Reply::Released { token: Token(1) })),
        ),
        "",
        "session 2 released a (token 1) it did not hold",
    );
    caught(
        "a cancel by a session that does not wait, applied",
        run(0, &not_holding, reply_at(4, Ok(Reply::Cancelled))),
        "",
        "session 2 cancelled a, but it was not queued",
    );
    caught(
        "an unwatch by a session that does not watch, applied",
        run(0, &not_holding, reply_at(5, Ok(Reply::Unwatched))),
        "",
        "session 2 unwatched a, but it did not watch it",
    );
    let watched = [open(0, 10), watch(1, 1), watch(2, 1)];
    passes(
        "a watch, and the same again refused",
        run(0, &watched, as_answered),
    );
    caught(
        "a watch of a lock nobody holds answered with a holder",
        run(0, &watched, reply_at(1, Ok(Reply::Watching { holders: 1 }))),
        "",
        "1 holders answered, 0 hold it",
    );
    caught(
        "the same watch again, applied",
        run(0, &watched, reply_at(2, Ok(Reply::Watching { holders: 0 }))),
        "",
        "session 1 watches a twice",
    );
    // A hold released by its token, and then closed.
    let by_token = [
        open(0, 10),
        acquire(1, 1, a(), X, Wait::None),
        release_hold(2, 1, 1),
        acquire(3, 1, a(), X, Wait::None),
        close(4, 1),
    ];
    passes(
        "a release by token, then a close",
        run(0, &by_token, as_answered),
    );
    caught(
        "a release of token 1 that released another",
        run(
            0,
            &by_token,
            reply_at(2, Ok(Reply::Released { token: Token(2) })),
        ),
        "",
        "asked to release a (token 1) and released token 2",
    );
    caught(
        "a release applied but answered as refused",
        run(0, &by_token, reply_at(2, Err(Error::NotHolder(s(1))))),
        "",
        "holders of \"a\": service [], replies [(SessionId(1), 1)]",
    );
    caught(
        "an acquire applied but answered as refused",
        run(0, &by_token, reply_at(1, Err(Error::NotHolder(s(1))))),
        "",
        "announced by no reply or event",
    );
    caught(
        "a close that kept its session's hold",
        run(0, &by_token, events_at(4, |e| e.clear())),
        "",
        "closed session 1 still holds",
    );
    let cancelled = [second_asker(Wait::Forever), vec![cancel(2, 2)]].concat();
    passes("a cancel", run(0, &cancelled, as_answered));
    caught(
        "a cancel applied but answered as refused",
        run(0, &cancelled, reply_at(4, Err(Error::NotQueued(s(2))))),
        "",
        "queue of \"a\": service [], replies [SessionId(2)]",
    );
    caught(
        "a tick answered with another time",
        run(0, &idle, reply_at(1, Ok(Reply::Ticked { now: Tick(4) }))),
        "",
        "does not answer",
    );
}

/// A core built with the test-only `fault-injection` feature whose grants reuse the latest
/// token: `check_service` finds two holders with one token (I2), whether of two locks or
/// of one shared lock, and `check_round_trip` finds the snapshot refused by restore (for
/// the token held twice, or for a shared lock's holders whose tokens do not rise in
/// arrival order); the same inputs on the real core pass both.
#[cfg(feature = "fault-injection")]
#[test]
fn a_core_that_reuses_tokens_is_caught_by_check_service_as_i2_and_by_the_round_trip() {
    use fencelock_tests::invariants::{check_round_trip, check_service};
    // Each story with the reason restore gives for refusing its snapshot.
    let stories: [(&str, [Input; 4], &str); 2] = [
        (
            "two locks",
            [
                open(0, 100),
                open(0, 100),
                acquire(1, 1, a(), X, Wait::None),
                acquire(1, 2, b(), X, Wait::None),
            ],
            "a token held twice",
        ),
        (
            "one shared lock",
            [
                open(0, 100),
                open(0, 100),
                acquire(1, 1, a(), Mode::Shared, Wait::None),
                acquire(1, 2, a(), Mode::Shared, Wait::None),
            ],
            "holders' tokens not rising in arrival order",
        ),
    ];
    for (story, inputs, refused) in stories {
        for broken in [false, true] {
            let mut svc =
                LockService::new(VecStorage::new(4, 4, 8), Config::default()).expect("a service");
            svc.inject_fault_reuse_token(broken);
            for input in &inputs {
                svc.handle(input.clone(), &mut Vec::new()).expect("applied");
            }
            if broken {
                caught(story, check_service(&svc), "I2:", "token 1 held twice");
                caught(
                    story,
                    check_round_trip(&svc),
                    "own snapshot refused by restore",
                    refused,
                );
            } else {
                passes(story, check_service(&svc));
                passes(story, check_round_trip(&svc));
            }
        }
    }
}

/// A core built with the test-only `fault-injection` feature that grants before it
/// expires the sessions due: with lock-delay 1, s1 dies at 3 holding "a", and at 4 the
/// delay ends just as s2, its waiter, dies. The shadow catches the grant to the dead
/// session (I4); the real core expires s2 first and passes. (`check_service` passes the
/// broken core's state after the tick: by then s2 has expired and its hold has ended.)
#[cfg(feature = "fault-injection")]
#[test]
fn a_core_that_grants_before_it_expires_is_caught_by_the_shadow_as_i4() {
    let inputs = [
        open(0, 3),
        open(0, 4),
        acquire(1, 1, a(), X, Wait::None),
        acquire(1, 2, a(), X, Wait::Forever),
        tick(3),
        tick(4),
    ];
    for broken in [false, true] {
        let mut svc = LockService::new(
            VecStorage::new(4, 4, 8),
            Config {
                lock_delay: 1,
                ..Config::default()
            },
        )
        .expect("a service");
        svc.inject_fault_expiry_after_grants(broken);
        let mut shadow = Shadow::new(1);
        let got = inputs.iter().try_for_each(|input| {
            shadow.before(input);
            let mut events = Vec::new();
            let result = svc.handle(input.clone(), &mut events);
            shadow.after(&result, &events)
        });
        if broken {
            caught(
                "the broken core",
                got,
                "I4:",
                "granted to dead session 2 at 4",
            );
        } else {
            passes("the real core", got);
        }
    }
}

/// Overrides of single answers of a real service's queries, each what a broken core might
/// report; an answer not overridden is the service's own.
#[derive(Default)]
struct Forged {
    usage: Option<Usage>,
    sessions: Option<Vec<SessionId>>,
    session: Option<(SessionId, Option<SessionInfo>)>,
    is_open: Option<(SessionId, bool)>,
    locks: Option<Vec<String>>,
    holders: Option<(&'static str, Vec<Holder>)>,
    waiters: Option<(&'static str, Vec<Waiter>)>,
    delay: Option<(&'static str, Option<Tick>)>,
    permits: Option<(&'static str, Option<Permits>)>,
    poll_timeout: Option<Option<Tick>>,
}

/// A [`Forged`] with one answer overridden: `forged!(holders, ("a", vec![...]))`.
macro_rules! forged {
    ($field:ident, $value:expr) => {
        Forged {
            $field: Some($value),
            ..Forged::default()
        }
    };
}

/// A real service seen through [`Forged`] answers.
struct Doctored<'a> {
    svc: &'a LockService<VecStorage>,
    doctor: Forged,
}

/// The doctor's answer for the key `is` accepts, if it has one.
fn pick<K, V: Clone>(o: &Option<(K, V)>, is: impl Fn(&K) -> bool) -> Option<V> {
    o.as_ref().filter(|(k, _)| is(k)).map(|(_, v)| v.clone())
}

impl Queries for Doctored<'_> {
    fn now(&self) -> Tick {
        self.svc.now()
    }
    fn revision(&self) -> u64 {
        self.svc.revision()
    }
    fn capacity(&self) -> Capacity {
        self.svc.capacity()
    }
    fn usage(&self) -> Usage {
        self.doctor.usage.unwrap_or_else(|| self.svc.usage())
    }
    fn sessions(&self) -> Vec<SessionId> {
        self.doctor
            .sessions
            .clone()
            .unwrap_or_else(|| Queries::sessions(self.svc))
    }
    fn session(&self, s: SessionId) -> Option<SessionInfo> {
        pick(&self.doctor.session, |k| *k == s).unwrap_or_else(|| self.svc.session(s))
    }
    fn is_open(&self, s: SessionId) -> bool {
        pick(&self.doctor.is_open, |k| *k == s).unwrap_or_else(|| self.svc.is_open(s))
    }
    fn locks(&self) -> Vec<String> {
        self.doctor
            .locks
            .clone()
            .unwrap_or_else(|| Queries::locks(self.svc))
    }
    fn holders(&self, lock: &str) -> Vec<Holder> {
        pick(&self.doctor.holders, |k| *k == lock)
            .unwrap_or_else(|| Queries::holders(self.svc, lock))
    }
    fn waiters(&self, lock: &str) -> Vec<Waiter> {
        pick(&self.doctor.waiters, |k| *k == lock)
            .unwrap_or_else(|| Queries::waiters(self.svc, lock))
    }
    fn lock_delay_until(&self, lock: &str) -> Option<Tick> {
        pick(&self.doctor.delay, |k| *k == lock).unwrap_or_else(|| self.svc.lock_delay_until(lock))
    }
    fn permits(&self, lock: &str) -> Option<Permits> {
        pick(&self.doctor.permits, |k| *k == lock).unwrap_or_else(|| self.svc.permits(lock))
    }
    fn poll_timeout(&self) -> Option<Tick> {
        self.doctor
            .poll_timeout
            .unwrap_or_else(|| self.svc.poll_timeout())
    }
    fn lock_delay(&self) -> u64 {
        self.svc.config().lock_delay
    }
}

fn named(name: &str) -> LockName {
    LockName::new(name).expect("a name")
}

/// A state that reaches every check of `check_service`: s1 holds "a", s2 waits for it
/// until 50; s3 holds one of the two permits of "sem" and watches "w" (an idle lock kept
/// by its watch alone); s4 held "d" and expired, so "d" is in lock-delay and the token it
/// had (the latest) is held by no one.
fn checked_state() -> LockService<VecStorage> {
    let config = Config {
        lock_delay: 20,
        ..Config::default()
    };
    let mut svc = LockService::new(VecStorage::new(8, 8, 8), config).expect("a service");
    let inputs = [
        open(0, 100),
        open(0, 100),
        open(0, 100),
        open(0, 5),
        acquire(1, 1, a(), X, Wait::None),
        acquire(1, 2, a(), X, Wait::Until(Tick(50))),
        acquire(
            1,
            3,
            named("sem"),
            Mode::Permits { count: 1, limit: 2 },
            Wait::None,
        ),
        acquire(1, 4, named("d"), X, Wait::None),
        Input::Watch {
            now: Tick(1),
            session: s(3),
            lock: named("w"),
            request: None,
        },
        tick(10),
    ];
    for input in inputs {
        svc.handle(input, &mut Vec::new()).expect("applied");
    }
    svc
}

/// `check_service`'s every check, each seen to fire: the real service's queries pass, and
/// each doctored answer — one query answering what a broken core would — fails with that
/// check's message. (The I2 test above shows one firing on a broken core itself.)
#[test]
fn each_check_of_check_service_fires_on_one_doctored_answer() {
    use fencelock_tests::invariants::check_service;
    let svc = checked_state();
    // The story reached what the checks need.
    assert_eq!(svc.now(), Tick(10));
    assert_eq!(svc.sessions().collect::<Vec<_>>(), [s(1), s(2), s(3)]);
    let delay = svc.lock_delay_until("d").expect("d in lock-delay").0;
    assert!(delay < 50, "the earliest deadline");
    assert_eq!(svc.waiters("a").count(), 1);
    assert!(svc.locks().any(|l| l.as_str() == "w"));
    let holder = |lock: &str| svc.holders(lock).next().expect("a holder");
    let waiter = svc.waiters("a").next().expect("a waiter");
    let info = |id: u64| svc.session(s(id)).expect("open");
    let usage = svc.usage();
    let revision = svc.revision();
    // The token "d" was granted, held by no one now.
    let free = Token(revision);
    let with = |doctor: Forged| check_service(&Doctored { svc: &svc, doctor });
    passes("the real service", with(Forged::default()));

    let poll_timeout_words =
        format!("poll_timeout None but the earliest deadline is Some({delay})");
    let mut cases: Vec<(&str, Forged, &str, &str)> = vec![
        (
            "the sessions listed out of order",
            forged!(sessions, vec![s(2), s(1), s(3)]),
            "",
            "not in strictly increasing id order",
        ),
        (
            "one session more counted than listed",
            forged!(
                usage,
                Usage {
                    sessions: usage.sessions + 1,
                    ..usage
                }
            ),
            "",
            "session count",
        ),
        (
            "a listed session not found",
            forged!(session, (s(1), None)),
            "",
            "listed but not found",
        ),
        (
            "a session's info under another id",
            forged!(
                session,
                (
                    s(1),
                    Some(SessionInfo {
                        id: s(9),
                        ..info(1)
                    }),
                )
            ),
            "",
            "info names",
        ),
        (
            "a session listed at its deadline",
            forged!(
                session,
                (
                    s(1),
                    Some(SessionInfo {
                        expires_at: Tick(10),
                        ..info(1)
                    }),
                )
            ),
            "I4:",
            "is listed but expired",
        ),
        (
            "a deadline beyond now + ttl",
            forged!(
                session,
                (
                    s(1),
                    Some(SessionInfo {
                        expires_at: Tick(111),
                        ..info(1)
                    }),
                )
            ),
            "I-time:",
            "beyond now + ttl",
        ),
        (
            "id 0 said to be open",
            forged!(is_open, (s(0), true)),
            "",
            "is_open(0) = true but the listing says false",
        ),
        (
            "a lock listed twice",
            forged!(locks, vec!["a".into(), "sem".into(), "a".into()]),
            "",
            "a lock is listed twice",
        ),
        (
            "one lock more counted than listed",
            forged!(
                usage,
                Usage {
                    locks: usage.locks + 1,
                    ..usage
                }
            ),
            "",
            "lock count",
        ),
        (
            "a lock-delay reported that has ended",
            forged!(delay, ("d", Some(Tick(10)))),
            "I8:",
            "reported though not after now",
        ),
        (
            "a lock-delay longer than the service's",
            forged!(delay, ("d", Some(Tick(10 + 20 + 1)))),
            "I8:",
            "beyond now + lock-delay 20",
        ),
        (
            "an exclusive holder during a lock-delay",
            forged!(
                holders,
                (
                    "d",
                    vec![Holder {
                        token: free,
                        ..holder("a")
                    }],
                )
            ),
            "I8:",
            "an exclusive holder during its delay",
        ),
        (
            "holders whose tokens do not rise in grant order",
            forged!(
                holders,
                (
                    "a",
                    vec![
                        Holder {
                            mode: Mode::Shared,
                            token: free,
                            ..holder("a")
                        },
                        Holder {
                            session: s(3),
                            mode: Mode::Shared,
                            ..holder("a")
                        },
                    ],
                )
            ),
            "I2:",
            "tokens not rising in grant order",
        ),
        (
            "a second exclusive holder",
            forged!(
                holders,
                (
                    "a",
                    vec![
                        holder("a"),
                        Holder {
                            session: s(3),
                            token: free,
                            ..holder("a")
                        },
                    ],
                )
            ),
            "I1:",
            "mutual exclusion violated",
        ),
        (
            "more permits held than the limit",
            forged!(
                holders,
                (
                    "sem",
                    vec![Holder {
                        mode: Mode::Permits { count: 3, limit: 2 },
                        ..holder("sem")
                    }],
                )
            ),
            "I11:",
            "permits held, limit 2",
        ),
        (
            "a plain waiter on a semaphore",
            forged!(
                waiters,
                (
                    "sem",
                    vec![Waiter {
                        session: s(2),
                        ..waiter
                    }],
                )
            ),
            "I11:",
            "plain and permit claims or two limits",
        ),
        (
            "a semaphore's permits not reported",
            forged!(permits, ("sem", None)),
            "",
            "permits() says None",
        ),
        (
            "a token above the revision",
            forged!(
                holders,
                (
                    "a",
                    vec![Holder {
                        token: Token(revision + 1),
                        ..holder("a")
                    }],
                )
            ),
            "I2:",
            "outside 1..=",
        ),
        (
            "a lock held by a session that is not open",
            forged!(
                holders,
                (
                    "a",
                    vec![Holder {
                        session: s(4),
                        ..holder("a")
                    }],
                )
            ),
            "I4:",
            "held by dead",
        ),
        (
            "one session holding twice",
            forged!(
                holders,
                (
                    "a",
                    vec![
                        Holder {
                            mode: Mode::Shared,
                            ..holder("a")
                        },
                        Holder {
                            mode: Mode::Shared,
                            token: free,
                            ..holder("a")
                        },
                    ],
                )
            ),
            "I10:",
            "holds twice",
        ),
        (
            "a waiter whose session is not open",
            forged!(
                waiters,
                (
                    "a",
                    vec![Waiter {
                        session: s(4),
                        ..waiter
                    }],
                )
            ),
            "I4:",
            ": dead session 4 waits",
        ),
        (
            "the holder also waiting",
            forged!(
                waiters,
                (
                    "a",
                    vec![Waiter {
                        session: s(1),
                        ..waiter
                    }],
                )
            ),
            "I10:",
            "holds/waits twice",
        ),
        (
            "a wait past its deadline",
            forged!(
                waiters,
                (
                    "a",
                    vec![Waiter {
                        deadline: Some(Tick(10)),
                        ..waiter
                    }],
                )
            ),
            "I3:",
            "past its deadline",
        ),
        (
            "a waiter left behind on a free lock",
            forged!(holders, ("a", vec![])),
            "I3:",
            "could be granted but waits",
        ),
        (
            "fewer claim rows counted than holds and waits",
            forged!(usage, Usage { claims: 2, ..usage }),
            "",
            "claims 3 / len 2",
        ),
        (
            "a lock kept though nothing holds, waits for or watches it",
            forged!(usage, Usage { claims: 3, ..usage }),
            "",
            "1 locks are idle but listed, with 0 watch rows",
        ),
        (
            "a session's count of holds that the locks do not show",
            forged!(
                session,
                (
                    s(1),
                    Some(SessionInfo {
                        holds: 2,
                        ..info(1)
                    }),
                )
            ),
            "",
            "info says 2/0 holds/waits, locks say 1/0",
        ),
        (
            "a session's count of watches that the claim rows do not show",
            forged!(
                session,
                (
                    s(1),
                    Some(SessionInfo {
                        watches: info(1).watches + 1,
                        ..info(1)
                    }),
                )
            ),
            "",
            "the sessions count 2 watches, the claim rows beside the holds and waits are 1",
        ),
        (
            "no next deadline though sessions and waits are due",
            forged!(poll_timeout, None),
            "",
            &poll_timeout_words,
        ),
    ];
    // Each doctored answer above is one a real core could not give here.
    assert_eq!(usage.claims, 4, "two holds, one wait and one watch");
    assert_eq!(holder("a").token, Token(1));
    assert!(holder("a").token != free && holder("sem").token != free);
    for (story, doctor, prefix, words) in cases.drain(..) {
        caught(story, with(doctor), prefix, words);
    }
}
