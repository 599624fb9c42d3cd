//! `etcd://HOST:PORT[,HOST:PORT…]/PREFIX`.

use std::fmt;
use std::str::FromStr;

use crate::DiscoveryError;

/// etcd's default client port, used when an endpoint names none.
pub const DEFAULT_PORT: u16 = 2379;

/// Where registrations live: etcd endpoints and a key prefix.
///
/// Syntax: `etcd://HOST[:PORT][,HOST[:PORT]…]/PREFIX`. `HOST` is a name, an IPv4 address or an
/// IPv6 address in brackets; `PORT` defaults to 2379. `PREFIX` is one or more `/`-separated
/// segments of ASCII letters, digits, `.`, `_` and `-` (no empty segment, no trailing `/`):
/// `etcd://10.0.0.1:2379,10.0.0.2:2379/genfront/prod`. Registrations are the keys
/// `/PREFIX/workers/<id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTarget {
    endpoints: Vec<String>,
    prefix: String,
}

impl EtcdTarget {
    /// The endpoints, as `host:port`.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The key prefix, with its leading `/` and no trailing one (`/genfront/prod`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The prefix every registration key starts with: `/PREFIX/workers/`.
    pub fn workers_prefix(&self) -> String {
        format!("{}/workers/", self.prefix)
    }

    /// The key of worker `id`: `/PREFIX/workers/<id>`.
    pub fn worker_key(&self, id: &str) -> String {
        format!("{}/workers/{id}", self.prefix)
    }
}

impl FromStr for EtcdTarget {
    type Err = DiscoveryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let url = s.trim();
        let err = |reason: String| DiscoveryError::Url {
            url: url.to_owned(),
            reason,
        };
        let rest = url.strip_prefix("etcd://").ok_or_else(|| {
            err("expected etcd://HOST:PORT[,HOST:PORT…]/PREFIX (the scheme must be etcd://)".into())
        })?;
        let (hosts, path) = rest
            .split_once('/')
            .ok_or_else(|| err("no /PREFIX after the endpoints".into()))?;
        if hosts.is_empty() {
            return Err(err("no endpoint before /PREFIX".into()));
        }
        let endpoints = hosts
            .split(',')
            .map(|h| endpoint(h.trim()).map_err(&err))
            .collect::<Result<Vec<_>, _>>()?;
        if path.is_empty() {
            return Err(err(
                "empty PREFIX: name one, as in etcd://HOST:2379/genfront".into(),
            ));
        }
        for segment in path.split('/') {
            if segment.is_empty() {
                return Err(err(format!(
                    "empty segment in PREFIX `{path}` (no `//` and no trailing `/`)"
                )));
            }
            if let Some(c) = segment
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            {
                return Err(err(format!(
                    "`{c}` in PREFIX `{path}`: segments take ASCII letters, digits, `.`, `_` and `-`"
                )));
            }
        }
        Ok(Self {
            endpoints,
            prefix: format!("/{path}"),
        })
    }
}

/// `host[:port]` → `host:port`.
fn endpoint(h: &str) -> Result<String, String> {
    if h.is_empty() {
        return Err("an empty endpoint between commas".into());
    }
    let (host, port) = if let Some(v6) = h.strip_prefix('[') {
        let (addr, tail) = v6
            .split_once(']')
            .ok_or_else(|| format!("endpoint `{h}`: unclosed `[` of an IPv6 address"))?;
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("endpoint `{h}`: `{addr}` is not an IPv6 address"));
        }
        let port = match tail {
            "" => None,
            t => Some(
                t.strip_prefix(':')
                    .ok_or_else(|| format!("endpoint `{h}`: expected `:PORT` after `]`"))?,
            ),
        };
        (format!("[{addr}]"), port)
    } else {
        match h.split_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (h.to_owned(), None),
        }
    };
    if host.is_empty()
        || !host.starts_with('[')
            && !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!(
            "endpoint `{h}`: `{host}` is not a host name or address"
        ));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("endpoint `{h}`: `{p}` is not a port (1-65535)"))?,
    };
    Ok(format!("{host}:{port}"))
}

impl fmt::Display for EtcdTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "etcd://{}{}", self.endpoints.join(","), self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<EtcdTarget, String> {
        s.parse::<EtcdTarget>().map_err(|e| e.to_string())
    }

    #[test]
    fn urls_parse() {
        let t = parse("etcd://127.0.0.1:2379/genfront").expect("parses");
        assert_eq!(t.endpoints(), ["127.0.0.1:2379"]);
        assert_eq!(t.prefix(), "/genfront");
        assert_eq!(t.worker_key("w0"), "/genfront/workers/w0");
        assert_eq!(t.workers_prefix(), "/genfront/workers/");
        assert_eq!(t.to_string(), "etcd://127.0.0.1:2379/genfront");

        let t = parse("etcd://a.example, b:3000,[::1]:4000,[fe80::1]/x/prod-1").expect("parses");
        assert_eq!(
            t.endpoints(),
            ["a.example:2379", "b:3000", "[::1]:4000", "[fe80::1]:2379"]
        );
        assert_eq!(t.prefix(), "/x/prod-1");
        assert_eq!(t.to_string().parse::<EtcdTarget>().ok(), Some(t));
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, needle) in [
            ("http://h:2379/p", "scheme must be etcd://"),
            ("etcd://h:2379", "no /PREFIX"),
            ("etcd://h:2379/", "empty PREFIX"),
            ("etcd:///p", "no endpoint"),
            ("etcd://h:2379/a//b", "empty segment"),
            ("etcd://h:2379/a/", "empty segment"),
            ("etcd://h:2379/a b", "` ` in PREFIX"),
            ("etcd://h:99999/p", "not a port"),
            ("etcd://h:0/p", "not a port"),
            ("etcd://h:x/p", "not a port"),
            ("etcd://h:1,,g:2/p", "empty endpoint"),
            ("etcd://[::1/p", "unclosed"),
            ("etcd://[nothex]:1/p", "not an IPv6"),
            ("etcd://h@x:1/p", "not a host"),
        ] {
            let e = parse(url).expect_err(url);
            assert!(e.contains(needle), "{url}: {e}");
            assert!(e.contains(url), "{url}: the error names the URL: {e}");
        }
    }
}
