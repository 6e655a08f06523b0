//! Lower-case hex, as the vector files write frames and snapshots.

/// `bytes` as lower-case hex, two digits per byte.
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Parses hex (either case, even length, no separators).
///
/// Errors: a message naming the problem.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    let t = text.as_bytes();
    if !t.len().is_multiple_of(2) {
        return Err(format!("odd-length hex {text:?}"));
    }
    let digit = |c: u8| -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!("bad hex digit {:?} in {text:?}", c as char)),
        }
    };
    t.chunks(2)
        .map(|p| Ok(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip_and_errors() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(super::encode(&b), "0001abff");
        assert_eq!(super::decode("0001ABff").unwrap(), b);
        assert!(super::decode("abc").is_err());
        assert!(super::decode("zz").is_err());
    }
}
