//! The fake GitLab's merge requests (`--merge-request`): list by state and
//! branches, create (409 when one is open for the same branches, as GitLab
//! answers), read one, and update its title, description or state
//! (`state_event: close | reopen`). Bodies are copies of
//! `fixtures/gitlab/merge-request.json`.

use serde_json::{Value, json};

use super::{Call, Endpoint, FakeGitLab, Response, Shared, fill, fixture, lock};

impl FakeGitLab {
    /// Every merge request created through the API, in order, each with
    /// the number of `edits` and of `state_changes` it received.
    pub fn merge_requests(&self) -> Vec<Value> {
        lock(&self.shared.merge_requests).clone()
    }

    /// A person merges `iid`: it is `merged` from now on (the test moves
    /// the watched branch itself).
    pub fn mark_merged(&self, iid: u64) {
        let mut all = lock(&self.shared.merge_requests);
        if let Some(mr) = all.iter_mut().find(|m| m["iid"] == iid) {
            mr["state"] = json!("merged");
        }
    }
}

impl Shared {
    pub(super) fn merge_requests(&self, call: &Call<'_>) -> Response {
        let body: Value = serde_json::from_slice(&lock(&self.body)).unwrap_or(Value::Null);
        let mut all = lock(&self.merge_requests);
        let param = |k: &str| call.param(k).map(str::to_string);
        match (call.req.method.as_str(), call.endpoint) {
            ("GET", Endpoint::MergeRequests) => {
                let (state, source, target) = (
                    param("state"),
                    param("source_branch"),
                    param("target_branch"),
                );
                let wanted = |m: &&Value, key: &str, v: &Option<String>| {
                    v.as_ref()
                        .is_none_or(|v| v == "all" || m[key] == v.as_str())
                };
                let found: Vec<Value> = all
                    .iter()
                    .filter(|m| wanted(m, "state", &state))
                    .filter(|m| wanted(m, "source_branch", &source))
                    .filter(|m| wanted(m, "target_branch", &target))
                    .map(served)
                    .collect();
                Response::json(200, &Value::Array(found))
            }
            ("POST", Endpoint::MergeRequests) => {
                let open = all.iter().any(|m| {
                    m["state"] == "opened"
                        && m["source_branch"] == body["source_branch"]
                        && m["target_branch"] == body["target_branch"]
                });
                if open {
                    let message = format!(
                        "Another open merge request already exists for this source branch: !{}",
                        all.len()
                    );
                    return Response::json(409, &json!({ "message": [message] }));
                }
                let iid = all.len() as u64 + 1;
                let mr = fill(
                    fixture("merge-request.json"),
                    vec![
                        ("id", json!(1000 + iid)),
                        ("iid", json!(iid)),
                        ("project_id", json!(super::PROJECT_ID)),
                        ("title", body["title"].clone()),
                        ("description", body["description"].clone()),
                        ("state", json!("opened")),
                        ("source_branch", body["source_branch"].clone()),
                        ("target_branch", body["target_branch"].clone()),
                        (
                            "web_url",
                            json!(format!(
                                "{}/{}/-/merge_requests/{iid}",
                                self.origin,
                                super::PROJECT
                            )),
                        ),
                    ],
                );
                let mut kept = mr.clone();
                kept["edits"] = json!(0);
                kept["state_changes"] = json!(0);
                all.push(kept);
                Response::json(201, &mr)
            }
            (method, Endpoint::MergeRequest) => {
                let iid: u64 = call.segments[5].parse().unwrap_or(0);
                let Some(mr) = all.iter_mut().find(|m| m["iid"] == iid) else {
                    return Response::error(404, "404-route.json");
                };
                if method == "PUT" {
                    update(mr, &body);
                }
                Response::json(200, &served(mr))
            }
            _ => Response::error(404, "404-route.json"),
        }
    }
}

/// A stored merge request as GitLab serves it: without the counters.
fn served(m: &Value) -> Value {
    let mut out = m.clone();
    if let Some(map) = out.as_object_mut() {
        map.remove("edits");
        map.remove("state_changes");
    }
    out
}

/// `PUT merge_requests/:iid`: title, description, and `state_event`; a
/// merged one cannot be closed or reopened.
fn update(mr: &mut Value, body: &Value) {
    let count = |mr: &mut Value, key: &str| {
        mr[key] = json!(mr[key].as_u64().unwrap_or(0) + 1);
    };
    if body.get("description").is_some() || body.get("title").is_some() {
        for key in ["title", "description"] {
            if let Some(v) = body.get(key) {
                mr[key] = v.clone();
            }
        }
        count(mr, "edits");
    }
    let next = match (body["state_event"].as_str(), mr["state"].as_str()) {
        (Some("close"), Some("opened")) => Some("closed"),
        (Some("reopen"), Some("closed")) => Some("opened"),
        _ => None,
    };
    if let Some(state) = next {
        mr["state"] = json!(state);
        count(mr, "state_changes");
    }
}
