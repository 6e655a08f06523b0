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

/// Writes `text` to stdout and flushes it. A reader that went away (`BrokenPipe`) is not
/// an error: the rest of the text is dropped and the command ends as it would have, as
/// `ripgrep` and the CLI's `watch` do. Any other write error (a full disk: `> /dev/full`)
/// is returned, naming stdout: the output is incomplete, so the command fails.
/// Cost: one write of `text`.
pub fn emit(text: &str) -> Result<(), String> {
    emit_to(&mut io::stdout().lock(), text)
}

/// Writes `line` and a newline to stderr, dropping it if it cannot be written (stderr a
/// pipe whose reader is gone): a message nobody can read must not stop a command half way (after a
/// durable change, or with a session and a supervised command to end), as `eprintln!`'s
/// panic did. Cost: one write.
pub fn note(line: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// [`emit`] to any writer.
pub fn emit_to(out: &mut impl Write, text: &str) -> Result<(), String> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("cannot write to stdout: {e}")),
        Ok(()) => Ok(()),
    }
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
        assert_eq!(
            emit_to(&mut Failing(io::ErrorKind::BrokenPipe), "x\n"),
            Ok(())
        );
        let e = emit_to(&mut Failing(io::ErrorKind::StorageFull), "x\n").unwrap_err();
        assert!(e.starts_with("cannot write to stdout: "), "{e}");
        let mut buf = Vec::new();
        assert_eq!(emit_to(&mut buf, "a\nb\n"), Ok(()));
        assert_eq!(buf, b"a\nb\n");
    }
}
