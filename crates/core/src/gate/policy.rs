//! Local policy: role, risk and confidence from the path, and the decisions
//! that need no model. Deterministic: same path and history, same answer.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::state::Outcome;

/// Bump when a rule below changes what it decides: every fingerprint changes
/// with it, so every file is judged again under the new rules.
pub const RULES_VERSION: &str = "rules-1";
/// Bump when the decision policy or the advisor prompt changes.
pub const POLICY_VERSION: &str = "policy-1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Source,
    Test,
    Doc,
    Config,
    Generated,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    Low,
    Medium,
    High,
    Critical,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Test => "test",
            Role::Doc => "doc",
            Role::Config => "config",
            Role::Generated => "generated",
            Role::Unknown => "unknown",
        }
    }
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
            Risk::Critical => "critical",
        }
    }
}

const LOCK_FILES: &[&str] = &[
    "cargo.lock",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "poetry.lock",
    "pipfile.lock",
    "gemfile.lock",
    "composer.lock",
    "go.sum",
    "flake.lock",
    "uv.lock",
];
const GENERATED_DIRS: &[&str] = &[
    "vendor",
    "node_modules",
    "third_party",
    "dist",
    "build",
    "target",
    "generated",
    "__generated__",
    "__pycache__",
];
const GENERATED_SUFFIXES: &[&str] = &[
    ".min.js", ".min.css", ".map", ".pb.go", "_pb2.py", ".pb.rs", ".g.dart", ".pyc",
];
const TEST_DIRS: &[&str] = &["test", "tests", "__tests__", "spec", "specs", "testdata"];
const DOC_EXTS: &[&str] = &["md", "rst", "txt", "adoc", "org"];
const DOC_NAMES: &[&str] = &[
    "license",
    "licence",
    "copying",
    "authors",
    "changelog",
    "notice",
];
const CONFIG_EXTS: &[&str] = &[
    "json",
    "yaml",
    "yml",
    "toml",
    "ini",
    "cfg",
    "conf",
    "env",
    "properties",
    "xml",
];
const CONFIG_NAMES: &[&str] = &["dockerfile", "makefile", ".gitlab-ci.yml", ".env"];
const SOURCE_EXTS: &[&str] = &[
    "rs", "js", "jsx", "mjs", "cjs", "ts", "tsx", "mts", "cts", "py", "go", "java", "kt", "kts",
    "rb", "php", "c", "h", "cc", "cpp", "cxx", "hpp", "cs", "swift", "scala", "sh", "bash", "sql",
    "lua", "pl", "ex", "exs", "erl", "hs", "ml", "clj", "dart", "vue", "svelte",
];
/// Words in a path that mark code whose mistakes cost the most.
const CRITICAL_WORDS: &[&str] = &[
    "crypto",
    "secret",
    "credential",
    "vault",
    "payment",
    "billing",
    "private_key",
    "privkey",
];
const HIGH_WORDS: &[&str] = &[
    "auth",
    "token",
    "password",
    "passwd",
    "session",
    "login",
    "oauth",
    "jwt",
    "permission",
    "acl",
    "security",
    "signing",
    "cert",
];

/// Parts of a file name that mark a test.
const TEST_MARKS: &[&str] = &["_test.", ".test.", ".spec.", "_spec."];

/// Words to look for in a path, with the bytes they start with.
struct Words {
    words: &'static [&'static str],
    starts: [bool; 256],
}

impl Words {
    /// `words` must not be empty strings.
    const fn new(words: &'static [&'static str]) -> Words {
        let mut starts = [false; 256];
        let mut i = 0;
        while i < words.len() {
            starts[words[i].as_bytes()[0] as usize] = true;
            i += 1;
        }
        Words { words, starts }
    }
}

const TEST_MARK_WORDS: Words = Words::new(TEST_MARKS);
const CRITICAL: Words = Words::new(CRITICAL_WORDS);
const HIGH: Words = Words::new(HIGH_WORDS);

/// Whether any of the words occurs in `hay`. One pass over a short path,
/// trying the words only where one of them starts, costs less than a
/// substring search set up per word, and every file is classified.
fn contains_any(hay: &str, words: &Words) -> bool {
    let hay = hay.as_bytes();
    (0..hay.len()).any(|i| {
        words.starts[usize::from(hay[i])]
            && words
                .words
                .iter()
                .any(|w| hay[i..].starts_with(w.as_bytes()))
    })
}

/// Role and risk of a repository path.
pub fn classify(path: &str) -> (Role, Risk) {
    // Most paths are lower case already: copied only when they are not.
    let lower: std::borrow::Cow<str> = if path.bytes().any(|b| b.is_ascii_uppercase()) {
        path.to_ascii_lowercase().into()
    } else {
        path.into()
    };
    let lower = lower.as_ref();
    let (dir, name) = match lower.rsplit_once('/') {
        Some((dir, name)) => (Some(dir), name),
        None => (None, lower),
    };
    // Every segment before the name; none for a file at the root.
    let dirs = || dir.into_iter().flat_map(|d| d.split('/'));
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");

    let role = if LOCK_FILES.contains(&name)
        || dirs().any(|d| GENERATED_DIRS.contains(&d))
        || GENERATED_SUFFIXES.iter().any(|s| name.ends_with(s))
    {
        Role::Generated
    } else if dirs().any(|d| TEST_DIRS.contains(&d))
        || name.starts_with("test_")
        || contains_any(name, &TEST_MARK_WORDS)
    {
        Role::Test
    } else if DOC_EXTS.contains(&ext)
        || dirs().next() == Some("docs")
        || DOC_NAMES.iter().any(|n| {
            name.strip_prefix(n)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
        || name.starts_with("readme")
    {
        Role::Doc
    } else if CONFIG_NAMES.contains(&name) || CONFIG_EXTS.contains(&ext) {
        Role::Config
    } else if SOURCE_EXTS.contains(&ext) {
        Role::Source
    } else {
        Role::Unknown
    };

    let risk = match role {
        // Tests, docs and generated code are low whatever their names say:
        // `tests/auth_test.py` is not the authentication code.
        Role::Test | Role::Doc | Role::Generated => Risk::Low,
        _ if contains_any(lower, &CRITICAL) => Risk::Critical,
        _ if contains_any(lower, &HIGH) => Risk::High,
        Role::Source | Role::Config => Risk::Medium,
        Role::Unknown => Risk::Low,
    };
    (role, risk)
}

/// Confidence in a local judgement of the file. It depends only on the role
/// and the file's incidents, never on how often the same answer was given:
/// ten identical inputs are the same evidence ten times, not ten pieces of it.
pub fn confidence(role: Role, rollback_streak: u32, penalty: u32) -> f64 {
    let base = match role {
        Role::Generated => 0.95,
        Role::Doc => 0.9,
        Role::Test => 0.85,
        Role::Config => 0.75,
        Role::Source => 0.7,
        Role::Unknown => 0.5,
    };
    (base - 0.1 * f64::from(rollback_streak) - 0.05 * f64::from(penalty)).clamp(0.05, 0.99)
}

/// A decision local policy can take alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDecision {
    pub outcome: Outcome,
    pub reason: String,
}

/// Low-risk and generated files are skipped locally; source and config files
/// of medium risk or more need judgement, which is a hand-over while the
/// advisor is off.
pub fn decide(role: Role, risk: Risk) -> LocalDecision {
    let (outcome, reason) = local_rule(role, risk);
    LocalDecision {
        outcome,
        reason: reason.to_string(),
    }
}

/// The rule of `decide` spelled out for every role and risk: generated
/// code is never judged, low risk is skipped, source and config of medium
/// risk or more need judgement, the rest has nothing to judge. A table of
/// literals, as every file of a tick takes one.
fn local_rule(role: Role, risk: Risk) -> (Outcome, &'static str) {
    match (role, risk) {
        (Role::Source, Risk::Low) => (Outcome::LocalSkip, "source file of low risk"),
        (Role::Source, Risk::Medium) => (
            Outcome::NeedsReview,
            "source file of medium risk needs judgement; advisor off",
        ),
        (Role::Source, Risk::High) => (
            Outcome::NeedsReview,
            "source file of high risk needs judgement; advisor off",
        ),
        (Role::Source, Risk::Critical) => (
            Outcome::NeedsReview,
            "source file of critical risk needs judgement; advisor off",
        ),
        (Role::Test, Risk::Low) => (Outcome::LocalSkip, "test file of low risk"),
        (Role::Test, Risk::Medium) => (Outcome::LocalSkip, "test file: nothing to judge"),
        (Role::Test, Risk::High) => (Outcome::LocalSkip, "test file: nothing to judge"),
        (Role::Test, Risk::Critical) => (Outcome::LocalSkip, "test file: nothing to judge"),
        (Role::Doc, Risk::Low) => (Outcome::LocalSkip, "doc file of low risk"),
        (Role::Doc, Risk::Medium) => (Outcome::LocalSkip, "doc file: nothing to judge"),
        (Role::Doc, Risk::High) => (Outcome::LocalSkip, "doc file: nothing to judge"),
        (Role::Doc, Risk::Critical) => (Outcome::LocalSkip, "doc file: nothing to judge"),
        (Role::Config, Risk::Low) => (Outcome::LocalSkip, "config file of low risk"),
        (Role::Config, Risk::Medium) => (
            Outcome::NeedsReview,
            "config file of medium risk needs judgement; advisor off",
        ),
        (Role::Config, Risk::High) => (
            Outcome::NeedsReview,
            "config file of high risk needs judgement; advisor off",
        ),
        (Role::Config, Risk::Critical) => (
            Outcome::NeedsReview,
            "config file of critical risk needs judgement; advisor off",
        ),
        (Role::Generated, Risk::Low) => (Outcome::LocalSkip, "generated: never judged"),
        (Role::Generated, Risk::Medium) => (Outcome::LocalSkip, "generated: never judged"),
        (Role::Generated, Risk::High) => (Outcome::LocalSkip, "generated: never judged"),
        (Role::Generated, Risk::Critical) => (Outcome::LocalSkip, "generated: never judged"),
        (Role::Unknown, Risk::Low) => (Outcome::LocalSkip, "unknown file of low risk"),
        (Role::Unknown, Risk::Medium) => (Outcome::LocalSkip, "unknown file: nothing to judge"),
        (Role::Unknown, Risk::High) => (Outcome::LocalSkip, "unknown file: nothing to judge"),
        (Role::Unknown, Risk::Critical) => (Outcome::LocalSkip, "unknown file: nothing to judge"),
    }
}

/// What the evidence version hashes: everything that is not per-file yet
/// changes an answer. The advisor is not part of it: each decision names the
/// advisor that made it (`Decision::by`), so switching the advisor off and on
/// changes no fingerprint.
#[derive(Debug, Clone)]
pub struct EvidenceInputs<'a> {
    pub rules: &'a str,
    pub policy: &'a str,
}

impl Default for EvidenceInputs<'_> {
    fn default() -> Self {
        EvidenceInputs {
            rules: RULES_VERSION,
            policy: POLICY_VERSION,
        }
    }
}

/// A short id of the evidence, e.g. `3f9a1c0d2b7e`.
pub fn evidence_version(inputs: &EvidenceInputs) -> String {
    short_hash(&[inputs.rules, inputs.policy])
}

/// The evidence version as states written before the advisor left it carry
/// it: rules, policy and `model` (`off`, or `openai:<model>`). A state is
/// recognised by it and carried over instead of judged again.
pub fn legacy_evidence_version(inputs: &EvidenceInputs, model: &str) -> String {
    short_hash(&[inputs.rules, inputs.policy, model])
}

fn short_hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for part in parts {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_paths_are_high_or_critical() {
        assert_eq!(classify("src/auth/login.js"), (Role::Source, Risk::High));
        assert_eq!(
            classify("lib/crypto-vault.js"),
            (Role::Source, Risk::Critical)
        );
        assert_eq!(classify("api/payment.py"), (Role::Source, Risk::Critical));
        assert_eq!(classify("config/tokens.yaml"), (Role::Config, Risk::High));
    }

    #[test]
    fn tests_docs_and_generated_code_are_low() {
        assert_eq!(classify("tests/auth_test.py"), (Role::Test, Risk::Low));
        assert_eq!(classify("src/session.test.ts"), (Role::Test, Risk::Low));
        assert_eq!(classify("docs/secrets.md"), (Role::Doc, Risk::Low));
        assert_eq!(classify("Cargo.lock"), (Role::Generated, Risk::Low));
        assert_eq!(classify("vendor/auth/x.go"), (Role::Generated, Risk::Low));
        assert_eq!(classify("web/app.min.js"), (Role::Generated, Risk::Low));
    }

    #[test]
    fn ordinary_source_and_config_are_medium_unknown_is_low() {
        assert_eq!(classify("libs/shared/a.js"), (Role::Source, Risk::Medium));
        assert_eq!(classify("app.toml"), (Role::Config, Risk::Medium));
        assert_eq!(classify("assets/logo.png"), (Role::Unknown, Risk::Low));
    }

    #[test]
    fn low_risk_and_generated_files_end_in_a_local_skip() {
        assert_eq!(decide(Role::Doc, Risk::Low).outcome, Outcome::LocalSkip);
        assert_eq!(
            decide(Role::Generated, Risk::Low).outcome,
            Outcome::LocalSkip
        );
        assert_eq!(
            decide(Role::Unknown, Risk::High).outcome,
            Outcome::LocalSkip
        );
    }

    #[test]
    fn medium_risk_source_and_config_need_review_while_the_advisor_is_off() {
        for (role, risk) in [
            (Role::Source, Risk::Medium),
            (Role::Source, Risk::Critical),
            (Role::Config, Risk::High),
        ] {
            assert_eq!(decide(role, risk).outcome, Outcome::NeedsReview);
        }
    }

    #[test]
    fn confidence_comes_from_history_not_from_repetition() {
        assert_eq!(confidence(Role::Source, 0, 0), 0.7);
        assert!(confidence(Role::Source, 1, 0) < confidence(Role::Source, 0, 0));
        assert!(confidence(Role::Source, 0, 1) < confidence(Role::Source, 0, 0));
        assert_eq!(confidence(Role::Unknown, 50, 50), 0.05);
    }

    #[test]
    fn evidence_version_changes_with_rules_or_policy_never_with_the_model() {
        let base = evidence_version(&EvidenceInputs::default());
        assert_eq!(base.len(), 12);
        assert_eq!(base, evidence_version(&EvidenceInputs::default()));
        for changed in [
            EvidenceInputs {
                rules: "rules-2",
                ..EvidenceInputs::default()
            },
            EvidenceInputs {
                policy: "policy-2",
                ..EvidenceInputs::default()
            },
        ] {
            assert_ne!(evidence_version(&changed), base);
        }
    }

    #[test]
    fn the_legacy_evidence_version_is_the_one_earlier_states_carry() {
        // The value a state written with the advisor off carries today.
        let d = EvidenceInputs::default();
        assert_eq!(legacy_evidence_version(&d, "off"), "d648350d787d");
        assert_ne!(
            legacy_evidence_version(&d, "off"),
            legacy_evidence_version(&d, "openai:gpt-4o-mini")
        );
        assert_ne!(legacy_evidence_version(&d, "off"), evidence_version(&d));
    }

    /// The classifier as it was, with a `Vec` of segments, a `format!` per
    /// document name and one substring search per word: the reference the
    /// allocation-free one must agree with.
    fn old_classify(path: &str) -> (Role, Risk) {
        let lower = path.to_ascii_lowercase();
        let name = lower.rsplit('/').next().unwrap_or(&lower);
        let dirs: Vec<&str> = lower.split('/').collect();
        let dirs = &dirs[..dirs.len().saturating_sub(1)];
        let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        let role = if LOCK_FILES.contains(&name)
            || dirs.iter().any(|d| GENERATED_DIRS.contains(d))
            || GENERATED_SUFFIXES.iter().any(|s| name.ends_with(s))
        {
            Role::Generated
        } else if dirs.iter().any(|d| TEST_DIRS.contains(d))
            || name.starts_with("test_")
            || name.contains("_test.")
            || name.contains(".test.")
            || name.contains(".spec.")
            || name.contains("_spec.")
        {
            Role::Test
        } else if DOC_EXTS.contains(&ext)
            || dirs.first() == Some(&"docs")
            || DOC_NAMES
                .iter()
                .any(|n| name == *n || name.starts_with(&format!("{n}.")))
            || name.starts_with("readme")
        {
            Role::Doc
        } else if CONFIG_NAMES.contains(&name) || CONFIG_EXTS.contains(&ext) {
            Role::Config
        } else if SOURCE_EXTS.contains(&ext) {
            Role::Source
        } else {
            Role::Unknown
        };
        let risk = match role {
            Role::Test | Role::Doc | Role::Generated => Risk::Low,
            _ if CRITICAL_WORDS.iter().any(|w| lower.contains(w)) => Risk::Critical,
            _ if HIGH_WORDS.iter().any(|w| lower.contains(w)) => Risk::High,
            Role::Source | Role::Config => Risk::Medium,
            Role::Unknown => Risk::Low,
        };
        (role, risk)
    }

    #[test]
    fn the_allocation_free_classifier_agrees_with_the_old_one() {
        let mut names: Vec<String> = [
            "",
            "/",
            "a",
            "a/",
            "/a.js",
            "a//b.py",
            "docs",
            "docs/",
            "docs/a.js",
            "x/docs/a.js",
            "DOCS/A.JS",
            "readme",
            "README.md",
            "readme.rs",
            "License",
            "license.js",
            "licensefoo.js",
            "LICENCE.txt",
            "changelog.",
            "notice.x.y",
            "authorsx",
            "Cargo.lock",
            "a/Cargo.lock",
            "go.sum",
            "vendor",
            "vendor/x.rs",
            "a/node_modules/b",
            "x.min.js",
            "x.MIN.JS",
            "y_pb2.py",
            ".map",
            "test_x.py",
            "Test_X.py",
            "a_test.go",
            "a.test.ts",
            "a.spec.",
            "a_spec.rb",
            "_test.",
            "tests/a.rs",
            "x/tests",
            "spec/a.rb",
            "Dockerfile",
            "a/Makefile",
            ".env",
            ".gitlab-ci.yml",
            "a.yml",
            "a.JSON",
            "src/auth/login.js",
            "lib/crypto-vault.js",
            "api/PAYMENT.py",
            "config/tokens.yaml",
            "a/b/c.cpp",
            "jwt.rs",
            "privkey",
            "x/private_key.pem",
            "certs/a.conf",
            "aacl.py",
            "seSSion.ts",
            "é/ü.rs",
            "src/d0/f1.js",
            "ttoken",
            "passwdd.sh",
            "s.vue",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Every word of every list, as a directory, a name, a prefix and an extension.
        let lists = [
            LOCK_FILES,
            GENERATED_DIRS,
            GENERATED_SUFFIXES,
            TEST_DIRS,
            DOC_EXTS,
            DOC_NAMES,
            CONFIG_EXTS,
            CONFIG_NAMES,
            SOURCE_EXTS,
            CRITICAL_WORDS,
            HIGH_WORDS,
        ];
        for word in lists.iter().flat_map(|l| l.iter()) {
            for form in [
                word.to_string(),
                format!("{word}/x.js"),
                format!("src/{word}"),
                format!("a/{word}.js"),
                format!("x.{word}"),
                format!("{word}.md"),
                word.to_ascii_uppercase(),
            ] {
                names.push(form);
            }
        }
        for path in &names {
            assert_eq!(classify(path), old_classify(path), "{path:?}");
        }
    }

    #[test]
    fn the_table_of_local_rules_says_what_the_rules_said() {
        let roles = [
            Role::Source,
            Role::Test,
            Role::Doc,
            Role::Config,
            Role::Generated,
            Role::Unknown,
        ];
        for role in roles {
            for risk in [Risk::Low, Risk::Medium, Risk::High, Risk::Critical] {
                // The rules as they were written, word for word.
                let (outcome, reason) = match (role, risk) {
                    (Role::Generated, _) => (Outcome::LocalSkip, "generated: never judged".into()),
                    (_, Risk::Low) => (
                        Outcome::LocalSkip,
                        format!("{} file of low risk", role.as_str()),
                    ),
                    (Role::Source | Role::Config, _) => (
                        Outcome::NeedsReview,
                        format!(
                            "{} file of {} risk needs judgement; advisor off",
                            role.as_str(),
                            risk.as_str()
                        ),
                    ),
                    _ => (
                        Outcome::LocalSkip,
                        format!("{} file: nothing to judge", role.as_str()),
                    ),
                };
                assert_eq!(decide(role, risk), LocalDecision { outcome, reason });
            }
        }
    }
}
