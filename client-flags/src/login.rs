//! `--user NAME --password-file FILE` (or `HIVEKEEPER_USER` / `HIVEKEEPER_PASSWORD`): the
//! account the CLI authenticates as, against a service with authentication on. With a user,
//! the CLI's MQTT client id is the user (the service requires client id = username).

use std::path::PathBuf;

use hivekeeper_agent::AgentConfig;

use crate::FlagsError;

/// The credential flags every command that talks to the service takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Login {
    /// The account to authenticate as (its agent id; the MQTT username and client id).
    #[arg(long, value_name = "NAME", env = "HIVEKEEPER_USER")]
    user: Option<String>,
    /// A file holding the account's secret (e.g. <data-dir>/admin.secret); surrounding
    /// whitespace is ignored. Instead of a file, the secret itself may be in the environment
    /// variable HIVEKEEPER_PASSWORD (never in a flag: `ps` would show it).
    #[arg(long, value_name = "FILE", conflicts_with = "password")]
    password_file: Option<PathBuf>,
    /// The account's secret, from the environment only: its flag is hidden, and `--help` names
    /// the variable under --password-file.
    #[arg(
        long,
        env = "HIVEKEEPER_PASSWORD",
        hide = true,
        hide_env_values = true,
        value_name = "SECRET"
    )]
    password: Option<String>,
}

impl Login {
    /// `config` authenticated as the user, if one is given: client id = the user, password =
    /// the secret. Without a user, `config` unchanged (anonymous, for a service without
    /// authentication).
    pub fn apply(&self, config: AgentConfig) -> Result<AgentConfig, FlagsError> {
        let Some(user) = &self.user else {
            if self.password_file.is_some() || self.password.is_some() {
                return Err(FlagsError::PasswordWithoutUser);
            }
            return Ok(config);
        };
        let secret = match (&self.password_file, &self.password) {
            (Some(path), _) => std::fs::read_to_string(path)
                .map_err(|source| FlagsError::PasswordFile {
                    path: path.clone(),
                    source,
                })?
                .trim()
                .to_string(),
            (None, Some(secret)) => secret.trim().to_string(),
            (None, None) => {
                return Err(FlagsError::NoPassword { user: user.clone() });
            }
        };
        if secret.is_empty() {
            return Err(FlagsError::EmptyPassword { user: user.clone() });
        }
        Ok(AgentConfig {
            agent_id: user.clone(),
            ..config
        }
        .credentials(secret))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login(user: Option<&str>, password_file: Option<PathBuf>, password: Option<&str>) -> Login {
        Login {
            user: user.map(str::to_string),
            password_file,
            password: password.map(str::to_string),
        }
    }

    fn refusal(login: &Login) -> String {
        login
            .apply(AgentConfig::default())
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_user_becomes_the_agent_id_and_the_trimmed_secret_the_password() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("admin.secret");
        std::fs::write(&file, "  s3cret\n").expect("writing the secret");
        let config = login(Some("admin"), Some(file), None)
            .apply(AgentConfig::default())
            .expect("applied");
        assert_eq!(config.agent_id, "admin");
        assert_eq!(config.secret.expect("a secret").expose(), "s3cret");
        let config = login(Some("ops"), None, Some(" env-secret "))
            .apply(AgentConfig::default())
            .expect("applied");
        assert_eq!(config.agent_id, "ops");
        assert_eq!(config.secret.expect("a secret").expose(), "env-secret");
    }

    #[test]
    fn no_user_leaves_the_config_anonymous() {
        let config = login(None, None, None)
            .apply(AgentConfig::default())
            .expect("applied");
        assert_eq!(config.agent_id, AgentConfig::default().agent_id);
        assert!(config.secret.is_none());
    }

    #[test]
    fn incomplete_credentials_are_refused_with_what_is_missing() {
        assert_eq!(
            refusal(&login(None, None, Some("s"))),
            "a password was given without --user (or HIVEKEEPER_USER)"
        );
        assert_eq!(
            refusal(&login(Some("admin"), None, None)),
            "--user admin needs --password-file FILE (or HIVEKEEPER_PASSWORD)"
        );
        assert_eq!(
            refusal(&login(Some("admin"), None, Some("  "))),
            "the password for --user admin is empty"
        );
        assert_eq!(
            refusal(&login(
                Some("admin"),
                Some(PathBuf::from("/nonexistent/admin.secret")),
                None
            )),
            "reading the password file /nonexistent/admin.secret"
        );
    }
}
