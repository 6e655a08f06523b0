//! FenceGate: the resource-side check.

use fencelock::{
    check_rows, Error, FenceGate, GateRow, Table, Token, GATE_MAGIC, GATE_VERSION, MAX_ROWS,
};

fn gate<const N: usize>() -> FenceGate<[GateRow; N]> {
    FenceGate::new([GateRow::EMPTY; N]).unwrap()
}

fn snapshot<R: AsRef<[GateRow]> + AsMut<[GateRow]>>(g: &FenceGate<R>) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let n = g.snapshot(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn enc<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut buf = [0u8; 512];
    postcard::to_slice(value, &mut buf).unwrap().to_vec()
}

#[test]
fn admits_the_same_or_a_higher_token_and_refuses_a_lower_one() {
    let mut g = gate::<4>();
    assert!(g.is_empty());
    assert_eq!(g.highest("r"), None);
    g.admit("r", Token(5)).unwrap();
    assert!(!g.is_empty(), "a resource is recorded");
    g.admit("r", Token(5)).unwrap(); // the same holder writes again
    assert_eq!(g.highest("r"), Some(Token(5)));
    g.admit("r", Token(9)).unwrap();
    assert_eq!(g.highest("r"), Some(Token(9)));
    assert_eq!(
        g.admit("r", Token(8)),
        Err(Error::Stale {
            token: Token(8),
            highest: Token(9)
        })
    );
    assert_eq!(g.highest("r"), Some(Token(9)));
}

#[test]
fn resources_are_independent() {
    let mut g = gate::<4>();
    g.admit("a", Token(10)).unwrap();
    g.admit("b", Token(3)).unwrap();
    assert_eq!(g.highest("a"), Some(Token(10)));
    assert_eq!(g.highest("b"), Some(Token(3)));
    assert_eq!(g.len(), 2);
}

#[test]
fn token_zero_is_never_admitted() {
    let mut g = gate::<4>();
    assert_eq!(g.admit("r", Token(0)), Err(Error::ZeroToken));
    assert_eq!(g.check("r", Token(0)), Err(Error::ZeroToken));
    assert!(g.is_empty());
}

#[test]
fn check_answers_like_admit_but_records_nothing() {
    let mut g = gate::<4>();
    g.admit("r", Token(5)).unwrap();
    assert_eq!(g.check("r", Token(7)), Ok(()));
    assert_eq!(g.highest("r"), Some(Token(5)));
    assert_eq!(
        g.check("r", Token(4)),
        Err(Error::Stale {
            token: Token(4),
            highest: Token(5)
        })
    );
    assert_eq!(g.check("new", Token(1)), Ok(()));
    assert_eq!(g.highest("new"), None);
}

#[test]
fn a_full_gate_refuses_new_resources_but_serves_known_ones() {
    let mut g = gate::<2>();
    assert!(!g.is_full());
    g.admit("a", Token(1)).unwrap();
    assert!(!g.is_full(), "one of two rows is free");
    g.admit("b", Token(1)).unwrap();
    assert!(g.is_full());
    assert_eq!(g.capacity(), 2);
    assert_eq!(
        g.admit("c", Token(1)),
        Err(Error::CapacityExceeded(Table::Resources))
    );
    g.admit("a", Token(2)).unwrap();
    assert_eq!(g.admit("b", Token(0)), Err(Error::ZeroToken));
}

#[test]
fn iter_lists_resources_in_admission_order() {
    let mut g = gate::<8>();
    for (i, r) in ["z", "a", "m"].iter().enumerate() {
        g.admit(r, Token(i as u64 + 1)).unwrap();
    }
    g.admit("z", Token(7)).unwrap();
    let all: Vec<_> = g.iter().map(|(r, t)| (r.to_owned(), t.0)).collect();
    assert_eq!(all, vec![("z".into(), 7), ("a".into(), 2), ("m".into(), 3)]);
}

#[test]
fn storage_may_be_a_vec_or_a_slice() {
    let mut g = FenceGate::new(vec![GateRow::EMPTY; 3]).unwrap();
    g.admit("r", Token(1)).unwrap();
    let mut rows = [GateRow::EMPTY, GateRow::EMPTY];
    let mut s = FenceGate::new(&mut rows[..]).unwrap();
    s.admit("r", Token(1)).unwrap();
    assert_eq!(snapshot(&g), snapshot(&s));
}

#[test]
fn many_resources_are_all_found() {
    let mut g = FenceGate::new(vec![GateRow::EMPTY; 1000]).unwrap();
    for i in 0..1000u64 {
        g.admit(&format!("resource/{i}"), Token(i + 1)).unwrap();
    }
    for i in 0..1000u64 {
        assert_eq!(g.highest(&format!("resource/{i}")), Some(Token(i + 1)));
    }
    assert_eq!(g.highest("resource/1000"), None);
}

#[test]
fn snapshot_and_restore_round_trip() {
    let mut g = gate::<4>();
    g.admit("ledger", Token(35)).unwrap();
    g.admit("report.xml", Token(43)).unwrap();
    let bytes = snapshot(&g);
    assert_eq!(bytes[..4], GATE_MAGIC);
    let r = FenceGate::restore([GateRow::EMPTY; 4], &bytes)
        .map_err(|e| e.1)
        .unwrap();
    assert_eq!(snapshot(&r), bytes);
    assert_eq!(r.highest("ledger"), Some(Token(35)));
    assert_eq!(r.highest("report.xml"), Some(Token(43)));
    // restored, it still refuses the stale holder
    let mut r = r;
    assert_eq!(
        r.admit("ledger", Token(34)),
        Err(Error::Stale {
            token: Token(34),
            highest: Token(35)
        })
    );
    let mut buf = [0u8; 3];
    assert!(
        matches!(g.snapshot(&mut buf), Err(Error::BufferTooSmall { need }) if need as usize == bytes.len())
    );
}

#[test]
fn restore_refuses_bad_bytes_with_typed_errors() {
    let mut g = gate::<2>();
    g.admit("a", Token(3)).unwrap();
    g.admit("b", Token(4)).unwrap();
    let good = snapshot(&g);
    let restore = |bytes: &[u8]| {
        FenceGate::restore([GateRow::EMPTY; 2], bytes)
            .map(|_| ())
            .map_err(|e| e.1)
    };
    assert_eq!(restore(b"XXXX\x01\x00"), Err(Error::BadMagic));
    assert_eq!(restore(&[]), Err(Error::BadMagic));
    assert_eq!(restore(b"FLG"), Err(Error::BadMagic));
    // the magic, then too little for the version or the count: a truncated header
    assert_eq!(
        restore(b"FLGT\xff\xff\xff\x00"),
        Err(Error::CorruptSnapshot("bad version"))
    );
    for cut in [4, 5] {
        assert_eq!(
            restore(&good[..cut]),
            Err(Error::CorruptSnapshot("truncated header")),
            "{cut} bytes"
        );
    }
    let mut v = good.clone();
    v[4] = (GATE_VERSION + 1) as u8;
    assert_eq!(
        restore(&v),
        Err(Error::UnsupportedVersion(GATE_VERSION + 1))
    );
    assert_eq!(
        restore(&good[..good.len() - 1]),
        Err(Error::CorruptSnapshot("truncated resource record"))
    );
    // whole but no value: a count past a u32's range, a token varint past a u64's, a
    // name that is not UTF-8
    assert_eq!(
        restore(b"FLGT\x01\xff\xff\xff\xff\x1f"),
        Err(Error::CorruptSnapshot("bad header"))
    );
    assert_eq!(
        restore(b"FLGT\x01\xff\xff"),
        Err(Error::CorruptSnapshot("truncated header"))
    );
    let past_u64 = [0xffu8; 11];
    assert_eq!(
        restore(&[&b"FLGT\x01\x01\x01a"[..], &past_u64[..]].concat()),
        Err(Error::CorruptSnapshot("bad resource record"))
    );
    assert_eq!(
        restore(b"FLGT\x01\x01\x01\xff\x05"),
        Err(Error::CorruptSnapshot("bad resource record"))
    );
    assert_eq!(
        restore(b"FLGT\x01\x01\x01a\xff"),
        Err(Error::CorruptSnapshot("truncated resource record"))
    );
    let mut v = good.clone();
    v.push(0);
    assert_eq!(restore(&v), Err(Error::CorruptSnapshot("trailing bytes")));
    // too many for the rows given
    assert_eq!(
        FenceGate::restore([GateRow::EMPTY; 1], &good)
            .map(|_| ())
            .map_err(|e| e.1),
        Err(Error::CapacityExceeded(Table::Resources))
    );
    // a resource twice, token 0
    let dup = enc(&(GATE_MAGIC, GATE_VERSION, 2u32, ("a", 1u64), ("a", 2u64)));
    assert_eq!(restore(&dup), Err(Error::CorruptSnapshot("resource twice")));
    let zero = enc(&(GATE_MAGIC, GATE_VERSION, 1u32, ("a", 0u64)));
    assert_eq!(
        restore(&zero),
        Err(Error::CorruptSnapshot("empty resource name or token 0"))
    );
}

#[test]
fn restore_never_panics_on_mutated_bytes() {
    let mut g = gate::<4>();
    g.admit("ledger", Token(35)).unwrap();
    g.admit("x", Token(1)).unwrap();
    let good = snapshot(&g);
    for i in 0..good.len() {
        for b in [0u8, 1, 0x7f, 0x80, 0xff] {
            let mut v = good.clone();
            v[i] = b;
            if let Ok(r) = FenceGate::restore([GateRow::EMPTY; 4], &v) {
                assert_eq!(snapshot(&r), v, "a restored gate re-snapshots to its bytes");
            }
        }
        let _ = FenceGate::restore([GateRow::EMPTY; 4], &good[..i]);
    }
}

#[test]
fn restore_refuses_a_non_canonical_encoding() {
    let mut g = gate::<2>();
    g.admit("a", Token(3)).unwrap();
    let good = snapshot(&g);
    assert_eq!(g.snapshot_len(), good.len());
    // magic (4) + version (1) + count (1) + name ("a": 2) + token 3 at the end
    assert_eq!(good[good.len() - 1], 3);
    let mut long = good[..good.len() - 1].to_vec();
    long.extend_from_slice(&[0x83, 0x00]);
    assert_eq!(
        FenceGate::restore([GateRow::EMPTY; 2], &long)
            .map(|_| ())
            .map_err(|e| e.1),
        Err(Error::CorruptSnapshot("non-canonical encoding"))
    );
}

/// postcard reads a string's length as a `usize` varint: a name's length prefix stretched
/// to 6 bytes decodes on a 64-bit target (and failed only at the end, as a non-canonical
/// encoding) but not on a 32-bit one. Restore refuses it first, as a bad record, on
/// every target (`tests/bare-metal` restores the same bytes on a Cortex-M4).
#[test]
fn a_name_length_stretched_past_five_bytes_is_a_bad_record_on_every_target() {
    let restore = |bytes: &[u8]| {
        FenceGate::restore([GateRow::EMPTY; 2], bytes)
            .map(|_| ())
            .map_err(|e| e.1)
    };
    // "FLGT", version 1, one resource: "a" (its length 1 in 6 bytes) with token 5
    let long = b"FLGT\x01\x01\x81\x80\x80\x80\x80\x00a\x05";
    assert_eq!(
        restore(long),
        Err(Error::CorruptSnapshot("bad resource record"))
    );
    // the same in its one encoding restores
    assert!(restore(b"FLGT\x01\x01\x01a\x05").is_ok());
}

#[test]
fn the_row_limit_is_the_one_check_rows() {
    // FenceGate::new (like LockService::new and both restores) refuses a table of more
    // than MAX_ROWS rows through check_rows. A real table that large (2^31 rows of
    // GateRow) cannot be allocated in a test, so the rule is tested here directly, and
    // the constructors at the sizes they can reach.
    assert_eq!(MAX_ROWS, (1usize << 31) - 1);
    assert_eq!(check_rows(0), Ok(()));
    assert_eq!(check_rows(MAX_ROWS), Ok(()));
    let too_many = Err(Error::BadConfig("a table has more than 2^31 - 1 rows"));
    assert_eq!(check_rows(MAX_ROWS + 1), too_many);
    assert_eq!(check_rows(usize::MAX), too_many);
    // at the sizes a test can build, new accepts every one, empty included
    for rows in [0, 1, 7, 1024] {
        let g = FenceGate::new(vec![GateRow::EMPTY; rows]).unwrap();
        assert_eq!(g.iter().count(), 0);
    }
    let mut empty = FenceGate::new(Vec::<GateRow>::new()).unwrap();
    assert!(empty.is_full());
    assert_eq!(
        empty.admit("r", Token(1)),
        Err(Error::CapacityExceeded(Table::Resources))
    );
}
