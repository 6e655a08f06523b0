//! The proposer: gathers concurrent client inputs into one log entry.
//!
//! openraft 0.9's core handles one client write at a time and, on the leader, waits for
//! that entry's flush to disk before it replicates it or looks at the next write. Sent to
//! openraft one by one, N concurrent requests cost N sequential fsyncs on the leader (no
//! log store can group them: it never sees a second append before the first is flushed).
//!
//! So every write of a node goes through one proposer task. It takes whatever has queued
//! (up to [`MAX_BATCH`] requests), proposes it as one [`Cmd`], and holds the next batch until
//! the log store reports that entry flushed (or it is answered, or [`MAX_HOLD`] passes).
//! Requests that arrive meanwhile share the next entry: one append, one fsync and one
//! replication round for all of them. A lone request is proposed at once, so an idle
//! cluster pays no batching delay.
//!
//! Each op of a batch is applied on its own (in order): one op's refusal by the core
//! does not affect the others. If the entry fails to commit, every request of the batch
//! gets the same error. A request whose caller stopped waiting before it was gathered (it
//! was answered `Unavailable` at its request timeout) is not proposed: its client retries
//! with the same request number.

use std::time::Duration;

use std::sync::Arc;

use openraft::error::ClientWriteError;
use openraft::raft::ClientWriteResult;
use tokio::sync::{mpsc, oneshot};

use crate::log_store::LogStore;
use crate::node::LeaderClock;
use crate::protocol::ClientError;
use crate::types::{Cmd, CmdResult, Op, Raft, TypeConfig};

/// At most this many requests go into one entry.
pub const MAX_BATCH: usize = 256;
/// Requests that may wait for the proposer before [`Proposer::propose`] itself waits.
pub const QUEUE: usize = 4096;
/// The longest the proposer holds a batch back while the previous entry is unflushed.
pub const MAX_HOLD: Duration = Duration::from_millis(20);

type Answer = Result<CmdResult, ClientError>;

/// What a proposal keeps until its outcome is known — answered after its entry applied
/// or failed, or dropped unproposed — whether or not its caller still waits: a
/// reservation made for it (a token's open in flight), which must outlive a caller that
/// gave up at its request timeout while the entry may still commit.
pub(crate) type Hold = Box<dyn Send>;

struct Proposal {
    op: Op,
    reply: oneshot::Sender<Answer>,
    hold: Option<Hold>,
}

/// The handle requests are proposed through (cheap to clone).
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Proposal>,
}

impl Proposer {
    /// Starts the proposer task for `raft`, stamping entries with `clock`. Cost: one task.
    pub(crate) fn start(
        raft: Raft,
        log: LogStore,
        clock: Arc<LeaderClock>,
    ) -> (Proposer, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(run(raft, log, clock, rx));
        (Proposer { tx }, task)
    }

    /// How many requests wait for the proposer now (at most [`QUEUE`]). Cost: O(1).
    pub fn queued(&self) -> usize {
        QUEUE.saturating_sub(self.tx.capacity())
    }

    /// Proposes `op` and waits for its result: committed and applied, refused by the
    /// core (in the result's `error`), or the batch's failure. Cost: a share of one
    /// replicated write.
    ///
    /// Errors: `NotLeader`, `Unavailable` (the proposer stopped, or the entry could not
    /// commit). Waits while [`QUEUE`] requests are already queued (backpressure).
    pub async fn propose(&self, op: Op) -> Answer {
        self.propose_holding(op, None).await
    }

    /// [`propose`](Self::propose), with `hold` kept until the proposal's outcome is known
    /// ([`Hold`]), not only while the caller waits. Cost and errors: as `propose`.
    pub(crate) async fn propose_holding(&self, op: Op, hold: Option<Hold>) -> Answer {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Proposal { op, reply, hold })
            .await
            .map_err(|_| ClientError::Unavailable("node is shutting down".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(ClientError::Unavailable("node is shutting down".into())))
    }
}

async fn run(raft: Raft, log: LogStore, clock: Arc<LeaderClock>, mut rx: mpsc::Receiver<Proposal>) {
    let mut flushed = log.flushed();
    while let Some(first) = rx.recv().await {
        let Some((ops, replies, holds)) = gather(first, &mut rx) else {
            continue;
        };
        // The entry will land after everything appended so far.
        let target = log.last_index() + 1;
        // Ticking at each deadline on the way to its time (`Op::EachDeadline`).
        let cmd = Cmd::new(clock.stamp(), ops);
        let pending = match raft.client_write_ff(cmd).await {
            Ok(p) => p,
            Err(fatal) => {
                drop(holds); // nothing was proposed: let go before anyone is answered
                for r in replies {
                    let _ = r.send(Err(ClientError::Unavailable(fatal.to_string())));
                }
                continue;
            }
        };
        let (done_tx, mut done_rx) = oneshot::channel::<()>();
        let raft2 = raft.clone();
        tokio::spawn(async move {
            let outcome = pending.await;
            // The outcome is known (applied, or failed): what the batch held goes now,
            // before anyone is answered — a caller answered must not find its own
            // reservation still counted beside what it reserved for.
            drop(holds);
            answer(&raft2, outcome, replies);
            let _ = done_tx.send(());
        });
        tokio::select! {
            _ = flushed.wait_for(|&i| i >= target) => {}
            _ = &mut done_rx => {}
            _ = tokio::time::sleep(MAX_HOLD) => {}
        }
    }
}

/// The next batch: `first` and whatever else has queued, up to [`MAX_BATCH`] requests,
/// without the requests whose callers have stopped waiting (answered `Unavailable` at
/// their request timeout, or `NotLeader` when the node stepped back: their clients retry
/// with the same request number, so proposing them would only add writes nobody waits
/// for). `None`
/// when every request gathered was abandoned. Cost: O(batch), no wait.
type Batch = (Vec<Op>, Vec<oneshot::Sender<Answer>>, Vec<Hold>);

fn gather(first: Proposal, rx: &mut mpsc::Receiver<Proposal>) -> Option<Batch> {
    let mut ops = Vec::new();
    let mut replies = Vec::new();
    let mut holds = Vec::new();
    let mut next = Some(first);
    while let Some(p) = next.take() {
        // An abandoned request is dropped here, what it held with it: it is never
        // proposed.
        if !p.reply.is_closed() {
            ops.push(p.op);
            replies.push(p.reply);
            holds.extend(p.hold);
        }
        if ops.len() < MAX_BATCH {
            next = rx.try_recv().ok();
        }
    }
    (!ops.is_empty()).then_some((ops, replies, holds))
}

type Outcome = Result<ClientWriteResult<TypeConfig>, oneshot::error::RecvError>;

fn answer(raft: &Raft, outcome: Outcome, replies: Vec<oneshot::Sender<Answer>>) {
    match outcome {
        Ok(Ok(resp)) => {
            let mut results = resp.data.0.into_iter();
            for r in replies {
                let a = results
                    .next()
                    .ok_or_else(|| ClientError::Unavailable("batch result missing".into()));
                let _ = r.send(a);
            }
        }
        Ok(Err(ClientWriteError::ForwardToLeader(f))) => {
            let leader = f.leader_node.map(|n| n.client).or_else(|| {
                let id = f.leader_id?;
                let m = raft.metrics().borrow().clone();
                m.membership_config
                    .membership()
                    .get_node(&id)
                    .map(|n| n.client.clone())
            });
            for r in replies {
                let _ = r.send(Err(ClientError::NotLeader {
                    leader: leader.clone(),
                }));
            }
        }
        Ok(Err(e)) => {
            for r in replies {
                let _ = r.send(Err(ClientError::Unavailable(e.to_string())));
            }
        }
        Err(_) => {
            for r in replies {
                let _ = r.send(Err(ClientError::Unavailable(
                    "node stopped before the entry committed".into(),
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(now: u64) -> Op {
        Op::Input(fencelock::Input::Tick {
            now: fencelock::Tick(now),
        })
    }

    /// Counts its drops: what a proposal holds.
    struct Held(Arc<std::sync::atomic::AtomicUsize>);
    impl Drop for Held {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A request whose caller stopped waiting is left out of the batch, and what it held
    /// is let go (it is never proposed); the others keep their order and their holds go
    /// with the batch, and a batch of abandoned requests only is no batch.
    #[test]
    fn abandoned_requests_are_not_proposed() {
        let (tx, mut rx) = mpsc::channel(QUEUE);
        let mut waiting = Vec::new();
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut proposal = |now: u64, abandoned: bool| {
            let (reply, answer) = oneshot::channel();
            if !abandoned {
                waiting.push(answer);
            }
            Proposal {
                op: tick(now),
                reply,
                hold: Some(Box::new(Held(dropped.clone())) as Hold),
            }
        };
        let first = proposal(1, true);
        for (now, abandoned) in [(2, false), (3, true), (4, false)] {
            tx.try_send(proposal(now, abandoned)).ok().unwrap();
        }
        let (ops, replies, holds) = gather(first, &mut rx).expect("two requests still wait");
        let gone = || dropped.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(gone(), 2, "the abandoned requests' holds are let go");
        assert_eq!(holds.len(), 2, "the others' go with the batch");
        drop(holds);
        assert_eq!(gone(), 4);
        let nows: Vec<_> = ops
            .iter()
            .map(|op| match op {
                Op::Input(fencelock::Input::Tick { now }) => now.0,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(nows, [2, 4]);
        assert_eq!(replies.len(), 2);
        let first = proposal(5, true);
        tx.try_send(proposal(6, true)).ok().unwrap();
        assert!(gather(first, &mut rx).is_none(), "nobody waits for 5 or 6");
        assert_eq!(waiting.len(), 2);
    }

    /// A batch holds at most [`MAX_BATCH`] requests; the rest wait for the next one.
    #[test]
    fn a_batch_holds_at_most_max_batch_requests() {
        let (tx, mut rx) = mpsc::channel(QUEUE);
        let mut answers = Vec::new();
        let mut proposal = |now: u64| {
            let (reply, answer) = oneshot::channel();
            answers.push(answer);
            Proposal {
                op: tick(now),
                reply,
                hold: None,
            }
        };
        let first = proposal(0);
        for now in 1..=MAX_BATCH as u64 {
            tx.try_send(proposal(now)).ok().unwrap();
        }
        let (ops, _, _) = gather(first, &mut rx).unwrap();
        assert_eq!(ops.len(), MAX_BATCH);
        let rest = rx.try_recv().expect("the last request waits");
        let (ops, _, _) = gather(rest, &mut rx).unwrap();
        assert_eq!(ops.len(), 1);
    }
}
