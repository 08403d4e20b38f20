//! The state always loads (invariant 27, ARCHITECTURE.md): a cost a peer reports is
//! bounded before it is added, a value the loader cannot trust is damage
//! named by its field, and a clock that jumped ahead does not freeze the
//! budget's day.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use serde_json::Value;

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at, notes};

/// An agent that answers SKIP and reports `cost` as its `cost_usd`.
fn agent_costing(sb: &Sandbox, cost: &str) -> String {
    let path = sb.root().join("agent.sh");
    let answer = format!(r#"{{"action":"SKIP","reason":"fine","findings":[],"cost_usd":{cost}}}"#);
    fs::write(
        &path,
        format!("#!/bin/sh\ncat > /dev/null\nprintf '%s' '{answer}'\n"),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// One tick at `now` with the agent, which must exit `code`.
#[track_caller]
fn tick(sb: &Sandbox, now: &str, agent: &str, code: i32) -> crate::util::Output {
    let out = sb.tick_cmd(now).args(["--agent", agent]).output();
    expect_code(&out, code);
    out
}

/// A change to the watched file: the next tick wakes for it.
fn edit(sb: &Sandbox, n: u32) {
    sb.repo
        .write(&format!("{WATCHED}/a.js"), format!("// a.js, edit {n}\n"));
    sb.repo.commit(&format!("edit {n}"));
}

/// The state document, whole (the manifest is one JSON document).
fn state(sb: &Sandbox) -> Value {
    serde_json::from_str(&fs::read_to_string(&sb.state).unwrap()).unwrap()
}

#[test]
fn invariant_27_the_state_always_loads_after_a_cost_of_1e308_on_two_days() {
    let sb = Sandbox::with_files(&["a.js"]);
    let agent = agent_costing(&sb, "1.7976931348623157e308");
    let first = tick(&sb, &at(0), &agent, 10);
    assert!(
        notes(&first.json()).contains("counted at $1000"),
        "{}",
        first.stderr
    );
    edit(&sb, 1);
    tick(&sb, "2026-06-17T00:00:00Z", &agent, 12);
    // Two ceilings, not infinity (which JSON writes as `null`).
    let budget = &state(&sb)["llm"]["budget"];
    assert_eq!(budget["lifetime_measured"], 2000.0, "{budget}");
    assert_eq!(budget["capped"], 2, "{budget}");
    let stats = sb.stats();
    assert_eq!(stats["llm"]["lifetime_cost_measured"], 2000.0);
    // And a wake still works, its call counted like any other.
    let cheap = agent_costing(&sb, "0.25");
    edit(&sb, 2);
    tick(&sb, "2026-06-18T00:00:00Z", &cheap, 12);
    assert_eq!(state(&sb)["llm"]["budget"]["lifetime_measured"], 2000.25);
}

/// A state whose manifest had `from` replaced by `to` by hand.
fn hand_edited(from: &str, to: &str) -> Sandbox {
    let sb = Sandbox::with_files(&["a.js"]);
    let agent = agent_costing(&sb, "0.0001");
    tick(&sb, &at(0), &agent, 10);
    let text = fs::read_to_string(&sb.state).unwrap();
    assert!(text.contains(from), "{text}");
    fs::write(&sb.state, text.replacen(from, to, 1)).unwrap();
    sb
}

/// A wake and `stats` on the edited state both refuse it, naming `field`.
#[track_caller]
fn refused_as_damage(sb: &Sandbox, field: &str) {
    let before = fs::read(&sb.state).unwrap();
    edit(sb, 1);
    let agent = agent_costing(sb, "0.0001");
    let out = tick(sb, &at(10), &agent, 1);
    assert!(out.stderr.contains("is damaged"), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("`{field}`")), "{}", out.stderr);
    assert_eq!(fs::read(&sb.state).unwrap(), before, "left untouched");
    let stats = sb
        .sentinel(["stats", "--json"])
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&stats, 1);
    assert!(
        stats.stderr.contains(&format!("`{field}`")),
        "{}",
        stats.stderr
    );
}

#[test]
fn a_negative_spend_written_into_the_state_is_damage_not_money_to_spend() {
    let sb = hand_edited("\"measured_today\":0.0001", "\"measured_today\":-1000.0");
    refused_as_damage(&sb, "llm.budget.measured_today");
}

#[test]
fn calls_today_at_u64_max_is_damage_not_a_count_that_wraps_to_zero() {
    let sb = hand_edited("\"calls_today\":1", "\"calls_today\":18446744073709551615");
    refused_as_damage(&sb, "llm.budget.calls_today");
}

#[test]
fn a_tick_at_2036_then_one_today_resets_the_budget_day() {
    let sb = Sandbox::with_files(&["a.js"]);
    let agent = agent_costing(&sb, "0.5");
    tick(&sb, "2036-01-01T00:00:00Z", &agent, 10);
    assert_eq!(state(&sb)["llm"]["budget"]["day"], "2036-01-01");
    edit(&sb, 1);
    let out = tick(&sb, &at(10), &agent, 12);
    let said = notes(&out.json());
    assert!(said.contains("clock jump"), "{}", out.stderr);
    assert!(said.contains("2036-01-01"), "{said}");
    let budget = &state(&sb)["llm"]["budget"];
    assert_eq!(budget["day"], "2026-06-16", "{budget}");
    assert_eq!(budget["measured_today"], 0.5, "only today's call: {budget}");
    // Said once: the reset state no longer holds the jump.
    edit(&sb, 2);
    let out = tick(&sb, &at(20), &agent, 12);
    assert!(!notes(&out.json()).contains("clock jump"), "{}", out.stderr);
}
