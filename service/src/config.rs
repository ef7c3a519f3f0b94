//! One way to configure every binary: `--config FILE` names a TOML file whose keys are the
//! flag names (with `_` for `-`), and flags given on the command line win over it. A key the
//! binary does not know is an error that names it (and the file's line), as is a value of
//! the wrong type.
//!
//! A binary's flags are a `clap` struct that also derives `Serialize`, every config flag an
//! `Option` (left out when not given) or a list skipped when empty; its configuration is a
//! `Deserialize` struct with `#[serde(default, deny_unknown_fields)]`. [`load`] lays the
//! flags over the file and deserializes the result, so no binary copies fields one by one.

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
    let at = |e: toml::de::Error| {
        let line = e.span().map_or(1, |span| text[..span.start].matches('\n').count() + 1);
        ConfigError::File {
            path: path.to_owned(),
            line,
            text: text.lines().nth(line - 1).unwrap_or_default().trim().to_owned(),
            message: e.message().split_whitespace().collect::<Vec<_>>().join(" "),
        }
    };
    toml::from_str::<T>(&text).map_err(at)?;
    toml::from_str::<toml::Table>(&text).map_err(at)
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

    #[test]
    fn a_value_of_the_wrong_type_is_named() {
        let f = file("port = \"eighty\"\n");
        let error = load::<Settings>(Some(f.path()), &Flags::default()).unwrap_err().to_string();
        assert!(error.contains("line 1 `port = \"eighty\"`"), "{error}");
        let missing = load::<Settings>(Some(Path::new("/no/such/file.toml")), &Flags::default());
        assert!(matches!(missing, Err(ConfigError::Read { .. })));
    }
}
