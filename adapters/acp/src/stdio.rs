//! The editor's stdin and stdout as reactor I/O.
//!
//! `tokio::io::stdin()` and `stdout()` do every read and write on a blocking-pool thread:
//! two thread wake-ups per read or write, several per prompt, which on a small machine were
//! a measurable share of a prompt's round trip. When they are pipes (an editor spawning
//! `gateway acp`, the usual case) they are driven by the reactor instead, like the agent
//! processes' pipes. Anything else (a terminal, a file) keeps tokio's blocking stdio.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

pub type Input = Box<dyn AsyncRead + Unpin + Send>;
pub type Output = Box<dyn AsyncWrite + Unpin + Send>;

/// Stdin. Its pipe is switched to non-blocking mode, which only this process reads.
pub fn input() -> Input {
    match duplicate(std::io::stdin().as_fd()).and_then(pipe::Receiver::from_owned_fd) {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    }
}

/// Stdout. Non-blocking mode belongs to the pipe's open file, so it is not set when stderr
/// shares that pipe (`2>&1`): the log's blocking writes would then fail with `EAGAIN`
/// whenever the editor reads slowly, and lines would be lost.
pub fn output() -> Output {
    let stdout = std::io::stdout();
    if same_pipe(stdout.as_fd(), std::io::stderr().as_fd()) {
        return Box::new(tokio::io::stdout());
    }
    match duplicate(stdout.as_fd()).and_then(pipe::Sender::from_owned_fd) {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    }
}

fn duplicate(fd: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

/// Whether both descriptors are the same pipe (or FIFO).
fn same_pipe(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    use nix::sys::stat::{SFlag, fstat};
    match (fstat(a), fstat(b)) {
        (Ok(a), Ok(b)) => {
            let fifo = |mode| SFlag::from_bits_truncate(mode) & SFlag::S_IFMT == SFlag::S_IFIFO;
            fifo(a.st_mode) && a.st_dev == b.st_dev && a.st_ino == b.st_ino
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_is_recognised_by_both_ends_and_a_file_is_not() {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        assert!(same_pipe(r.as_fd(), w.as_fd()));
        let (r2, _w2) = nix::unistd::pipe().expect("pipe");
        assert!(!same_pipe(r.as_fd(), r2.as_fd()));
        let file = tempfile::tempfile().expect("file");
        assert!(!same_pipe(file.as_fd(), file.as_fd()), "a file is never a shared pipe");
    }
}
