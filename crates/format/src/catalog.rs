//! The static format catalog and route resolution.

use std::sync::Arc;

use http::Method;

use crate::GenerateFormat;

/// The shared path whose format `DYN_GENERATE_FORMAT` selects.
pub const GENERATE_PATH: &str = "/generate";

/// Settings a format constructor may read. Each field says which formats use it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormatSettings {
    /// SGLang: stream in incremental mode (`--incremental-streaming-output`) instead of the
    /// default cumulative mode.
    pub incremental_streaming: bool,
}

/// One linked format: its name, aliases, native route and constructor.
#[derive(Debug, Clone, Copy)]
pub struct CatalogEntry {
    /// Canonical name (what `DYN_GENERATE_FORMAT` takes).
    pub name: &'static str,
    /// Other accepted names.
    pub aliases: &'static [&'static str],
    /// The engine's own path for this API, e.g. `/inference/v1/generate`.
    pub native_path: &'static str,
    /// Methods the native path accepts.
    pub native_methods: &'static [Method],
    /// Methods accepted when this format serves [`GENERATE_PATH`] through the selection.
    pub generate_methods: &'static [Method],
    /// Builds the format.
    pub build: fn(&FormatSettings) -> Arc<dyn GenerateFormat>,
}

impl CatalogEntry {
    fn matches(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }
}

/// The formats linked into a binary: a static slice, in precedence order.
#[derive(Debug, Clone, Copy)]
pub struct Catalog {
    /// The entries. Names and aliases must be unique (checked by [`Catalog::check`]).
    pub entries: &'static [CatalogEntry],
    /// Format of [`GENERATE_PATH`] when `DYN_GENERATE_FORMAT` is unset or empty.
    pub default_generate: &'static str,
}

impl Catalog {
    /// Look up an entry by name or alias (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&'static CatalogEntry> {
        self.entries.iter().find(|e| e.matches(name))
    }

    /// Canonical names, for messages and `--help`.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.name).collect()
    }

    /// Check that names and aliases are unique and the default exists.
    ///
    /// # Errors
    /// [`ConfigError::DuplicateFormat`] or [`ConfigError::UnknownFormat`].
    pub fn check(&self) -> Result<(), ConfigError> {
        let mut seen: Vec<String> = Vec::new();
        for e in self.entries {
            for n in std::iter::once(&e.name).chain(e.aliases.iter()) {
                let n = n.to_ascii_lowercase();
                if seen.contains(&n) {
                    return Err(ConfigError::DuplicateFormat(n));
                }
                seen.push(n);
            }
        }
        if self.get(self.default_generate).is_none() {
            return Err(ConfigError::UnknownFormat {
                name: self.default_generate.to_owned(),
                linked: self.names().join(", "),
            });
        }
        Ok(())
    }
}

/// Route configuration from flags and environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteConfig {
    /// `DYN_GENERATE_FORMAT`: format of [`GENERATE_PATH`]; `None` or empty → catalog default.
    pub generate_format: Option<String>,
    /// Extra `(path, format name)` routes (`--route PATH=FORMAT`).
    pub extra_routes: Vec<(String, String)>,
    /// Settings handed to every format constructor.
    pub settings: FormatSettings,
}

/// One resolved route of the table.
#[derive(Clone)]
pub struct Route {
    /// URL path.
    pub path: String,
    /// Accepted methods.
    pub methods: Vec<Method>,
    /// The format serving it.
    pub format: Arc<dyn GenerateFormat>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("path", &self.path)
            .field("methods", &self.methods)
            .field("format", &self.format.name())
            .finish()
    }
}

/// A start-up configuration error. Never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A format name that no linked format has.
    #[error("unknown generate format `{name}`; linked formats: {linked}")]
    UnknownFormat {
        /// The name given.
        name: String,
        /// Canonical names of the linked formats.
        linked: String,
    },
    /// Two routes on one path.
    #[error("two routes on path `{path}`: `{first}` and `{second}`")]
    DuplicateRoute {
        /// The path.
        path: String,
        /// The format already on it.
        first: String,
        /// The format that collided.
        second: String,
    },
    /// A route path that is not a plain absolute path.
    #[error(
        "invalid route path `{0}`: it must start with `/` and no segment may start with `:` or `*`"
    )]
    InvalidPath(String),
    /// Two catalog entries share a name.
    #[error("duplicate format name `{0}` in the catalog")]
    DuplicateFormat(String),
}

fn check_path(path: &str) -> Result<(), ConfigError> {
    let ok = path.starts_with('/')
        && !path.contains("//")
        && path
            .split('/')
            .all(|seg| !seg.starts_with(':') && !seg.starts_with('*') && !seg.contains('{'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::InvalidPath(path.to_owned()))
    }
}

/// Build the route table: [`GENERATE_PATH`] for the selected format, each other format on its
/// native path (a format whose native path is [`GENERATE_PATH`] is only served there when
/// selected), then the extra routes.
///
/// # Errors
/// [`ConfigError`] for an unknown format name, two routes on one path, or a bad path.
pub fn resolve_routes(catalog: &Catalog, config: &RouteConfig) -> Result<Vec<Route>, ConfigError> {
    catalog.check()?;
    let unknown = |name: &str| ConfigError::UnknownFormat {
        name: name.to_owned(),
        linked: catalog.names().join(", "),
    };
    let selected_name = match config.generate_format.as_deref().map(str::trim) {
        None | Some("") => catalog.default_generate,
        Some(name) => name,
    };
    let selected = catalog
        .get(selected_name)
        .ok_or_else(|| unknown(selected_name))?;

    let mut built: Vec<(&'static str, Arc<dyn GenerateFormat>)> = Vec::new();
    let mut instance = |entry: &'static CatalogEntry| {
        if let Some((_, f)) = built.iter().find(|(n, _)| *n == entry.name) {
            return f.clone();
        }
        let f = (entry.build)(&config.settings);
        built.push((entry.name, f.clone()));
        f
    };

    let mut routes: Vec<Route> = Vec::new();
    let push = |routes: &mut Vec<Route>, route: Route| -> Result<(), ConfigError> {
        check_path(&route.path)?;
        if let Some(existing) = routes.iter().find(|r| r.path == route.path) {
            return Err(ConfigError::DuplicateRoute {
                path: route.path,
                first: existing.format.name().to_owned(),
                second: route.format.name().to_owned(),
            });
        }
        routes.push(route);
        Ok(())
    };

    push(
        &mut routes,
        Route {
            path: GENERATE_PATH.to_owned(),
            methods: if selected.native_path == GENERATE_PATH {
                selected.native_methods.to_vec()
            } else {
                selected.generate_methods.to_vec()
            },
            format: instance(selected),
        },
    )?;
    for entry in catalog.entries {
        if entry.native_path == GENERATE_PATH {
            continue;
        }
        push(
            &mut routes,
            Route {
                path: entry.native_path.to_owned(),
                methods: entry.native_methods.to_vec(),
                format: instance(entry),
            },
        )?;
    }
    for (path, name) in &config.extra_routes {
        let entry = catalog.get(name).ok_or_else(|| unknown(name))?;
        push(
            &mut routes,
            Route {
                path: path.clone(),
                methods: entry.native_methods.to_vec(),
                format: instance(entry),
            },
        )?;
    }
    // A format's abort and auxiliary routes must not land on a generate route.
    for route in &routes {
        let f = &route.format;
        let extra = f
            .abort_route()
            .map(|a| a.path)
            .into_iter()
            .chain(f.aux_routes().iter().map(|a| a.path));
        for path in extra {
            if let Some(taken) = routes.iter().find(|r| r.path == path) {
                return Err(ConfigError::DuplicateRoute {
                    path: path.to_owned(),
                    first: taken.format.name().to_owned(),
                    second: format!("{} (its own {path} route)", f.name()),
                });
            }
        }
    }
    Ok(routes)
}

#[cfg(test)]
mod tests;
