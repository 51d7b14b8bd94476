//! The operator's AWS credentials: from the standard environment variables,
//! or a profile of the shared credentials file.

use std::fmt;
use std::path::{Path, PathBuf};

/// What the guard signs with: an access key pair (with a session token for
/// temporary credentials), or a Bedrock API key sent as a bearer token.
///
/// `Debug` and `Display` never show a secret.
///
/// ```
/// use refusal_guard::aws::Credentials;
///
/// let keys = Credentials::keys("AKIDEXAMPLE", "secret", None);
/// assert!(!format!("{keys:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Credentials {
    /// SigV4 with an access key pair.
    Keys {
        /// `AWS_ACCESS_KEY_ID`.
        access_key_id: String,
        /// `AWS_SECRET_ACCESS_KEY`.
        secret_access_key: String,
        /// `AWS_SESSION_TOKEN`, for temporary credentials.
        session_token: Option<String>,
    },
    /// A Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`): sent as
    /// `Authorization: Bearer`, binding no body.
    Bearer(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Keys {
                access_key_id,
                session_token,
                ..
            } => f
                .debug_struct("Keys")
                .field("access_key_id", &redacted_id(access_key_id))
                .field("session_token", &session_token.is_some())
                .finish_non_exhaustive(),
            Credentials::Bearer(_) => f.write_str("Bearer(..)"),
        }
    }
}

/// An access key id with all but its first four characters hidden: enough
/// to tell two keys apart in a log, not enough to use one.
fn redacted_id(id: &str) -> String {
    let shown: String = id.chars().take(4).collect();
    format!("{shown}…")
}

/// Why credentials could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsError(String);

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CredentialsError {}

impl Credentials {
    /// An access key pair.
    pub fn keys(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        Credentials::Keys {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token,
        }
    }

    /// What the standard variables hold, looked up through `var`:
    /// `AWS_BEARER_TOKEN_BEDROCK` first, else `AWS_ACCESS_KEY_ID` with
    /// `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), else the profile
    /// `AWS_PROFILE` (or `default`) of the shared credentials file
    /// (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`) if the
    /// variable `AWS_PROFILE` is set. `Ok(None)` when there are none.
    ///
    /// ```
    /// use refusal_guard::aws::Credentials;
    ///
    /// let env = |name: &str| match name {
    ///     "AWS_ACCESS_KEY_ID" => Some("AKIDEXAMPLE".to_owned()),
    ///     "AWS_SECRET_ACCESS_KEY" => Some("secret".to_owned()),
    ///     _ => None,
    /// };
    /// let found = Credentials::from_vars(env).unwrap();
    /// assert_eq!(found, Some(Credentials::keys("AKIDEXAMPLE", "secret", None)));
    /// ```
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, CredentialsError> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if let Some(token) = set("AWS_BEARER_TOKEN_BEDROCK") {
            return Ok(Some(Credentials::Bearer(token.trim().to_owned())));
        }
        match (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(secret)) => {
                return Ok(Some(Credentials::keys(
                    id,
                    secret,
                    set("AWS_SESSION_TOKEN"),
                )));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(CredentialsError(
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together".into(),
                ));
            }
            (None, None) => {}
        }
        let Some(profile) = set("AWS_PROFILE") else {
            return Ok(None);
        };
        let file = set("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| set("HOME").map(|home| Path::new(&home).join(".aws").join("credentials")))
            .ok_or_else(|| CredentialsError("no shared credentials file to read".into()))?;
        Credentials::from_profile_file(&file, &profile).map(Some)
    }

    /// [`from_vars`](Self::from_vars) over the process environment.
    pub fn from_env() -> Result<Option<Self>, CredentialsError> {
        Credentials::from_vars(|name| std::env::var(name).ok())
    }

    /// The keys of `profile` in a shared credentials file (the INI file
    /// `aws configure` writes: `[profile]` sections of `key = value` lines).
    /// Only static keys are read: a profile that assumes a role or runs a
    /// process is an error, not a silent fallback.
    pub fn from_profile_file(file: &Path, profile: &str) -> Result<Self, CredentialsError> {
        let text = std::fs::read_to_string(file).map_err(|error| {
            CredentialsError(format!("cannot read {}: {error}", file.display()))
        })?;
        Credentials::from_profile_text(&text, profile).ok_or_else(|| {
            CredentialsError(format!(
                "profile `{profile}` in {} has no aws_access_key_id and aws_secret_access_key",
                file.display()
            ))
        })
    }

    /// The keys of `profile` in the text of a shared credentials file.
    fn from_profile_text(text: &str, profile: &str) -> Option<Self> {
        let mut in_profile = false;
        let (mut id, mut secret, mut token) = (None, None, None);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                let section = section.trim();
                let name = section.strip_prefix("profile ").unwrap_or(section).trim();
                in_profile = name == profile;
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if !in_profile {
                continue;
            }
            let value = Some(value.trim().to_owned());
            match key.trim().to_ascii_lowercase().as_str() {
                "aws_access_key_id" => id = value,
                "aws_secret_access_key" => secret = value,
                "aws_session_token" => token = value,
                _ => {}
            }
        }
        Some(Credentials::keys(id?, secret?, token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_read_from_its_own_section_only() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n\
                    # a comment\n[profile work]\naws_access_key_id=C\naws_secret_access_key = D\n\
                    aws_session_token = E\n[other]\naws_access_key_id = F\n";
        assert_eq!(
            Credentials::from_profile_text(text, "work"),
            Some(Credentials::keys("C", "D", Some("E".into())))
        );
        assert_eq!(
            Credentials::from_profile_text(text, "default"),
            Some(Credentials::keys("A", "B", None))
        );
        assert_eq!(Credentials::from_profile_text(text, "other"), None);
        assert_eq!(Credentials::from_profile_text(text, "missing"), None);
    }

    #[test]
    fn the_bearer_key_wins_and_half_a_key_pair_is_an_error() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let both = Credentials::from_vars(vars(&[
            ("AWS_BEARER_TOKEN_BEDROCK", "bedrock-key"),
            ("AWS_ACCESS_KEY_ID", "A"),
            ("AWS_SECRET_ACCESS_KEY", "B"),
        ]));
        assert_eq!(both, Ok(Some(Credentials::Bearer("bedrock-key".into()))));
        assert!(Credentials::from_vars(vars(&[("AWS_ACCESS_KEY_ID", "A")])).is_err());
        assert_eq!(Credentials::from_vars(vars(&[])), Ok(None));
        let shown = format!("{:?}", Credentials::Bearer("bedrock-key".into()));
        assert!(!shown.contains("bedrock-key"));
    }
}
