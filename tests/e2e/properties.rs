//! Property tests (proptest, 256 cases each): the functions that read what
//! the outside world wrote (the state file, the model's answer, a provider's
//! error, a file's bytes, a signals file) never panic, whatever the input,
//! and what they return keeps its promises.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};

use sentinel::gate::{autonomy, deps};
use sentinel::llm::client::parse_answer;
use sentinel::llm::protocol::{self, Class, Failure};
use sentinel::state::{SCHEMA, State, store};

/// 256 cases a property; `PROPTEST_CASES=N` runs more.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(256),
        // A failure is reported with its minimal input; the corpus is not kept.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// The state file
// ---------------------------------------------------------------------------

/// A real encoded state: `state.example.json` plus an open circuit, an open
/// proposal and a backlog, in the layout `store::encode` writes.
fn real_state() -> Vec<u8> {
    let mut v: Value =
        serde_json::from_str(include_str!("../../state.example.json")).expect("the example parses");
    v["llm"]["circuit"] = json!({
        "class": "server",
        "reason": "HTTP 500 server_error",
        "until": "2026-06-16T10:10:00Z",
        "advice": "the provider failed; retried later"
    });
    v["llm"]["proposals"] = json!({
        "libs/shared/format-date.js": {
            "fingerprint": "8d4f03a991|medium|source|0.70|under_observation|0|0|ev:d648350d787d|deps:-",
            "reason": "unchecked input",
            "findings": [{"line": 3, "severity": "major", "message": "validate the date"}],
            "ts": "2026-06-16T10:00:00Z"
        }
    });
    v["backlog"] = json!(["libs/shared/README.md"]);
    let state: State = serde_json::from_value(v).expect("the example is a state");
    store::encode(&state).expect("encode")
}

/// One scratch file per test thread, rewritten for every case.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("state.json");
    (dir, path)
}

/// `load` and `load_header` on `bytes` written to `path`: never a panic,
/// never "missing" for a file that exists, an error that names the file,
/// and a loaded state only of a schema this build understands. Returns
/// whether each loaded.
fn load_both(path: &Path, bytes: &[u8]) -> Result<(bool, bool), TestCaseError> {
    std::fs::write(path, bytes).expect("write the scratch state");
    let named = format!("`{}`", path.display());
    let whole = match store::load(path) {
        Ok(Some(state)) => {
            prop_assert!((1..=SCHEMA).contains(&state.schema));
            true
        }
        Ok(None) => return Err(TestCaseError::fail("an existing file loaded as missing")),
        Err(e) => {
            let msg = format!("{e:#}");
            prop_assert!(msg.contains(&named), "the error names the file: {msg}");
            false
        }
    };
    let header = match store::load_header(path) {
        Ok(Some(h)) => {
            prop_assert!((1..=SCHEMA).contains(&h.schema));
            true
        }
        Ok(None) => {
            return Err(TestCaseError::fail(
                "an existing file's header loaded as missing",
            ));
        }
        Err(e) => {
            let msg = format!("{e:#}");
            prop_assert!(msg.contains(&named), "the error names the file: {msg}");
            false
        }
    };
    // The header is never refused when the whole document loads.
    prop_assert!(!whole || header);
    // Read-only: loading never changes the file.
    prop_assert_eq!(std::fs::read(path).expect("read back"), bytes);
    Ok((whole, header))
}

/// Bytes that look a little like a state now and then.
fn state_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        proptest::collection::vec(
            prop_oneof![
                Just(b"{\"schema\":1,".to_vec()),
                Just(b"{\"schema\":99,".to_vec()),
                Just(b"\"body_bytes\":12,\n".to_vec()),
                Just(b"\"wake\":{\"ticks\":3},".to_vec()),
                Just(b"\"files\":{}".to_vec()),
                Just(b"}".to_vec()),
                Just(b",\n".to_vec()),
                Just(b"\"".to_vec()),
                Just(b"null".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..8),
            ],
            0..24
        )
        .prop_map(|parts| parts.concat()),
    ]
}

/// A mutation of a document: cut, flip, insert or remove bytes.
#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip(Vec<(usize, u8)>),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        proptest::collection::vec((any::<usize>(), 1..=255u8), 1..5).prop_map(Mutation::Flip),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1..64usize).prop_map(|(i, n)| Mutation::Remove(i, n)),
    ]
}

fn apply(doc: &[u8], m: &Mutation) -> Vec<u8> {
    let mut out = doc.to_vec();
    match m {
        Mutation::Truncate(i) => out.truncate(i % doc.len()),
        Mutation::Flip(flips) => {
            for (i, x) in flips {
                let i = i % out.len();
                out[i] ^= x;
            }
        }
        Mutation::Insert(i, bytes) => {
            let i = i % (out.len() + 1);
            out.splice(i..i, bytes.iter().copied());
        }
        Mutation::Remove(i, n) => {
            let i = i % out.len();
            let end = (i + n).min(out.len());
            out.drain(i..end);
        }
    }
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn loading_arbitrary_bytes_as_a_state_never_panics_and_errors_name_the_file(
        bytes in state_like_bytes()
    ) {
        let (_dir, path) = scratch();
        load_both(&path, &bytes)?;
    }

    #[test]
    fn loading_a_damaged_real_state_never_panics_and_a_torn_one_never_loads(m in mutation()) {
        let doc = real_state();
        let (_dir, path) = scratch();
        let damaged = apply(&doc, &m);
        let (whole, header) = load_both(&path, &damaged)?;
        // A document cut before its closing brace is torn: neither the
        // whole nor the header may load from it.
        let closing = doc.iter().rposition(|b| *b == b'}').unwrap();
        if let Mutation::Truncate(_) = m
            && damaged.len() <= closing
        {
            prop_assert!(!whole && !header, "a torn state of {} bytes loaded", damaged.len());
        }
    }
}

#[test]
fn the_real_state_the_properties_mutate_loads_whole_and_by_its_header() {
    let (_dir, path) = scratch();
    let doc = real_state();
    std::fs::write(&path, &doc).unwrap();
    let state = store::load(&path).unwrap().unwrap();
    assert_eq!(store::load_header(&path).unwrap().unwrap(), state.header());
    assert!(state.llm.circuit.is_some() && !state.llm.proposals.is_empty());
    assert_eq!(store::encode(&state).unwrap(), doc, "encode is stable");
}

// ---------------------------------------------------------------------------
// The model's answer and the provider's errors
// ---------------------------------------------------------------------------

fn valid_answer() -> impl Strategy<Value = String> {
    let finding = (
        0..10_000u64,
        prop_oneof![
            Just("info"),
            Just("minor"),
            Just("major"),
            Just("critical"),
            Just("blocker")
        ],
        ".{0,40}",
    )
        .prop_map(|(line, severity, message)| {
            json!({"line": line, "severity": severity, "message": message})
        });
    (
        prop_oneof![Just("SKIP"), Just("EVOLVE")],
        "[a-z][a-z ]{0,29}",
        proptest::collection::vec(finding, 0..4),
    )
        .prop_map(|(action, reason, findings)| {
            json!({"action": action, "reason": reason, "findings": findings}).to_string()
        })
}

/// The error bodies of `fixtures/openai/` and `fixtures/peers/`, with the
/// status they are sent with and the class each must give (the tables of
/// docs/advisor.md and the fixtures' READMEs).
const ERROR_SHAPES: [(u16, &str, Class); 27] = [
    (
        429,
        include_str!("../../fixtures/openai/rate-limit.json"),
        Class::RateLimit,
    ),
    (
        429,
        include_str!("../../fixtures/openai/quota.json"),
        Class::Quota,
    ),
    (
        429,
        include_str!("../../fixtures/openai/spend-limit.json"),
        Class::Quota,
    ),
    (
        401,
        include_str!("../../fixtures/openai/bad-key.json"),
        Class::Auth,
    ),
    (
        404,
        include_str!("../../fixtures/openai/model-not-found.json"),
        Class::Request,
    ),
    (
        400,
        include_str!("../../fixtures/openai/context-length.json"),
        Class::FileRequest,
    ),
    (
        500,
        include_str!("../../fixtures/openai/server-500.json"),
        Class::Server,
    ),
    (
        503,
        include_str!("../../fixtures/openai/overloaded-503.json"),
        Class::Server,
    ),
    (
        429,
        include_str!("../../fixtures/openai/request-too-large.json"),
        Class::FileRequest,
    ),
    (
        429,
        include_str!("../../fixtures/peers/litellm-quota.json"),
        Class::Quota,
    ),
    (
        429,
        include_str!("../../fixtures/peers/litellm-rate-limit.json"),
        Class::RateLimit,
    ),
    (
        429,
        include_str!("../../fixtures/peers/litellm-cooldown.json"),
        Class::RateLimit,
    ),
    (
        401,
        include_str!("../../fixtures/peers/litellm-auth.json"),
        Class::Auth,
    ),
    (
        500,
        include_str!("../../fixtures/peers/litellm-server.json"),
        Class::Server,
    ),
    (
        422,
        include_str!("../../fixtures/peers/litellm-key-budget.json"),
        Class::Budget,
    ),
    (
        429,
        include_str!("../../fixtures/peers/litellm-key-budget-429.json"),
        Class::Budget,
    ),
    (
        429,
        include_str!("../../fixtures/peers/litellm-provider-budget.json"),
        Class::Budget,
    ),
    (
        400,
        include_str!("../../fixtures/peers/litellm-unsupported-params.json"),
        Class::Request,
    ),
    (
        400,
        include_str!("../../fixtures/peers/openai-unsupported-max-tokens.json"),
        Class::Request,
    ),
    (
        404,
        include_str!("../../fixtures/peers/ollama-not-found.json"),
        Class::Request,
    ),
    (
        400,
        include_str!("../../fixtures/peers/vllm-context-length.json"),
        Class::FileRequest,
    ),
    (
        400,
        include_str!("../../fixtures/peers/vllm-context-length-old.json"),
        Class::FileRequest,
    ),
    (
        501,
        include_str!("../../fixtures/peers/llamacpp-not-supported.json"),
        Class::Request,
    ),
    (
        503,
        include_str!("../../fixtures/peers/llamacpp-loading.json"),
        Class::Server,
    ),
    (
        400,
        include_str!("../../fixtures/peers/llamacpp-context-size.json"),
        Class::FileRequest,
    ),
    (
        400,
        include_str!("../../fixtures/peers/azure-content-filter.json"),
        Class::FileRequest,
    ),
    // A proxy that answers llama.cpp's loading with its own status.
    (
        500,
        include_str!("../../fixtures/peers/llamacpp-loading.json"),
        Class::Server,
    ),
];

/// Every phrase the classifier reads in a message, lower case.
const CLASSIFIER_PHRASES: [&str; 33] = [
    "budget has been exceeded",
    "crossed budget",
    "exceeded budget",
    "exceededbudget",
    "exceeded your current quota",
    "insufficient_quota",
    "credit balance is too low",
    "spend_limit_exceeded",
    "maximum context length",
    "exceeds the available context size",
    "context length exceeded",
    "content management policy",
    "loading model",
    "request too large",
    "contextwindowexceedederror",
    "prompt is too long",
    "input is too long",
    // Money is read by its words, wherever they stand.
    "quota",
    "credit",
    "billing",
    "balance",
    "payment",
    "spend limit",
    "spending limit",
    "usage limit",
    "usage_limit",
    "out of funds",
    "insufficient funds",
    // And so is a wait.
    "try again in",
    "retry in",
    "retry after",
    "try again after",
    "rate limit",
];

/// Words a provider might add to a message, none of them a classifier's phrase.
fn noise() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9 .,:;!'()-]{0,80}",
        proptest::collection::vec(
            prop_oneof![
                Just("request"),
                Just("too"),
                Just("large"),
                Just("model"),
                Just("budget"),
                Just("quota"),
                Just("context"),
                Just("length"),
                Just("exceeded"),
                Just("limit"),
                Just("rate"),
                Just("server"),
                Just("loading"),
                Just("tokens"),
                Just("policy"),
            ],
            0..12,
        )
        .prop_map(|words| words.join(" ")),
    ]
    .prop_filter("holds a classifier phrase", |n| {
        let n = n.to_ascii_lowercase();
        !CLASSIFIER_PHRASES.iter().any(|p| n.contains(p))
    })
}

/// `body` with `noise` after its message and, if given, an extra field of noise.
fn with_noise(body: &str, noise: &str, field: Option<&str>) -> String {
    let mut v: Value = serde_json::from_str(body).expect("a fixture parses");
    let err = if v.get("error").is_some() {
        &mut v["error"]
    } else {
        &mut v
    };
    let message = err["message"].as_str().expect("a fixture has a message");
    // After a separator no phrase spans, so the message keeps its own words.
    err["message"] = json!(format!("{message} | {noise}"));
    if let Some(field) = field {
        err["detail"] = json!(field);
    }
    v.to_string()
}

/// `parse_answer` never panics; what it accepts keeps its promises.
fn check_answer(text: &str) -> Result<(), TestCaseError> {
    if let Ok(answer) = parse_answer(text) {
        prop_assert!(!answer.reason.trim().is_empty());
        let again = serde_json::to_string(&answer).unwrap();
        prop_assert_eq!(parse_answer(&again).unwrap(), answer);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn parsing_an_arbitrary_answer_never_panics(text in prop_oneof![
        ".{0,200}",
        "[{}\\[\\]\":,a-zA-Z0-9 ]{0,80}",
    ]) {
        check_answer(&text)?;
    }

    #[test]
    fn parsing_a_damaged_valid_answer_never_panics(answer in valid_answer(), m in mutation()) {
        prop_assert!(parse_answer(&answer).is_ok(), "{}", answer);
        let damaged = apply(answer.as_bytes(), &m);
        check_answer(&String::from_utf8_lossy(&damaged))?;
    }

    #[test]
    fn a_documented_error_shape_gives_its_class_whatever_noise_its_message_carries(
        case in 0..ERROR_SHAPES.len(),
        noise in noise(),
        noise_field in proptest::option::of(noise()),
    ) {
        let (status, body, expected) = ERROR_SHAPES[case];
        let failure = Failure::Http {
            status,
            body: with_noise(body, &noise, noise_field.as_deref()),
            headers: Vec::new(),
        };
        prop_assert_eq!(protocol::classify(&failure), expected, "{} {}", status, body);
    }

    #[test]
    fn without_an_error_body_the_class_follows_the_status_and_retries_stop_within_three_attempts(
        status in prop_oneof![
            Just(400u16), Just(401), Just(403), Just(404), Just(413), Just(422), Just(429),
            500u16..600,
            any::<u16>(),
        ],
        body in ".{0,120}",
        retry_after_ms in proptest::option::of(".{0,12}"),
        retry_after in proptest::option::of(".{0,32}"),
    ) {
        prop_assume!(serde_json::from_str::<Value>(&body).map_or(true, |v| {
            v.get("error").is_none() && v.get("object") != Some(&json!("error"))
        }));
        let mut headers = Vec::new();
        if let Some(v) = &retry_after_ms {
            headers.push(("retry-after-ms".to_string(), v.clone()));
        }
        if let Some(v) = &retry_after {
            headers.push(("llm_provider-retry-after".to_string(), v.clone()));
        }
        let failure = Failure::Http {
            status,
            body: body.clone(),
            headers,
        };
        let class = protocol::classify(&failure);
        let expected = match status {
            429 => Class::RateLimit,
            402 => Class::Quota,
            401 | 403 => Class::Auth,
            400 | 404 | 422 => Class::Request,
            413 => Class::FileRequest,
            500..=599 => Class::Server,
            _ => Class::Unknown,
        };
        prop_assert_eq!(class, expected, "status {}", status);
        // Whatever the headers say, the protocol stops after a few attempts.
        let now: DateTime<Utc> = "2026-06-16T12:00:00Z".parse().unwrap();
        let wait = protocol::server_wait(&failure, now).map(|w| w.wait);
        let mut attempts = 1;
        while let protocol::Step::Retry(d) = protocol::next_step(class, attempts, wait, now) {
            prop_assert!(d <= std::time::Duration::from_secs(60), "a sleep of {d:?}");
            attempts += 1;
            prop_assert!(attempts <= 3, "{class:?} retries more than twice");
        }
    }

    #[test]
    fn classifying_transport_failures_never_panics(message in ".{0,60}") {
        prop_assert_eq!(protocol::classify(&Failure::Timeout), Class::Timeout);
        prop_assert_eq!(
            protocol::classify(&Failure::Network(message.clone())),
            Class::Network
        );
        prop_assert_eq!(
            protocol::classify(&Failure::BadResponse(message)),
            Class::BadResponse
        );
    }
}

// ---------------------------------------------------------------------------
// A file's bytes and the signals file
// ---------------------------------------------------------------------------

/// Bytes that are often close to an import statement.
fn source_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            Just(b"import x from './".to_vec()),
            Just(b"export * from \"../".to_vec()),
            Just(b"require('./".to_vec()),
            Just(b"import('".to_vec()),
            Just(b"from . import ".to_vec()),
            Just(b"from ..".to_vec()),
            Just(b"mod ".to_vec()),
            Just(b"pub mod r#".to_vec()),
            Just(b"../".to_vec()),
            Just(b"'".to_vec()),
            Just(b"\"".to_vec()),
            Just(b";\n".to_vec()),
            Just(b"//".to_vec()),
            Just(b"/*".to_vec()),
            Just(b"\0".to_vec()),
            Just(b"\\".to_vec()),
            Just("\u{e9}\u{4e2d}".as_bytes().to_vec()),
            proptest::collection::vec(any::<u8>(), 0..12),
            "[a-z./_-]{0,12}".prop_map(String::into_bytes),
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

/// `extract` never panics, is deterministic and deduplicated; resolving
/// what it found never panics either, and never yields an absolute path.
fn check_imports(path: &str, bytes: &[u8]) -> Result<(), TestCaseError> {
    let specs = deps::extract(path, bytes);
    prop_assert_eq!(&deps::extract(path, bytes), &specs, "deterministic");
    let mut unique = specs.clone();
    unique.sort();
    unique.dedup();
    prop_assert_eq!(unique.len(), specs.len(), "deduplicated: {:?}", specs);
    for exists in [true, false] {
        let r = deps::resolve(path, &specs, &|_| exists);
        prop_assert!(r.paths.iter().all(|p| !p.starts_with('/')), "{:?}", r);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn extracting_imports_from_arbitrary_bytes_never_panics_and_resolving_them_neither(
        ext in prop_oneof![
            Just("js"), Just("mjs"), Just("cjs"), Just("ts"), Just("tsx"), Just("py"),
            Just("rs"), Just("md"), Just("")
        ],
        dir in "[a-z]{0,3}(/[a-z.]{0,3}){0,3}",
        bytes in source_like_bytes(),
    ) {
        check_imports(&format!("{dir}/file.{ext}"), &bytes)?;
    }

    #[test]
    fn reading_arbitrary_signals_never_panics_and_counts_every_line_once(
        lines in proptest::collection::vec(signal_line(), 0..12),
    ) {
        let text: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        let text = text.join("\n");
        let now: DateTime<Utc> = "2026-06-16T12:00:00Z".parse().unwrap();
        let (triggers, bad) = autonomy::signals(&text, now);
        // Every line is exactly one of: blank, malformed, stale, live.
        let expect = |k: LineKind| lines.iter().filter(|l| l.kind == k).count();
        prop_assert_eq!(bad, expect(LineKind::Bad), "{}", text);
        prop_assert_eq!(triggers.len(), expect(LineKind::Live), "{}", text);
        let live_paths: Vec<&str> = lines
            .iter()
            .filter(|l| l.kind == LineKind::Live)
            .map(|l| l.path.trim())
            .collect();
        let got: Vec<&str> = triggers.iter().map(|t| t.path.as_str()).collect();
        prop_assert_eq!(got, live_paths);
    }

    #[test]
    fn a_server_wait_over_60_s_is_never_slept_and_one_under_it_is_slept_exactly(
        secs in 1u64..=600,
        as_ms in any::<bool>(),
        class in prop_oneof![Just(Class::RateLimit), Just(Class::Server), Just(Class::Network)],
    ) {
        let now: DateTime<Utc> = "2026-06-16T12:00:00Z".parse().unwrap();
        let header = if as_ms { (secs * 1000).to_string() } else { secs.to_string() };
        let name = if as_ms { "retry-after-ms" } else { "llm_provider-retry-after" };
        let failure = Failure::Http {
            status: 429,
            body: String::new(),
            headers: vec![(name.to_string(), header)],
        };
        let wait = protocol::server_wait(&failure, now)
            .expect("a positive number of seconds is a sane wait")
            .wait;
        prop_assert_eq!(wait, std::time::Duration::from_secs(secs));
        match protocol::next_step(class, 1, Some(wait), now) {
            protocol::Step::Retry(d) => {
                prop_assert!(secs <= 60, "slept {d:?} for a wait of {secs} s");
                prop_assert_eq!(d, wait);
            }
            protocol::Step::Stop { hold_until } => {
                prop_assert!(secs > 60, "a wait of {secs} s was not slept");
                let until = hold_until.expect("a long wait holds the provider");
                prop_assert!(until >= now + chrono::Duration::seconds(secs as i64));
            }
        }
    }
}

/// What a generated signals line is, known when it is generated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum LineKind {
    Blank,
    Bad,
    Stale,
    Live,
}

#[derive(Debug, Clone)]
struct SignalLine {
    text: String,
    path: String,
    kind: LineKind,
}

/// A signals line whose fate is known: garbage (never a JSON object), a
/// signal without a path, or a signal that is live or stale at noon.
fn signal_line() -> impl Strategy<Value = SignalLine> {
    let garbage = "[^{}\\n\\r]{0,60}".prop_map(|t| SignalLine {
        kind: if t.trim().is_empty() {
            LineKind::Blank
        } else {
            LineKind::Bad
        },
        text: t,
        path: String::new(),
    });
    let ts = prop_oneof![
        Just(("2026-06-16T11:00:00Z", LineKind::Live)),
        Just(("2026-06-17T11:00:00Z", LineKind::Live)),
        Just(("2026-06-14T11:00:00Z", LineKind::Stale)),
        Just(("yesterday", LineKind::Bad)),
    ];
    let signal =
        ("[a-z/.]{1,12}", "[ ]{0,2}", ".{0,20}", ts).prop_map(|(p, pad, m, (ts, kind))| {
            let path = format!("{pad}{p}");
            SignalLine {
                text: json!({"path": path, "kind": "crash", "message": m, "ts": ts}).to_string(),
                path,
                kind,
            }
        });
    let no_path = ("[ ]{0,3}", ".{0,20}").prop_map(|(path, m)| SignalLine {
        text: json!({"path": path, "message": m, "ts": "2026-06-16T11:00:00Z"}).to_string(),
        path,
        kind: LineKind::Bad,
    });
    prop_oneof![garbage, signal, no_path]
}

#[test]
fn deeply_nested_json_is_refused_without_overflowing_the_stack() {
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let deep = nested(200_000);
    let (_dir, path) = scratch();
    std::fs::write(&path, format!("{{\"schema\":1,\"wake\":{deep}}}")).unwrap();
    assert!(store::load(&path).is_err());
    assert!(store::load_header(&path).is_err());
    assert!(parse_answer(&deep).is_err());
    let failure = Failure::Http {
        status: 500,
        body: format!("{{\"error\":{deep}}}"),
        headers: Vec::new(),
    };
    assert_eq!(protocol::classify(&failure), Class::Server);
    let (triggers, bad) = autonomy::signals(&deep, "2026-06-16T12:00:00Z".parse().unwrap());
    assert_eq!((triggers.len(), bad), (0, 1));
    assert!(deps::extract("a.js", deep.as_bytes()).is_empty());
}

/// Found by the property above: the Python lexer stepped into the middle
/// of a character after a backslash and panicked (fixed in fe31e4e).
#[test]
fn a_backslash_before_a_multibyte_character_in_python_does_not_panic() {
    assert!(deps::extract("a.py", "x = 1 \\\u{e9}\n".as_bytes()).is_empty());
}
