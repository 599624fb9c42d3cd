//! The packing itself: token ids as standard base64 (RFC 4648 §4, with `=` padding) of a zstd
//! stream of the ids as little-endian `u32`s, 4 bytes an id, in order.

use std::io::Read;

use base64::Engine as _;

/// The key of a packed id list: `{"b64zstd": "<base64>"}`.
pub const KEY: &str = "b64zstd";

/// zstd level used when packing (level 3 is zstd's default: fast, and ids of a real vocabulary
/// still shrink to ~2.2–2.8 bytes an id before base64).
pub const LEVEL: i32 = 3;

/// Why a packed id list could not be unpacked; the text is what the 400 says after the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnpackError {
    /// The string is not standard padded base64.
    Base64(String),
    /// The bytes are not a zstd stream (or it is truncated or corrupt).
    Zstd(String),
    /// The stream decompresses to more than the limit (a decompression bomb, or just too big).
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The decompressed length is not a multiple of 4.
    Length(usize),
}

impl std::fmt::Display for UnpackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnpackError::Base64(e) => write!(f, "b64zstd is not valid base64 ({e})"),
            UnpackError::Zstd(e) => write!(f, "b64zstd is not a valid zstd stream ({e})"),
            UnpackError::TooLarge { limit } => write!(
                f,
                "b64zstd decompresses to more than {limit} bytes (--sglang-packed-max-unpacked-bytes)"
            ),
            UnpackError::Length(n) => write!(
                f,
                "b64zstd decompresses to {n} bytes, not a whole number of 4-byte little-endian u32 ids"
            ),
        }
    }
}

/// Pack `ids`: zstd (level [`LEVEL`]) of their little-endian bytes, then base64.
pub fn pack(ids: &[u32]) -> String {
    let mut raw = Vec::with_capacity(ids.len() * 4);
    for id in ids {
        raw.extend_from_slice(&id.to_le_bytes());
    }
    // Compressing an in-memory buffer cannot fail short of allocation failure; an empty frame
    // is what an error would leave, which unpacks to no ids (never reached in practice).
    let z = zstd::bulk::compress(&raw, LEVEL).unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(z)
}

/// Unpack `text` into ids, decompressing at most `limit` bytes: the decoder is read through a
/// bounded reader, so a small input that claims or expands to gigabytes stops at `limit + 1`
/// bytes with [`UnpackError::TooLarge`] instead of allocating them.
///
/// # Errors
/// [`UnpackError`]: bad base64, bad zstd, more than `limit` bytes, or a length not a multiple
/// of 4.
pub fn unpack(text: &str, limit: usize) -> Result<Vec<u32>, UnpackError> {
    let z = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| UnpackError::Base64(e.to_string()))?;
    let decoder =
        zstd::stream::read::Decoder::new(&z[..]).map_err(|e| UnpackError::Zstd(e.to_string()))?;
    let mut raw = Vec::new();
    decoder
        .take(limit as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| UnpackError::Zstd(e.to_string()))?;
    if raw.len() > limit {
        return Err(UnpackError::TooLarge { limit });
    }
    if z.is_empty() {
        // Zero bytes are no zstd frame at all.
        return Err(UnpackError::Zstd("empty input".to_owned()));
    }
    if !raw.len().is_multiple_of(4) {
        return Err(UnpackError::Length(raw.len()));
    }
    Ok(raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_is_not_packed_ids() {
        for ids in [
            vec![],
            vec![0],
            vec![1, 2, 3, u32::MAX],
            (0..40_000).collect(),
        ] {
            assert_eq!(unpack(&pack(&ids), 1 << 20), Ok(ids));
        }
        assert!(matches!(
            unpack("not base64!", 100),
            Err(UnpackError::Base64(_))
        ));
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        assert!(matches!(
            unpack(&b64(b"not zstd"), 100),
            Err(UnpackError::Zstd(_))
        ));
        assert!(matches!(unpack("", 100), Err(UnpackError::Zstd(_))));
        let three = zstd::bulk::compress(&[1, 2, 3], 3).expect("compress");
        assert_eq!(unpack(&b64(&three), 100), Err(UnpackError::Length(3)));
        // A bomb: 64 MiB of zeros is a few KiB packed; the bounded reader stops at the limit.
        let bomb = zstd::bulk::compress(&vec![0u8; 64 << 20], 19).expect("compress");
        assert!(bomb.len() < 64 << 10);
        assert_eq!(
            unpack(&b64(&bomb), 1 << 20),
            Err(UnpackError::TooLarge { limit: 1 << 20 })
        );
        // Exactly at the limit is fine.
        assert_eq!(unpack(&pack(&[7; 256]), 1024).map(|v| v.len()), Ok(256));
        assert!(unpack(&pack(&[7; 257]), 1024).is_err());
    }
}
