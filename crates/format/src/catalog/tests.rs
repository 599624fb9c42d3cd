use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode};

use super::*;
use crate::{GenerateError, NativeResponse, ParseInput, Prepared, Rejection};

struct Dummy(&'static str);

impl GenerateFormat for Dummy {
    fn name(&self) -> &'static str {
        self.0
    }
    fn prepare(&self, _: ParseInput<'_>) -> Result<Prepared, Rejection> {
        Err(GenerateError::validation("dummy").into())
    }
    fn error_response(&self, _: &GenerateError, _: bool) -> NativeResponse {
        NativeResponse::json(StatusCode::BAD_REQUEST, Bytes::new())
    }
    fn stream_error_event(&self, _: &GenerateError) -> Bytes {
        Bytes::new()
    }
    fn framing(&self) -> &'static crate::Framing {
        &FRAMING
    }
}

fn refusal(status: StatusCode, _: &str) -> NativeResponse {
    NativeResponse::json(status, Bytes::new())
}
fn not_found() -> NativeResponse {
    refusal(StatusCode::NOT_FOUND, "")
}
fn method_not_allowed() -> NativeResponse {
    refusal(StatusCode::METHOD_NOT_ALLOWED, "")
}
static FRAMING: crate::Framing = crate::Framing {
    sse_prefix: b"data: ",
    sse_suffix: b"\n\n",
    sse_done: b"",
    sse_content_type: "text/event-stream",
    json_content_type: "application/json",
    not_found,
    method_not_allowed,
    http_error: refusal,
};

fn a(_: &FormatSettings) -> Arc<dyn GenerateFormat> {
    Arc::new(Dummy("a"))
}
fn b(_: &FormatSettings) -> Arc<dyn GenerateFormat> {
    Arc::new(Dummy("b"))
}

const SWITCH: SettingSpec = SettingSpec {
    flag: "a-switch",
    env: "A_SWITCH",
    help: "a switch",
    kind: SettingKind::Bool { default: true },
};
const COUNT: SettingSpec = SettingSpec {
    flag: "b-count",
    env: "B_COUNT",
    help: "a count",
    kind: SettingKind::Integer { default: 7 },
};

static ENTRIES: &[CatalogEntry] = &[
    CatalogEntry {
        name: "a",
        aliases: &[],
        native_path: "/generate",
        native_methods: &[Method::POST, Method::PUT],
        generate_methods: &[Method::POST, Method::PUT],
        settings: &[SWITCH],
        build: a,
    },
    CatalogEntry {
        name: "b",
        aliases: &["bee"],
        native_path: "/b/generate",
        native_methods: &[Method::POST],
        generate_methods: &[Method::POST],
        settings: &[SWITCH, COUNT],
        build: b,
    },
];
const CATALOG: Catalog = Catalog {
    entries: ENTRIES,
    default_generate: "a",
};

fn table(routes: &[Route]) -> Vec<(String, &'static str)> {
    routes
        .iter()
        .map(|r| (r.path.clone(), r.format.name()))
        .collect()
}

#[test]
fn default_selection_serves_each_native_path() {
    for sel in [
        None,
        Some(String::new()),
        Some("a".to_owned()),
        Some(" A ".to_owned()),
    ] {
        let cfg = RouteConfig {
            generate_format: sel,
            ..Default::default()
        };
        let routes = resolve_routes(&CATALOG, &cfg).expect("valid");
        assert_eq!(
            table(&routes),
            vec![
                ("/generate".to_owned(), "a"),
                ("/b/generate".to_owned(), "b")
            ]
        );
        assert_eq!(routes[0].methods, vec![Method::POST, Method::PUT]);
    }
}

#[test]
fn selecting_another_format_moves_generate() {
    let cfg = RouteConfig {
        generate_format: Some("bee".into()),
        ..Default::default()
    };
    let routes = resolve_routes(&CATALOG, &cfg).expect("valid");
    assert_eq!(
        table(&routes),
        vec![
            ("/generate".to_owned(), "b"),
            ("/b/generate".to_owned(), "b")
        ]
    );
    assert_eq!(routes[0].methods, vec![Method::POST]);
    // One instance per format.
    assert!(Arc::ptr_eq(&routes[0].format, &routes[1].format));
}

#[test]
fn unknown_format_names_linked_formats() {
    let cfg = RouteConfig {
        generate_format: Some("bogus".into()),
        ..Default::default()
    };
    let err = resolve_routes(&CATALOG, &cfg).expect_err("unknown");
    assert_eq!(
        err,
        ConfigError::UnknownFormat {
            name: "bogus".into(),
            linked: "a, b".into()
        }
    );
    assert!(err.to_string().contains("linked formats: a, b"));
}

#[test]
fn duplicate_paths_are_a_config_error() {
    let cfg = RouteConfig {
        extra_routes: vec![("/x".into(), "a".into()), ("/x".into(), "b".into())],
        ..Default::default()
    };
    let err = resolve_routes(&CATALOG, &cfg).expect_err("duplicate");
    assert!(matches!(err, ConfigError::DuplicateRoute { ref path, .. } if path == "/x"));
    let cfg = RouteConfig {
        extra_routes: vec![("/generate".into(), "b".into())],
        ..Default::default()
    };
    assert!(matches!(
        resolve_routes(&CATALOG, &cfg),
        Err(ConfigError::DuplicateRoute { .. })
    ));
}

#[test]
fn bad_paths_are_rejected() {
    for p in ["x", "/a/:id", "/a/*rest", "/a//b", "/{x}"] {
        let cfg = RouteConfig {
            extra_routes: vec![(p.into(), "a".into())],
            ..Default::default()
        };
        assert_eq!(
            resolve_routes(&CATALOG, &cfg).expect_err(p),
            ConfigError::InvalidPath(p.into())
        );
    }
}

#[test]
fn catalog_names_must_be_unique() {
    static DUP: &[CatalogEntry] = &[ENTRIES[0], ENTRIES[0]];
    let c = Catalog {
        entries: DUP,
        default_generate: "a",
    };
    assert_eq!(c.check(), Err(ConfigError::DuplicateFormat("a".into())));
}

#[test]
fn settings_are_listed_once_and_read_with_their_defaults() {
    CATALOG.check().expect("consistent");
    let flags: Vec<&str> = CATALOG.settings().iter().map(|s| s.flag).collect();
    assert_eq!(flags, vec!["a-switch", "b-count"]);
    let none = FormatSettings::default();
    assert!(none.bool(&SWITCH));
    assert_eq!(none.integer(&COUNT), 7);
    let set = FormatSettings::default()
        .with("a-switch", SettingValue::Bool(false))
        .with("b-count", SettingValue::Integer(3));
    assert!(!set.bool(&SWITCH));
    assert_eq!(set.integer(&COUNT), 3);
}

#[test]
fn one_flag_with_two_specs_is_refused() {
    const OTHER: SettingSpec = SettingSpec {
        flag: "a-switch",
        env: "A_SWITCH",
        help: "a switch",
        kind: SettingKind::Bool { default: false },
    };
    static CLASH: &[CatalogEntry] = &[
        CatalogEntry {
            name: "a",
            aliases: &[],
            native_path: "/generate",
            native_methods: &[Method::POST],
            generate_methods: &[Method::POST],
            settings: &[SWITCH],
            build: a,
        },
        CatalogEntry {
            name: "b",
            aliases: &[],
            native_path: "/b",
            native_methods: &[Method::POST],
            generate_methods: &[Method::POST],
            settings: &[OTHER],
            build: b,
        },
    ];
    let c = Catalog {
        entries: CLASH,
        default_generate: "a",
    };
    assert_eq!(
        c.check(),
        Err(ConfigError::ConflictingSetting("a-switch".to_owned()))
    );
}
