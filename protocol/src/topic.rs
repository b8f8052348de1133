//! Topic names: `{prefix}/req/{agent}`, `{prefix}/rsp/{agent}`, `{prefix}/evt/{agent}`.
//!
//! The prefix is `hk/v1` by default and configurable, so two services can share a broker.

use crate::error::ProtocolError;
use crate::validate;

/// The default topic prefix.
pub const DEFAULT_PREFIX: &str = "hk/v1";

/// Builds and parses the topics under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    /// The prefix without a trailing slash, e.g. `hk/v1`.
    prefix: String,
}

impl Default for Topics {
    fn default() -> Self {
        Topics {
            prefix: DEFAULT_PREFIX.to_string(),
        }
    }
}

impl Topics {
    /// Topics under `prefix`. A trailing slash is dropped; wildcards are refused because the
    /// prefix is also used in topic names, where MQTT forbids them.
    pub fn new(prefix: &str) -> Result<Topics, ProtocolError> {
        let prefix = prefix.trim_end_matches('/');
        // MQTT forbids wildcards and NUL in topic names; an empty level (`hk//v1`, `/hk`) is
        // legal MQTT but almost always a typo, and would not match what a user subscribes to.
        if prefix.is_empty()
            || prefix.contains(['+', '#', '\0'])
            || prefix.split('/').any(str::is_empty)
        {
            return Err(ProtocolError::bad_request(
                None,
                format!(
                    "topic prefix {prefix:?} must be non-empty, have no empty level and contain \
                     no +, # or NUL"
                ),
            ));
        }
        Ok(Topics {
            prefix: prefix.to_string(),
        })
    }

    /// The prefix, e.g. `hk/v1`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Where `agent` sends requests.
    pub fn request(&self, agent: &str) -> String {
        format!("{}/req/{agent}", self.prefix)
    }

    /// Where `agent` receives responses.
    pub fn response(&self, agent: &str) -> String {
        format!("{}/rsp/{agent}", self.prefix)
    }

    /// Where `agent` receives events.
    pub fn event(&self, agent: &str) -> String {
        format!("{}/evt/{agent}", self.prefix)
    }

    /// The filter the service subscribes to: every agent's requests.
    pub fn request_filter(&self) -> String {
        format!("{}/req/+", self.prefix)
    }

    /// The agent id in a request topic. Errors (to be counted and dropped, since there is no
    /// agent to answer) when the topic is not `{prefix}/req/{agent}` with a valid id.
    pub fn parse_request_topic<'t>(&self, topic: &'t str) -> Result<&'t str, ProtocolError> {
        let agent = topic
            .strip_prefix(self.prefix.as_str())
            .and_then(|rest| rest.strip_prefix("/req/"))
            .ok_or_else(|| {
                ProtocolError::bad_request(
                    None,
                    format!("topic {topic:?} is not {}/req/{{agent}}", self.prefix),
                )
            })?;
        validate::agent_id(agent).map_err(|message| ProtocolError::bad_request(None, message))?;
        Ok(agent)
    }
}
