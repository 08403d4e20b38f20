//! `--agent-user`: the agent runs as another user, with that user's ids, no
//! supplementary group and `no_new_privs`, where sentinel runs as root (a
//! CI job's container). The kernel then keeps it out of every file of
//! root's it may not read or write, whatever the Landlock ABI.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The user the agent runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Its home directory, given to the agent as `HOME` (where Claude Code
    /// and Codex keep their sessions).
    pub home: PathBuf,
}

/// The user `spec` (a name or a numeric uid) names in `/etc/passwd`. `Err`
/// when sentinel is not root, the user is unknown, or it is root itself.
pub fn resolve(spec: &str) -> Result<AgentUser, String> {
    if !rustix::process::geteuid().is_root() {
        return Err(format!(
            "--agent-user {spec}: only root can run the agent as another user; run sentinel as \
             root (a CI job's container) or drop the flag and run sentinel itself as that user"
        ));
    }
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| format!("--agent-user {spec}: cannot read /etc/passwd: {e}"))?;
    let user = find(&passwd, spec).ok_or_else(|| {
        format!(
            "--agent-user {spec}: no such user in /etc/passwd; create it first (`useradd \
             --create-home --user-group sentinel-agent` in the job's script or image)"
        )
    })?;
    if user.uid == 0 {
        return Err(format!(
            "--agent-user {spec} is root: the agent would keep every right; name an ordinary user"
        ));
    }
    Ok(user)
}

/// The entry of `passwd` whose name (or uid, when `spec` is a number) is `spec`.
fn find(passwd: &str, spec: &str) -> Option<AgentUser> {
    let by_uid = spec.parse::<u32>().ok();
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        let [name, _, uid, gid, _, home, ..] = f.as_slice() else {
            return None;
        };
        let uid: u32 = uid.parse().ok()?;
        let gid: u32 = gid.parse().ok()?;
        let matches = match by_uid {
            Some(wanted) => uid == wanted,
            None => *name == spec,
        };
        matches.then(|| AgentUser {
            name: name.to_string(),
            uid,
            gid,
            home: PathBuf::from(home),
        })
    })
}

impl AgentUser {
    /// Run `cmd` as this user: its uid and gid (std drops every
    /// supplementary group when root sets a uid), `no_new_privs` so no
    /// set-uid program gives root back, and its own `HOME`, `USER` and
    /// `LOGNAME`.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.uid(self.uid)
            .gid(self.gid)
            .env("HOME", &self.home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name);
        // SAFETY: `pre_exec` itself is unsafe as its closure runs between
        // fork and exec; this one makes one prctl system call (rustix calls
        // the kernel directly), which neither allocates nor takes a lock.
        unsafe {
            cmd.pre_exec(|| Ok(rustix::thread::set_no_new_privs(true)?));
        }
    }

    /// Make everything under `dir` (and `dir`) this user's, without
    /// following a link: its working copy and temporary directory.
    pub fn give(&self, dir: &Path) -> Result<(), String> {
        let own = |p: &Path| {
            std::os::unix::fs::lchown(p, Some(self.uid), Some(self.gid)).map_err(|e| {
                format!(
                    "cannot give `{}` to --agent-user {}: {e}",
                    p.display(),
                    self.name
                )
            })
        };
        // Iterative: a tree the agent made deep must not exhaust the stack.
        let mut todo = vec![dir.to_path_buf()];
        while let Some(p) = todo.pop() {
            own(&p)?;
            let is_dir = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir());
            if is_dir && let Ok(entries) = std::fs::read_dir(&p) {
                todo.extend(entries.flatten().map(|e| e.path()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
        agent:x:1001:1002::/home/agent:/bin/sh\n";

    #[test]
    fn a_user_is_found_by_name_or_uid_with_its_group_and_home() {
        let by_name = find(PASSWD, "agent").unwrap();
        assert_eq!((by_name.uid, by_name.gid), (1001, 1002));
        assert_eq!(by_name.home, PathBuf::from("/home/agent"));
        assert_eq!(find(PASSWD, "65534").unwrap().name, "nobody");
        assert_eq!(find(PASSWD, "ghost"), None);
        assert_eq!(find(PASSWD, "4242"), None);
    }
}
