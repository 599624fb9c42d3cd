//! Query strings as Starlette reads them (both engines are FastAPI apps): `&`-separated
//! `key=value` pairs, `application/x-www-form-urlencoded` decoding, the last of repeated keys.
//! Control routes read their native query parameters with this (vLLM `/pause?mode=…`, SGLang
//! `/flush_cache?timeout=…`), and the frontend its own `workers=` selection.

/// The last value of `key` in a query string (without `?`), as Starlette's `query_params[key]`:
/// `+`- and percent-decoded; `None` when the key is absent.
pub fn query_value(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k) == key).then(|| percent_decode(v))
        })
        .next_back()
}

/// `application/x-www-form-urlencoded` decoding of one key or value: `+` is a space, `%XX` a
/// byte; invalid escapes stay as they are, invalid UTF-8 becomes U+FFFD.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| char::from(c).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starlette_rules() {
        assert_eq!(
            query_value("mode=keep&mode=abort", "mode").as_deref(),
            Some("abort")
        );
        assert_eq!(query_value("a=1", "mode"), None);
        assert_eq!(query_value("mode", "mode").as_deref(), Some(""));
        assert_eq!(
            query_value("m%6Fde=it%27s+ok", "mode").as_deref(),
            Some("it's ok")
        );
        assert_eq!(percent_decode("a%zz%4"), "a%zz%4");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }
}
