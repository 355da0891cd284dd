//! An error and its causes on one line.
//!
//! HTTP and protocol libraries keep the useful part of a failure (the OS error, a TLS alert,
//! the SSRF resolver's refusal) in `source()`, and their own message says only "error sending
//! request"; every log line and every error a client reads wants the whole chain.

use std::error::Error;

/// `error` followed by each of its causes, joined by `": "`.
pub fn causes(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn every_cause_follows_its_error() {
        let e = Outer(std::io::Error::other("refused"));
        assert_eq!(causes(&e), "outer: refused");
        assert_eq!(causes(&std::io::Error::other("alone")), "alone");
    }
}
