//! Routed experts as vLLM sends them: `base64(np.save(array))`, a NumPy `.npy` file of an integer
//! array shaped `(rows, num_layers, top_k)` (`numpy2base64` in vLLM).
//!
//! The encoder writes `.npy` v1.0 `<i4` (what genfront renders); the decoder reads what vLLM may
//! send: versions 1–3, any integer dtype (`u1`/`u2`/`i4` in practice), either byte order, C order.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// `.npy` magic and version 1.0.
const MAGIC: &[u8] = b"\x93NUMPY\x01\x00";
/// NumPy pads the header so that the data starts at a multiple of 64 bytes.
const ALIGN: usize = 64;

/// The `.npy` v1.0 bytes of an `<i4` array of the given shape (`ids.len()` must be the product).
pub(crate) fn npy_i32(shape: &[usize], ids: &[i32]) -> Vec<u8> {
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<i4', 'fortran_order': False, 'shape': {dims}, }}");
    let unpadded = MAGIC.len() + 2 + header.len() + 1;
    let pad = (ALIGN - unpadded % ALIGN) % ALIGN;
    header.extend(std::iter::repeat_n(' ', pad));
    header.push('\n');
    let header_len = u16::try_from(header.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(MAGIC.len() + 2 + header.len() + ids.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// `base64` (standard alphabet, padded) of [`npy_i32`] for a `(rows, num_layers, top_k)` array.
pub(crate) fn routed_experts_b64(num_layers: u32, top_k: u32, ids: &[i32]) -> String {
    let width = (num_layers as usize) * (top_k as usize);
    let rows = ids.len().checked_div(width).unwrap_or(0);
    let bytes = npy_i32(
        &[rows, num_layers as usize, top_k as usize],
        &ids[..rows * width],
    );
    STANDARD.encode(bytes)
}

/// A decoded integer `.npy` array: its shape and its values in C order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NpyInts {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// `product(shape)` values, row-major.
    pub values: Vec<i64>,
}

/// Why a `.npy` payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NpyError(pub &'static str);

/// Decode an integer `.npy` file (versions 1.0–3.0, dtype `[<>|=][iu][1248]`, `fortran_order`
/// false). Never panics on arbitrary bytes.
pub(crate) fn parse_npy_ints(bytes: &[u8]) -> Result<NpyInts, NpyError> {
    let rest = bytes
        .strip_prefix(b"\x93NUMPY".as_slice())
        .ok_or(NpyError("missing .npy magic"))?;
    let (major, rest) = rest.split_first().ok_or(NpyError("truncated"))?;
    let (_minor, rest) = rest.split_first().ok_or(NpyError("truncated"))?;
    let (header_len, rest) = match major {
        1 => {
            let (len, rest) = rest.split_at_checked(2).ok_or(NpyError("truncated"))?;
            (usize::from(u16::from_le_bytes([len[0], len[1]])), rest)
        }
        2 | 3 => {
            let (len, rest) = rest.split_at_checked(4).ok_or(NpyError("truncated"))?;
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
            (
                usize::try_from(len).map_err(|_| NpyError("header too long"))?,
                rest,
            )
        }
        _ => return Err(NpyError("unsupported .npy version")),
    };
    let (header, data) = rest
        .split_at_checked(header_len)
        .ok_or(NpyError("truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| NpyError("header is not text"))?;
    let descr = quoted_value(header, "descr").ok_or(NpyError("no descr"))?;
    if literal_value(header, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(NpyError("fortran_order arrays are not supported"));
    }
    let shape = shape_value(header).ok_or(NpyError("no shape"))?;
    let (big_endian, signed, size) = dtype(descr).ok_or(NpyError("not an integer dtype"))?;
    let count = shape
        .iter()
        .try_fold(1usize, |acc, d| acc.checked_mul(*d))
        .ok_or(NpyError("shape overflows"))?;
    let needed = count.checked_mul(size).ok_or(NpyError("shape overflows"))?;
    let data = data.get(..needed).ok_or(NpyError("truncated data"))?;
    let values = data
        .chunks_exact(size)
        .map(|item| {
            let mut raw = [0u8; 8];
            if big_endian {
                for (dst, src) in raw.iter_mut().zip(item.iter().rev()) {
                    *dst = *src;
                }
            } else {
                raw[..size].copy_from_slice(item);
            }
            let unsigned = u64::from_le_bytes(raw);
            let bits = (size * 8) as u32;
            if signed && bits < 64 {
                // Sign-extend from `bits`.
                let shift = 64 - bits;
                ((unsigned << shift) as i64) >> shift
            } else {
                unsigned as i64
            }
        })
        .collect();
    Ok(NpyInts { shape, values })
}

/// `(big_endian, signed, item size)` of an integer dtype string such as `<i4` or `|u1`.
fn dtype(descr: &str) -> Option<(bool, bool, usize)> {
    let mut chars = descr.chars();
    let order = chars.next()?;
    let big_endian = match order {
        '<' | '|' | '=' => false,
        '>' => true,
        _ => return None,
    };
    let signed = match chars.next()? {
        'i' => true,
        'u' => false,
        _ => return None,
    };
    let size: usize = chars.as_str().parse().ok()?;
    matches!(size, 1 | 2 | 4 | 8).then_some((big_endian, signed, size))
}

/// The text after `'key':` in a Python dict literal, trimmed.
fn literal_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let quoted = format!("'{key}'");
    let at = header.find(&quoted)? + quoted.len();
    let rest = header.get(at..)?.trim_start();
    Some(rest.strip_prefix(':')?.trim_start())
}

/// A quoted string value (`'key': '<i4'`).
fn quoted_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let rest = literal_value(header, key)?;
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = rest.get(1..)?;
    rest.get(..rest.find(quote)?)
}

/// The `shape` tuple (`(3, 2, 4)`, `(5,)`, `()`).
fn shape_value(header: &str) -> Option<Vec<usize>> {
    let rest = literal_value(header, "shape")?.strip_prefix('(')?;
    let inner = rest.get(..rest.find(')')?)?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.trim_end_matches('L').parse().ok())
        .collect()
}

/// Decode vLLM's base64 `.npy` routed experts into `(num_layers, top_k, ids)`: a 3-D integer array
/// `(rows, num_layers, top_k)` whose values fit `i32`.
pub(crate) fn routed_experts_from_b64(text: &str) -> Result<(u32, u32, Vec<i32>), NpyError> {
    let bytes = STANDARD
        .decode(text)
        .map_err(|_| NpyError("routed experts are not base64"))?;
    let npy = parse_npy_ints(&bytes)?;
    let [_, layers, top_k] = npy.shape[..] else {
        return Err(NpyError("routed experts are not a 3-D array"));
    };
    let layers = u32::try_from(layers).map_err(|_| NpyError("too many layers"))?;
    let top_k = u32::try_from(top_k).map_err(|_| NpyError("top_k too large"))?;
    let ids = npy
        .values
        .into_iter()
        .map(i32::try_from)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| NpyError("expert id does not fit i32"))?;
    Ok((layers, top_k, ids))
}
