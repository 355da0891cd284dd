//! Identifiers the baselines hand out: a prefix and 24 random base62 characters, the shape of
//! the gateway's own ids (so frames and bodies have comparable sizes).

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `<prefix>_<24 base62 characters>`.
pub fn new(prefix: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + 25);
    s.push_str(prefix);
    s.push('_');
    for _ in 0..24 {
        s.push(char::from(ALPHABET[fastrand::usize(..ALPHABET.len())]));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_have_their_prefix_and_length() {
        let id = super::new("sesn");
        assert!(id.starts_with("sesn_"));
        assert_eq!(id.len(), 29);
        assert!(id[5..].bytes().all(|b| b.is_ascii_alphanumeric()));
    }
}
