//! Routed experts as vLLM sends them: `base64(np.save(array))`, a NumPy `.npy` v1.0 file of a
//! little-endian `int32` array shaped `(rows, num_layers, top_k)` (`numpy2base64` in vLLM).

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
