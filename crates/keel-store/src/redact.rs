//! Database URLs as they may be shown: the password is replaced wherever a URL can carry
//! one (`user:password@` and a `password=` query parameter), so no message or log line
//! holds it.

/// What replaces a password.
const MASK: &str = "***";

/// `url` with every password masked; anything that is not a URL comes back unchanged.
pub fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut out = redact_userinfo(head);
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                    format!("{key}={MASK}")
                }
                _ => param.to_owned(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

/// Masks the password of `scheme://user:password@host...`.
fn redact_userinfo(head: &str) -> String {
    let Some((scheme, rest)) = head.split_once("://") else {
        return head.to_owned();
    };
    // The authority ends at the first `/`; a password may itself hold `@`, so the userinfo
    // ends at the authority's last `@`.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some(at) = authority.rfind('@') else {
        return head.to_owned();
    };
    let (userinfo, host) = authority.split_at(at);
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:{MASK}{host}{path}"),
        None => head.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_wherever_a_url_carries_them() {
        let cases = [
            (
                "postgres://keel:s3cret@db:5432/keel",
                "postgres://keel:***@db:5432/keel",
            ),
            (
                "postgresql://keel:p@ss@db/keel?sslmode=require",
                "postgresql://keel:***@db/keel?sslmode=require",
            ),
            (
                "postgres://db/keel?user=keel&password=s3cret&sslmode=disable",
                "postgres://db/keel?user=keel&password=***&sslmode=disable",
            ),
            (
                "postgres://keel:a@db?PASSWORD=b",
                "postgres://keel:***@db?PASSWORD=***",
            ),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown);
            assert!(!redact_url(url).contains("s3cret"));
        }
    }

    #[test]
    fn urls_without_a_password_are_unchanged() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "postgres://db/keel",
            "sqlite://keel-data/keel.db",
            "sqlite::memory:",
            "sqlite://a/b@c",
            "not a url",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }
}
