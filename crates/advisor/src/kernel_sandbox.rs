//! The kernel's walls around an agent run (Landlock): it writes only its
//! working copy, a private temporary directory and what the user names;
//! it cannot ptrace or read `/proc/<pid>/{environ,mem}` of any process
//! outside its run, and with ABI 6 and later cannot signal one or reach
//! its abstract sockets. Reads and the network stay open.
//!
//! The ruleset is built in sentinel (it opens files and allocates); the
//! child only calls `landlock_restrict_self` between fork and exec, which
//! allocates nothing and takes no lock.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope,
};
use serde::Serialize;

use sentinel_core::state::records::llm::AgentSandbox;

/// A seam for tests: the highest Landlock ABI sentinel takes the kernel to
/// have (`0`: none). Lowering it makes a kernel with Landlock look like one
/// without, through the same code path a kernel without it takes.
pub const ABI_CAP_VAR: &str = "SENTINEL_LANDLOCK_ABI_MAX";

/// The first ABI that scopes signals and abstract unix sockets.
const SCOPED_ABI: i32 = 6;

/// Files under `/dev` every program writes (`> /dev/null`) or opens for a
/// terminal; devices, so nothing is stored there.
const DEVICES: [&str; 8] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// `--agent-sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// Landlock where the kernel has it; without it the agent runs as before
    /// and a line on stderr says so.
    #[default]
    Auto,
    /// Refuse to run the agent where the kernel has no Landlock (exit 1).
    Require,
    /// No kernel sandbox: the agent has every right of sentinel's user.
    Off,
}

/// What the agent runs inside, as `--json` reports it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Status {
    /// `landlock` or `off`.
    pub sandbox: &'static str,
    /// The Landlock ABI enforced.
    pub abi: Option<i32>,
    /// `fully` (writes, ptrace, signals and abstract sockets), `partly`
    /// (ABI below 6: writes and ptrace only) or `no`.
    pub enforced: &'static str,
    /// Why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// How an agent run is contained beyond its processes: the kernel's walls
/// (none when off or absent) and the environment it is given.
#[derive(Debug, Clone, Default)]
pub struct Jail {
    pub walls: Option<Walls>,
    pub env: super::given_env::Inherit,
    /// `--agent-user`: the user it runs as, when not sentinel's.
    pub user: Option<super::agent_user::AgentUser>,
}

/// The walls the agent runs inside.
#[derive(Debug, Clone)]
pub struct Walls {
    abi: i32,
    /// What the user named with `--agent-writable`.
    writable: Vec<PathBuf>,
}

/// The walls `mode` asks for on this kernel, and what to report. `Err`
/// when `require` meets a kernel without Landlock, or a named path does
/// not exist: a configuration error, before anything is spent.
pub fn decide(mode: Mode, writable: &[PathBuf]) -> Result<(Option<Walls>, Status), String> {
    if mode == Mode::Off {
        let why = "--agent-sandbox off".to_string();
        return Ok((None, off(why)));
    }
    let abi = match kernel_abi() {
        Ok(abi) => abi,
        Err(why) if mode == Mode::Require => {
            return Err(format!(
                "--agent-sandbox require: the agent cannot be sandboxed ({why}); run on a kernel \
                 with Landlock (5.13 or later, `lsm=landlock` enabled), or use --agent-sandbox \
                 auto; nothing was reserved, spent or counted"
            ));
        }
        Err(why) => return Ok((None, off(why))),
    };
    for p in writable {
        if std::fs::symlink_metadata(p).is_err() {
            return Err(format!(
                "--agent-writable `{}` does not exist; create it, or drop the flag",
                p.display()
            ));
        }
    }
    let status = Status {
        sandbox: "landlock",
        abi: Some(abi),
        enforced: if abi >= SCOPED_ABI { "fully" } else { "partly" },
        why: None,
    };
    let walls = Walls {
        abi,
        writable: writable.to_vec(),
    };
    Ok((Some(walls), status))
}

fn off(why: String) -> Status {
    Status {
        sandbox: "off",
        abi: None,
        enforced: "no",
        why: Some(why),
    }
}

impl Status {
    /// What the state keeps of it, for `stats`.
    pub fn remembered(&self, at: chrono::DateTime<chrono::Utc>) -> AgentSandbox {
        AgentSandbox {
            sandbox: self.sandbox.to_string(),
            abi: self.abi,
            enforced: self.enforced.to_string(),
            why: self.why.clone(),
            user: None,
            at,
        }
    }
}

/// The line `auto` prints once per tick when the agent runs without walls.
pub fn unsandboxed_line(status: &Status) -> String {
    format!(
        "sentinel: agent sandbox: off ({}): the agent runs with every right of sentinel's user; \
         --agent-sandbox require refuses to run it, --agent-sandbox off silences this line",
        status.why.as_deref().unwrap_or("no Landlock")
    )
}

/// The Landlock ABI of this kernel (at most the seam's), or why there is none.
fn kernel_abi() -> Result<i32, String> {
    const VERSION: libc::c_uint = 1;
    // SAFETY: with LANDLOCK_CREATE_RULESET_VERSION the call reads no
    // argument and only returns the ABI version (or -1 and errno). Raw, as
    // neither rustix nor the landlock crate (it keeps its query private)
    // offers it.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            VERSION,
        )
    };
    let cap = std::env::var(ABI_CAP_VAR)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    let abi = (v.max(0) as i32).min(cap.unwrap_or(i32::MAX));
    if abi < 1 {
        return Err(format!("kernel {}, no Landlock", kernel_release()));
    }
    Ok(abi)
}

fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

impl Walls {
    /// The enforced ABI.
    pub fn abi(&self) -> i32 {
        self.abi
    }

    /// Put the walls around `cmd`: it may write `own` (its working copy,
    /// its temporary directory) and what the user named, nothing else.
    /// The ruleset is made here; the child only enforces it.
    pub fn apply(&self, cmd: &mut Command, own: &[&Path]) -> Result<(), String> {
        let ruleset = self.ruleset(own).map_err(|e| {
            format!(
                "cannot build the agent's Landlock sandbox: {e}; use --agent-sandbox off to run \
                 the agent without it"
            )
        })?;
        let mut ruleset = Some(ruleset);
        // SAFETY: between fork and exec the closure only calls prctl and
        // landlock_restrict_self on a ruleset built before the fork, and
        // closes its descriptor: no allocation, no lock.
        unsafe {
            cmd.pre_exec(move || match ruleset.take() {
                Some(r) => r
                    .restrict_self()
                    .map(|_| ())
                    .map_err(|_| rustix::io::Errno::PERM.into()),
                None => Ok(()),
            });
        }
        Ok(())
    }

    fn ruleset(&self, own: &[&Path]) -> Result<RulesetCreated, String> {
        let abi = ABI::from(self.abi);
        let mut write = AccessFs::from_write(abi);
        // Device ioctls (a terminal's) and connecting to unix sockets are
        // no writes of a file: left alone.
        write.remove(AccessFs::IoctlDev);
        write.remove(AccessFs::ResolveUnix);
        let file_write = write & AccessFs::from_file(abi);
        let mut rules = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(write | AccessFs::ReadFile)
            .map_err(|e| e.to_string())?;
        if self.abi >= SCOPED_ABI {
            rules = rules
                .scope(Scope::from_all(abi))
                .map_err(|e| e.to_string())?;
        }
        let mut created = rules.create().map_err(|e| e.to_string())?;
        for path in readable() {
            let Ok(fd) = PathFd::new(&path) else { continue };
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::ReadFile))
                .map_err(|e| format!("`{}`: {e}", path.display()))?;
        }
        let devices = DEVICES.iter().map(Path::new);
        let named = self.writable.iter().map(PathBuf::as_path);
        for path in own.iter().copied().chain(named).chain(devices) {
            let Ok(meta) = std::fs::metadata(path) else {
                // A device this system lacks; the agent's own paths exist.
                continue;
            };
            let fd = PathFd::new(path).map_err(|e| format!("`{}`: {e}", path.display()))?;
            let access = if meta.is_dir() { write } else { file_write };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| format!("`{}`: {e}", path.display()))?;
        }
        Ok(created)
    }
}

/// Where the agent may read files: everywhere but the processes' own
/// directories under `/proc`. A domain's ptrace wall refuses `mem`, but some
/// kernels (6.18 seen) still let it read another process's `environ` and
/// `maps`, where a job shell's secrets are: so file reads beneath
/// `/proc/<pid>` (its own too: it cannot be named before it exists) are
/// refused by the file rules, and everything else stays readable.
fn readable() -> Vec<PathBuf> {
    let entries = |dir: &str| {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let per_process = |p: &Path| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            n == "self" || n == "thread-self" || n.bytes().all(|b| b.is_ascii_digit())
        })
    };
    let mut out: Vec<PathBuf> = entries("/")
        .into_iter()
        .filter(|p| p != Path::new("/proc"))
        .collect();
    out.extend(entries("/proc").into_iter().filter(|p| !per_process(p)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `sh -c script` inside walls that let it write `own` only.
    fn walled(script: &str, own: &Path) -> Option<std::process::ExitStatus> {
        let (walls, _) = decide(Mode::Auto, &[]).ok()?;
        let walls = walls?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        walls.apply(&mut cmd, &[own]).unwrap();
        Some(cmd.status().unwrap())
    }

    #[test]
    fn a_walled_agent_writes_its_own_directory_and_nothing_beside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let own = tmp.path().join("own");
        std::fs::create_dir(&own).unwrap();
        let beside = tmp.path().join("beside");
        let script = format!(
            "echo x > '{o}/f' && mkdir '{o}/d' && echo y > /dev/null && ! echo z > '{b}'",
            o = own.display(),
            b = beside.display()
        );
        let Some(status) = walled(&script, &own) else {
            eprintln!("skipped: this kernel has no Landlock");
            return;
        };
        assert!(status.success());
        assert!(own.join("f").exists() && !beside.exists());
    }

    #[test]
    fn require_without_landlock_is_a_configuration_error_and_off_is_no_sandbox() {
        let (walls, status) = decide(Mode::Off, &[]).unwrap();
        assert!(walls.is_none());
        assert_eq!((status.sandbox, status.enforced), ("off", "no"));
        let missing = [PathBuf::from("/nonexistent/sentinel-test")];
        if let Ok((Some(_), _)) = decide(Mode::Auto, &[]) {
            let err = decide(Mode::Auto, &missing).unwrap_err();
            assert!(
                err.contains("`/nonexistent/sentinel-test` does not exist"),
                "{err}"
            );
        }
    }
}
