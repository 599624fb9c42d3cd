//! Private request ids.

use std::cell::RefCell;

use ring::rand::{SecureRandom, SystemRandom};

/// Ids' worth of random bytes fetched from the OS at once (one `getrandom` per this many ids
/// instead of one per id).
const BATCH: usize = 32;

/// A thread's buffer of OS random bytes, 16 per id.
struct Pool {
    bytes: [u8; 16 * BATCH],
    /// Bytes already handed out (`bytes.len()`: empty).
    used: usize,
}

thread_local! {
    static POOL: RefCell<Pool> = const {
        RefCell::new(Pool {
            bytes: [0; 16 * BATCH],
            used: 16 * BATCH,
        })
    };
}

/// 16 bytes from the OS's CSPRNG, taken from the thread's pool (refilled with one call per
/// [`BATCH`] ids). `None` if the OS refused.
fn random_16() -> Option<[u8; 16]> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.used >= pool.bytes.len() {
            SystemRandom::new().fill(&mut pool.bytes).ok()?;
            pool.used = 0;
        }
        let mut out = [0u8; 16];
        let at = pool.used;
        out.copy_from_slice(&pool.bytes[at..at + 16]);
        // Each byte is handed out once.
        pool.bytes[at..at + 16].fill(0);
        pool.used = at + 16;
        Some(out)
    })
}

/// Mint a private internal request id: 32 lowercase hex characters from a random UUIDv4.
///
/// Fixed length makes ids prefix-free (SGLang aborts by rid *prefix*), and randomness (the OS's
/// CSPRNG, fetched a batch of ids at a time) means a client can never guess or choose one.
pub fn mint_request_id() -> String {
    let id = match random_16() {
        Some(bytes) => uuid::Builder::from_random_bytes(bytes).into_uuid(),
        None => uuid::Uuid::new_v4(),
    };
    let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
    id.simple().encode_lower(&mut buf).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_v4_hex_and_distinct() {
        let ids: Vec<String> = (0..3 * BATCH).map(|_| mint_request_id()).collect();
        for id in &ids {
            assert_eq!(id.len(), 32);
            assert!(id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
            let u = uuid::Uuid::parse_str(id).expect("uuid");
            assert_eq!(u.get_version_num(), 4);
        }
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len());
    }
}
