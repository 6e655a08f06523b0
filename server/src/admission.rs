//! Who gets a connection place on a port: at most a total, at most so many per source
//! address, and, when the total is full, the newest connection before the oldest one that
//! has not yet proven itself.
//!
//! A connection is *proven* once it shows it belongs: on the Raft port, its first request
//! from a member (with mutual TLS, its certificate names a member); on the client port, a
//! token accepted (or, on a node without tokens, its first whole request). Until then it
//! is only a socket, and anyone who can reach the port can open those: a flood of them
//! used to fill the total and keep a member from reconnecting. Now a new connection that
//! finds the total full takes the place of the oldest unproven one, which is told to close
//! ([`Admitted::displaced`]). To keep a peer out, a flood has to open a port's whole total
//! of connections within the few milliseconds the peer's handshake and first request take,
//! again and again; proven connections are never displaced, and only when every place is
//! proven (or [`MAX_CLOSING`] displaced ones are still closing) is a new one refused.
//!
//! Descriptors: a displaced connection holds its socket until its task sees the signal (at
//! its next poll), so for a moment a port holds up to its total plus [`MAX_CLOSING`].

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// At most this many displaced connections may still be closing on one port; beyond it a
/// new connection that finds the total full is refused, counted as `closing` (so a port
/// never holds more than its total plus this many sockets).
pub const MAX_CLOSING: usize = 8;

/// What a per-address limit counts a connection from `ip` against: an IPv4 address (an
/// IPv4-mapped IPv6 one as that IPv4 address), and an IPv6 address's first `v6_prefix`
/// bits (the rest zeroed; 128, the default, is the address whole). A /64 is the smallest
/// block one site is given, within which a host may use as many addresses as it likes.
/// Cost: O(1).
pub(crate) fn source(ip: IpAddr, v6_prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(v6_prefix.min(128)))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(v6) & mask).into())
            }
        },
    }
}

/// The places of one port. Cheap to clone (shared).
#[derive(Clone)]
pub(crate) struct Admission {
    total: usize,
    per_addr: usize,
    /// The bits of an IPv6 address that name its source ([`source`]).
    v6_prefix: u8,
    places: Arc<Mutex<Places>>,
}

#[derive(Default)]
struct Places {
    /// Connections holding a place: id → [`source`].
    live: HashMap<u64, IpAddr>,
    /// Of those, the ones not yet proven, oldest first, with the signal that closes them.
    unproven: BTreeMap<u64, Arc<Notify>>,
    /// Places held per source ([`source`]).
    per_addr: HashMap<IpAddr, usize>,
    /// Displaced connections not yet dropped.
    closing: usize,
    next: u64,
}

impl Places {
    fn forget_addr(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_addr.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_addr.remove(&ip);
            }
        }
    }
}

/// One admitted connection's place; frees it when dropped.
pub(crate) struct Admitted {
    id: u64,
    displaced: Arc<Notify>,
    places: Arc<Mutex<Places>>,
}

/// Why a connection was refused, and the size of the limit that refused it.
pub(crate) type Refusal = (&'static str, usize);

impl Admission {
    /// At most `total` connections and `per_addr` from one address. A total beyond
    /// 2⁶³ − 1 (more connections than any machine opens) is that many, the most a metric
    /// shows, so the limit shown is the one the port runs with. Cost: O(1).
    pub(crate) fn new(total: usize, per_addr: usize) -> Admission {
        Admission {
            total: total.min(i64::MAX as usize),
            per_addr,
            v6_prefix: 128,
            places: Arc::default(),
        }
    }

    /// The same, counting an IPv6 source by its first `bits` bits ([`source`]; at most
    /// 128). Cost: O(1).
    pub(crate) fn ipv6_prefix(self, bits: u8) -> Admission {
        Admission {
            v6_prefix: bits.min(128),
            ..self
        }
    }

    /// The total it admits (what the node shows as its limit). Cost: O(1).
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// A place for one more connection from `ip`: refused with `per_address` when its
    /// [`source`] holds its limit; when the total is full, the oldest unproven connection is
    /// told to close and this one takes its place; refused with `total` when none is
    /// unproven, or `closing` when [`MAX_CLOSING`] are still closing. Cost: O(log n) for n
    /// connections.
    pub(crate) fn admit(&self, ip: IpAddr) -> Result<Admitted, Refusal> {
        let ip = source(ip, self.v6_prefix);
        let mut p = self.places.lock().unwrap_or_else(|e| e.into_inner());
        if p.per_addr.get(&ip).copied().unwrap_or(0) >= self.per_addr {
            return Err(("per_address", self.per_addr));
        }
        if p.live.len() >= self.total {
            if p.closing >= MAX_CLOSING {
                return Err(("closing", MAX_CLOSING));
            }
            let Some((old, signal)) = p.unproven.pop_first() else {
                return Err(("total", self.total));
            };
            if let Some(from) = p.live.remove(&old) {
                p.forget_addr(from);
            }
            p.closing += 1;
            // Stored if it is not waiting yet: its next wait ends at once.
            signal.notify_one();
        }
        let id = p.next;
        p.next += 1;
        let displaced = Arc::new(Notify::new());
        p.live.insert(id, ip);
        p.unproven.insert(id, displaced.clone());
        *p.per_addr.entry(ip).or_insert(0) += 1;
        Ok(Admitted {
            id,
            displaced,
            places: self.places.clone(),
        })
    }

    /// How many connections hold a place, and how many of those are proven (tests and
    /// status). Cost: O(1).
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let p = self.places.lock().unwrap_or_else(|e| e.into_inner());
        (p.live.len(), p.live.len() - p.unproven.len())
    }
}

impl Admitted {
    /// Marks the connection proven: it is never displaced from now on. Call it once the
    /// connection has shown it belongs (see the module), before serving it. False if it
    /// was displaced first: then close it unserved. Cost: O(log n).
    pub(crate) fn prove(&self) -> bool {
        let mut p = self.places.lock().unwrap_or_else(|e| e.into_inner());
        p.unproven.remove(&self.id);
        p.live.contains_key(&self.id)
    }

    /// Completes once a newer connection has taken this one's place (never, once proven):
    /// the connection must close then. Cancel-safe: a signal given while nobody waits is
    /// kept for the next wait.
    async fn displaced(&self) {
        self.displaced.notified().await
    }

    /// Runs `conn` (the connection's whole service, owning its socket) until it ends or
    /// the connection is displaced; then `on_displaced` runs (to count it) before `conn`,
    /// and so the socket, is dropped. Dropping `conn` unfinished is safe because only an
    /// unproven connection is displaced, and nothing of it has been served
    /// ([`prove`](Self::prove) comes first on every serving path).
    pub(crate) async fn serve(&self, conn: impl Future<Output = ()>, on_displaced: impl FnOnce()) {
        let displaced = async {
            self.displaced().await;
            on_displaced();
        };
        tokio::select! {
            _ = conn => {}
            _ = displaced => {}
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut p = self.places.lock().unwrap_or_else(|e| e.into_inner());
        match p.live.remove(&self.id) {
            Some(ip) => {
                p.unproven.remove(&self.id);
                p.forget_addr(ip);
            }
            // Displaced: its place went to another; it no longer holds a socket.
            None => p.closing -= 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    /// Whether `a` has been told to close (polled once, without waiting).
    fn is_displaced(a: &Admitted) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        matches!(pin!(a.displaced()).poll(&mut cx), Poll::Ready(()))
    }

    /// With a prefix of 64 bits (the client port's `--client-ipv6-prefix-len 64`), the
    /// per-address limit counts an IPv6 address by its /64: a host that takes a new
    /// address of its prefix for each connection is held to the limit as one address is;
    /// another /64 is another source. An IPv4-mapped address is its IPv4 address, with any
    /// prefix.
    #[test]
    fn the_per_address_limit_counts_an_ipv6_prefix_as_one_address() {
        let a = Admission::new(16, 2).ipv6_prefix(64);
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let _held = [
            a.admit(v6("2001:db8:1:2::1")).unwrap(),
            a.admit(v6("2001:db8:1:2:ffff:ffff:ffff:ffff")).unwrap(),
        ];
        assert_eq!(
            a.admit(v6("2001:db8:1:2:abcd::9")).err(),
            Some(("per_address", 2))
        );
        assert!(a.admit(v6("2001:db8:1:3::1")).is_ok(), "another /64");
        let _v4 = [a.admit(ip(7)).unwrap(), a.admit(ip(7)).unwrap()];
        assert_eq!(
            a.admit(v6("::ffff:127.0.0.7")).err(),
            Some(("per_address", 2)),
            "a mapped address is its IPv4 address"
        );
        let addr = v6("2001:db8:1:2:3:4:5:6");
        assert_eq!(source(addr, 64), v6("2001:db8:1:2::"));
        assert_eq!(source(addr, 48), v6("2001:db8:1::"));
        assert_eq!(source(addr, 0), v6("::"));
        // By default each IPv6 address is its own source (a mapped one is still IPv4).
        let exact = Admission::new(16, 1);
        let _one = exact.admit(v6("2001:db8:1:2::1")).unwrap();
        assert!(exact.admit(v6("2001:db8:1:2::2")).is_ok());
        assert_eq!(source(addr, 128), addr);
        assert_eq!(
            source(v6("::ffff:10.0.0.1"), 128),
            IpAddr::from([10, 0, 0, 1])
        );
    }

    /// A full total makes room by displacing the oldest unproven connection, never a
    /// proven one; the places and the per-address counts stay exact.
    #[test]
    fn a_full_total_displaces_the_oldest_unproven_connection() {
        let a = Admission::new(3, 10);
        let first = a.admit(ip(2)).unwrap();
        let second = a.admit(ip(3)).unwrap();
        let third = a.admit(ip(4)).unwrap();
        assert!(first.prove());
        assert_eq!(a.counts(), (3, 1));
        let fourth = a.admit(ip(5)).unwrap();
        assert!(!is_displaced(&first), "a proven connection was displaced");
        assert!(is_displaced(&second), "the oldest unproven was kept");
        assert!(!second.prove(), "a displaced connection proved itself");
        assert!(!is_displaced(&third));
        assert_eq!(a.counts(), (3, 1));
        // The displaced connection's address holds no place any more.
        assert_eq!(a.places.lock().unwrap().per_addr.get(&ip(3)), None);
        drop(second);
        assert_eq!(a.counts(), (3, 1));
        assert_eq!(a.places.lock().unwrap().closing, 0);
        drop(fourth);
        assert_eq!(a.counts(), (2, 1));
        drop((first, third));
        assert_eq!(a.counts(), (0, 0));
        assert!(a.places.lock().unwrap().per_addr.is_empty());
    }

    /// When every place is proven, one more is refused, and nothing changes.
    #[test]
    fn a_total_of_proven_connections_refuses_one_more() {
        let a = Admission::new(2, 10);
        let held: Vec<_> = (2..4).map(|i| a.admit(ip(i)).unwrap()).collect();
        assert!(held.iter().all(Admitted::prove));
        assert_eq!(a.admit(ip(9)).err(), Some(("total", 2)));
        assert_eq!(a.counts(), (2, 2));
        assert!(held.iter().all(|h| !is_displaced(h)));
    }

    /// An address at its limit is refused before anyone is displaced.
    #[test]
    fn the_per_address_limit_refuses_before_displacing() {
        let a = Admission::new(2, 1);
        let x = a.admit(ip(2)).unwrap();
        let _y = a.admit(ip(3)).unwrap();
        assert_eq!(a.admit(ip(2)).err(), Some(("per_address", 1)));
        assert!(!is_displaced(&x));
        assert_eq!(a.counts(), (2, 0));
    }

    /// An enormous total (a flag such as `--max-peer-connections 18446744073709551615`)
    /// admits as any other and is shown as the most a metric holds.
    #[test]
    fn an_enormous_total_is_the_most_a_metric_shows() {
        let a = Admission::new(usize::MAX, usize::MAX);
        assert_eq!(a.total(), i64::MAX as usize);
        assert!(a.admit(ip(2)).is_ok());
    }

    /// Displaced connections still closing are bounded: past `MAX_CLOSING` of them a new
    /// connection is refused, and once they close, displacing resumes.
    #[test]
    fn displaced_connections_still_closing_are_bounded() {
        let a = Admission::new(1, usize::MAX);
        let mut closing = Vec::new();
        let mut current = a.admit(ip(2)).unwrap();
        for _ in 0..MAX_CLOSING {
            let next = a.admit(ip(2)).unwrap();
            assert!(is_displaced(&current));
            closing.push(std::mem::replace(&mut current, next));
        }
        assert_eq!(a.admit(ip(2)).err(), Some(("closing", MAX_CLOSING)));
        assert!(
            !is_displaced(&current),
            "refused, yet someone was displaced"
        );
        closing.pop();
        let next = a.admit(ip(2)).unwrap();
        assert!(is_displaced(&current));
        drop((closing, current, next));
        let p = a.places.lock().unwrap();
        assert_eq!((p.live.len(), p.closing, p.per_addr.len()), (0, 0, 0));
    }
}
