//! Private request ids.

/// Mint a private internal request id: 32 lowercase hex characters from a random UUIDv4.
///
/// Fixed length makes ids prefix-free (SGLang aborts by rid *prefix*), and randomness means a
/// client can never guess or choose one.
pub fn mint_request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
