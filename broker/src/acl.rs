//! Who may do what (`docs/design.md`, "ACL file"): a broker given `acl_file` allows a request only
//! if a rule of the file allows its principal the operation on every topic it touches, and
//! answers anything else with error 14. The file:
//!
//! ```toml
//! [[allow]]
//! principals = ["agent-*"]             # globs over the principal (`*`: any run of characters)
//! topics = ["page-view", "_audit"]     # globs over topic names
//! operations = ["produce", "describe"] # produce, consume, create, describe, replicate,
//!                                      # delete, alter, alter_configs, describe_configs
//!
//! [[allow]]
//! principals = ["ops-*"]
//! groups = ["*"]                       # globs over Kafka consumer group ids
//! operations = ["describe", "delete"]
//! ```
//!
//! A rule names topics, groups or both; its operations apply to each. Kafka's admin APIs
//! take Kafka's operation names: DeleteTopics and DeleteRecords `delete`, CreatePartitions and
//! partition reassignments `alter`, AlterConfigs `alter_configs`, DescribeConfigs
//! `describe_configs`; on groups, DescribeGroups and ListGroups `describe`, DeleteGroups and
//! OffsetDelete `delete`.
//!
//! Without a file every principal (every client, on a listener without client certificates)
//! may do everything. A denial is counted and logged once a minute per principal, topic and
//! operation, so that a misconfigured client cannot flood the log.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;
use service::glob;
use thiserror::Error;

/// How often one (principal, topic, operation) denial is logged at most.
const DENIAL_LOG_INTERVAL: Duration = Duration::from_secs(60);
/// Distinct denials remembered for the log's rate limit; beyond it the memory starts over.
const DENIALS_REMEMBERED_MAX: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// PRODUCE, MULTIPRODUCE.
    Produce,
    /// FETCH, MULTIFETCH, MULTIFETCH_WAIT, OFFSETS.
    Consume,
    /// CREATE_TOPIC (and a first produce that auto-creates).
    Create,
    /// METADATA: a topic the principal may not describe is left out of the answer.
    Describe,
    /// REPLICA_FETCH, OFFSET_FOR_LEADER_EPOCH: what a follower broker does.
    Replicate,
    /// DELETE_RECORDS; Kafka's DeleteTopics, DeleteRecords; DeleteGroups and OffsetDelete on
    /// a group.
    Delete,
    /// Kafka's CreatePartitions and partition reassignments.
    Alter,
    /// Kafka's AlterConfigs and IncrementalAlterConfigs.
    AlterConfigs,
    /// Kafka's DescribeConfigs.
    DescribeConfigs,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Produce => "produce",
            Operation::Consume => "consume",
            Operation::Create => "create",
            Operation::Describe => "describe",
            Operation::Replicate => "replicate",
            Operation::Delete => "delete",
            Operation::Alter => "alter",
            Operation::AlterConfigs => "alter_configs",
            Operation::DescribeConfigs => "describe_configs",
        }
    }
}

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AclError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    principals: Vec<String>,
    #[serde(default)]
    topics: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    operations: Vec<Operation>,
}

/// What a rule's patterns name: a topic, or a Kafka consumer group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Topic,
    Group,
}

impl Resource {
    fn name(self) -> &'static str {
        match self {
            Resource::Topic => "topic",
            Resource::Group => "group",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    allow: Vec<Rule>,
}

/// The rules of an ACL file.
#[derive(Debug, Clone, Default)]
pub struct Acl {
    rules: Vec<Rule>,
}

impl Acl {
    pub fn load(path: &Path) -> Result<Acl, AclError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|source| AclError::Read { path: shown.clone(), source })?;
        Acl::parse(&text).map_err(|reason| AclError::Invalid { path: shown, reason })
    }

    /// Parses the file's text; the error says what is wrong where.
    pub fn parse(text: &str) -> Result<Acl, String> {
        let file: File = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        for (i, rule) in file.allow.iter().enumerate() {
            let n = i + 1;
            if rule.principals.is_empty() {
                return Err(format!("rule {n}: principals is empty (it would allow nothing)"));
            }
            if rule.topics.is_empty() && rule.groups.is_empty() {
                return Err(format!(
                    "rule {n}: names neither topics nor groups (it would allow nothing)"
                ));
            }
            for (what, list) in [
                ("principals", &rule.principals),
                ("topics", &rule.topics),
                ("groups", &rule.groups),
            ] {
                if let Some(bad) =
                    list.iter().find(|p| p.is_empty() || p.chars().any(char::is_control))
                {
                    return Err(format!("rule {n}: {what} has an invalid pattern {bad:?}"));
                }
            }
            if rule.operations.is_empty() {
                return Err(format!("rule {n}: operations is empty (it would allow nothing)"));
            }
        }
        Ok(Acl { rules: file.allow })
    }

    /// Whether a rule allows `principal` to `operation` on `topic`.
    pub fn allows(&self, principal: &str, topic: &str, operation: Operation) -> bool {
        self.allows_on(principal, Resource::Topic, topic, operation)
    }

    /// Whether a rule allows `principal` to `operation` on the `kind` resource `name`.
    pub fn allows_on(
        &self,
        principal: &str,
        kind: Resource,
        name: &str,
        operation: Operation,
    ) -> bool {
        self.rules.iter().any(|rule| {
            let patterns = match kind {
                Resource::Topic => &rule.topics,
                Resource::Group => &rule.groups,
            };
            rule.operations.contains(&operation)
                && rule.principals.iter().any(|p| glob::matches(p, principal))
                && patterns.iter().any(|t| glob::matches(t, name))
        })
    }
}

/// A broker's authorization: its ACL (none: everything allowed), and the memory that keeps
/// denials from flooding the log.
#[derive(Debug, Default)]
pub struct Authorizer {
    acl: Option<Acl>,
    logged: Mutex<HashMap<(String, Resource, String, Operation), Instant>>,
}

impl Authorizer {
    pub fn new(acl: Option<Acl>) -> Authorizer {
        Authorizer { acl, logged: Mutex::new(HashMap::new()) }
    }

    pub fn enforcing(&self) -> bool {
        self.acl.is_some()
    }

    /// Whether `principal` may `operation` on `topic`; a denial is logged (at most once a
    /// minute for the same three).
    pub fn check(&self, principal: &str, topic: &str, operation: Operation) -> bool {
        self.check_on(principal, Resource::Topic, topic, operation)
    }

    /// Whether `principal` may `operation` on Kafka consumer group `group`.
    pub fn check_group(&self, principal: &str, group: &str, operation: Operation) -> bool {
        self.check_on(principal, Resource::Group, group, operation)
    }

    fn check_on(&self, principal: &str, kind: Resource, name: &str, operation: Operation) -> bool {
        let Some(acl) = &self.acl else { return true };
        if acl.allows_on(principal, kind, name, operation) {
            return true;
        }
        let now = Instant::now();
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.len() >= DENIALS_REMEMBERED_MAX {
            logged.clear();
        }
        let key = (principal.to_owned(), kind, name.to_owned(), operation);
        let due = logged.get(&key).is_none_or(|at| now.duration_since(*at) >= DENIAL_LOG_INTERVAL);
        if due {
            logged.insert(key, now);
            tracing::warn!(
                %principal, resource = kind.name(), %name, operation = operation.name(),
                "authorization failed (logged once a minute per principal, resource and operation)"
            );
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[allow]]
principals = ["agent-*"]
topics = ["page-view", "click", "_audit"]
operations = ["produce", "describe"]

[[allow]]
principals = ["reader"]
topics = ["page-view"]
operations = ["consume"]

[[allow]]
principals = ["broker-*"]
topics = ["*"]
operations = ["replicate", "describe"]

[[allow]]
principals = ["ops"]
groups = ["app-*"]
operations = ["describe", "delete"]
"#;

    #[test]
    fn rules_allow_exactly_what_they_name() {
        let acl = Acl::parse(FILE).unwrap();
        assert!(acl.allows("agent-7", "page-view", Operation::Produce));
        assert!(!acl.allows("agent-7", "page-view", Operation::Consume));
        assert!(!acl.allows("agent-7", "search", Operation::Produce));
        assert!(acl.allows("reader", "page-view", Operation::Consume));
        assert!(!acl.allows("reader", "page-view", Operation::Produce));
        assert!(!acl.allows("reader", "click", Operation::Consume));
        assert!(!acl.allows("readers", "page-view", Operation::Consume), "no implicit prefix");
        assert!(acl.allows("broker-1", "anything", Operation::Replicate));
        assert!(acl.allows_on("ops", Resource::Group, "app-1", Operation::Delete));
        assert!(!acl.allows_on("ops", Resource::Topic, "app-1", Operation::Delete));
        assert!(!acl.allows_on("ops", Resource::Group, "web", Operation::Describe));
        assert!(
            !acl.allows_on("broker-1", Resource::Group, "app-1", Operation::Describe),
            "topic patterns do not name groups"
        );
        assert!(!acl.allows("", "page-view", Operation::Consume));
        assert!(
            !Acl::default().allows("x", "y", Operation::Describe),
            "an empty file allows nothing"
        );
    }

    #[test]
    fn hostile_files_are_refused_with_the_reason() {
        for (text, says) in [
            (
                "[[allow]]\nprincipals = []\ntopics = [\"t\"]\noperations = [\"produce\"]",
                "principals is empty",
            ),
            (
                "[[allow]]\nprincipals = [\"\"]\ntopics = [\"t\"]\noperations = [\"produce\"]",
                "invalid pattern",
            ),
            (
                "[[allow]]\nprincipals = [\"a\\u0000\"]\ntopics = [\"t\"]\noperations = [\"produce\"]",
                "invalid pattern",
            ),
            (
                "[[allow]]\nprincipals = [\"a\"]\ntopics = [\"t\"]\noperations = [\"destroy\"]",
                "unknown variant",
            ),
            (
                "[[allow]]\nprincipals = [\"a\"]\noperations = [\"describe\"]",
                "neither topics nor groups",
            ),
            (
                "[[allow]]\nprincipals = [\"a\"]\ngroups = [\"\"]\noperations = [\"describe\"]",
                "groups has an invalid pattern",
            ),
            (
                "[[allow]]\nprincipals = [\"a\"]\ntopics = [\"t\"]\noperations = []",
                "operations is empty",
            ),
            (
                "[[allow]]\nprincipal = [\"a\"]\ntopics = [\"t\"]\noperations = [\"produce\"]",
                "unknown field",
            ),
            ("[[deny]]\nprincipals = [\"a\"]", "unknown field"),
            ("allow = 3", "invalid type"),
            ("\u{feff}[[allow", ""),
        ] {
            let error = Acl::parse(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
        assert!(Acl::parse("").unwrap().rules.is_empty());
    }

    #[test]
    fn denials_are_logged_once_a_minute_but_always_refused() {
        let authorizer = Authorizer::new(Some(Acl::parse(FILE).unwrap()));
        for _ in 0..1000 {
            assert!(!authorizer.check("agent-1", "search", Operation::Produce));
        }
        assert_eq!(authorizer.logged.lock().unwrap().len(), 1);
        assert!(authorizer.check("agent-1", "click", Operation::Produce));
        assert!(Authorizer::new(None).check("anyone", "anything", Operation::Create));
    }
}
