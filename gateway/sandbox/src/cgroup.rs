//! Process cgroups for sandboxes: a process limit that holds for uid 0, and a way to kill
//! everything a sandbox started.
//!
//! Why cgroups: `RLIMIT_NPROC` (`ulimit -u`) is counted per real user and is not enforced for
//! root, and a gateway in a container usually is root, so a fork bomb in a sandbox would
//! reach the host. A process group does not hold every descendant either: a child that calls
//! `setsid()` leaves it, and outlives a kill of the group. A cgroup holds every descendant,
//! whatever it does, and `pids.max` bounds them all.
//!
//! How a process joins: the sandbox's command is wrapped in `/bin/sh -c 'echo $$ >
//! …/cgroup.procs && exec "$@"'`, so the process moves itself into the cgroup *before* it
//! execs the real program; nothing it starts can be outside. (Writing the pid from the
//! gateway after `spawn` would race the child's first fork.) If the move fails, the program
//! never runs.
//!
//! Where: a directory `gateway-<pid>-<salt>` under this process's own cgroup, in the cgroup v2
//! hierarchy when the `pids` controller is enabled for its children there (delegated), else
//! in the v1 `pids` hierarchy (writable by root). [`CgroupRoot::probe`] says why neither
//! works when it does not; the namespace provider then refuses to run as root, and the local
//! provider falls back to process groups (README: what `local` does not protect).

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Kill rounds before giving up on an emptied cgroup (processes forking while being killed).
const KILL_ROUNDS: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The cgroup directory this process creates its sandboxes' cgroups in.
#[derive(Debug)]
pub struct CgroupRoot {
    dir: PathBuf,
    version: Version,
    next: AtomicU64,
}

/// One sandbox's cgroup. Dropping it kills what is left in it and removes it.
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    version: Version,
    /// Keeps the parent directory until its last child is gone.
    _root: Option<Arc<CgroupRoot>>,
}

impl CgroupRoot {
    /// Finds a place to create cgroups with a `pids` limit, or says why there is none.
    pub fn probe() -> Result<Self, String> {
        let own =
            std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mounts =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("cannot read mountinfo: {e}"))?;
        let mut reasons = Vec::new();
        for (version, base) in candidates(&own, &mounts) {
            match Self::create_at(&base, version) {
                Ok(root) => return Ok(root),
                Err(e) => reasons.push(format!("{}: {e}", base.display())),
            }
        }
        if reasons.is_empty() {
            reasons.push("no cgroup hierarchy with the pids controller is mounted".into());
        }
        Err(reasons.join("; "))
    }

    fn create_at(base: &Path, version: Version) -> io::Result<Self> {
        if version == Version::V2 {
            let enabled = std::fs::read_to_string(base.join("cgroup.subtree_control"))?;
            if !enabled.split_whitespace().any(|c| c == "pids") {
                return Err(io::Error::other("the pids controller is not enabled for child cgroups (not delegated)"));
            }
        }
        sweep_stale(base);
        // Unique per root (several providers of one process each have theirs); the pid lets
        // a later process tell a dead gateway's leftovers.
        let mut salt = [0u8; 6];
        getrandom::fill(&mut salt).map_err(|e| io::Error::other(e.to_string()))?;
        let salt: String = salt.iter().map(|b| format!("{b:02x}")).collect();
        let dir = base.join(format!("gateway-{}-{salt}", std::process::id()));
        std::fs::create_dir(&dir)?;
        if version == Version::V2 {
            // Children of our directory need the controller too; our directory has no
            // processes of its own, so enabling it is allowed.
            std::fs::write(dir.join("cgroup.subtree_control"), "+pids")?;
        }
        let root = Self { dir, version, next: AtomicU64::new(0) };
        // Prove it works end to end before offering it.
        root.make(1, None)?;
        Ok(root)
    }

    /// A fresh cgroup under `root`, limited to `max_processes` processes (and threads).
    pub fn create(root: &Arc<Self>, max_processes: u64) -> io::Result<Cgroup> {
        root.make(max_processes, Some(Arc::clone(root)))
    }

    fn make(&self, max_processes: u64, keep: Option<Arc<CgroupRoot>>) -> io::Result<Cgroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("sandbox-{n}"));
        std::fs::create_dir(&dir)?;
        let cgroup = Cgroup { dir, version: self.version, _root: keep };
        std::fs::write(cgroup.dir.join("pids.max"), max_processes.max(1).to_string())?;
        Ok(cgroup)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Cgroup {
    /// A shell fragment that moves the shell running it into this cgroup, or exits 125.
    pub fn join_script(&self) -> String {
        let procs = self.dir.join("cgroup.procs").display().to_string().replace('\'', r"'\''");
        format!("echo $$ > '{procs}' || {{ echo 'sandbox: cannot join its cgroup' >&2; exit 125; }}; ")
    }

    /// `program args..` wrapped so that the process joins this cgroup before it runs.
    pub fn wrap(&self, program: &OsStr, args: Vec<OsString>) -> (OsString, Vec<OsString>) {
        let mut argv: Vec<OsString> = vec![
            "-c".into(),
            format!("{}exec \"$@\"", self.join_script()).into(),
            "sandbox".into(),
            program.to_owned(),
        ];
        argv.extend(args);
        ("/bin/sh".into(), argv)
    }

    /// Pids currently in the cgroup.
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kills every process in the cgroup, including those that left their process group.
    pub fn kill_all(&self) {
        if self.version == Version::V2 && std::fs::write(self.dir.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        // v1: signal each member until none is left (a member may fork meanwhile; `pids.max`
        // bounds how many there can be).
        for _ in 0..KILL_ROUNDS {
            let pids = self.pids();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        tracing::warn!(cgroup = %self.dir.display(), "processes were still starting after being killed");
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.kill_all();
        // Killed processes leave the cgroup once they are reaped; try briefly, then leave an
        // empty directory for the next probe's sweep.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Where to try, in order: the v2 hierarchy (this process's own cgroup), then v1 `pids`.
fn candidates(own: &str, mountinfo: &str) -> Vec<(Version, PathBuf)> {
    let mut out = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            if let Some(mount) = mount_point(mountinfo, |fstype, _| fstype == "cgroup2") {
                out.insert(0, (Version::V2, mount.join(rel)));
            }
        } else if controllers.split(',').any(|c| c == "pids")
            && let Some(mount) =
                mount_point(mountinfo, |fstype, opts| fstype == "cgroup" && opts.split(',').any(|o| o == "pids"))
        {
            out.push((Version::V1, mount.join(rel)));
        }
    }
    out
}

/// The mount point of the first mount whose filesystem type and super options match.
fn mount_point(mountinfo: &str, want: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        // `id parent major:minor root mount-point options [optional fields] - fstype source super-options`
        let (left, right) = line.split_once(" - ")?;
        let mount = left.split_whitespace().nth(4)?;
        let mut r = right.split_whitespace();
        let fstype = r.next()?;
        let _source = r.next()?;
        let opts = r.next().unwrap_or("");
        want(fstype, opts).then(|| PathBuf::from(mount))
    })
}

/// Removes empty `gateway-<pid>-*` directories of processes that are gone.
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("gateway-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            if let Ok(children) = std::fs::read_dir(entry.path()) {
                for child in children.flatten().filter(|c| c.path().is_dir()) {
                    let _ = std::fs::remove_dir(child.path());
                }
            }
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
40 30 0:36 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
41 30 0:37 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";

    #[test]
    fn hierarchies_are_found_from_proc_files() {
        let own = "8:pids:/a/b\n4:memory:/m\n0::/u\n";
        let c = candidates(own, MOUNTINFO);
        assert_eq!(
            c,
            vec![
                (Version::V2, PathBuf::from("/sys/fs/cgroup/unified/u")),
                (Version::V1, PathBuf::from("/sys/fs/cgroup/pids/a/b"))
            ]
        );
        assert!(candidates("0::/\n", "1 0 0:1 / / rw - ext4 /dev/vda rw\n").is_empty());
    }

    #[test]
    fn the_wrapper_joins_before_it_execs() {
        let cg = Cgroup { dir: PathBuf::from("/cg/x"), version: Version::V1, _root: None };
        let (program, args) = cg.wrap("bash".as_ref(), vec!["-c".into(), "echo hi".into()]);
        assert_eq!(program, "/bin/sh");
        let args: Vec<String> = args.into_iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(&args[2..], ["sandbox", "bash", "-c", "echo hi"]);
        assert!(
            args[1].starts_with("echo $$ > '/cg/x/cgroup.procs' ||") && args[1].ends_with("exec \"$@\""),
            "{}",
            args[1]
        );
        std::mem::forget(cg); // not a real cgroup: nothing to remove
    }
}
