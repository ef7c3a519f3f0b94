//! One way to configure every binary: `--config FILE` names a TOML file whose keys are the
//! flag names (with `_` for `-`), and flags given on the command line win over it. A key the
//! binary does not know is an error that names it (and the file's line), as is a value of
//! the wrong type.
//!
//! A binary's flags are a `clap` struct that also derives `Serialize`, every config flag an
//! `Option` (left out when not given) or a list skipped when empty; its configuration is a
//! `Deserialize` struct with `#[serde(default, deny_unknown_fields)]`. [`load`] lays the
//! flags over the file and deserializes the result, so no binary copies fields one by one.
//!
//! Settings every service repeats (TLS: [`crate::tls::TlsArgs`]; ZooKeeper:
//! `cluster::ZooKeeperArgs`) are groups flattened into both structs (`#[command(flatten)]`,
//! `#[serde(flatten)]`). serde cannot combine `deny_unknown_fields` with `flatten`, so a
//! config with groups is `#[serde(default)]` and its last field is the catch-all
//! `#[serde(flatten)] unknown: Unknown`: [`Unknown`] refuses whatever key no other field took.
//! Each group must be a plain struct (a group flattening another would hand the catch-all its
//! keys as well), and serde reports an error inside a group without the key's place: [`load`]
//! (and [`parse`]) then find the key themselves.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}, line {line} `{text}`: {message}")]
    File { path: PathBuf, line: usize, text: String, message: String },
    #[error("{0}")]
    Flags(String),
}

/// The configuration: `T`'s defaults, then the keys of `file`, then every flag in `flags`
/// that was given.
pub fn load<T: DeserializeOwned>(
    file: Option<&Path>,
    flags: &impl Serialize,
) -> Result<T, ConfigError> {
    let mut table = match file {
        Some(path) => read_file::<T>(path)?,
        None => toml::Table::new(),
    };
    let flags = toml::Table::try_from(flags).map_err(|e| ConfigError::Flags(one_line(&e)))?;
    table.extend(flags);
    toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::Flags(one_line(&e)))
}

/// The file's keys, checked against `T` first so that an error carries its line.
fn read_file<T: DeserializeOwned>(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    let (table, _) = check::<T>(&text).map_err(|(line, message)| ConfigError::File {
        path: path.to_owned(),
        line,
        text: text.lines().nth(line - 1).unwrap_or_default().trim().to_owned(),
        message,
    })?;
    Ok(table)
}

/// TOML text read into `T`; an error is its 1-based line and a one-line message, also for
/// a key inside a flattened group (see the module's introduction).
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, (usize, String)> {
    check(text).map(|(_, value)| value)
}

/// The text's keys and `T` read from them; an error is its line and message.
fn check<T: DeserializeOwned>(text: &str) -> Result<(toml::Table, T), (usize, String)> {
    let line_at = |span: std::ops::Range<usize>| line_of(text, span.start);
    let table = toml::from_str::<toml::Table>(text)
        .map_err(|e| (e.span().map_or(1, line_at), one_line(&e.message())))?;
    match toml::from_str::<T>(text) {
        Ok(value) => Ok((table, value)),
        Err(e) => {
            // Inside a flattened group serde says what is wrong but not where (an empty span).
            let (line, message) = match e.span().filter(|span| !span.is_empty()) {
                Some(span) => (line_at(span), e.message().to_owned()),
                None => refused_key::<T>(text, &table).unwrap_or((1, e.message().to_owned())),
            };
            Err((line, one_line(&message)))
        }
    }
}

/// The first key of the file (by line) that `T` refuses on its own, with its line and why:
/// every check serde makes is of one key, so the key at fault fails alone.
fn refused_key<T: DeserializeOwned>(text: &str, table: &toml::Table) -> Option<(usize, String)> {
    let parsed = toml::de::DeTable::parse(text).ok()?;
    parsed
        .get_ref()
        .keys()
        .filter_map(|key| {
            let (name, value) = table.get_key_value(key.get_ref().as_ref())?;
            let alone = toml::Table::from_iter([(name.clone(), value.clone())]);
            let error = toml::Value::Table(alone).try_into::<T>().err()?;
            Some((line_of(text, key.span().start), error.message().to_owned()))
        })
        .min_by_key(|(line, _)| *line)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The last field of a config whose groups are flattened, `#[serde(flatten)] unknown:
/// Unknown`: it gets the keys no other field took and refuses the first, "unknown field
/// \`{key}\`", as `deny_unknown_fields` would. It serializes to nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unknown;

impl<'de> serde::Deserialize<'de> for Unknown {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Unknown, D::Error> {
        struct Refuse;
        impl<'de> serde::de::Visitor<'de> for Refuse {
            type Value = Unknown;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("no keys besides the known ones")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Unknown, A::Error> {
                match map.next_key::<String>()? {
                    Some(key) => {
                        Err(serde::de::Error::custom(format_args!("unknown field `{key}`")))
                    }
                    None => Ok(Unknown),
                }
            }
        }
        deserializer.deserialize_map(Refuse)
    }
}

impl Serialize for Unknown {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        serializer.serialize_map(Some(0))?.end()
    }
}

fn one_line(e: &impl std::fmt::Display) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Settings {
        port: u16,
        host: String,
        peers: Vec<String>,
        zookeeper: Option<String>,
    }

    impl Default for Settings {
        fn default() -> Settings {
            Settings { port: 1, host: "h".into(), peers: vec![], zookeeper: None }
        }
    }

    #[derive(Default, Serialize)]
    struct Flags {
        #[serde(skip)]
        config: Option<PathBuf>,
        port: Option<u16>,
        host: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        peers: Vec<String>,
        zookeeper: Option<String>,
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let f = file("port = 7\nhost = \"file\"\npeers = [\"a\"]\n");
        let flags = Flags { host: Some("flag".into()), ..Flags::default() };
        let settings: Settings = load(Some(f.path()), &flags).unwrap();
        assert_eq!(
            settings,
            Settings { port: 7, host: "flag".into(), peers: vec!["a".into()], zookeeper: None }
        );
        let flags =
            Flags { peers: vec!["b".into()], zookeeper: Some("zk".into()), ..Flags::default() };
        let settings: Settings = load(Some(f.path()), &flags).unwrap();
        assert_eq!((settings.peers, settings.zookeeper), (vec!["b".into()], Some("zk".into())));
        assert_eq!(load::<Settings>(None, &Flags::default()).unwrap(), Settings::default());
        assert!(Flags::default().config.is_none());
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let f = file("port = 7\n\nprot = 8\n");
        let error = load::<Settings>(Some(f.path()), &Flags::default()).unwrap_err().to_string();
        assert!(error.contains("line 3") && error.contains("prot"), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }

    /// A group of settings several configs share, flattened into each.
    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Group {
        timeout_ms: Option<u64>,
        auth_file: Option<PathBuf>,
    }

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(default)]
    struct Grouped {
        port: u16,
        #[serde(flatten)]
        group: Group,
        #[serde(flatten)]
        unknown: Unknown,
    }

    #[derive(Default, Serialize)]
    struct GroupedFlags {
        port: Option<u16>,
        #[serde(flatten)]
        group: Group,
    }

    #[test]
    fn flags_win_inside_a_flattened_group() {
        let f = file("timeout_ms = 5\nport = 2\nauth_file = \"file\"\n");
        let flags = GroupedFlags {
            group: Group { auth_file: Some("flag".into()), ..Group::default() },
            ..GroupedFlags::default()
        };
        let grouped: Grouped = load(Some(f.path()), &flags).unwrap();
        let group = Group { timeout_ms: Some(5), auth_file: Some("flag".into()) };
        assert_eq!(grouped, Grouped { port: 2, group, unknown: Unknown });
        let written = toml::Table::try_from(&grouped).unwrap();
        assert_eq!(written.keys().collect::<Vec<_>>(), ["auth_file", "port", "timeout_ms"]);
    }

    #[test]
    fn beside_flattened_groups_an_unknown_key_is_named_with_its_line() {
        let f = file("port = 7\ntimeout_ms = 1\n\nprot = 8\n");
        let error = load::<Grouped>(Some(f.path()), &GroupedFlags::default()).unwrap_err();
        let error = error.to_string();
        assert!(error.contains("line 4 `prot = 8`: unknown field `prot`"), "{error}");
        // The first by line, a table's header too.
        let f = file("port = 7\n[zz]\na = 1\n");
        let error = load::<Grouped>(Some(f.path()), &GroupedFlags::default()).unwrap_err();
        assert!(error.to_string().contains("line 2 `[zz]`: unknown field `zz`"), "{error}");
        // Refused however the config is read, not only by `load`.
        let error = toml::from_str::<Grouped>("prot = 1").unwrap_err().to_string();
        assert!(error.contains("unknown field `prot`"), "{error}");
        let error = toml::Value::Table(toml::Table::from_iter([("prot".into(), 1.into())]))
            .try_into::<Grouped>()
            .unwrap_err();
        assert!(error.to_string().contains("unknown field `prot`"), "{error}");
    }

    #[test]
    fn a_wrong_value_inside_a_flattened_group_is_named_with_its_line() {
        let f = file("port = 7\n\ntimeout_ms = \"soon\"\n");
        let error = load::<Grouped>(Some(f.path()), &GroupedFlags::default()).unwrap_err();
        let error = error.to_string();
        assert!(error.contains("line 3 `timeout_ms = \"soon\"`: invalid type"), "{error}");
        assert!(!error.contains('\n'), "{error}");
        // Outside the groups serde's own span still says where.
        let f = file("timeout_ms = 1\nport = -1\n");
        let error = load::<Grouped>(Some(f.path()), &GroupedFlags::default()).unwrap_err();
        assert!(error.to_string().contains("line 2 `port = -1`"), "{error}");
    }

    #[test]
    fn text_is_parsed_with_the_same_lines() {
        assert_eq!(parse::<Grouped>("port = 3\n").unwrap().port, 3);
        let (line, message) = parse::<Grouped>("port = 3\n\ntimeout_ms = true\n").unwrap_err();
        assert_eq!(line, 3);
        assert!(message.starts_with("invalid type: boolean"), "{message}");
        assert_eq!(parse::<Grouped>("port = 3\nx = [\n").unwrap_err().0, 2);
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named() {
        let f = file("port = \"eighty\"\n");
        let error = load::<Settings>(Some(f.path()), &Flags::default()).unwrap_err().to_string();
        assert!(error.contains("line 1 `port = \"eighty\"`"), "{error}");
        let missing = load::<Settings>(Some(Path::new("/no/such/file.toml")), &Flags::default());
        assert!(matches!(missing, Err(ConfigError::Read { .. })));
    }
}
