//! API keys: who may call which route, and who owns a request.
//!
//! Keys come from `--api-key` (repeatable, or one per line in `--api-key-file`; each key is a
//! **tenant**) and `--admin-api-key` (repeatable). A client sends one as
//! `Authorization: Bearer <key>` (the scheme is case-insensitive, RFC 9110 §11.1). The presented
//! key is hashed (SHA-256) and compared with every configured key's hash in constant time
//! (`subtle`), without stopping at the first match, so neither the key nor its length leaks
//! through timing. Keys are never logged and never in `Debug` output ([`ApiKeys`] prints only
//! counts).
//!
//! | route | no keys configured | keys configured |
//! |---|---|---|
//! | generate routes, model/server-info routes | open | a tenant or admin key |
//! | abort routes (`/abort_request`, vLLM's abort) | open; any caller aborts anything (the engines' rule) | a tenant key aborts only its own requests; the admin key aborts anyone's |
//! | `abort_all` | open | admin key only (a tenant key gets 403) |
//! | `/health`, `/ready`, `/health_generate`, `/metrics` | open | open (probes and scrapers) |
//!
//! The open probes and `/metrics` follow SGLang's own `--api-key` middleware
//! (`add_api_key_middleware`: `/health*` and `/metrics` pass without a key, `OPTIONS` too);
//! SGLang answers its refusal with a bare `{"error": "Unauthorized"}`, genfront with the route
//! format's full error envelope so clients parse one shape per format.
//!
//! A missing or wrong key is a 401 in the route format's native error envelope
//! ([`GenerateError::Http`]) with `WWW-Authenticate: Bearer`, counted in
//! `genfront_auth_refusals_total{route}`; a tenant key where the admin key is needed is a 403.
//!
//! **Owners.** With keys, a request's owner is its key: tenant key `i` (in the order given) is
//! owner `i + 1`, admin key `j` is owner `tenants + j + 1`; without keys every request is owner
//! `0`. The in-flight index ([`crate::InFlight`]) is partitioned by owner, so a tenant's abort
//! never even looks at another tenant's requests.

use std::fmt;

use genfront_format::GenerateError;
use http::header::AUTHORIZATION;
use http::{HeaderMap, StatusCode};
use subtle::{ConstantTimeEq, ConstantTimeGreater};

use crate::registry::AbortScope;

/// Labels of `genfront_auth_refusals_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct AuthLabels {
    /// The route path refused.
    pub route: String,
}

/// SHA-256 of a key.
type Digest = [u8; 32];

fn digest(key: &[u8]) -> Digest {
    let d = ring::digest::digest(&ring::digest::SHA256, key);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// A key as given on the command line or in the environment: `Debug` and `Display` print
/// `***`, never the key.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretKey(String);

impl SecretKey {
    /// The key itself (to hash it; never log it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(***)")
    }
}

impl fmt::Display for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl std::str::FromStr for SecretKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

/// The configured API keys (hashed). `Default`: none, i.e. every route open.
#[derive(Clone, Default)]
pub struct ApiKeys {
    tenants: Vec<Digest>,
    admins: Vec<Digest>,
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeys")
            .field("tenants", &self.tenants.len())
            .field("admins", &self.admins.len())
            .finish()
    }
}

/// Who a request comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The owner its requests are registered under (`0` without keys).
    pub owner: u32,
    /// Whether it holds the admin key (or no keys are configured: everyone is, as on the
    /// engines).
    pub admin: bool,
}

impl Caller {
    /// Whose requests this caller's aborts reach: everyone's for the admin key (and without
    /// keys), else only its own.
    pub fn abort_scope(&self) -> AbortScope {
        if self.admin {
            AbortScope::Everyone
        } else {
            AbortScope::Owner(self.owner)
        }
    }
}

/// The key a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A tenant or admin key.
    ApiKey,
    /// The admin key.
    Admin,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No key, a malformed `Authorization` header, or a key that is not configured: 401.
    Unauthenticated,
    /// A tenant key where the admin key is needed: 403.
    Forbidden,
}

impl Refusal {
    /// The error answered, in the route format's envelope.
    pub fn error(self) -> GenerateError {
        match self {
            Refusal::Unauthenticated => GenerateError::Http {
                status: StatusCode::UNAUTHORIZED,
                message: "Unauthorized: send a valid API key as `Authorization: Bearer <key>`."
                    .to_owned(),
            },
            Refusal::Forbidden => GenerateError::Http {
                status: StatusCode::FORBIDDEN,
                message: "Forbidden: this operation needs the admin API key (--admin-api-key)."
                    .to_owned(),
            },
        }
    }
}

impl ApiKeys {
    /// Keys from `tenants` (`--api-key`, `--api-key-file`) and `admins` (`--admin-api-key`).
    ///
    /// # Errors
    /// An empty key (after trimming whitespace), or the same key given twice (as a tenant and an
    /// admin, or twice in one list: owners would be ambiguous).
    pub fn new(tenants: &[String], admins: &[String]) -> Result<Self, String> {
        let mut seen: Vec<Digest> = Vec::new();
        let mut hash = |k: &String, what: &str| -> Result<Digest, String> {
            let k = k.trim();
            if k.is_empty() {
                return Err(format!("{what}: an API key must not be empty"));
            }
            let d = digest(k.as_bytes());
            if seen.contains(&d) {
                return Err(format!("{what}: the same API key is given twice"));
            }
            seen.push(d);
            Ok(d)
        };
        let tenants = tenants
            .iter()
            .map(|k| hash(k, "--api-key"))
            .collect::<Result<Vec<_>, _>>()?;
        let admins = admins
            .iter()
            .map(|k| hash(k, "--admin-api-key"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { tenants, admins })
    }

    /// Parse a keys file: one key per line; blank lines and lines starting with `#` are
    /// skipped, surrounding whitespace is trimmed.
    pub fn parse_file(text: &str) -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    }

    /// Whether any key is configured (then protected routes refuse requests without one).
    pub fn enabled(&self) -> bool {
        !self.tenants.is_empty() || !self.admins.is_empty()
    }

    /// Number of tenant keys.
    pub fn tenants(&self) -> usize {
        self.tenants.len()
    }

    /// Who sent `headers`, if it may call a route that needs `need`. Without keys everyone may
    /// call everything, as owner 0 with admin rights (the engines' rule).
    ///
    /// # Errors
    /// [`Refusal::Unauthenticated`] for a missing, malformed or unknown key;
    /// [`Refusal::Forbidden`] for a tenant key where the admin key is needed.
    pub fn check(&self, headers: &HeaderMap, need: Need) -> Result<Caller, Refusal> {
        if !self.enabled() {
            return Ok(Caller {
                owner: 0,
                admin: true,
            });
        }
        let token = bearer(headers).ok_or(Refusal::Unauthenticated)?;
        let d = digest(token);
        // Every key is compared; the match is accumulated without branching on secrets.
        let mut owner = 0u32;
        let mut found = subtle::Choice::from(0);
        for (i, k) in self.tenants.iter().chain(&self.admins).enumerate() {
            let hit = k.ct_eq(&d);
            let idx = u32::try_from(i + 1).unwrap_or(u32::MAX);
            owner = subtle::ConditionallySelectable::conditional_select(&owner, &idx, hit);
            found |= hit;
        }
        if !bool::from(found) {
            return Err(Refusal::Unauthenticated);
        }
        let tenants = u32::try_from(self.tenants.len()).unwrap_or(u32::MAX);
        let admin = bool::from(owner.ct_gt(&tenants));
        if need == Need::Admin && !admin {
            return Err(Refusal::Forbidden);
        }
        Ok(Caller { owner, admin })
    }
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive), if well-formed.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let v = headers.get(AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = v.split_at(v.iter().position(|b| *b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, auth.parse().expect("header"));
        h
    }

    #[test]
    fn owners_admin_and_refusals() {
        let keys = ApiKeys::new(&["a".into(), "b".into()], &["root".into()]).expect("keys");
        assert!(keys.enabled());
        let a = keys.check(&headers("Bearer a"), Need::ApiKey).expect("a");
        let b = keys.check(&headers("bearer  b "), Need::ApiKey).expect("b");
        assert_eq!((a.owner, a.admin, b.owner, b.admin), (1, false, 2, false));
        let r = keys
            .check(&headers("Bearer root"), Need::Admin)
            .expect("root");
        assert_eq!((r.owner, r.admin), (3, true));
        assert_eq!(r.abort_scope(), AbortScope::Everyone);
        assert_eq!(a.abort_scope(), AbortScope::Owner(1));
        assert_eq!(
            keys.check(&headers("Bearer a"), Need::Admin),
            Err(Refusal::Forbidden)
        );
        for bad in ["Bearer c", "Basic a", "Bearer", "a", "Bearer ab"] {
            assert_eq!(
                keys.check(&headers(bad), Need::ApiKey),
                Err(Refusal::Unauthenticated),
                "{bad}"
            );
        }
        assert_eq!(
            keys.check(&HeaderMap::new(), Need::ApiKey),
            Err(Refusal::Unauthenticated)
        );
    }

    #[test]
    fn no_keys_is_open_and_debug_hides_keys() {
        let open = ApiKeys::default();
        let c = open.check(&HeaderMap::new(), Need::Admin).expect("open");
        assert_eq!((c.owner, c.admin), (0, true));
        let keys = ApiKeys::new(&["s3cret-key".into()], &[]).expect("keys");
        let dbg = format!("{keys:?}");
        assert!(!dbg.contains("s3cret"), "{dbg}");
        assert!(ApiKeys::new(&["x".into()], &["x".into()]).is_err());
        assert!(ApiKeys::new(&[" ".into()], &[]).is_err());
        assert_eq!(
            ApiKeys::parse_file("# keys\n k1 \n\nk2\n"),
            vec!["k1".to_owned(), "k2".to_owned()]
        );
    }
}
