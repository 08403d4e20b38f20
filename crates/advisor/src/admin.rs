//! OpenAI's Admin API, read only: the organization's costs and completions
//! usage per UTC day, for `sentinel costs`.
//!
//! Two GET endpoints, each followed through `next_page` while `has_more`,
//! at most `MAX_PAGES` pages each. No retry: a costs run is on demand, and a
//! failure says what to fix or to try again later. The admin key is sent in
//! `Authorization: Bearer` and never printed.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use anyhow::{Result, bail};
use chrono::{DateTime, NaiveDate};
use serde_json::Value;

use sentinel_core::address::encode;
use sentinel_core::gate::costs::BilledDay;

/// Pages read from one endpoint before the run stops and says it was cut.
pub const MAX_PAGES: usize = 50;
/// A page larger than this is not one of the documented pages.
const MAX_PAGE_BYTES: u64 = 8 << 20;
/// Buckets of 1 day per page: the costs endpoint allows 1..=180, the usage one 1..=31.
const COSTS_LIMIT_MAX: u32 = 180;
const USAGE_LIMIT_MAX: u32 = 31;

/// Where the admin key comes from, and what kind of key it must be.
pub const KEY_VAR: &str = "OPENAI_ADMIN_KEY";

/// An admin key that never prints itself.
#[derive(Clone)]
pub struct AdminKey(String);

impl AdminKey {
    pub fn new(value: String) -> AdminKey {
        AdminKey(value)
    }
}

impl fmt::Debug for AdminKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminKey(***)")
    }
}

#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    pub key: AdminKey,
    pub timeout: Duration,
    /// Only this project's costs and usage (`project_ids=`).
    pub project: Option<String>,
}

/// The bill over a window of UTC days.
#[derive(Debug, Clone, Default)]
pub struct Bill {
    pub days: BTreeMap<NaiveDate, BilledDay>,
    /// Pages read from each endpoint.
    pub costs_pages: usize,
    pub usage_pages: usize,
    /// What is incomplete or unusual about the figures.
    pub notes: Vec<String>,
    /// False when an endpoint still had pages after `MAX_PAGES`.
    pub complete: bool,
}

/// One page of either endpoint: its buckets, and where the next one is.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub buckets: Vec<(NaiveDate, Vec<Value>)>,
    pub next: Option<String>,
}

/// Parse a page (`{"object":"page","data":[{"start_time":..,"results":[..]}],"has_more":..,"next_page":..}`).
pub fn parse_page(body: &[u8]) -> Result<Page, String> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or("the answer has no `data` array of buckets")?;
    let mut buckets = Vec::with_capacity(data.len());
    for bucket in data {
        let start = bucket
            .get("start_time")
            .and_then(Value::as_i64)
            .ok_or("a bucket has no `start_time`")?;
        let day = DateTime::from_timestamp(start, 0)
            .ok_or("a bucket's `start_time` is not a time")?
            .date_naive();
        let results = match bucket.get("results") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(r)) => r.clone(),
            Some(_) => return Err("a bucket's `results` is not an array".into()),
        };
        buckets.push((day, results));
    }
    let has_more = v.get("has_more").and_then(Value::as_bool).unwrap_or(false);
    let next = v
        .get("next_page")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    Ok(Page {
        buckets,
        next: if has_more { next } else { None },
    })
}

/// `amount.value` of a costs result: a number, or a decimal string.
fn amount(result: &Value) -> Option<(f64, String)> {
    let amount = result.get("amount")?;
    let value = match amount.get("value")? {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    let currency = amount
        .get("currency")
        .and_then(Value::as_str)
        .unwrap_or("usd")
        .to_ascii_lowercase();
    value.is_finite().then_some((value, currency))
}

/// Add a costs page's amounts to `days`; returns notes on what was skipped.
pub fn add_costs(days: &mut BTreeMap<NaiveDate, BilledDay>, page: &Page) -> Vec<String> {
    let mut notes = Vec::new();
    for (day, results) in &page.buckets {
        for r in results {
            match amount(r) {
                Some((v, c)) if c == "usd" => days.entry(*day).or_default().usd += v,
                Some((v, c)) => notes.push(format!("{day}: {v} {c} not counted (not USD)")),
                None => notes.push(format!("{day}: a cost without a readable amount.value")),
            }
        }
    }
    notes
}

/// Add a usage page's requests per model to `days`.
pub fn add_usage(days: &mut BTreeMap<NaiveDate, BilledDay>, page: &Page) {
    for (day, results) in &page.buckets {
        for r in results {
            let n = r
                .get("num_model_requests")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if n == 0 {
                continue;
            }
            let model = r
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("(model not given)")
                .to_string();
            let d = days.entry(*day).or_default();
            d.requests += n;
            *d.models.entry(model).or_default() += n;
        }
    }
}

/// The provider's error message, with anything that looks like a key masked.
fn provider_message(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let msg = v.pointer("/error/message")?.as_str()?;
    let masked: Vec<String> = msg
        .split(' ')
        .map(|w| {
            if w.starts_with("sk-") {
                "sk-***".to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    let mut text = sentinel_core::redact::text(&masked.join(" "));
    if text.chars().count() > 300 {
        text = text.chars().take(300).collect::<String>() + "…";
    }
    Some(text)
}

/// Why a status is a failure, in terms of what to do about it.
fn status_error(endpoint: &str, base: &str, status: u16, body: &[u8]) -> anyhow::Error {
    let said = provider_message(body)
        .map(|m| format!(": \"{m}\""))
        .unwrap_or_default();
    match status {
        401 => anyhow::anyhow!(
            "the Admin API refused {KEY_VAR} (401 on {endpoint}); set {KEY_VAR} to an organization admin key \
             (an organization owner creates one under Settings > Organization > Admin keys), not a project API key"
        ),
        403 => anyhow::anyhow!(
            "{KEY_VAR} may not read the organization's costs and usage (403 on {endpoint}){said}; \
             it needs an organization admin key with read access to Usage (all permissions, or restricted with Usage: Read), not a project API key"
        ),
        404 => anyhow::anyhow!(
            "the Admin API has no {endpoint} at `{base}` (404){said}; check --admin-url (the API base, e.g. https://api.openai.com/v1)"
        ),
        429 => {
            anyhow::anyhow!("the Admin API is rate limiting (429 on {endpoint}); try again later")
        }
        300..=399 => anyhow::anyhow!(
            "the Admin API answered {status} (a redirect) on {endpoint}; it is not followed, so the key stays with `{base}`: check --admin-url"
        ),
        500..=599 => {
            anyhow::anyhow!("the Admin API failed ({status} on {endpoint}); try again later")
        }
        _ => anyhow::anyhow!("the Admin API answered {status} on {endpoint}{said}"),
    }
}

/// Reads the bill.
pub struct AdminClient {
    agent: ureq::Agent,
    cfg: AdminConfig,
}

impl AdminClient {
    pub fn new(cfg: AdminConfig) -> AdminClient {
        // Without a CA file the agent cannot fail to build.
        let agent = sentinel_io::http::agent(cfg.timeout, None).expect("no CA file to read");
        AdminClient { agent, cfg }
    }

    fn base(&self) -> &str {
        self.cfg.base_url.trim_end_matches('/')
    }

    /// One GET of `path?query`; the page, or an error that says what to do.
    fn get(&self, path: &str, query: &str) -> Result<Page> {
        let url = format!("{}{path}?{query}", self.base());
        let sent = self
            .agent
            .get(&url)
            .header("Authorization", format!("Bearer {}", self.cfg.key.0))
            .header("Accept", "application/json")
            .call();
        let secs = self.cfg.timeout.as_secs();
        let mut response = match sent {
            Ok(r) => r,
            Err(ureq::Error::Timeout(_)) => {
                bail!("the Admin API did not answer {path} within {secs} s; try again later")
            }
            Err(e) => bail!(
                "cannot reach the Admin API at `{}` ({}); check --admin-url, or try again later",
                self.base(),
                sentinel_io::http::transport_message(&e)
            ),
        };
        let status = response.status().as_u16();
        let body = match response
            .body_mut()
            .with_config()
            .limit(MAX_PAGE_BYTES)
            .read_to_vec()
        {
            Ok(b) => b,
            Err(ureq::Error::Timeout(_)) => bail!(
                "the Admin API did not finish its answer to {path} within {secs} s; try again later"
            ),
            Err(e) => bail!(
                "the Admin API's answer to {path} was cut ({}); try again later",
                sentinel_io::http::transport_message(&e)
            ),
        };
        if !(200..300).contains(&status) {
            return Err(status_error(path, self.base(), status, &body));
        }
        parse_page(&body).map_err(|e| {
            anyhow::anyhow!(
                "the Admin API's answer to {path} is not the documented page: {e}; check --admin-url"
            )
        })
    }

    /// Every page of `path` from `query`, following `next_page` while
    /// `has_more`, at most `MAX_PAGES`; true when the last page had no more.
    fn pages(&self, path: &str, query: &str, mut each: impl FnMut(&Page)) -> Result<(usize, bool)> {
        let mut cursor: Option<String> = None;
        for n in 1..=MAX_PAGES {
            let q = match &cursor {
                Some(c) => format!("{query}&page={}", encode(c)),
                None => query.to_string(),
            };
            let page = self.get(path, &q)?;
            each(&page);
            match page.next {
                // The same cursor again would never end.
                Some(next) if cursor.as_deref() != Some(next.as_str()) => cursor = Some(next),
                _ => return Ok((n, true)),
            }
        }
        Ok((MAX_PAGES, false))
    }

    /// The bill from `start` (00:00 UTC of the first day) over `days` days.
    pub fn bill(&self, start: DateTime<chrono::Utc>, days: u32) -> Result<Bill> {
        let project = self
            .cfg
            .project
            .as_deref()
            .map(|p| format!("&project_ids={}", encode(p)))
            .unwrap_or_default();
        let start = start.timestamp();
        let mut bill = Bill {
            complete: true,
            ..Bill::default()
        };
        let mut notes = Vec::new();
        let costs_query = format!(
            "start_time={start}&bucket_width=1d&limit={}{project}",
            days.clamp(1, COSTS_LIMIT_MAX)
        );
        let (n, done) = self.pages("/organization/costs", &costs_query, |page| {
            notes.extend(add_costs(&mut bill.days, page))
        })?;
        bill.costs_pages = n;
        if !done {
            bill.complete = false;
            notes.push(format!(
                "/organization/costs still had pages after {MAX_PAGES}; the amounts are incomplete"
            ));
        }
        let usage_query = format!(
            "start_time={start}&bucket_width=1d&group_by=model&limit={}{project}",
            days.clamp(1, USAGE_LIMIT_MAX)
        );
        let (n, done) = self.pages("/organization/usage/completions", &usage_query, |page| {
            add_usage(&mut bill.days, page)
        })?;
        bill.usage_pages = n;
        if !done {
            bill.complete = false;
            notes.push(format!(
                "/organization/usage/completions still had pages after {MAX_PAGES}; the requests are incomplete"
            ));
        }
        bill.notes = notes;
        Ok(bill)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn the_documented_costs_page_parses_and_sums_per_day() {
        let body = json!({"object":"page","data":[{"object":"bucket","start_time":1730419200,"end_time":1730505600,
            "results":[{"object":"organization.costs.result","amount":{"value":0.06,"currency":"usd"},
            "line_item":null,"project_id":null,"api_key_id":null,"quantity":null,"quantity_unit":null},
            {"object":"organization.costs.result","amount":{"value":"0.04","currency":"usd"}}]}],
            "has_more":false,"next_page":null});
        let page = parse_page(body.to_string().as_bytes()).unwrap();
        assert_eq!(page.next, None);
        let mut days = BTreeMap::new();
        assert_eq!(add_costs(&mut days, &page), Vec::<String>::new());
        assert!((days[&d("2024-11-01")].usd - 0.10).abs() < 1e-12);
    }

    #[test]
    fn the_documented_usage_page_counts_requests_per_model() {
        let body = json!({"object":"page","data":[{"object":"bucket","start_time":1730419200,"end_time":1730505600,
            "results":[{"object":"organization.usage.completions.result","input_tokens":1000,"output_tokens":500,
            "input_cached_tokens":800,"num_model_requests":5,"project_id":null,"user_id":null,"api_key_id":null,
            "model":"gpt-4o-mini-2024-07-18","batch":null}]}],"has_more":true,"next_page":"AAAAAGdGxdEiJdKOAAAAAGcqsYA="});
        let page = parse_page(body.to_string().as_bytes()).unwrap();
        assert_eq!(page.next.as_deref(), Some("AAAAAGdGxdEiJdKOAAAAAGcqsYA="));
        let mut days = BTreeMap::new();
        add_usage(&mut days, &page);
        let day = &days[&d("2024-11-01")];
        assert_eq!(day.requests, 5);
        assert_eq!(day.models["gpt-4o-mini-2024-07-18"], 5);
    }

    #[test]
    fn a_next_page_without_has_more_is_the_end() {
        let body = json!({"data": [], "has_more": false, "next_page": "x"});
        assert_eq!(parse_page(body.to_string().as_bytes()).unwrap().next, None);
    }

    #[test]
    fn an_answer_that_is_not_a_page_says_so() {
        assert!(parse_page(b"<html>").unwrap_err().contains("not JSON"));
        assert!(parse_page(b"{}").unwrap_err().contains("data"));
        let no_start = json!({"data": [{"results": []}]}).to_string();
        assert!(
            parse_page(no_start.as_bytes())
                .unwrap_err()
                .contains("start_time")
        );
    }

    #[test]
    fn a_cost_in_another_currency_is_noted_not_added() {
        let body = json!({"data":[{"start_time":1730419200,"results":[{"amount":{"value":1.0,"currency":"eur"}}]}]});
        let page = parse_page(body.to_string().as_bytes()).unwrap();
        let mut days = BTreeMap::new();
        let notes = add_costs(&mut days, &page);
        assert_eq!(notes, ["2024-11-01: 1 eur not counted (not USD)"]);
        assert_eq!(days.get(&d("2024-11-01")), None);
    }

    #[test]
    fn cursors_are_percent_encoded_and_provider_messages_mask_keys() {
        assert_eq!(encode("AAA+/b="), "AAA%2B%2Fb%3D");
        let body = json!({"error":{"message":"Incorrect API key provided: sk-admin-abc***xyz. See docs."}});
        assert_eq!(
            provider_message(body.to_string().as_bytes()).unwrap(),
            "Incorrect API key provided: sk-*** See docs."
        );
    }

    #[test]
    fn the_key_never_prints_itself() {
        let key = AdminKey::new("sk-admin-secret".into());
        assert_eq!(format!("{key:?}"), "AdminKey(***)");
    }
}
