//! What a model call really costs: a dated price table per model, overrides, and the response's usage.

pub use crate::state::records::llm::Usage;
use serde::{Deserialize, Serialize};

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub input: f64,
    pub cached_input: f64,
    pub output: f64,
}

/// When the built-in table was taken; prices drift, so reports say how old they are.
pub const PRICES_AS_OF: &str = "2025-08 (OpenAI's published prices per million tokens)";

const fn p(input: f64, cached_input: f64, output: f64) -> Price {
    Price {
        input,
        cached_input,
        output,
    }
}

// Standard-tier prices from https://platform.openai.com/docs/pricing (the
// pricing page, with its "legacy models" list for the older snapshots), as
// of PRICES_AS_OF. A model without cached-input pricing is charged its input
// price for cached tokens too. A dated snapshot priced unlike its family has
// its own row: the longest name wins, so it is never priced as the family.
const TABLE: [(&str, Price); 17] = [
    ("gpt-5", p(1.25, 0.125, 10.00)),
    ("gpt-5-mini", p(0.25, 0.025, 2.00)),
    ("gpt-5-nano", p(0.05, 0.005, 0.40)),
    ("gpt-4.1", p(2.00, 0.50, 8.00)),
    ("gpt-4.1-mini", p(0.40, 0.10, 1.60)),
    ("gpt-4.1-nano", p(0.10, 0.025, 0.40)),
    ("gpt-4o-mini", p(0.15, 0.075, 0.60)),
    ("gpt-4o", p(2.50, 1.25, 10.00)),
    // The first gpt-4o snapshot kept its launch price and has no cache discount.
    ("gpt-4o-2024-05-13", p(5.00, 5.00, 15.00)),
    ("o4-mini", p(1.10, 0.275, 4.40)),
    ("o3", p(2.00, 0.50, 8.00)),
    ("o3-mini", p(1.10, 0.55, 4.40)),
    ("gpt-4-turbo", p(10.00, 10.00, 30.00)),
    ("gpt-3.5-turbo", p(0.50, 0.50, 1.50)),
    // Older gpt-3.5-turbo snapshots cost more than the family's current one (0125).
    ("gpt-3.5-turbo-1106", p(1.00, 1.00, 2.00)),
    ("gpt-3.5-turbo-0613", p(1.50, 1.50, 2.00)),
    ("gpt-3.5-turbo-0301", p(1.50, 1.50, 2.00)),
];

/// `-2024-07-18` or `-0125`: the suffixes OpenAI gives pinned snapshots of a family.
pub fn is_snapshot_suffix(rest: &str) -> bool {
    let Some(rest) = rest.strip_prefix('-') else {
        return false;
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if digits(rest, 4) {
        return true;
    }
    let parts: Vec<&str> = rest.split('-').collect();
    matches!(parts.as_slice(), [y, m, d] if digits(y, 4) && digits(m, 2) && digits(d, 2))
}

/// Built-in price of a model or of a dated snapshot of it (longest family first, so
/// gpt-4o-mini is never priced as gpt-4o). Only a bare family name or a date may follow
/// the family: variants such as `o3-pro` or `gpt-4o-audio-preview` cost a different
/// amount, and a wrong price is worse than none (none falls back to the flagged estimate).
pub fn builtin(model: &str) -> Option<Price> {
    let model = model.trim();
    let mut families: Vec<&(&str, Price)> = TABLE.iter().collect();
    families.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    families.into_iter().find_map(|(name, price)| {
        let rest = model.strip_prefix(name)?;
        (rest.is_empty() || is_snapshot_suffix(rest)).then_some(*price)
    })
}

/// Where the cost counted for a call came from, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostSource {
    /// What whoever answered reported for the call: a proxy's
    /// `x-litellm-response-cost`, a server's `usage.cost`, an agent's cost.
    Reported,
    /// The response's usage at the price table's (or `--price`'s) prices.
    PriceTable,
    /// The per-call estimate of a model without a price (0 on this machine).
    PerCall,
    /// An answer without usage: what was reserved for it.
    Reservation,
    /// An attempt that timed out: what was reserved for it (the provider
    /// may have answered, and billed, after sentinel hung up).
    TimedOut,
    /// A proxy answered from its cache: no upstream call, $0.
    CacheHit,
}

impl CostSource {
    pub fn as_str(self) -> &'static str {
        match self {
            CostSource::Reported => "reported",
            CostSource::PriceTable => "price_table",
            CostSource::PerCall => "per_call",
            CostSource::Reservation => "reservation",
            CostSource::TimedOut => "timed_out",
            CostSource::CacheHit => "cache_hit",
        }
    }
}

/// (prompt - cached) * input + cached * cached_input + completion * output, per million.
pub fn cost(price: &Price, usage: &Usage) -> f64 {
    let uncached = usage.prompt_tokens.saturating_sub(usage.cached_tokens) as f64;
    let cached = usage.cached_tokens.min(usage.prompt_tokens) as f64;
    (uncached * price.input
        + cached * price.cached_input
        + usage.completion_tokens as f64 * price.output)
        / 1e6
}

const OVERRIDE_FORM: &str =
    "expected MODEL=IN,CACHED,OUT in USD per million tokens, e.g. my-model=0.5,0.25,1.5";

/// Parse an override "MODEL=IN,CACHED,OUT" (USD per million tokens), e.g. "my-model=0.5,0.25,1.5".
pub fn parse_override(s: &str) -> Result<(String, Price), String> {
    let fail = |why: &str| Err(format!("price override {s:?}: {why}; {OVERRIDE_FORM}"));
    let Some((model, numbers)) = s.split_once('=') else {
        return fail("no '='");
    };
    let model = model.trim();
    if model.is_empty() {
        return fail("no model name");
    }
    let parts: Vec<&str> = numbers.split(',').map(str::trim).collect();
    if parts.len() != 3 {
        return fail(&format!("{} prices, not 3", parts.len()));
    }
    let mut values = [0.0; 3];
    for (slot, part) in values.iter_mut().zip(&parts) {
        match part.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => *slot = v,
            _ => return fail(&format!("{part:?} is not a price (a number >= 0)")),
        }
    }
    let [input, cached_input, output] = values;
    Ok((
        model.to_owned(),
        Price {
            input,
            cached_input,
            output,
        },
    ))
}

/// The usage object of a chat-completions response (`usage` with optional
/// `prompt_tokens_details.cached_tokens`); None when absent or malformed.
pub fn usage_from_response(body: &serde_json::Value) -> Option<Usage> {
    let usage = body.get("usage")?;
    let prompt_tokens = usage.get("prompt_tokens")?.as_u64()?;
    let completion_tokens = usage.get("completion_tokens")?.as_u64()?;
    let cached_tokens = match usage
        .get("prompt_tokens_details")
        .filter(|d| !d.is_null())
        .and_then(|d| d.get("cached_tokens"))
    {
        None | Some(serde_json::Value::Null) => 0,
        Some(v) => v.as_u64()?,
    };
    // Cached tokens are part of the prompt; more of them than prompt is not a bill we can price.
    if cached_tokens > prompt_tokens {
        return None;
    }
    Some(Usage {
        prompt_tokens,
        cached_tokens,
        completion_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MINI: Price = p(0.15, 0.075, 0.60);

    #[test]
    fn cached_tokens_are_priced_at_the_cached_rate() {
        let usage = Usage {
            prompt_tokens: 10_000,
            cached_tokens: 8_000,
            completion_tokens: 500,
        };
        let price = builtin("gpt-4o-mini").unwrap();
        assert_eq!(
            cost(&price, &usage),
            (2000.0 * 0.15 + 8000.0 * 0.075 + 500.0 * 0.60) / 1e6
        );
    }

    #[test]
    fn the_documented_usage_example_parses_and_costs_prompt_plus_completion() {
        let body = json!({
            "usage": {"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,
             "prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},
             "completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,
              "accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}
        });
        let usage = usage_from_response(&body).unwrap();
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 19,
                cached_tokens: 0,
                completion_tokens: 10
            }
        );
        assert_eq!(cost(&MINI, &usage), (19.0 * 0.15 + 10.0 * 0.60) / 1e6);
    }

    #[test]
    fn usage_without_prompt_details_has_no_cached_tokens() {
        let body = json!({"usage": {"prompt_tokens": 100, "completion_tokens": 5}});
        assert_eq!(usage_from_response(&body).unwrap().cached_tokens, 0);
        let body = json!({"usage": {"prompt_tokens": 100, "completion_tokens": 5,
            "prompt_tokens_details": null}});
        assert_eq!(usage_from_response(&body).unwrap().cached_tokens, 0);
    }

    #[test]
    fn absent_or_malformed_usage_is_none() {
        for body in [
            json!({}),
            json!({"usage": null}),
            json!({"usage": {"completion_tokens": 5}}),
            json!({"usage": {"prompt_tokens": 100}}),
            json!({"usage": {"prompt_tokens": "100", "completion_tokens": 5}}),
            json!({"usage": {"prompt_tokens": -1, "completion_tokens": 5}}),
            json!({"usage": {"prompt_tokens": 100, "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": "lots"}}}),
            json!({"usage": {"prompt_tokens": 100, "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 101}}}),
        ] {
            assert_eq!(usage_from_response(&body), None, "{body}");
        }
    }

    #[test]
    fn the_builtin_table_has_the_published_prices() {
        let cases = [
            ("gpt-4o-mini", p(0.15, 0.075, 0.60)),
            ("gpt-4o", p(2.50, 1.25, 10.00)),
            ("gpt-4.1", p(2.00, 0.50, 8.00)),
            ("gpt-4.1-mini", p(0.40, 0.10, 1.60)),
            ("gpt-4.1-nano", p(0.10, 0.025, 0.40)),
            ("o4-mini", p(1.10, 0.275, 4.40)),
            ("o3", p(2.00, 0.50, 8.00)),
            ("o3-mini", p(1.10, 0.55, 4.40)),
            ("gpt-4-turbo", p(10.00, 10.00, 30.00)),
            ("gpt-3.5-turbo", p(0.50, 0.50, 1.50)),
        ];
        for (model, price) in cases {
            assert_eq!(builtin(model), Some(price), "{model}");
        }
        assert!(PRICES_AS_OF.starts_with("2025-08"));
    }

    #[test]
    fn a_dated_snapshot_is_priced_as_its_family() {
        assert_eq!(builtin("gpt-4o-mini-2024-07-18"), builtin("gpt-4o-mini"));
        assert_eq!(builtin("gpt-4o-2024-08-06"), builtin("gpt-4o"));
        assert_eq!(builtin("gpt-4.1-mini-2025-04-14"), builtin("gpt-4.1-mini"));
        assert_eq!(builtin("o3-mini-2025-01-31"), builtin("o3-mini"));
        assert_eq!(builtin("gpt-4-turbo-2024-04-09"), builtin("gpt-4-turbo"));
        assert_eq!(builtin("gpt-3.5-turbo-0125"), builtin("gpt-3.5-turbo"));
    }

    #[test]
    fn a_dated_snapshot_keeps_its_own_price() {
        assert_eq!(builtin("gpt-4o-2024-05-13"), Some(p(5.00, 5.00, 15.00)));
        assert_ne!(builtin("gpt-4o-2024-05-13"), builtin("gpt-4o"));
        assert_eq!(builtin("gpt-3.5-turbo-1106"), Some(p(1.00, 1.00, 2.00)));
        assert_eq!(builtin("gpt-3.5-turbo-0613"), Some(p(1.50, 1.50, 2.00)));
        assert_eq!(builtin("gpt-3.5-turbo-0125"), builtin("gpt-3.5-turbo"));
    }

    #[test]
    fn the_gpt5_family_and_its_snapshots_have_their_prices() {
        assert_eq!(builtin("gpt-5"), Some(p(1.25, 0.125, 10.00)));
        assert_eq!(builtin("gpt-5-mini"), Some(p(0.25, 0.025, 2.00)));
        assert_eq!(builtin("gpt-5-nano"), Some(p(0.05, 0.005, 0.40)));
        assert_eq!(builtin("gpt-5-mini-2025-08-07"), builtin("gpt-5-mini"));
        assert_eq!(builtin("gpt-4.1-2025-04-14"), builtin("gpt-4.1"));
        // A point release or a chat alias is priced on its own page, not as gpt-5.
        assert_eq!(builtin("gpt-5.1"), None);
        assert_eq!(builtin("gpt-5-chat-latest"), None);
    }

    #[test]
    fn the_longest_family_wins_so_mini_is_never_priced_as_its_big_sibling() {
        assert_eq!(builtin("gpt-4o-mini").unwrap().input, 0.15);
        assert_eq!(builtin("gpt-4.1-nano").unwrap().input, 0.10);
        assert_eq!(builtin("o3-mini").unwrap().cached_input, 0.55);
    }

    #[test]
    fn an_unknown_model_has_no_price() {
        for model in ["my-local-llama", "gpt-4", "", "claude-3-opus", "o1"] {
            assert_eq!(builtin(model), None, "{model}");
        }
    }

    #[test]
    fn a_differently_priced_variant_of_a_family_has_no_price_rather_than_a_wrong_one() {
        for model in [
            "o3-pro",
            "gpt-4o-audio-preview",
            "gpt-4o-realtime-preview",
            "o3-deep-research",
        ] {
            assert_eq!(builtin(model), None, "{model}");
        }
    }

    #[test]
    fn cached_tokens_beyond_the_prompt_are_not_charged_twice() {
        let usage = Usage {
            prompt_tokens: 100,
            cached_tokens: 200,
            completion_tokens: 0,
        };
        assert_eq!(cost(&MINI, &usage), 100.0 * 0.075 / 1e6);
    }

    #[test]
    fn no_tokens_cost_nothing() {
        assert_eq!(cost(&MINI, &Usage::default()), 0.0);
    }

    #[test]
    fn an_override_gives_a_model_its_three_prices() {
        assert_eq!(
            parse_override("my-model=0.5,0.25,1.5"),
            Ok(("my-model".to_owned(), p(0.5, 0.25, 1.5)))
        );
        assert_eq!(
            parse_override(" gpt-4o = 2.5, 1.25, 10 "),
            Ok(("gpt-4o".to_owned(), p(2.5, 1.25, 10.0)))
        );
        assert_eq!(
            parse_override("free=0,0,0"),
            Ok(("free".to_owned(), p(0.0, 0.0, 0.0)))
        );
    }

    #[test]
    fn a_malformed_override_says_what_form_is_expected() {
        for bad in [
            "my-model",
            "=0.5,0.25,1.5",
            "my-model=0.5,1.5",
            "my-model=0.5,0.25,1.5,2",
            "my-model=cheap,0.25,1.5",
            "my-model=-0.5,0.25,1.5",
            "my-model=0.5,,1.5",
            "my-model=NaN,0.25,1.5",
            "my-model=inf,0.25,1.5",
        ] {
            let err = parse_override(bad).unwrap_err();
            assert!(err.contains("MODEL=IN,CACHED,OUT"), "{bad}: {err}");
            assert!(err.contains("per million tokens"), "{bad}: {err}");
            assert!(err.contains(bad), "{bad}: {err}");
        }
    }
}
