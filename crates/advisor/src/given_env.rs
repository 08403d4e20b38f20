//! The agent's environment is given, not inherited: a CI job's shell holds
//! every CI/CD variable, and an agent turned hostile by a file it read
//! would carry them wherever it can write. By default it gets the plain
//! variables and none whose name says it is a secret, unless named.

use std::process::Command;

/// `--agent-env-inherit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Inherit {
    /// The plain variables (PATH, HOME, LANG, LC_*, TERM, USER, the non-secret
    /// SENTINEL_*, CI_* and GIT_* ones, proxies, CA bundles) and what
    /// --agent-env names.
    #[default]
    Given,
    /// Every variable of sentinel's but its own secrets (before 0.2).
    All,
}

/// Variables passed on by their whole name.
const PLAIN: [&str; 31] = [
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "USER",
    "LOGNAME",
    "SHELL",
    "TZ",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "GITLAB_CI",
    // Where the agent CLIs' providers are: addresses, not credentials.
    "ANTHROPIC_BASE_URL",
    "OPENAI_BASE_URL",
];

/// Families passed on by their prefix, when the name says no secret: the
/// documented adapters' own settings (`CLAUDE_FLAGS`, `CODEX_PROVIDER`, ...)
/// among them, as a user sets them for the agent.
const PLAIN_PREFIXES: [&str; 6] = ["LC_", "SENTINEL_", "CI_", "GIT_", "CLAUDE_", "CODEX_"];

/// Words that make a name a secret's, wherever they stand in it.
const SECRET_WORDS: [&str; 7] = [
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
];

/// Names that carry a secret in a plain name: GitLab's clone URL holds the
/// job token, and a JWT is a credential.
const SECRET_NAMES: [&str; 2] = ["CI_REPOSITORY_URL", "JWT"];

/// Whether the name says the value is a secret (case aside).
pub fn secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_WORDS.iter().any(|w| upper.contains(w))
        || upper.ends_with("_PAT")
        || SECRET_NAMES.iter().any(|w| upper.contains(w))
}

fn plain(name: &str) -> bool {
    PLAIN.contains(&name) || PLAIN_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Set the agent's environment on `cmd` before anything of the run's is
/// added to it: `named` (`--agent-env`) always passes when sentinel has it.
pub fn give(cmd: &mut Command, inherit: Inherit, named: &[String]) {
    let is_named = |k: &str| named.iter().any(|n| n == k);
    match inherit {
        Inherit::All => {
            // Before: everything but sentinel's own secrets.
            for secret in sentinel_core::redact::SECRET_VARS {
                if !is_named(secret) {
                    cmd.env_remove(secret);
                }
            }
        }
        Inherit::Given => {
            cmd.env_clear();
            for (k, v) in std::env::vars_os() {
                let Some(name) = k.to_str() else { continue };
                if is_named(name) || (plain(name) && !secret_name(name)) {
                    cmd.env(&k, &v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_says_secret_is_one_and_a_plain_one_is_not() {
        for name in [
            "OPENAI_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "CI_REGISTRY_PASSWORD",
            "DEPLOY_TOKEN",
            "SENTINEL_GITLAB_TOKEN",
            "GITHUB_PAT",
            "CI_JOB_JWT_V2",
            "CI_REPOSITORY_URL",
            "NPM_AUTH",
            "db_passwd",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(secret_name(name), "{name}");
        }
        for name in ["PATH", "CI_COMMIT_SHA", "LC_ALL", "SENTINEL_FILE", "PATCH"] {
            assert!(!secret_name(name), "{name}");
        }
        assert!(plain("CI_COMMIT_SHA") && plain("LC_ALL") && !plain("AWS_REGION"));
    }
}
