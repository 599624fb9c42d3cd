//! The formats linked into this binary, and the command-line flags their settings contribute.

use clap::builder::BoolishValueParser;
use clap::{Arg, ArgMatches, Command};
use genfront_format::{Catalog, CatalogEntry, FormatSettings, SettingKind, SettingValue};

static ENTRIES: &[CatalogEntry] = &[
    genfront_sglang::CATALOG_ENTRY,
    genfront_vllm::CATALOG_ENTRY,
    genfront_sglang_packed::CATALOG_ENTRY,
];

/// The catalog: SGLang (default format of `/generate`), vLLM, and `sglang-packed` (SGLang with
/// packed token ids; served only where configured: `--route /generate_packed=sglang-packed` or
/// `DYN_GENERATE_FORMAT=sglang-packed`).
pub const CATALOG: Catalog = Catalog {
    entries: ENTRIES,
    default_generate: "sglang",
};

/// The settings every linked format declares ([`CatalogEntry::settings`]) as `genfront serve`
/// flags: each [`genfront_format::SettingSpec`] becomes `--<flag>` with its environment
/// variable (the flag wins), under the "Routes" help heading. A [`SettingKind::Bool`] is a
/// switch (`--flag`, `--flag=false`; env `true`/`false`/`1`/`0`/`yes`/`no`/`on`/`off`), a
/// [`SettingKind::Integer`] takes a `u64`. A value not given is left unset, so the format reads
/// its spec's default. Flattened into [`crate::ServeArgs`] (`#[command(flatten)]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormatArgs(pub FormatSettings);

fn arg_of(spec: &'static genfront_format::SettingSpec) -> Arg {
    let arg = Arg::new(spec.flag)
        .long(spec.flag)
        .env(spec.env)
        .help(spec.help)
        .help_heading("Routes");
    match spec.kind {
        SettingKind::Bool { default } => arg
            .value_parser(BoolishValueParser::new())
            .num_args(0..=1)
            .default_value(if default { "true" } else { "false" })
            .default_missing_value("true"),
        SettingKind::Integer { .. } => arg.value_parser(clap::value_parser!(u64)),
    }
}

impl clap::FromArgMatches for FormatArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = Self::default();
        args.update_from_arg_matches(matches)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for spec in CATALOG.settings() {
            let value = match spec.kind {
                SettingKind::Bool { .. } => matches
                    .try_get_one::<bool>(spec.flag)
                    .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e))?
                    .map(|b| SettingValue::Bool(*b)),
                SettingKind::Integer { .. } => matches
                    .try_get_one::<u64>(spec.flag)
                    .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, e))?
                    .map(|n| SettingValue::Integer(*n)),
            };
            if let Some(v) = value {
                self.0.set(spec.flag, v);
            }
        }
        Ok(())
    }
}

impl clap::Args for FormatArgs {
    fn augment_args(cmd: Command) -> Command {
        CATALOG
            .settings()
            .into_iter()
            .fold(cmd, |cmd, spec| cmd.arg(arg_of(spec)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args, FromArgMatches};
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

    fn parse(argv: &[&str]) -> FormatSettings {
        let cmd = FormatArgs::augment_args(Command::new("t"));
        let m = cmd.try_get_matches_from(argv).expect("parses");
        FormatArgs::from_arg_matches(&m).expect("reads").0
    }

    #[test]
    fn every_declared_setting_is_a_flag() {
        let spec = genfront_sglang::INCREMENTAL_STREAMING;
        assert!(!parse(&["t"]).bool(&spec));
        assert!(parse(&["t", "--sglang-incremental-streaming"]).bool(&spec));
        assert!(!parse(&["t", "--sglang-incremental-streaming=false"]).bool(&spec));
        let max = genfront_sglang_packed::MAX_UNPACKED_BYTES;
        assert_eq!(parse(&["t"]).integer(&max), 64 << 20);
        let set = parse(&["t", "--sglang-packed-max-unpacked-bytes", "4096"]);
        assert_eq!(set.integer(&max), 4096);
        let cmd = FormatArgs::augment_args(Command::new("t"));
        assert!(
            cmd.try_get_matches_from(["t", "--sglang-packed-max-unpacked-bytes", "lots"])
                .is_err()
        );
    }
}
