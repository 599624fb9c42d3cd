//! The static format catalog and route resolution.

use std::sync::Arc;

use http::Method;

use crate::GenerateFormat;

/// The shared path whose format `DYN_GENERATE_FORMAT` selects.
pub const GENERATE_PATH: &str = "/generate";

/// The kind and default of one [`SettingSpec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingKind {
    /// A switch: `--flag` alone means `true`; `--flag=false`/`--flag=0`/`no`/`off` and the env
    /// forms (`true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`) are accepted as well.
    Bool {
        /// The value when neither the flag nor the env variable is given.
        default: bool,
    },
    /// A non-negative integer (`u64`), e.g. a byte count.
    Integer {
        /// The value when neither the flag nor the env variable is given.
        default: u64,
    },
}

/// One setting a format contributes to the binary's command line: the binary turns every
/// [`CatalogEntry::settings`] item into a `--<flag>` flag with environment variable `env` (the
/// flag wins over the environment), and hands the values to every constructor as
/// [`FormatSettings`]. Two entries may list the same setting (a format that extends another
/// reuses its settings) only if the two specs are identical ([`Catalog::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingSpec {
    /// Long flag name without the leading `--`, e.g. `sglang-incremental-streaming`; also the
    /// key of the value in [`FormatSettings`]. Prefix it with the format's name.
    pub flag: &'static str,
    /// Environment variable, e.g. `GENFRONT_SGLANG_INCREMENTAL_STREAMING`.
    pub env: &'static str,
    /// One-paragraph `--help` text.
    pub help: &'static str,
    /// Kind and default.
    pub kind: SettingKind,
}

/// A setting's value, as [`FormatSettings`] holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingValue {
    /// Of a [`SettingKind::Bool`] setting.
    Bool(bool),
    /// Of a [`SettingKind::Integer`] setting.
    Integer(u64),
}

/// The values of the format-contributed settings ([`SettingSpec`]), keyed by flag name, handed
/// to every format constructor. A setting without a value (not given, or a caller that builds
/// formats without a command line, such as tests) reads as its spec's default. The shared crate
/// knows no setting by name: each format declares and reads its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormatSettings {
    values: std::collections::BTreeMap<&'static str, SettingValue>,
}

impl FormatSettings {
    /// Record the value of the setting named `flag`.
    pub fn set(&mut self, flag: &'static str, value: SettingValue) {
        self.values.insert(flag, value);
    }

    /// `self` with `flag` set to `value` (builder form of [`FormatSettings::set`]).
    #[must_use]
    pub fn with(mut self, flag: &'static str, value: SettingValue) -> Self {
        self.set(flag, value);
        self
    }

    /// The value of a [`SettingKind::Bool`] setting: the recorded value, else the spec's
    /// default (also when the recorded value has another kind, or the spec is not a switch:
    /// `false`).
    pub fn bool(&self, spec: &SettingSpec) -> bool {
        match (self.values.get(spec.flag), spec.kind) {
            (Some(SettingValue::Bool(b)), _) => *b,
            (_, SettingKind::Bool { default }) => default,
            (_, SettingKind::Integer { .. }) => false,
        }
    }

    /// The value of a [`SettingKind::Integer`] setting: the recorded value, else the spec's
    /// default (`0` for a spec that is not an integer).
    pub fn integer(&self, spec: &SettingSpec) -> u64 {
        match (self.values.get(spec.flag), spec.kind) {
            (Some(SettingValue::Integer(n)), _) => *n,
            (_, SettingKind::Integer { default }) => default,
            (_, SettingKind::Bool { .. }) => 0,
        }
    }
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
    /// The settings this format contributes to the binary's command line (flags and
    /// environment names); their values reach [`CatalogEntry::build`].
    pub settings: &'static [SettingSpec],
    /// Builds the format. Its framing (SSE bytes, content types, the bodies of 404/405 and
    /// other HTTP-level refusals) is [`GenerateFormat::framing`] of what it builds.
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

    /// Every entry's settings, each flag once, in catalog order (what the binary turns into
    /// flags). A flag listed by two entries appears once ([`Catalog::check`] makes sure the two
    /// specs are the same).
    pub fn settings(&self) -> Vec<&'static SettingSpec> {
        let mut out: Vec<&'static SettingSpec> = Vec::new();
        for e in self.entries {
            for s in e.settings {
                if !out.iter().any(|o| o.flag == s.flag) {
                    out.push(s);
                }
            }
        }
        out
    }

    /// Check that names and aliases are unique, the default exists, and a setting flag listed
    /// by two entries is the same spec in both.
    ///
    /// # Errors
    /// [`ConfigError::DuplicateFormat`], [`ConfigError::UnknownFormat`] or
    /// [`ConfigError::ConflictingSetting`].
    pub fn check(&self) -> Result<(), ConfigError> {
        let mut specs: Vec<&SettingSpec> = Vec::new();
        for s in self.entries.iter().flat_map(|e| e.settings.iter()) {
            match specs.iter().find(|o| o.flag == s.flag || o.env == s.env) {
                Some(o) if *o != s => {
                    return Err(ConfigError::ConflictingSetting(s.flag.to_owned()));
                }
                Some(_) => {}
                None => specs.push(s),
            }
        }
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
    /// Two catalog entries list a setting flag (or env name) with different specs.
    #[error("setting `--{0}` is declared differently by two formats of the catalog")]
    ConflictingSetting(String),
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
