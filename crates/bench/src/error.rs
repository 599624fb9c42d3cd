//! [`ErrorKind`]: why a request did not count as a success.

use serde::Serialize;

/// Why one request failed. Failed requests are counted per kind and kept out of every latency
/// histogram; a bad server answer is always one of these, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// TCP connect failed (refused, unreachable).
    Connect,
    /// The request did not finish within `--timeout`.
    Timeout,
    /// The server answered 4xx.
    #[serde(rename = "http_4xx")]
    Http4xx,
    /// The server answered 5xx.
    #[serde(rename = "http_5xx")]
    Http5xx,
    /// Any other non-200 status.
    HttpOther,
    /// A 200 answer carried an `{"error": …}` object (an SSE error event, or such a unary body).
    ErrorEvent,
    /// The answer finished with an abort finish reason (SGLang `{"type":"abort"}`, vLLM `"abort"`).
    Aborted,
    /// The answer was cut short: a stream without `data: [DONE]`, or a connection dropped mid-response.
    Incomplete,
    /// A body or event that is not the JSON shape of the chosen `--format`.
    InvalidResponse,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Http4xx,
        ErrorKind::Http5xx,
        ErrorKind::HttpOther,
        ErrorKind::ErrorEvent,
        ErrorKind::Aborted,
        ErrorKind::Incomplete,
        ErrorKind::InvalidResponse,
    ];

    /// Stable snake_case label, the same string the JSON report uses as a key.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Http4xx => "http_4xx",
            ErrorKind::Http5xx => "http_5xx",
            ErrorKind::HttpOther => "http_other",
            ErrorKind::ErrorEvent => "error_event",
            ErrorKind::Aborted => "aborted",
            ErrorKind::Incomplete => "incomplete",
            ErrorKind::InvalidResponse => "invalid_response",
        }
    }

    /// The kind for a non-200 HTTP status.
    pub fn from_status(status: http::StatusCode) -> Self {
        if status.is_client_error() {
            ErrorKind::Http4xx
        } else if status.is_server_error() {
            ErrorKind::Http5xx
        } else {
            ErrorKind::HttpOther
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    #[test]
    fn codes_match_serde_and_index_order() {
        for (i, k) in ErrorKind::ALL.into_iter().enumerate() {
            assert_eq!(k.index(), i);
            let json = serde_json::to_string(&k).expect("serializes");
            assert_eq!(json, format!("\"{}\"", k.code()));
        }
    }

    #[test]
    fn status_classes() {
        use http::StatusCode;
        assert_eq!(
            ErrorKind::from_status(StatusCode::BAD_REQUEST),
            ErrorKind::Http4xx
        );
        assert_eq!(
            ErrorKind::from_status(StatusCode::SERVICE_UNAVAILABLE),
            ErrorKind::Http5xx
        );
        assert_eq!(
            ErrorKind::from_status(StatusCode::FOUND),
            ErrorKind::HttpOther
        );
    }
}
