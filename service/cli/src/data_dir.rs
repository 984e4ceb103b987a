//! Where ctx keeps its data when nobody says otherwise (spec/cli.md §2): the `--data-dir`
//! option, then the environment. What lives inside it is `ctx_service::Layout`.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::CliError;

/// The environment variable that names the data directory explicitly.
pub const DATA_DIR_ENV: &str = "CTX_DATA_DIR";

/// Which rule chose the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataDirSource {
    /// The `--data-dir` option.
    Option,
    /// `$CTX_DATA_DIR`.
    Explicit,
    /// `$XDG_DATA_HOME/ctx`.
    XdgDataHome,
    /// `$HOME/.local/share/ctx`.
    Home,
}

impl fmt::Display for DataDirSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DataDirSource::Option => "from --data-dir",
            DataDirSource::Explicit => "from CTX_DATA_DIR",
            DataDirSource::XdgDataHome => "from XDG_DATA_HOME",
            DataDirSource::Home => "from HOME",
        })
    }
}

/// An absolute data directory and the rule that chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    pub path: PathBuf,
    pub source: DataDirSource,
}

/// Chooses the data directory every command uses: `--data-dir DIR` when given (`option`; it must
/// be absolute), else `$CTX_DATA_DIR` if set (absolute too), else `$XDG_DATA_HOME/ctx` (a
/// relative value is ignored, as the XDG spec asks), else `$HOME/.local/share/ctx`. Empty
/// variables count as unset. `env` looks a variable up, so tests need not touch the process
/// environment.
pub fn choose_data_dir(
    option: Option<&Path>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<DataDir, CliError> {
    if let Some(path) = option {
        if !path.is_absolute() {
            return Err(CliError::Usage(format!(
                "--data-dir {} is not an absolute path",
                path.display()
            )));
        }
        return Ok(DataDir {
            path: path.to_path_buf(),
            source: DataDirSource::Option,
        });
    }
    let get = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(path) = get(DATA_DIR_ENV) {
        if !path.is_absolute() {
            return Err(CliError::Usage(format!(
                "{DATA_DIR_ENV}={} is not an absolute path",
                path.display()
            )));
        }
        return Ok(DataDir {
            path,
            source: DataDirSource::Explicit,
        });
    }
    if let Some(xdg) = get("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Ok(DataDir {
            path: xdg.join("ctx"),
            source: DataDirSource::XdgDataHome,
        });
    }
    match get("HOME") {
        Some(home) if home.is_absolute() => Ok(DataDir {
            path: home.join(".local").join("share").join("ctx"),
            source: DataDirSource::Home,
        }),
        Some(home) => Err(CliError::Usage(format!(
            "HOME={} is not an absolute path; set {DATA_DIR_ENV} to an absolute directory",
            home.display()
        ))),
        None => Err(CliError::Usage(format!(
            "neither {DATA_DIR_ENV}, XDG_DATA_HOME nor HOME is set; set {DATA_DIR_ENV} to an \
             absolute directory"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn explicit_directory_wins() {
        let dir = choose_data_dir(
            None,
            env(&[
                ("CTX_DATA_DIR", "/data/ctx"),
                ("XDG_DATA_HOME", "/xdg"),
                ("HOME", "/home/u"),
            ]),
        );
        assert_eq!(
            dir.ok(),
            Some(DataDir {
                path: "/data/ctx".into(),
                source: DataDirSource::Explicit
            })
        );
    }

    #[test]
    fn relative_explicit_directory_is_bad_input() {
        let err = choose_data_dir(None, env(&[("CTX_DATA_DIR", "data"), ("HOME", "/home/u")]));
        assert!(matches!(err, Err(CliError::Usage(_))), "{err:?}");
    }

    #[test]
    fn xdg_then_home() {
        let xdg = choose_data_dir(None, env(&[("XDG_DATA_HOME", "/xdg"), ("HOME", "/home/u")]));
        assert_eq!(xdg.ok().map(|d| d.path), Some(PathBuf::from("/xdg/ctx")));
        let home = choose_data_dir(
            None,
            env(&[
                ("XDG_DATA_HOME", "rel"),
                ("CTX_DATA_DIR", ""),
                ("HOME", "/home/u"),
            ]),
        );
        assert_eq!(
            home.ok(),
            Some(DataDir {
                path: "/home/u/.local/share/ctx".into(),
                source: DataDirSource::Home
            })
        );
    }

    #[test]
    fn nothing_set_is_bad_input() {
        assert!(matches!(
            choose_data_dir(None, env(&[])),
            Err(CliError::Usage(_))
        ));
        assert!(matches!(
            choose_data_dir(None, env(&[("HOME", "home")])),
            Err(CliError::Usage(_))
        ));
    }
}
