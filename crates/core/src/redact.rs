//! The one redaction layer: the secrets sentinel holds are registered once at
//! startup, and every diagnostic text (errors, notes, reasons, findings, the
//! echoes of peers, the dashboard's prose) passes through here on its way out.
//!
//! A peer can echo anything back: GitLab a token in a 400 message, a proxy the
//! `Authorization` header, a model or an agent a key it was shown. Rather than
//! trust each module to remember, the words are cleaned where they leave.
//!
//! Redaction is for words, never for data: a path, a record key, a
//! fingerprint, an id or a file's content is never altered here (a changed
//! path names a file that does not exist; a changed content breaks code). A
//! content that would carry a secret to a branch is refused instead
//! (`holds_secret`).

use std::process::Command;
use std::sync::OnceLock;

use serde::Serialize;
use serde_json::Value;

/// The secrets sentinel reads from the environment, by these names (of
/// `CI_JOB_TOKEN` only whether it is set, but every GitLab CI job has it). An
/// agent gets them only when named with `--agent-env`; a git child never does.
pub const SECRET_VARS: [&str; 5] = [
    "OPENAI_API_KEY",
    "OPENAI_ADMIN_KEY",
    "SENTINEL_GITLAB_TOKEN",
    "GITLAB_TOKEN",
    "CI_JOB_TOKEN",
];

/// Keys of the providers agent CLIs talk to. sentinel does not use them,
/// but an agent may print one or write it into a file: they are secrets to
/// the redaction and to the refusal of content, as is every variable named
/// with `--agent-env` (`Secrets::with_agent_keys`).
pub const AGENT_KEY_VARS: [&str; 12] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CODEX_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "OPENROUTER_API_KEY",
    "GROQ_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
];

/// Addresses that may carry `user:password@` (a proxy in front of a peer).
const URL_VARS: [&str; 5] = [
    "SENTINEL_GITLAB_URL",
    "CI_API_V4_URL",
    "OPENAI_BASE_URL",
    "SENTINEL_ADMIN_URL",
    "OPENAI_ADMIN_BASE_URL",
];

/// Shorter values are not secrets: they cannot be told from ordinary text.
/// Real tokens and keys are 20 characters and more.
pub const MIN_SECRET_LEN: usize = 8;

/// A value made only of letters, digits and `-`/`_` shorter than this, with
/// no digit, is a word (`placeholder`, `not-needed`), not a secret, unless
/// it starts with a known key prefix.
const WORDLIKE_MAX: usize = 16;

/// The keys local servers document for "no key needed" (LM Studio,
/// llama.cpp and llamafile, vLLM, text-generation-webui, Ollama's
/// OpenAI-compatible endpoint and common examples): never secrets, compared
/// without case.
const PLACEHOLDERS: [&str; 12] = [
    "lm-studio",
    "ollama",
    "sk-no-key-required",
    "no-key-required",
    "not-needed",
    "no-key",
    "none",
    "empty",
    "dummy",
    "sk-dummy",
    "placeholder",
    "sk-xxx",
];

/// Prefixes of real keys and tokens (OpenAI, GitLab personal, project,
/// deploy, CI job, trigger and OAuth tokens): such a value is a secret even
/// when it reads like a word.
const KEY_PREFIXES: [&str; 8] = [
    "sk-", "glpat-", "gldt-", "glcbt-", "glptt-", "gloas-", "glrt-", "glft-",
];

/// Object keys whose values are data (paths, ids, fingerprints, contents):
/// never redacted, wherever they appear in a document.
const DATA_KEYS: [&str; 21] = [
    "path",
    "paths",
    "file",
    "blob",
    "fingerprint",
    "id",
    "commit",
    "patch_commit",
    "patch_pending",
    "content",
    "head",
    "last_head",
    "tip",
    "hash",
    "deps",
    "imports",
    "own_output",
    "backlog",
    "importers",
    "location",
    "scope",
];

/// Whether an environment value counts as a secret (see docs/threat-model.md).
pub fn is_secret(value: &str) -> bool {
    let v = value.trim();
    if v.chars().count() < MIN_SECRET_LEN {
        return false;
    }
    let lower = v.to_ascii_lowercase();
    if PLACEHOLDERS.contains(&lower.as_str()) {
        return false;
    }
    if KEY_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        return true;
    }
    let wordlike = v
        .chars()
        .all(|c| c.is_ascii_alphabetic() || c == '-' || c == '_');
    !(wordlike && v.len() < WORDLIKE_MAX)
}

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Headers whose value is a credential, in the spelling peers echo them.
const HEADERS: [&str; 4] = ["authorization", "private-token", "job-token", "x-api-key"];

static REGISTERED: OnceLock<Secrets> = OnceLock::new();

/// The bytes `names_a_header` looks for first: every header holds one, and
/// they are rare in a state (its times are numbers), so the search jumps
/// from one to the next instead of reading every byte.
const ANCHORS: [u8; 3] = [b'-', b'z', b'Z'];

/// Whether `text` names a credential header in any ASCII case. Found by
/// its anchor bytes and compared in place, case folded: a save checks its
/// whole state this way (a 200 KB manifest and a 100 KB shard on every
/// wake), and lowering it, even a chunk at a time, cost more than the rest
/// of the search.
fn names_a_header(text: &str) -> bool {
    // Each header once, by its first anchor and the byte after it: every
    // occurrence of it holds the two, and most anchors in a state (the
    // dashes and `Z` of its times, the `deps:-` of its fingerprints) are
    // told apart by the second byte alone.
    let by_anchor = HEADERS.map(|h| {
        let h = h.as_bytes();
        let k = h.iter().position(|c| ANCHORS.contains(c)).unwrap_or(0);
        (h[k], h.get(k + 1).copied(), k, h)
    });
    let b = text.as_bytes();
    let [a0, a1, a2] = ANCHORS;
    memchr::memchr3_iter(a0, a1, a2, b).any(|at| {
        let anchor = b[at].to_ascii_lowercase();
        let next = b.get(at + 1).map(u8::to_ascii_lowercase);
        by_anchor.iter().any(|&(a, after, k, h)| {
            a == anchor
                && after == next
                && at >= k
                && b.get(at - k..at - k + h.len())
                    .is_some_and(|s| s.eq_ignore_ascii_case(h))
        })
    })
}

/// The set of secret values and the spellings they may come back in.
#[derive(Default)]
pub struct Secrets {
    /// Longest first, so a value is never half-replaced by a shorter one.
    needles: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} spellings)", self.needles.len())
    }
}

impl Secrets {
    /// The secrets in the environment `get` reads, and the passwords of the
    /// addresses in it and in `urls` (the flags that name a peer).
    pub fn from_env(get: impl Fn(&str) -> Option<String>, urls: &[&str]) -> Secrets {
        let mut values: Vec<String> = SECRET_VARS.iter().filter_map(|k| get(k)).collect();
        let from_env: Vec<String> = URL_VARS.iter().filter_map(|k| get(k)).collect();
        for url in urls
            .iter()
            .copied()
            .chain(from_env.iter().map(String::as_str))
        {
            values.extend(url_credentials(url));
        }
        Secrets::new(values)
    }

    /// These secrets, and the values (read with `get`) of the agent
    /// providers' keys and of the variables `named` with `--agent-env`.
    pub fn with_agent_keys(
        self,
        get: impl Fn(&str) -> Option<String>,
        named: &[String],
    ) -> Secrets {
        let names = AGENT_KEY_VARS
            .iter()
            .copied()
            .chain(named.iter().map(String::as_str));
        let more = Secrets::new(names.filter_map(&get));
        let mut needles = self.needles;
        needles.extend(more.needles);
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        needles.dedup();
        Secrets { needles }
    }

    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        let mut needles = Vec::new();
        for value in values {
            if !is_secret(&value) {
                continue;
            }
            for v in [value.as_str(), value.trim()] {
                // A string serialised as JSON, quotes taken off.
                let quoted = serde_json::to_string(v).unwrap_or_default();
                let json = quoted.get(1..quoted.len().saturating_sub(1)).unwrap_or("");
                needles.extend([v.to_string(), json.to_string(), percent_encode(v, false)]);
                needles.push(percent_encode(v, true));
            }
        }
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        needles.dedup();
        needles.retain(|n| !n.is_empty());
        Secrets { needles }
    }

    /// Whether `text` holds a registered secret in any of its spellings.
    pub fn holds(&self, text: &str) -> bool {
        self.needles.iter().any(|n| text.contains(n.as_str()))
    }

    /// Whether `text` might lose something to `text`: a secret, or the name
    /// of a credential header.
    fn may_touch(&self, text: &str) -> bool {
        self.holds(text) || names_a_header(text)
    }

    /// `text` with every secret, in any registered spelling, and the value of
    /// every credential header line replaced by `***`.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for needle in &self.needles {
            if out.contains(needle.as_str()) {
                out = out.replace(needle.as_str(), MASK);
            }
        }
        scrub_headers(&out)
    }

    /// Whether `text` holds no secret in any spelling and no credential
    /// header's name: `text` then leaves it, and every part of it, as it is.
    fn nothing_in(&self, text: &str) -> bool {
        if self.needles.iter().any(|n| text.contains(n.as_str())) {
            return false;
        }
        !names_a_header(text)
    }

    /// `value` as JSON text with its words redacted (`words`), in the field
    /// order of its type. The text is cleaned in place when that gives
    /// exactly the redacted value; otherwise (a secret in a data field, or
    /// one that matched across JSON's own syntax) it is written from the
    /// redacted value, whose keys come sorted, so the document is always
    /// valid.
    fn json_text<T: Serialize + ?Sized>(
        &self,
        value: &T,
        pretty: bool,
    ) -> serde_json::Result<String> {
        let raw = serialise(value, pretty)?;
        // The common case, and the hot one (every record of a save): the
        // text holds no secret in any spelling `text` knows, JSON-escaped
        // included, and no header name, so no value does either.
        if !self.may_touch(&raw) {
            return Ok(raw);
        }
        let plain = serde_json::to_value(value)?;
        let clean = self.words(plain.clone());
        if clean == plain {
            return Ok(raw);
        }
        let text = self.text(&raw);
        if serde_json::from_str::<Value>(&text).is_ok_and(|v| v == clean) {
            return Ok(text);
        }
        serialise(&clean, pretty)
    }

    /// Every string of `value` redacted but object keys and the values of
    /// data fields (`DATA_KEYS`), structure untouched: a JSON document
    /// stays valid whatever the secrets look like, and its paths, ids and
    /// contents stay what they are.
    pub fn words(&self, value: Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.text(&s)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.words(v)).collect()),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| {
                        let v = if DATA_KEYS.contains(&k.as_str()) {
                            v
                        } else {
                            self.words(v)
                        };
                        (k, v)
                    })
                    .collect(),
            ),
            other => other,
        }
    }
}

/// Register the secrets of this process; the first call wins. Called once
/// by the binary before anything is read or printed.
pub fn register(secrets: Secrets) {
    let _ = REGISTERED.set(secrets);
}

fn registered() -> &'static Secrets {
    REGISTERED.get_or_init(Secrets::default)
}

/// Text on its way out, redacted.
pub fn text(text: &str) -> String {
    registered().text(text)
}

/// Whether redacting `text`, or any part of it, changes nothing: it holds
/// no secret in any registered spelling and no credential header's name.
/// A document that passes can be written as serialised, whole: what the
/// redaction of each of its values would have written is the same text.
pub fn nothing_to_redact(text: &str) -> bool {
    registered().nothing_in(text)
}

/// Whether `text` carries a registered secret: a content that does is
/// refused, never altered.
pub fn holds_secret(text: &str) -> bool {
    registered().holds(text)
}

/// `serde_json::to_string`, its words redacted (never its data fields).
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    registered().json_text(value, false)
}

/// `serde_json::to_string_pretty`, its words redacted.
pub fn to_string_pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    registered().json_text(value, true)
}

/// `serde_json::to_writer`, its words redacted.
pub fn to_writer<W: std::io::Write, T: Serialize + ?Sized>(
    mut writer: W,
    value: &T,
) -> serde_json::Result<()> {
    let text = to_string(value)?;
    writer
        .write_all(text.as_bytes())
        .map_err(serde_json::Error::io)
}

/// A git child's environment without sentinel's secrets, removed by name;
/// everything else (HOME, PATH, the user's GIT_* settings) is kept so git
/// works as the user configured it.
pub fn scrub_env(cmd: &mut Command) -> &mut Command {
    for name in SECRET_VARS {
        cmd.env_remove(name);
    }
    cmd
}

fn serialise<T: Serialize + ?Sized>(value: &T, pretty: bool) -> serde_json::Result<String> {
    if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
}

/// The password (and `user:password`) of a `scheme://user:password@host` address,
/// as written and percent-decoded.
fn url_credentials(url: &str) -> Vec<String> {
    let Some(userinfo) = crate::address::credentials(url) else {
        return Vec::new();
    };
    let mut out = vec![userinfo.to_string(), percent_decode(userinfo)];
    if let Some((_, password)) = userinfo.split_once(':') {
        out.push(password.to_string());
        out.push(percent_decode(password));
    }
    out
}

/// Everything but RFC 3986's unreserved characters percent-encoded, as a
/// query string or a form body would carry the value.
/// With `lower`, the escapes' hex digits are lowercase, as some clients
/// write them; the letters that pass keep their case.
fn percent_encode(s: &str, lower: bool) -> String {
    let encoded = percent_encoding::utf8_percent_encode(s, crate::address::UNRESERVED);
    if !lower {
        return encoded.to_string();
    }
    // The encoder yields each escape as its own `%XX` piece, and `%` never
    // passes unescaped, so only escapes start with it.
    encoded
        .map(|piece| match piece.starts_with('%') {
            true => piece.to_ascii_lowercase(),
            false => piece.to_string(),
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The value of a credential header line (`Authorization: Bearer x`,
/// `< PRIVATE-TOKEN: x` as `curl -v` echoes it) replaced by `***`: an echo
/// may carry a credential sentinel never held (a proxy's own). Only a line
/// that starts with the header's name, in its first column as HTTP writes
/// it, is one: the same words in indented code or a sentence are left alone.
fn scrub_headers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match header_value(line) {
            Some((at, end)) => {
                out.push_str(&line[..at]);
                out.push_str(MASK);
                out.push_str(&line[end..]);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Where the credential of a header line starts and ends, when `line` is one.
fn header_value(line: &str) -> Option<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut j = 0;
    // `curl -v` marks sent and received headers with `> ` and `< `.
    if matches!(bytes.get(j), Some(b'>' | b'<')) && bytes.get(j + 1) == Some(&b' ') {
        j = skip(bytes, j + 1, b" ");
    }
    let name = HEADERS.iter().find(|h| {
        line.get(j..j + h.len())
            .is_some_and(|n| n.eq_ignore_ascii_case(h))
    })?;
    j = skip(bytes, j + name.len(), b" \t");
    if bytes.get(j) != Some(&b':') {
        return None;
    }
    j = skip(bytes, j + 1, b" \t");
    let word = bytes[j..]
        .iter()
        .take_while(|b| b.is_ascii_alphabetic())
        .count();
    if word > 0
        && bytes.get(j + word) == Some(&b' ')
        && matches!(
            line[j..j + word].to_ascii_lowercase().as_str(),
            "bearer" | "basic" | "token"
        )
    {
        j += word + 1;
    }
    let end = line.trim_end().len().max(j);
    (end > j && &line[j..end] != MASK).then_some((j, end))
}

fn skip(bytes: &[u8], mut i: usize, set: &[u8]) -> usize {
    while bytes.get(i).is_some_and(|b| set.contains(b)) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        Secrets::new(["glpat-canary/Token+1".to_string()])
    }

    #[test]
    fn a_header_name_is_seen_wherever_it_lies_in_a_long_state_in_any_case() {
        // At every offset over a few thousand bytes, in any case, after
        // multi-byte text that moves it off the ASCII grid, and at the very
        // start and end.
        let filler = "é{\"path\":\"src/d1/f.js\"},".repeat(700);
        for name in ["Authorization", "PRIVATE-TOKEN", "job-token", "X-Api-Key"] {
            for at in (0..40).chain(8170..8210).chain(16381..16390) {
                // `at` bytes of two-byte letters (and one `x` if odd).
                let mut text = "é".repeat(at / 2);
                if at % 2 == 1 {
                    text.push('x');
                }
                text.push_str(name);
                assert!(names_a_header(&text), "{name} at the end after {at}");
                text.push_str(&filler[..4000]);
                assert!(names_a_header(&text), "{name} at {at}");
                assert!(!secrets().nothing_in(&text), "{name} at {at}");
            }
        }
        let clean = filler.repeat(3);
        assert!(!names_a_header(&clean));
        assert!(secrets().nothing_in(&clean));
        assert!(!names_a_header(""));
    }

    /// Every header holds an anchor byte: the search finds a header only
    /// through one.
    #[test]
    fn every_header_holds_an_anchor_the_search_jumps_to() {
        for h in HEADERS {
            assert!(h.bytes().any(|c| ANCHORS.contains(&c)), "{h}");
            assert!(!ANCHORS.contains(&h.as_bytes()[h.len() - 1]), "{h}");
            assert_eq!(h, h.to_ascii_lowercase());
        }
    }

    /// Found in place, case folded, a header is found exactly where a
    /// search of the lowered text finds one, near misses and anchors cut
    /// off at either end included.
    #[test]
    fn the_anchored_search_agrees_with_a_search_of_the_lowered_text() {
        let lowered = |t: &str| {
            let l = t.to_ascii_lowercase();
            HEADERS.iter().any(|h| l.contains(h))
        };
        let parts = [
            "Authorizatio",
            "uthorization",
            "AUTHORIZATION",
            "private-tok",
            "rivate-token",
            "Private-Token",
            "job-tok",
            "ob-token",
            "JOB-TOKEN",
            "x-api-ke",
            "-api-key",
            "X-API-KEY",
            "z",
            "Z",
            "-",
            "--",
            "é",
            "✓",
            "\"ts\":1782864000000,",
            "x-api",
            "-key",
            "job",
            "-token",
        ];
        let mut seed = 7u64;
        for _ in 0..20_000 {
            let mut text = String::new();
            for _ in 0..(seed % 6) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push_str(parts[(seed >> 33) as usize % parts.len()]);
            }
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            assert_eq!(names_a_header(&text), lowered(&text), "{text:?}");
        }
    }

    #[test]
    fn a_document_passes_whole_only_when_no_part_of_it_would_be_redacted() {
        let s = secrets();
        let clean = r#"{"a":{"reason":"fine"},"b":{"reason":"also fine"}}"#;
        assert!(s.nothing_in(clean));
        assert_eq!(s.text(clean), clean);
        for dirty in [
            r#"{"a":{"reason":"glpat-canary/Token+1"}}"#,
            r#"{"a":{"reason":"glpat-canary%2FToken%2B1"}}"#,
            r#"{"a":{"reason":"PRIVATE-TOKEN: abc"}}"#,
            r#"{"a":{"reason":"an authorization header"}}"#,
        ] {
            assert!(!s.nothing_in(dirty), "{dirty}");
        }
    }

    #[test]
    fn a_secret_is_redacted_as_written_json_escaped_and_percent_encoded() {
        let s = Secrets::new([
            "sk-canary\"quote".to_string(),
            "glpat-canary/Token+1".into(),
        ]);
        assert_eq!(s.text("key sk-canary\"quote!"), "key ***!");
        assert_eq!(s.text(r#"{"m":"sk-canary\"quote"}"#), r#"{"m":"***"}"#);
        assert_eq!(s.text("t=glpat-canary%2FToken%2B1&x"), "t=***&x");
        assert_eq!(s.text("t=glpat-canary%2fToken%2b1"), "t=***");
    }

    #[test]
    fn credential_header_lines_lose_their_value_whatever_it_is() {
        let s = Secrets::default();
        assert_eq!(
            s.text("echo:\nAuthorization: Bearer sk-proxy-own-key\nnext"),
            "echo:\nAuthorization: Bearer ***\nnext"
        );
        assert_eq!(
            s.text("< private-token: glpat-x y\r\n"),
            "< private-token: ***\r\n"
        );
        // The name alone, in a sentence, is not a header.
        let plain = "send the PRIVATE-TOKEN header with a token";
        assert_eq!(s.text(plain), plain);
    }

    #[test]
    fn the_header_rule_never_touches_code() {
        let s = Secrets::default();
        for code in [
            "  headers: { Authorization: `Bearer ${token}` },",
            "    Authorization: `Bearer ${token}`,",
            "curl -H \"PRIVATE-TOKEN: $GITLAB_TOKEN\" \"$url\"",
            "const h = {\"PRIVATE-TOKEN\":\"x\"};",
            "x-api-key=abc def",
        ] {
            assert_eq!(s.text(code), code);
        }
    }

    #[test]
    fn placeholder_keys_and_words_are_not_secrets_and_real_keys_are() {
        for not in [
            "lm-studio",
            "ollama",
            "sk-no-key-required",
            "EMPTY",
            "not-needed",
            "abc",
            "placeholders",
        ] {
            assert!(!is_secret(not), "{not}");
        }
        for yes in [
            "sk-abcdefgh",
            "glpat-abcdefghij",
            "hunter2-pass",
            "sk-proj-4f9aQ",
            "aVeryLongPassphraseWord",
        ] {
            assert!(is_secret(yes), "{yes}");
        }
        let s = Secrets::from_env(
            |k| (k == "OPENAI_API_KEY").then(|| "lm-studio".to_string()),
            &[],
        );
        assert_eq!(s.text("src/lm-studio/client.js"), "src/lm-studio/client.js");
    }

    #[test]
    fn invariant_20_data_fields_keep_a_secret_and_words_lose_it() {
        let v = serde_json::json!({
            "src/glpat-canary/Token+1.js": {"path": "glpat-canary/Token+1", "reason": "saw glpat-canary/Token+1",
            "fingerprint": "glpat-canary/Token+1|x", "findings": [{"message": "glpat-canary/Token+1"}]}
        });
        let out = secrets().words(v);
        let r = &out["src/glpat-canary/Token+1.js"];
        assert_eq!(r["path"], "glpat-canary/Token+1");
        assert_eq!(r["fingerprint"], "glpat-canary/Token+1|x");
        assert_eq!(r["reason"], "saw ***");
        assert_eq!(r["findings"][0]["message"], "***");
        assert!(secrets().holds("x glpat-canary/Token+1"));
        assert!(!secrets().holds("x glpat-canary"));
    }

    #[test]
    fn json_keeps_its_structure_and_its_keys_and_loses_the_secret_in_values() {
        let v = serde_json::json!({"glpat-canary/Token+1": ["x glpat-canary/Token+1", 1, true]});
        let out = secrets().words(v);
        assert_eq!(
            out,
            serde_json::json!({"glpat-canary/Token+1": ["x ***", 1, true]})
        );
    }

    #[test]
    fn redacted_json_keeps_its_field_order_unless_a_secret_spans_its_syntax() {
        #[derive(Serialize)]
        struct Line {
            seq: u32,
            reason: String,
            at: &'static str,
        }
        let line = Line {
            seq: 1,
            reason: "saw glpat-canary/Token+1".into(),
            at: "now",
        };
        let text = secrets().json_text(&line, false).unwrap();
        assert_eq!(text, r#"{"seq":1,"reason":"saw ***","at":"now"}"#);
        // A secret that matches across JSON's syntax: still valid JSON.
        let odd = Secrets::new([r#"1,"reason":"#.to_string()]);
        let text = odd.json_text(&line, false).unwrap();
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["reason"], "saw glpat-canary/Token+1");
        assert_eq!(back["seq"], 1);
        // And when it is also inside a value, the value loses it, the
        // syntax stays.
        let odd = Secrets::new([r#"ab","cdefg"#.to_string()]);
        let list = ["ab", "cdefg", r#"zz ab","cdefg"#];
        let back: Value = serde_json::from_str(&odd.json_text(&list, false).unwrap()).unwrap();
        assert_eq!(back, serde_json::json!(["ab", "cdefg", "zz ***"]));
    }

    #[test]
    fn short_values_and_unset_variables_redact_nothing() {
        let s = Secrets::from_env(|k| (k == "OPENAI_API_KEY").then(|| "abc".to_string()), &[]);
        assert_eq!(s.text("abc 1234abcd"), "abc 1234abcd");
    }

    #[test]
    fn the_password_of_a_proxy_address_is_a_secret() {
        let s = Secrets::from_env(
            |k| (k == "OPENAI_BASE_URL").then(|| "https://me:p%40ss-word-1@proxy/v1".into()),
            &["http://u:flag-secret-9@h:1/x"],
        );
        assert_eq!(s.text("p@ss-word-1 p%40ss-word-1"), "*** ***");
        assert_eq!(s.text("failed: flag-secret-9"), "failed: ***");
    }
}
