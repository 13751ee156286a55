//! Who may talk to the daemon: the `Host`, `Origin` and `Sec-Fetch-Site` decision.
//!
//! A web page on another site can make a browser send requests to the daemon. Two
//! defences stop it reading or changing anything:
//!
//! * **Host** (DNS rebinding): a site whose name is re-pointed at 127.0.0.1 becomes
//!   same-origin with the daemon, but the browser still sends that site's name as `Host`.
//!   Only the daemon's own names are accepted: `localhost`, `127.0.0.1`, `[::1]` and the
//!   listen address, each with the listen port, plus `[server] allowed_hosts`. When the
//!   daemon listens on every interface (`0.0.0.0`, `[::]`) any IP address with the listen
//!   port is accepted too: a name can be rebound, an address typed in cannot.
//! * **Origin** (cross-site requests): a browser names the page's origin on every request
//!   that could change something and on every cross-origin read (`fetch`, `EventSource`).
//!   When present it must be an origin whose host is allowed as above; `null` (sandboxed
//!   frames, files) is refused. Without `Origin`, a browser's `Sec-Fetch-Site` saying
//!   `cross-site` or `same-site` is refused too (image and script tags, which send no
//!   `Origin`), except a plain navigation: following a link to the page is harmless.
//!
//! Clients that are not browsers send neither header and pass on `Host` alone.
//!
//! | request | decision |
//! | --- | --- |
//! | no `Host` | refused |
//! | `Host` not allowed | refused |
//! | `Origin` present, not an allowed `http(s)` origin | refused |
//! | no `Origin`, `Sec-Fetch-Site: cross-site`/`same-site`, not a `GET`/`HEAD` navigation | refused |
//! | anything else | allowed |

use std::net::{IpAddr, SocketAddr};

/// One `[server] allowed_hosts` entry: a host name and, optionally, the only port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowedEntry {
    name: String,
    port: Option<u16>,
}

/// Parses an `allowed_hosts` entry (`HOST` or `HOST:PORT`, IPv6 in brackets).
pub(crate) fn parse_allowed_entry(entry: &str) -> Result<AllowedEntry, String> {
    let (name, port) = split_authority(entry.trim()).ok_or_else(|| {
        format!("`{entry}` is not HOST or HOST:PORT (no scheme, path or user part)")
    })?;
    Ok(AllowedEntry { name, port })
}

/// The names the daemon answers to.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    port: u16,
    /// Names allowed with `port` only (lowercase, IPv6 in brackets).
    own: Vec<String>,
    /// Any IP address with `port` (listening on every interface).
    any_address: bool,
    extra: Vec<AllowedEntry>,
}

impl AllowedHosts {
    /// The names for a daemon bound to `bound` (the real port, not `:0`) with the
    /// configured extra entries (already validated; a bad one is skipped).
    pub fn new(bound: SocketAddr, extra: &[String]) -> Self {
        let mut own = vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "[::1]".to_owned(),
        ];
        let ip = bound.ip();
        if !ip.is_unspecified() {
            own.push(ip_name(ip));
        }
        Self {
            port: bound.port(),
            own,
            any_address: ip.is_unspecified(),
            extra: extra
                .iter()
                .filter_map(|e| parse_allowed_entry(e).ok())
                .collect(),
        }
    }

    /// Whether a `Host` header value (`name[:port]`, port 80 when absent) is allowed.
    pub fn allows_host(&self, host: &str) -> bool {
        match split_authority(host) {
            Some((name, port)) => self.allows(&name, port.unwrap_or(80)),
            None => false,
        }
    }

    /// Whether an `Origin` header value (`scheme://name[:port]`) is allowed.
    pub fn allows_origin(&self, origin: &str) -> bool {
        let Some((scheme, authority)) = origin.trim().split_once("://") else {
            return false;
        };
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            _ => return false,
        };
        match split_authority(authority) {
            Some((name, port)) => self.allows(&name, port.unwrap_or(default_port)),
            None => false,
        }
    }

    fn allows(&self, name: &str, port: u16) -> bool {
        let own = port == self.port
            && (self.own.iter().any(|n| n == name) || (self.any_address && is_ip_literal(name)));
        own || self
            .extra
            .iter()
            .any(|e| e.name == name && e.port.is_none_or(|p| p == port))
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    MissingHost,
    ForeignHost(String),
    ForeignOrigin(String),
    CrossSite(String),
}

impl Refusal {
    /// A short stable name for the reason (in the error body and the metrics).
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::MissingHost => "missing_host",
            Refusal::ForeignHost(_) => "foreign_host",
            Refusal::ForeignOrigin(_) => "foreign_origin",
            Refusal::CrossSite(_) => "cross_site",
        }
    }

    /// What the client is told.
    pub(crate) fn message(&self) -> String {
        match self {
            Refusal::MissingHost => "a Host header is required".to_owned(),
            Refusal::ForeignHost(host) => format!(
                "Host `{host}` is not a name this daemon answers to (DNS rebinding \
                 protection); a reverse proxy's name belongs in [server] allowed_hosts"
            ),
            Refusal::ForeignOrigin(origin) => format!(
                "requests from origin `{origin}` are refused (cross-site request protection); \
                 only the daemon's own origins and [server] allowed_hosts may call it"
            ),
            Refusal::CrossSite(site) => format!(
                "a request a browser marks `Sec-Fetch-Site: {site}` without an allowed Origin \
                 is refused (cross-site request protection)"
            ),
        }
    }
}

/// The headers the decision looks at, as received.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RequestFacts<'a> {
    /// `GET`, `HEAD` or `OPTIONS`.
    pub safe_method: bool,
    /// The `Host` header, else the authority of an absolute request target.
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub sec_fetch_site: Option<&'a str>,
    pub sec_fetch_mode: Option<&'a str>,
}

/// The decision of the table in the module doc.
pub(crate) fn check(allowed: &AllowedHosts, facts: &RequestFacts<'_>) -> Result<(), Refusal> {
    let host = facts.host.ok_or(Refusal::MissingHost)?;
    if !allowed.allows_host(host) {
        return Err(Refusal::ForeignHost(host.to_owned()));
    }
    if let Some(origin) = facts.origin {
        return if allowed.allows_origin(origin) {
            Ok(())
        } else {
            Err(Refusal::ForeignOrigin(origin.to_owned()))
        };
    }
    match facts.sec_fetch_site.map(str::to_ascii_lowercase).as_deref() {
        Some(site @ ("cross-site" | "same-site")) => {
            let navigation = facts
                .sec_fetch_mode
                .is_some_and(|m| m.eq_ignore_ascii_case("navigate"));
            if facts.safe_method && navigation {
                Ok(())
            } else {
                Err(Refusal::CrossSite(site.to_owned()))
            }
        }
        _ => Ok(()),
    }
}

/// Splits `name[:port]` into a normalised name (lowercase, no trailing dot, IPv6 in
/// brackets) and the port; `None` for anything else (schemes, paths, user parts, spaces).
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    if authority.is_empty()
        || authority
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '/' | '@' | '?' | '#' | '\\'))
    {
        return None;
    }
    let (name, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        inside.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (format!("[{inside}]"), port)
    } else {
        match authority.split_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p != 0)?),
        None => None,
    };
    let name = name.to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name).to_owned();
    if name.is_empty() || name.starts_with('.') || name.contains("..") {
        return None;
    }
    // A bracketed name is an IPv6 literal in its canonical form, so `[::1]` and
    // `[0:0::1]` are the same host.
    let name = match name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .and_then(|n| n.parse::<std::net::Ipv6Addr>().ok())
    {
        Some(v6) => format!("[{v6}]"),
        None => name,
    };
    Some((name, port))
}

fn ip_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

fn is_ip_literal(name: &str) -> bool {
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .is_some_and(|n| n.parse::<std::net::Ipv6Addr>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(extra: &[&str]) -> AllowedHosts {
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        AllowedHosts::new("127.0.0.1:8700".parse().unwrap(), &extra)
    }

    fn facts<'a>(host: &'a str, origin: Option<&'a str>) -> RequestFacts<'a> {
        RequestFacts {
            safe_method: false,
            host: Some(host),
            origin,
            ..RequestFacts::default()
        }
    }

    #[test]
    fn the_daemons_own_names_with_its_port_are_allowed() {
        let hosts = loopback(&[]);
        for host in [
            "localhost:8700",
            "LOCALHOST:8700",
            "localhost.:8700",
            "127.0.0.1:8700",
            "[::1]:8700",
            "[0:0::1]:8700",
        ] {
            assert!(hosts.allows_host(host), "{host}");
        }
        for host in [
            "evil.example:8700",
            "localhost:8701",
            "localhost",
            "127.0.0.2:8700",
            "localhost.evil.example:8700",
            "127.0.0.1.nip.io:8700",
            "user@localhost:8700",
            "localhost:8700/x",
            "::1:8700",
            "localhost:0",
            "localhost:99999",
            "",
            " localhost:8700",
        ] {
            assert!(!hosts.allows_host(host), "{host}");
        }
    }

    #[test]
    fn every_address_is_allowed_when_listening_on_every_interface() {
        let hosts = AllowedHosts::new("0.0.0.0:8700".parse().unwrap(), &[]);
        assert!(hosts.allows_host("192.168.1.20:8700"));
        assert!(hosts.allows_host("[fe80::1]:8700"));
        assert!(hosts.allows_host("localhost:8700"));
        assert!(!hosts.allows_host("192.168.1.20:8701"));
        assert!(!hosts.allows_host("0.0.0.0.evil.example:8700"));
        assert!(
            !hosts.allows_host("my-laptop:8700"),
            "names need allowed_hosts"
        );
        let specific = AllowedHosts::new("192.168.1.20:8700".parse().unwrap(), &[]);
        assert!(specific.allows_host("192.168.1.20:8700"));
        assert!(!specific.allows_host("192.168.1.21:8700"));
    }

    #[test]
    fn configured_names_allow_any_port_unless_they_name_one() {
        let hosts = loopback(&["keel.example.com", "Tunnel:9000", "[fd00::5]"]);
        assert!(hosts.allows_host("keel.example.com"));
        assert!(hosts.allows_host("keel.example.com:443"));
        assert!(hosts.allows_host("tunnel:9000"));
        assert!(!hosts.allows_host("tunnel:9001"));
        assert!(hosts.allows_host("[fd00::5]:1"));
        assert!(!hosts.allows_host("sub.keel.example.com"));
        assert!(hosts.allows_origin("https://keel.example.com"));
    }

    #[test]
    fn bad_allowed_entries_are_named() {
        for entry in ["http://x", "x/y", "x:port", "", "a b", "[::1", "u@x"] {
            assert!(parse_allowed_entry(entry).is_err(), "{entry}");
        }
        assert!(parse_allowed_entry("proxy.internal:8443").is_ok());
    }

    #[test]
    fn origins_must_be_http_origins_of_allowed_hosts() {
        let hosts = loopback(&[]);
        for origin in [
            "http://127.0.0.1:8700",
            "http://localhost:8700",
            "http://[::1]:8700",
        ] {
            assert!(hosts.allows_origin(origin), "{origin}");
        }
        for origin in [
            "null",
            "http://evil.example",
            "http://evil.example:8700",
            "http://localhost",
            "https://localhost:8700/",
            "file://",
            "chrome-extension://abc",
            "http://127.0.0.1:8701",
            "127.0.0.1:8700",
        ] {
            assert!(!hosts.allows_origin(origin), "{origin}");
        }
    }

    #[test]
    fn a_foreign_host_is_refused_whatever_the_origin() {
        let hosts = loopback(&[]);
        assert_eq!(
            check(&hosts, &facts("evil.example:8700", None)),
            Err(Refusal::ForeignHost("evil.example:8700".into()))
        );
        assert_eq!(
            check(
                &hosts,
                &facts("evil.example:8700", Some("http://127.0.0.1:8700"))
            ),
            Err(Refusal::ForeignHost("evil.example:8700".into()))
        );
        assert_eq!(
            check(&hosts, &RequestFacts::default()),
            Err(Refusal::MissingHost)
        );
    }

    #[test]
    fn a_foreign_origin_is_refused_on_reads_and_writes() {
        let hosts = loopback(&[]);
        for safe_method in [true, false] {
            let request = RequestFacts {
                safe_method,
                ..facts("127.0.0.1:8700", Some("http://evil.example"))
            };
            assert_eq!(
                check(&hosts, &request),
                Err(Refusal::ForeignOrigin("http://evil.example".into()))
            );
        }
        assert_eq!(
            check(&hosts, &facts("127.0.0.1:8700", Some("null"))).map_err(|r| r.reason()),
            Err("foreign_origin")
        );
        assert_eq!(
            check(
                &hosts,
                &facts("127.0.0.1:8700", Some("http://localhost:8700"))
            ),
            Ok(())
        );
    }

    #[test]
    fn cross_site_requests_without_origin_are_refused_except_navigations() {
        let hosts = loopback(&[]);
        let from = |site: &'static str, mode: &'static str, safe_method: bool| RequestFacts {
            safe_method,
            host: Some("127.0.0.1:8700"),
            origin: None,
            sec_fetch_site: Some(site),
            sec_fetch_mode: Some(mode),
        };
        assert_eq!(check(&hosts, &from("cross-site", "navigate", true)), Ok(()));
        assert_eq!(
            check(&hosts, &from("cross-site", "no-cors", true)),
            Err(Refusal::CrossSite("cross-site".into()))
        );
        assert_eq!(
            check(&hosts, &from("same-site", "navigate", false)),
            Err(Refusal::CrossSite("same-site".into()))
        );
        assert_eq!(check(&hosts, &from("same-origin", "cors", false)), Ok(()));
        assert_eq!(check(&hosts, &from("none", "navigate", true)), Ok(()));
        assert_eq!(check(&hosts, &facts("localhost:8700", None)), Ok(()));
    }
}
