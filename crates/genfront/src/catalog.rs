//! The formats linked into this binary.

use genfront_format::{Catalog, CatalogEntry};

static ENTRIES: &[CatalogEntry] = &[genfront_sglang::CATALOG_ENTRY, genfront_vllm::CATALOG_ENTRY];

/// The catalog: SGLang (default format of `/generate`) and vLLM.
pub const CATALOG: Catalog = Catalog {
    entries: ENTRIES,
    default_generate: "sglang",
};

#[cfg(test)]
mod tests {
    use genfront_format::FormatSettings;

    use super::*;

    #[test]
    fn names_are_unique_and_every_entry_constructs() {
        CATALOG.check().expect("catalog is consistent");
        for e in CATALOG.entries {
            let f = (e.build)(&FormatSettings::default());
            assert_eq!(f.name(), e.name);
        }
    }
}
