//! The bubblewrap command line of a namespace sandbox, built as plain data so it can be
//! inspected in tests and used for both the async `command()` and the blocking `check()`.

use std::ffi::OsString;
use std::path::Path;

use crate::Limits;
use crate::local::{CLOSE_INHERITED_FDS, SANDBOX_LANG, SANDBOX_PATH, SANDBOX_TERM};

/// Where the workspace is mounted inside the sandbox. Private to this crate: others ask
/// [`SandboxProvider::inner_root`](crate::SandboxProvider::inner_root).
pub(crate) const INNER_ROOT: &str = "/workspace";
/// The descriptor bubblewrap finds the workspace directory on (`--bind-fd`).
pub const WORKSPACE_FD: i32 = 3;
/// The descriptors of a networked sandbox: bubblewrap's status reports and the pipe the
/// sandboxed program waits on until its network is up (see `net`).
pub const STATUS_FD: i32 = 4;
pub const BLOCK_FD: i32 = 5;
/// The descriptor of the first read-only file bubblewrap binds over itself
/// (`--ro-bind-fd`); the others follow in order.
pub const FIRST_READ_ONLY_FD: i32 = 6;
/// The unprivileged identity processes run as (`nobody`/`nogroup` on Debian).
pub const SANDBOX_UID: u32 = 65534;

/// Top-level directories that distributions either keep as real directories or, with a merged
/// `/usr`, as symlinks into `/usr`. Mirrored as they are on the host.
const SYSTEM_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// The `/etc` entries ordinary programs need: the dynamic linker's cache and configuration,
/// Debian's `alternatives` (e.g. `awk` is a symlink through it), TLS roots, name-service
/// configuration and the user database (so uid 65534 has a name). Bound read-only when they
/// exist. A networked sandbox gets its own `resolv.conf` (slirp4netns's resolver). No secrets (`shadow`, ssh
/// keys) are in this list.
const ETC_ENTRIES: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "nsswitch.conf",
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "gai.conf",
    "localtime",
    "protocols",
    "services",
];

/// How the host's filesystem looks, sampled once when a sandbox is opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLayout {
    /// `(name, Some(target))` for a symlink, `(name, None)` for a directory to bind.
    pub system: Vec<(String, Option<OsString>)>,
    /// `/etc` entries that exist (`resolv.conf` is never taken from the host: a networked
    /// sandbox gets one naming its own resolver).
    pub etc: Vec<String>,
}

impl HostLayout {
    pub fn probe() -> Self {
        let system = SYSTEM_LINKS
            .iter()
            .filter_map(|name| {
                let path = Path::new("/").join(name);
                let meta = std::fs::symlink_metadata(&path).ok()?;
                if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&path).ok()?;
                    Some((name.to_string(), Some(target.into_os_string())))
                } else if meta.is_dir() {
                    Some((name.to_string(), None))
                } else {
                    None
                }
            })
            .collect();
        let etc = ETC_ENTRIES
            .iter()
            .filter(|name| Path::new("/etc").join(name).exists())
            .map(|name| name.to_string())
            .collect();
        Self { system, etc }
    }
}

/// The environment of every sandboxed process, set on the bubblewrap process itself (whose
/// own environment is otherwise empty) and inherited through it.
pub fn sandbox_env() -> [(&'static str, &'static str); 4] {
    [("PATH", SANDBOX_PATH), ("HOME", INNER_ROOT), ("LANG", SANDBOX_LANG), ("TERM", SANDBOX_TERM)]
}

/// Everything that decides the command line.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    /// The sandbox's network: `None` for none but its own loopback; else the `resolv.conf`
    /// to mount (naming slirp4netns's resolver), with bubblewrap reporting on [`STATUS_FD`]
    /// and holding the program on [`BLOCK_FD`] until the network is attached.
    pub network: Option<&'a Path>,
    pub limits: &'a Limits,
    pub layout: &'a HostLayout,
    /// bubblewrap >= 0.8 can forbid nested user namespaces (less kernel attack surface).
    pub disable_userns: bool,
    /// The workspace's read-only files (relative paths), found on descriptors from
    /// [`FIRST_READ_ONLY_FD`] on, in this order, and bound read-only over themselves.
    pub read_only: &'a [std::path::PathBuf],
    /// The session's additional directories: the descriptor each is found on, and where it is
    /// bound (its own absolute path, `WorkspaceDir::extra`), writable.
    pub extra: &'a [(i32, std::path::PathBuf)],
}

/// The arguments after `bwrap` that run `program args..` confined.
pub fn bwrap_args(spec: &Spec<'_>, program: &str, args: &[String]) -> Vec<OsString> {
    let mut a = Args::default();
    // Every namespace is new, the network's too: a sandbox never shares the host's network
    // (where it would reach the gateway on 127.0.0.1); with network allowed, slirp4netns
    // connects its own namespace to the outside.
    a.push(["--unshare-all", "--unshare-user"]);
    if spec.network.is_some() {
        let (status, block) = (STATUS_FD.to_string(), BLOCK_FD.to_string());
        a.push(["--json-status-fd", &status, "--block-fd", &block]);
    }
    if spec.disable_userns {
        a.push(["--disable-userns"]);
    }
    let id = SANDBOX_UID.to_string();
    a.push(["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox"]);
    a.push(["--uid", &id, "--gid", &id]);
    a.push(["--ro-bind", "/usr", "/usr"]);
    for (name, link) in &spec.layout.system {
        let dest = format!("/{name}");
        match link {
            Some(target) => a.push_os(["--symlink".into(), target.clone(), dest.into()]),
            None => a.push(["--ro-bind", &dest, &dest]),
        }
    }
    for name in &spec.layout.etc {
        let path = format!("/etc/{name}");
        a.push(["--ro-bind", &path, &path]);
    }
    if let Some(resolv) = spec.network {
        a.push_os(["--ro-bind".into(), resolv.as_os_str().to_owned(), "/etc/resolv.conf".into()]);
    }
    // A minimal /dev (null, zero, urandom, tty, pts) that is itself read-only, with a private
    // writable /dev/shm for programs that need shared memory.
    a.push(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]);
    a.push(["--tmpfs", "/tmp"]);
    // The workspace is the directory handle checked when the environment was realized, never
    // a path looked up again (a path can be swapped for a symlink in between).
    a.push(["--bind-fd", &WORKSPACE_FD.to_string(), INNER_ROOT]);
    // Mounted inputs are read-only over the writable workspace: a write or chmod gets EROFS,
    // an unlink or a rename over them EBUSY (`crate::readonly`). Each is bound from the
    // descriptor opened when it was placed, never from a path looked up again.
    for (i, rel) in spec.read_only.iter().enumerate() {
        let fd = (FIRST_READ_ONLY_FD + i as i32).to_string();
        let dest = Path::new(INNER_ROOT).join(rel);
        a.push_os(["--ro-bind-fd".into(), fd.into(), dest.into_os_string()]);
    }
    // Additional directories at their own paths, from the descriptors checked at realization
    // (their places are never system directories: `gateway_core::mounts::check_extra_roots`);
    // bubblewrap makes the mount points on the root tmpfs before it is made read-only.
    for (fd, dest) in spec.extra {
        a.push_os(["--bind-fd".into(), fd.to_string().into(), dest.as_os_str().to_owned()]);
    }
    // Session mounts live in the workspace; sandboxed processes find them at their own path
    // too (`gateway_core::mounts`).
    let mounts = format!("{INNER_ROOT}/{}", gateway_core::mounts::SESSION_MOUNTS_IN_WORKSPACE);
    a.push(["--symlink", &mounts, gateway_core::mounts::SESSION_MOUNTS]);
    // bubblewrap builds the root as a tmpfs; once every mount point exists, make it read-only
    // so nothing outside /workspace, /tmp and /dev/shm can be written.
    a.push(["--remount-ro", "/"]);
    // No `--clearenv`/`--setenv`: bubblewrap is started with exactly `sandbox_env()` (plus an
    // operator's variables), which the program inherits, so no value is ever on a command line.
    a.push(["--chdir", INNER_ROOT]);
    let script = limits_script(spec.limits);
    a.push(["--", "bash", "--noprofile", "--norc", "-c", &script, "sandbox", program]);
    a.0.extend(args.iter().map(OsString::from));
    a.0
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn push<const N: usize>(&mut self, items: [&str; N]) {
        self.0.extend(items.iter().map(OsString::from));
    }
    fn push_os<const N: usize>(&mut self, items: [OsString; N]) {
        self.0.extend(items);
    }
}

/// A bash prologue that lowers the resource limits, then `exec`s the program (`"$@"`).
///
/// Limits are set inside the sandbox by the shell because `setrlimit` in the child would need
/// `pre_exec` (unsafe). Each limit is only ever lowered (never raised past the current hard
/// limit), soft and hard together so the sandboxed program cannot raise it back. If a limit
/// cannot be applied the program does not run (exit 125): fail closed.
///
/// Note that `RLIMIT_NPROC` (`ulimit -u`) is counted per real user and is **not enforced for
/// root**: when the gateway runs as root, the sandbox's uid 65534 maps back to root outside
/// the user namespace and the process limit does not bind. The sandbox's `pids` cgroup does
/// (see `cgroup`); the namespace provider refuses to run as root without one.
pub fn limits_script(limits: &Limits) -> String {
    // First close every descriptor but the standard three: whatever the gateway inherited
    // and did not mark close-on-exec must not reach the sandbox (a directory descriptor from
    // outside is a way out of it).
    let mut script = String::from(CLOSE_INHERITED_FDS);
    script.push_str(
        "lim() { h=$(ulimit -H \"$1\") || exit 125; \
         if [ \"$h\" = unlimited ] || [ \"$h\" -gt \"$2\" ]; then \
         ulimit \"$1\" \"$2\" || { echo \"sandbox: cannot apply limit $1 $2\" >&2; exit 125; }; fi; }; ",
    );
    // bash's ulimit counts -f and -v in KiB and -u in processes.
    for (flag, value) in
        [("-u", limits.max_processes), ("-f", limits.max_file_size / 1024), ("-v", limits.max_memory / 1024)]
    {
        if value != u64::MAX / 1024 && value != u64::MAX {
            script.push_str(&format!("lim {flag} {}; ", value.max(1)));
        }
    }
    script.push_str("exec \"$@\"");
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> HostLayout {
        HostLayout {
            system: vec![("bin".into(), Some("usr/bin".into())), ("lib".into(), None)],
            etc: vec!["passwd".into()],
        }
    }

    fn args(network: bool) -> Vec<String> {
        let limits = Limits::default();
        let layout = layout();
        let resolv = Path::new("/run/gw/resolv.conf");
        let read_only = [std::path::PathBuf::from("data/ro.csv"), std::path::PathBuf::from("mnt/session/uploads/f")];
        let extra = [(8, std::path::PathBuf::from("/home/u/lib"))];
        let spec = Spec {
            network: network.then_some(resolv),
            limits: &limits,
            layout: &layout,
            disable_userns: true,
            read_only: &read_only,
            extra: &extra,
        };
        bwrap_args(&spec, "echo", &["a b".into()]).into_iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    fn has(args: &[String], seq: &[&str]) -> bool {
        args.windows(seq.len()).any(|w| w.iter().zip(seq).all(|(a, b)| a == b))
    }

    #[test]
    fn the_host_network_is_never_shared() {
        let closed = args(false);
        assert!(has(&closed, &["--unshare-all"]));
        assert!(!closed.iter().any(|a| a == "--share-net"));
        assert!(!closed.iter().any(|a| a.contains("resolv.conf")));
        assert!(!closed.iter().any(|a| a == "--block-fd"));
        let open = args(true);
        assert!(has(&open, &["--unshare-all"]));
        assert!(!open.iter().any(|a| a == "--share-net"), "networked sandboxes get their own namespace");
        assert!(has(&open, &["--json-status-fd", "4", "--block-fd", "5"]));
        assert!(has(&open, &["--ro-bind", "/run/gw/resolv.conf", "/etc/resolv.conf"]));
    }

    #[test]
    fn mounts_identity_and_program_are_in_place() {
        let a = args(false);
        assert!(has(&a, &["--symlink", "usr/bin", "/bin"]));
        assert!(has(&a, &["--ro-bind", "/lib", "/lib"]));
        assert!(has(&a, &["--ro-bind", "/usr", "/usr"]));
        assert!(has(&a, &["--bind-fd", "3", "/workspace"]));
        let at = |seq: &[&str]| a.windows(seq.len()).position(|w| w.iter().zip(seq).all(|(x, y)| x == y));
        let workspace = at(&["--bind-fd", "3", "/workspace"]).unwrap();
        let first = at(&["--ro-bind-fd", "6", "/workspace/data/ro.csv"]).expect("the first read-only file");
        let second = at(&["--ro-bind-fd", "7", "/workspace/mnt/session/uploads/f"]).expect("the second");
        let sealed = at(&["--remount-ro", "/"]).unwrap();
        assert!(workspace < first && first < second && second < sealed, "read-only files are bound over the workspace");
        let extra = at(&["--bind-fd", "8", "/home/u/lib"]).expect("the additional directory, at its own path");
        let tmp = at(&["--tmpfs", "/tmp"]).unwrap();
        assert!(tmp < extra && extra < sealed, "an additional directory is bound before the root is sealed");
        assert!(!a.iter().any(|x| x == "--bind"), "no workspace path is looked up by bubblewrap");
        assert!(has(&a, &["--uid", "65534", "--gid", "65534"]));
        assert!(has(&a, &["--cap-drop", "ALL"]));
        assert!(has(&a, &["--tmpfs", "/tmp"]));
        assert!(has(&a, &["--remount-ro", "/"]));
        assert!(has(&a, &["--remount-ro", "/dev"]));
        assert!(!a.iter().any(|x| x == "--setenv" || x == "--clearenv"), "the environment is not on the command line");
        assert!(sandbox_env().contains(&("HOME", "/workspace")));
        assert_eq!(&a[a.len() - 3..], ["sandbox", "echo", "a b"]);
    }

    #[test]
    fn limits_are_in_kib_and_processes() {
        let s = limits_script(&Limits {
            max_processes: 7,
            max_file_size: 1 << 20,
            max_memory: 1 << 30,
            ..Default::default()
        });
        assert!(s.contains("lim -u 7;"), "{s}");
        assert!(s.contains("lim -f 1024;"), "{s}");
        assert!(s.contains("lim -v 1048576;"), "{s}");
        assert!(s.ends_with("exec \"$@\""));
    }
}
