//! How the binaries write what a user reads on stdout: a reader that stops reading is
//! not a failure of the command, and no write panics.
//!
//! `println!` and `eprintln!` panic when the write fails, and a write to a pipe whose
//! reader is gone fails (Rust ignores `SIGPIPE`, so the write returns `BrokenPipe` instead
//! of killing the process): `fencelock holder L | head -1` with several holders, or
//! `fencelock-node snapshot restore … | head -1`, ended in a panic message and exit 101
//! after the command had done its work. (A stream closed outright, `>&-`, never did: Rust
//! opens `/dev/null` in its place at startup.) The binaries write through [`emit`]
//! instead, and write their messages to stderr through [`note`], which drops a message
//! nobody can read.

use std::io::{self, Write};

/// What became of a write to stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// All of it was written and flushed.
    All,
    /// The reader went away (`BrokenPipe`): the rest is dropped.
    ReaderGone,
    /// It could not be written for another reason (a full disk: `> /dev/full`), named.
    Failed(String),
}

/// Writes `text` to stdout and flushes it, saying what became of it. Cost: one write of
/// `text`.
pub fn write_out(text: &str) -> Written {
    write_to(&mut io::stdout().lock(), text)
}

/// [`write_out`] to any writer.
pub fn write_to(out: &mut impl Write, text: &str) -> Written {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Written::All,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Written::ReaderGone,
        Err(e) => Written::Failed(format!("cannot write to stdout: {e}")),
    }
}

/// Writes a one-shot command's `text` to stdout. A reader that went away is not an error:
/// the rest of the text is dropped and the command ends as it would have, as `ripgrep`
/// does. Any other write error is returned, naming stdout: the output is incomplete, so
/// the command fails. Cost: one write of `text`.
pub fn emit(text: &str) -> Result<(), String> {
    match write_out(text) {
        Written::Failed(e) => Err(e),
        Written::All | Written::ReaderGone => Ok(()),
    }
}

/// Writes `line` and a newline to stderr, dropping it if it cannot be written (stderr a
/// pipe whose reader is gone): a message nobody can read must not stop a command half way
/// (after a durable change, or with a session and a supervised command to end), as
/// `eprintln!`'s panic did. Cost: one write.
pub fn note(line: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// `eprintln!` that never panics: [`note`] of the formatted line.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::stdio::note(&format!($($arg)*))
    };
}

/// Text a node sent (an address, a role, a check, an error message), as one field of a
/// line printed for a person or a script: at most [`SHOWN_MAX`] characters (then `…`),
/// whitespace and what [`hides_text`] names escaped, so a node cannot forge a line (an
/// address holding `\nvoter 9 …`), split a field or send a terminal its controls, as
/// labels cannot. Cost: O(text length).
pub fn field(text: &str) -> String {
    escaped(text, |c| c.is_whitespace() || hides_text(c))
}

/// [`field`] for a message: its spaces kept. Cost: O(text length).
pub fn shown(text: &str) -> String {
    escaped(text, |c| c != ' ' && (c.is_whitespace() || hides_text(c)))
}

/// The most characters of a node's text [`field`] and [`shown`] print.
pub const SHOWN_MAX: usize = 1024;

fn escaped(text: &str, escape: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len().min(SHOWN_MAX));
    for (i, c) in text.chars().enumerate() {
        if i == SHOWN_MAX {
            out.push('…');
            break;
        }
        if !escape(c) {
            out.push(c);
        } else if c == ' ' {
            out.push_str("\\u{20}"); // (escape_default leaves a space as it is)
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

/// Whether `c`, printed for a person, could start a line, move the cursor or make a
/// terminal show the text around it in another order than it comes: the control
/// characters (C0, DEL, C1), the line and paragraph separators, and the bidirectional
/// controls of Unicode Standard Annex 9 (U+061C, U+200E, U+200F, U+202A–U+202E,
/// U+2066–U+2069: the characters of the "Trojan Source" attack, which would let a label
/// read as another holder's). Cost: O(1).
pub fn hides_text(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that fails every write with `kind`.
    struct Failing(io::ErrorKind);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_gone_reader_is_not_an_error_and_any_other_failure_is() {
        let gone = Failing(io::ErrorKind::BrokenPipe);
        assert_eq!(write_to(&mut { gone }, "x\n"), Written::ReaderGone);
        let full = Failing(io::ErrorKind::StorageFull);
        match write_to(&mut { full }, "x\n") {
            Written::Failed(e) => assert!(e.starts_with("cannot write to stdout: "), "{e}"),
            other => panic!("{other:?}"),
        }
        let mut buf = Vec::new();
        assert_eq!(write_to(&mut buf, "a\nb\n"), Written::All);
        assert_eq!(buf, b"a\nb\n");
    }
}
