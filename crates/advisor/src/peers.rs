//! What sentinel knows of the models and servers it talks to: which models
//! reason (and so take `max_completion_tokens` and no `temperature`), which
//! take a strict JSON schema, and which endpoints run on this machine.

use super::prices;

/// Completion tokens a reasoning model gets at least: its reasoning counts
/// inside `max_completion_tokens`, and a limit sized for the answer alone
/// is spent before the answer starts.
pub const REASONING_MIN_TOKENS: u64 = 4096;

/// How many times the first limit one larger retry of a cut answer asks for.
const GROWTH: u64 = 2;

/// The model's own name: a proxy's `provider/model` (LiteLLM's
/// `openai/gpt-5-mini`) names the same model.
fn bare(model: &str) -> &str {
    let model = model.trim();
    model.rsplit('/').next().unwrap_or(model)
}

/// `family` itself or one of its dated snapshots (`gpt-5-mini-2025-08-07`).
fn in_family(model: &str, family: &str) -> bool {
    model
        .strip_prefix(family)
        .is_some_and(|rest| rest.is_empty() || prices::is_snapshot_suffix(rest))
}

/// A reasoning model: the o-series (`o1`, `o3-mini`, `o4-mini`...), the
/// gpt-5 family (`gpt-5`, `gpt-5-mini`, `gpt-5-nano`, their snapshots and
/// point releases), or a model the user named (`--reasoning-models`).
pub fn is_reasoning(model: &str, marked: &[String]) -> bool {
    if marked.iter().any(|m| m.trim() == model.trim()) {
        return true;
    }
    let name = bare(model);
    let o_series = name
        .strip_prefix('o')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    let gpt5 = name
        .strip_prefix("gpt-5")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '.']));
    o_series || gpt5
}

/// The model's families that honour `response_format: json_schema` with
/// `strict` (OpenAI's structured outputs). The first gpt-4o snapshot
/// (2024-05-13) predates them; everything else falls back to `json_object`.
const SCHEMA_FAMILIES: [&str; 12] = [
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1",
    "gpt-4.1-mini",
    "gpt-4.1-nano",
    "gpt-5",
    "gpt-5-mini",
    "gpt-5-nano",
    "o1",
    "o3",
    "o3-mini",
    "o4-mini",
];

/// Whether the model takes a strict JSON schema as its response format.
pub fn takes_json_schema(model: &str) -> bool {
    let name = bare(model);
    name != "gpt-4o-2024-05-13" && SCHEMA_FAMILIES.iter().any(|f| in_family(name, f))
}

/// The completion limit of the first attempt: `--max-tokens`, or for a
/// reasoning model at least `REASONING_MIN_TOKENS`.
pub fn completion_limit(model: &str, marked: &[String], max_tokens: u64) -> u64 {
    if is_reasoning(model, marked) {
        max_tokens.max(REASONING_MIN_TOKENS)
    } else {
        max_tokens
    }
}

/// The limit of the one retry a reasoning model's cut answer gets.
pub fn grown_limit(limit: u64) -> u64 {
    limit.saturating_mul(GROWTH)
}

/// Completion tokens the budget reserves before a call: for a reasoning
/// model the first attempt and its one larger retry, so that the retry
/// stays within what was reserved; otherwise `--max-tokens`.
pub fn reserved_completion_tokens(model: &str, marked: &[String], max_tokens: u64) -> u64 {
    let limit = completion_limit(model, marked, max_tokens);
    if is_reasoning(model, marked) {
        limit.saturating_add(grown_limit(limit))
    } else {
        limit
    }
}

/// Whether the base URL is an endpoint on this machine: a loopback host
/// (`127.0.0.0/8`, `::1`, `localhost`) or a Unix socket. Its calls cost no
/// money per call, whatever the per-call estimate of a paid service.
pub fn is_local_endpoint(base_url: &str) -> bool {
    let url = base_url.trim();
    let scheme = sentinel_core::address::scheme(url).map(str::to_ascii_lowercase);
    if scheme.is_some_and(|s| s == "unix" || s.ends_with("+unix")) {
        return true;
    }
    let Some(host) = sentinel_core::address::host_name(url) else {
        return false;
    };
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => host == "localhost" || host.ends_with(".localhost"),
    }
}

/// A proxy between sentinel and the provider, known by the headers its
/// documentation says every answer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proxy {
    pub name: &'static str,
    /// Every answer of this proxy carries a header that starts so.
    prefix: &'static str,
    /// The header that counts the proxy's own retries of the call.
    pub retries_header: &'static str,
}

/// LiteLLM (`x-litellm-version`, `x-litellm-call-id`, ...; its
/// `x-litellm-attempted-retries` on answers) and Portkey
/// (`x-portkey-trace-id`, `x-portkey-retry-attempt-count`).
pub const PROXIES: [Proxy; 2] = [
    Proxy {
        name: "LiteLLM",
        prefix: "x-litellm-",
        retries_header: "x-litellm-attempted-retries",
    },
    Proxy {
        name: "Portkey",
        prefix: "x-portkey-",
        retries_header: "x-portkey-retry-attempt-count",
    },
];

/// The proxy whose headers an answer carries, from the answer's header
/// names. A proxy forwards to a paid provider even on a loopback address,
/// so its calls are never counted as free.
pub fn proxy_in<'a>(mut names: impl Iterator<Item = &'a str>) -> Option<Proxy> {
    names.find_map(|n| {
        let n = n.to_ascii_lowercase();
        PROXIES.iter().copied().find(|p| n.starts_with(p.prefix))
    })
}

/// The proxy of that name (as remembered in the state).
pub fn proxy_named(name: &str) -> Option<Proxy> {
    PROXIES.iter().copied().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Vec<String> {
        Vec::new()
    }

    #[test]
    fn the_o_series_and_the_gpt5_family_reason() {
        for model in [
            "o1",
            "o3",
            "o3-mini",
            "o4-mini",
            "o4-mini-2025-04-16",
            "gpt-5",
            "gpt-5-mini",
            "gpt-5-nano",
            "gpt-5-mini-2025-08-07",
            "gpt-5.1",
            "openai/gpt-5-mini",
        ] {
            assert!(is_reasoning(model, &none()), "{model}");
        }
        for model in ["gpt-4o-mini", "gpt-4.1", "gpt-50", "omni", "llama3.2", "o"] {
            assert!(!is_reasoning(model, &none()), "{model}");
        }
    }

    #[test]
    fn a_model_the_user_names_reasons() {
        let marked = vec!["qwen3-8b".to_string(), "deepseek-r1".to_string()];
        assert!(is_reasoning("qwen3-8b", &marked));
        assert!(is_reasoning("deepseek-r1", &marked));
        assert!(!is_reasoning("qwen3", &marked));
    }

    #[test]
    fn a_reasoning_model_gets_room_to_reason_and_the_budget_reserves_its_retry() {
        assert_eq!(completion_limit("gpt-5-mini", &none(), 1024), 4096);
        assert_eq!(completion_limit("gpt-5-mini", &none(), 8000), 8000);
        assert_eq!(completion_limit("gpt-4o-mini", &none(), 1024), 1024);
        assert_eq!(grown_limit(4096), 8192);
        assert_eq!(
            reserved_completion_tokens("gpt-5-mini", &none(), 1024),
            4096 + 8192
        );
        assert_eq!(
            reserved_completion_tokens("gpt-4o-mini", &none(), 1024),
            1024
        );
    }

    #[test]
    fn structured_outputs_only_where_openai_documents_them() {
        for model in [
            "gpt-4o",
            "gpt-4o-2024-08-06",
            "gpt-4o-mini",
            "gpt-4.1-nano",
            "gpt-5-mini",
            "o3",
            "o4-mini",
            "openai/gpt-4.1",
        ] {
            assert!(takes_json_schema(model), "{model}");
        }
        for model in [
            "gpt-4o-2024-05-13",
            "gpt-3.5-turbo",
            "gpt-4-turbo",
            "llama3.2",
            "qwen3-8b",
            "gpt-4o-audio-preview",
        ] {
            assert!(!takes_json_schema(model), "{model}");
        }
    }

    #[test]
    fn loopback_hosts_and_unix_sockets_are_local() {
        for url in [
            "http://127.0.0.1:11434/v1",
            "http://127.0.0.2:8000/v1",
            "http://localhost:8080/v1",
            "http://LOCALHOST/v1",
            "http://[::1]:4000/v1",
            "http://user@127.0.0.1:4000",
            "unix:/run/llama.sock",
            "http+unix://%2Frun%2Fllama.sock/v1",
        ] {
            assert!(is_local_endpoint(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "http://10.0.0.5:8000/v1",
            "http://192.168.1.2/v1",
            "http://localhost.example.com/v1",
            "http://127.0.0.1.example.com/v1",
            "",
        ] {
            assert!(!is_local_endpoint(url), "{url}");
        }
    }

    #[test]
    fn a_proxy_is_known_by_its_own_headers() {
        let litellm = ["content-type", "x-litellm-call-id", "x-litellm-version"];
        assert_eq!(
            proxy_in(litellm.into_iter()).map(|p| p.name),
            Some("LiteLLM")
        );
        let portkey = ["X-Portkey-Trace-Id"];
        assert_eq!(
            proxy_in(portkey.into_iter()).map(|p| p.name),
            Some("Portkey")
        );
        // An upstream header a proxy passes on is not the proxy's own.
        let plain = ["content-type", "openai-version", "llm_provider-retry-after"];
        assert_eq!(proxy_in(plain.into_iter()), None);
        assert_eq!(proxy_named("LiteLLM"), Some(PROXIES[0]));
        assert_eq!(proxy_named("nginx"), None);
    }
}
