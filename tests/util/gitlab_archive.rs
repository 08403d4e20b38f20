//! The fake GitLab's repository archive, `GET /projects/:id/repository/archive[.tar.gz]`:
//! a real tar.gz built from the backing git repository the way GitLab's
//! `send_git_archive` lays it out, with tampering hooks for the tests.
//!
//! As GitLab documents and its `archive_prefix` builds it, every entry is
//! under one top directory `<project>-<ref>-<sha>` (`/` in the ref turned
//! into `-`), with the path appended (`-libs-shared`) when `path` is given;
//! the entries keep their full repository paths under it, as `git archive
//! --prefix=<top>/ <sha> <path>` writes them, after a pax global header that
//! names the commit. An unknown ref or path is `404 File Not Found` (the
//! endpoint rescues every error that way).

use std::io::Write;

use super::{Call, Response, Shared, fixture_text, lock, trim_slashes};

/// One way the next archives differ from the repository.
#[derive(Debug, Clone)]
pub enum Tamper {
    /// The entry of `path` carries these bytes instead: its hash no longer
    /// matches the tree's blob id.
    Bytes { path: String, bytes: Vec<u8> },
    /// The entry of `path` is a symbolic link to `target` instead.
    Symlink { path: String, target: String },
    /// The entry of `path` is named `name` under the top directory
    /// instead, written into the header as it is (`../x.js`).
    Name { path: String, name: String },
}

impl Tamper {
    fn path(&self) -> &str {
        match self {
            Tamper::Bytes { path, .. }
            | Tamper::Symlink { path, .. }
            | Tamper::Name { path, .. } => path,
        }
    }
}

/// The project's `path`, the last segment of `group/project`.
fn project_path() -> &'static str {
    super::PROJECT.rsplit('/').next().unwrap_or(super::PROJECT)
}

impl super::FakeGitLab {
    /// Serve every later archive with this change.
    pub fn tamper_archive(&self, tamper: Tamper) {
        lock(&self.shared.archive_tampering).push(tamper);
    }
}

impl Shared {
    pub(super) fn archive(&self, call: &Call<'_>) -> Response {
        let not_found = || Response::error(404, "404-file.json");
        let rev = call.param("sha").unwrap_or(super::BRANCH).to_string();
        let Some(sha) = self.git.resolve(&rev) else {
            return not_found();
        };
        let path = trim_slashes(call.param("path").unwrap_or("")).to_string();
        let Some(entries) = self.git.ls_tree(&sha, &path, true) else {
            return not_found();
        };
        let mut top = format!("{}-{}-{sha}", project_path(), rev.replace('/', "-"));
        if !path.is_empty() {
            top.push('-');
            top.push_str(&path.replace('/', "-"));
        }
        let tampering = lock(&self.archive_tampering).clone();
        let mut tar = tar::Builder::new(Vec::new());
        pax_comment(&mut tar, &sha);
        for e in &entries {
            let tamper = tampering.iter().find(|t| t.path() == e.path);
            let name = match tamper {
                Some(Tamper::Name { name, .. }) => format!("{top}/{name}"),
                _ => format!("{top}/{}", e.path),
            };
            match (e.kind.as_str(), tamper) {
                ("tree", _) => append(
                    &mut tar,
                    &format!("{name}/"),
                    tar::EntryType::Directory,
                    0o755,
                    b"",
                ),
                // A submodule is an empty directory in `git archive`.
                ("commit", _) => append(
                    &mut tar,
                    &format!("{name}/"),
                    tar::EntryType::Directory,
                    0o755,
                    b"",
                ),
                (_, Some(Tamper::Symlink { target, .. })) => append(
                    &mut tar,
                    &name,
                    tar::EntryType::Symlink,
                    0o777,
                    target.as_bytes(),
                ),
                (_, tamper) => {
                    let Some((_, mut bytes)) = self.git.object(&e.id) else {
                        return not_found();
                    };
                    if let Some(Tamper::Bytes { bytes: other, .. }) = tamper {
                        bytes = other.clone();
                    }
                    let (kind, mode) = match e.mode.as_str() {
                        "120000" => (tar::EntryType::Symlink, 0o777),
                        "100755" => (tar::EntryType::Regular, 0o755),
                        _ => (tar::EntryType::Regular, 0o644),
                    };
                    append(&mut tar, &name, kind, mode, &bytes);
                }
            }
        }
        let raw = tar.into_inner().expect("an in-memory tar");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).expect("an in-memory gzip");
        Response {
            status: 200,
            headers: vec![
                ("Content-Type".into(), "application/octet-stream".into()),
                (
                    "Content-Disposition".into(),
                    format!("attachment; filename=\"{top}.tar.gz\""),
                ),
            ],
            body: gz.finish().expect("an in-memory gzip"),
        }
    }
}

/// GitLab.com's answer past its archive rate limit (`lib/api/repositories.rb`).
pub fn rate_limited() -> super::Reply {
    super::Reply::Fixed {
        status: 429,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: fixture_text("errors/429-archive.json").into_bytes(),
    }
}

/// One entry; the name goes into the header as it is (a GNU long name when
/// it does not fit), since the `tar` crate's own setters refuse `..`.
fn append(
    tar: &mut tar::Builder<Vec<u8>>,
    name: &str,
    kind: tar::EntryType,
    mode: u32,
    data: &[u8],
) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_mtime(1_781_481_600);
    let (size, body): (u64, &[u8]) = if kind == tar::EntryType::Symlink {
        h.set_link_name_literal(data).expect("a short link target");
        (0, b"")
    } else {
        (data.len() as u64, data)
    };
    if name.len() < 100 {
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    } else {
        let mut long = tar::Header::new_gnu();
        long.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
        long.set_entry_type(tar::EntryType::GNULongName);
        long.set_mode(0o644);
        long.set_size(name.len() as u64 + 1);
        long.set_cksum();
        let mut bytes = name.as_bytes().to_vec();
        bytes.push(0);
        tar.append(&long, bytes.as_slice())
            .expect("an in-memory tar");
        h.as_old_mut().name[..99].copy_from_slice(&name.as_bytes()[..99]);
    }
    h.set_size(size);
    h.set_cksum();
    tar.append(&h, body).expect("an in-memory tar");
}

/// `git archive`'s pax global header: `comment=<commit id>`.
fn pax_comment(tar: &mut tar::Builder<Vec<u8>>, sha: &str) {
    let tail = format!(" comment={sha}\n");
    let mut len = tail.len() + 2;
    while format!("{len}{tail}").len() != len {
        len += 1;
    }
    let record = format!("{len}{tail}");
    let mut h = tar::Header::new_ustar();
    h.as_old_mut().name[..17].copy_from_slice(b"pax_global_header");
    h.set_entry_type(tar::EntryType::XGlobalHeader);
    h.set_mode(0o666);
    h.set_size(record.len() as u64);
    h.set_cksum();
    tar.append(&h, record.as_bytes()).expect("an in-memory tar");
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use crate::util::Sandbox;

    /// `(entry type, name, bytes)` of every entry of the fake's archive.
    fn entries(url: &str) -> (u16, Vec<(tar::EntryType, String, Vec<u8>)>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut resp = agent
            .get(url)
            .header("PRIVATE-TOKEN", super::super::TOKEN)
            .call()
            .expect("the fake answers");
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_vec().unwrap();
        if status != 200 {
            return (status, Vec::new());
        }
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(body.as_slice()));
        let mut out = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            out.push((entry.header().entry_type(), name, bytes));
        }
        (status, out)
    }

    #[test]
    fn the_fake_archive_is_laid_out_as_gitlab_lays_it_out() {
        let sb = Sandbox::with_files(&["a.js", "sub/b.js"]);
        sb.repo.write("README.md", "outside the watched path\n");
        let sha = sb.repo.commit("readme");
        let gl = sb.gitlab();
        let base = format!("{}/projects/group%2Fproject/repository", gl.url());

        let (status, got) = entries(&format!(
            "{base}/archive.tar.gz?sha={sha}&path=libs%2Fshared"
        ));
        assert_eq!(status, 200);
        let top = format!("project-{sha}-{sha}-libs-shared");
        assert_eq!(got[0].0, tar::EntryType::XGlobalHeader);
        assert_eq!(
            String::from_utf8_lossy(&got[0].2),
            format!("52 comment={sha}\n")
        );
        let names: Vec<(tar::EntryType, &str)> =
            got[1..].iter().map(|(k, n, _)| (*k, n.as_str())).collect();
        let a = format!("{top}/libs/shared/a.js");
        let sub = format!("{top}/libs/shared/sub/");
        let b = format!("{top}/libs/shared/sub/b.js");
        assert_eq!(
            names,
            vec![
                (tar::EntryType::Regular, a.as_str()),
                (tar::EntryType::Directory, sub.as_str()),
                (tar::EntryType::Regular, b.as_str()),
            ]
        );
        let blob = sb
            .repo
            .git(&["cat-file", "blob", &format!("{sha}:libs/shared/a.js")]);
        assert_eq!(String::from_utf8_lossy(&got[1].2).trim_end(), blob);

        // A branch names itself in the top directory, the commit after it.
        let (_, got) = entries(&format!("{base}/archive?sha=main"));
        assert!(
            got[1..]
                .iter()
                .all(|(_, n, _)| n.starts_with(&format!("project-main-{sha}/"))),
            "{:?}",
            got.iter().map(|e| &e.1).collect::<Vec<_>>()
        );
        assert!(got.iter().any(|(_, n, _)| n.ends_with("/README.md")));

        // Any failure is GitLab's rescue: 404 File Not Found.
        let (status, _) = entries(&format!("{base}/archive.tar.gz?sha={}", "0".repeat(40)));
        assert_eq!(status, 404);
        let (status, _) = entries(&format!("{base}/archive.tar.gz?sha=main&path=nothing"));
        assert_eq!(status, 404);
    }
}
