//! An agent's domain rules for the web tools: which hosts a fetch may reach (the first URL and
//! every redirect) and which search results the model sees. A rule names a domain and covers
//! its subdomains (`example.com` covers `docs.example.com`, not `badexample.com`); it may add a
//! path prefix (`example.com/blog`). A blocked rule always wins; a non-empty allowed list
//! permits only what it covers. The rules narrow what the operator's SSRF setting permits and
//! never widen it: they are checked after the guard, never instead of it.

use super::WebError;

/// The most rules of one kind an agent may carry.
pub const MAX_DOMAIN_RULES: usize = 256;
/// The longest rule (a DNS name is at most 253 characters; a path prefix may follow).
const MAX_RULE_CHARS: usize = 512;

/// One rule: a domain (lower case, no leading `*.` or `.`, no trailing `.`) and an optional
/// path prefix (starting with `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    domain: String,
    path: Option<String>,
}

impl Rule {
    fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t.is_empty() || t.len() > MAX_RULE_CHARS {
            return Err(format!("domain rule {t:?} must be 1..={MAX_RULE_CHARS} characters"));
        }
        // Tolerate a scheme written by habit; the rule is about the host.
        let t = t.strip_prefix("https://").or_else(|| t.strip_prefix("http://")).unwrap_or(t);
        let (host, path) = match t.find('/') {
            Some(i) => (&t[..i], Some(t[i..].to_owned())),
            None => (t, None),
        };
        let domain = host.trim_start_matches("*.").trim_start_matches('.').trim_end_matches('.').to_ascii_lowercase();
        let valid = !domain.is_empty()
            && domain.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '[' | ']'));
        if !valid {
            return Err(format!("domain rule {text:?} is not a domain name"));
        }
        Ok(Self { domain, path: path.filter(|p| p != "/") })
    }

    fn covers(&self, host: &str, path: &str) -> bool {
        let host_ok = host == self.domain
            || (host.len() > self.domain.len()
                && host.ends_with(&self.domain)
                && host.as_bytes()[host.len() - self.domain.len() - 1] == b'.');
        host_ok && self.path.as_deref().is_none_or(|p| path.starts_with(p))
    }

    fn text(&self) -> String {
        format!("{}{}", self.domain, self.path.as_deref().unwrap_or(""))
    }
}

/// The allowed and blocked domains of one agent's web tool. The default permits every host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainRules {
    allowed: Vec<Rule>,
    blocked: Vec<Rule>,
}

impl DomainRules {
    /// Rules from an agent's lists (e.g. a tool's configured allowed and blocked domains).
    pub fn new<A: AsRef<str>, B: AsRef<str>>(allowed: &[A], blocked: &[B]) -> Result<Self, WebError> {
        let parse = |list: &[&str], what: &str| -> Result<Vec<Rule>, WebError> {
            if list.len() > MAX_DOMAIN_RULES {
                return Err(WebError::BadInput(format!("more than {MAX_DOMAIN_RULES} {what} domains")));
            }
            list.iter().map(|r| Rule::parse(r).map_err(WebError::BadInput)).collect()
        };
        let allowed: Vec<&str> = allowed.iter().map(AsRef::as_ref).collect();
        let blocked: Vec<&str> = blocked.iter().map(AsRef::as_ref).collect();
        Ok(Self { allowed: parse(&allowed, "allowed")?, blocked: parse(&blocked, "blocked")? })
    }

    /// Whether the rules permit everything (no list set).
    pub fn is_open(&self) -> bool {
        self.allowed.is_empty() && self.blocked.is_empty()
    }

    /// Whether `url` may be reached or shown; `Err` says which rule decided.
    pub fn check(&self, url: &reqwest::Url) -> Result<(), WebError> {
        let host = url.host_str().unwrap_or_default().trim_end_matches('.').to_ascii_lowercase();
        let path = url.path();
        let refuse = |why: String| Err(WebError::DomainNotPermitted { host: host.clone(), why });
        if let Some(rule) = self.blocked.iter().find(|r| r.covers(&host, path)) {
            return refuse(format!("this agent's blocked domains include {}", rule.text()));
        }
        if !self.allowed.is_empty() && !self.allowed.iter().any(|r| r.covers(&host, path)) {
            return refuse("it is not in this agent's allowed domains".to_owned());
        }
        Ok(())
    }

    /// [`Self::check`] as a yes or no.
    pub fn permits(&self, url: &reqwest::Url) -> bool {
        self.check(url).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).expect("url")
    }

    #[test]
    fn rules_cover_subdomains_and_path_prefixes_and_blocked_wins() {
        let rules =
            DomainRules::new(&["Example.com", "*.docs.rs", "blog.io/posts"], &["secret.example.com"]).expect("valid");
        for (u, permitted) in [
            ("https://example.com/", true),
            ("https://www.example.com/a", true),
            ("https://EXAMPLE.COM./a", true),
            ("https://badexample.com/", false),
            ("https://secret.example.com/", false),
            ("https://a.secret.example.com/", false),
            ("https://docs.rs/x", true),
            ("https://blog.io/posts/1", true),
            ("https://blog.io/about", false),
            ("https://other.org/", false),
        ] {
            assert_eq!(rules.permits(&url(u)), permitted, "{u}");
        }
        let blocked_only = DomainRules::new::<&str, &str>(&[], &["localhost"]).expect("valid");
        assert!(blocked_only.permits(&url("http://127.0.0.1/")));
        let e = blocked_only.check(&url("http://localhost:8080/")).expect_err("blocked");
        assert!(e.to_string().contains("blocked domains include localhost"), "{e}");
        assert!(DomainRules::default().is_open() && DomainRules::default().permits(&url("http://x.y/")));
    }

    #[test]
    fn malformed_rules_are_refused() {
        for bad in ["", "exa mple.com", "*", "a\"b"] {
            assert!(DomainRules::new(&[bad], &[] as &[&str]).is_err(), "{bad:?}");
        }
        let many = vec!["a.com"; MAX_DOMAIN_RULES + 1];
        assert!(DomainRules::new(&many, &[] as &[&str]).is_err());
        assert!(DomainRules::new(&["https://example.com/"], &[] as &[&str]).is_ok());
    }
}
