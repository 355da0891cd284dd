//! What a provider that is a security boundary must enforce on processes: run by the `bash`
//! tool and checked from the host. `local` does not run these (it is not a boundary).

use std::collections::BTreeSet;
use std::net::TcpListener;

use super::{Fixture, Harness, policy, unique};

const SECRET: &str = "B-SECRET-other-workspace";

pub async fn processes_run_unprivileged(h: &dyn Harness) {
    let f = Fixture::new(h);
    assert_eq!(f.sh("id -u; id -g").await, "65534\n65534\n");
    let caps = f.sh("grep ^Cap /proc/self/status").await;
    let lines: Vec<&str> = caps.lines().collect();
    assert!(lines.iter().any(|l| l.starts_with("CapEff:")), "{caps}");
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        assert!(value.trim().chars().all(|c| c == '0'), "{name} is not empty: {value}");
    }
}

pub async fn the_only_network_interface_is_loopback(h: &dyn Harness) {
    let f = Fixture::new(h);
    let dev = f.sh("cat /proc/net/dev").await;
    let names: Vec<&str> = dev.lines().skip(2).filter_map(|l| l.split_once(':')).map(|(n, _)| n.trim()).collect();
    assert_eq!(names, ["lo"], "{dev}");
}

pub async fn the_system_is_read_only(h: &dyn Harness) {
    let f = Fixture::new(h);
    let name = unique("gw-ro");
    let targets: Vec<String> = ["/usr", "/usr/bin", "/etc", "", "/bin", "/lib", "/proc", "/dev"]
        .iter()
        .map(|d| format!("{d}/{name}"))
        .collect();
    let script = format!(
        "for p in {}; do (echo x > \"$p\") 2>/dev/null && echo \"WROTE $p\"; done; \
         mkdir /{name}-dir 2>/dev/null && echo WROTE-DIR; echo checked",
        targets.join(" ")
    );
    assert_eq!(f.sh(&script).await, "checked\n");
    for t in &targets {
        assert!(!std::path::Path::new(t).exists(), "{t} appeared on the host");
    }
    // The workspace is the one writable place.
    assert_eq!(f.sh("echo ok > /workspace/ctl && cat /workspace/ctl").await, "ok\n");
    assert!(f.host("ctl").exists());
}

pub async fn tmp_is_private(h: &dyn Harness) {
    let f = Fixture::new(h);
    let host_marker = std::env::temp_dir().join(unique("gw-host-tmp"));
    std::fs::write(&host_marker, "host").unwrap();
    let inner_name = unique("gw-inner-tmp");
    let script = format!(
        "test -e {} && echo SEEN || echo unseen; echo inner > /tmp/{inner_name} && cat /tmp/{inner_name}",
        host_marker.display()
    );
    let out = f.sh(&script).await;
    let _ = std::fs::remove_file(&host_marker);
    assert_eq!(out, "unseen\ninner\n");
    assert!(!std::path::Path::new("/tmp").join(&inner_name).exists(), "the sandbox wrote into the host's /tmp");
}

/// A sandbox never reaches the host's loopback, where a gateway without keys trusts every
/// caller; one that may use the network reaches the host's other addresses like any remote
/// peer would (and is seen from a non-loopback address).
pub async fn a_networked_sandbox_never_reaches_the_hosts_loopback(h: &dyn Harness) {
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = outbound_address().expect("this test needs a non-loopback address with a default route");
    let probe = |host: &str| {
        format!("timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port}' 2>/dev/null && echo CONNECTED || echo unreachable")
    };
    let closed = Fixture::new(h);
    assert_eq!(closed.sh(&probe("127.0.0.1")).await, "unreachable\n", "the host's loopback without network");
    assert_eq!(closed.sh(&probe(&outside)).await, "unreachable\n", "the host's address without network");
    let mut open_policy = policy();
    open_policy.network = true;
    let open = Fixture::with_policy(h, open_policy);
    for host in ["127.0.0.1", "10.0.2.2", "localhost"] {
        assert_eq!(open.sh(&probe(host)).await, "unreachable\n", "a networked sandbox reached the host via {host}");
    }
    assert_eq!(open.sh(&probe(&outside)).await, "CONNECTED\n", "network: true reaches the host's other address");
    listener.set_nonblocking(true).unwrap();
    let peer = listener.accept().map(|(_, peer)| peer).expect("the connection was accepted");
    assert!(!peer.ip().is_loopback(), "the sandbox's connection came from {peer}, a loopback address");
    let dev = open.sh("cat /proc/net/dev").await;
    assert!(!dev.lines().any(|l| l.trim_start().starts_with("eth0:")), "the host's interfaces are not shared: {dev}");
}

/// The address this host uses to reach the outside (no packet is sent).
fn outbound_address() -> Option<String> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.254:9").or_else(|_| s.connect("1.1.1.1:53")).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then(|| ip.to_string())
}

/// Nothing of the gateway's reaches a sandboxed process but its three standard streams (the
/// workspace descriptor bubblewrap binds, for one, would lead out of the sandbox).
pub async fn no_descriptor_leaks_into_the_sandbox(h: &dyn Harness) {
    let f = Fixture::new(h);
    // What a command sees: its three streams, and the descriptor `ls` opens to list them.
    let listing = "ls -1 /proc/self/fd";
    assert_eq!(f.sh(listing).await, "0\n1\n2\n3\n", "a command inherited more than its standard streams");
    let mut p = policy();
    p.network = true;
    let networked = Fixture::with_policy(h, p);
    assert_eq!(networked.sh(listing).await, "0\n1\n2\n3\n");
}

/// A fork bomb stops at the sandbox's process limit, also when the gateway runs as root
/// (uid 0 ignores `ulimit -u`; the sandbox's cgroup does not).
pub async fn a_fork_bomb_stops_at_the_process_limit(h: &dyn Harness) {
    let mut p = policy();
    p.limits.max_processes = 64;
    let f = Fixture::with_policy(h, p);
    // perl, because bash retries a failed fork for half a minute. It prints how many of 400
    // children it could start, then stops them.
    let out = f
        .sh("perl -e 'my @k; for (1..400) { my $p = fork; last unless defined $p; \
             if (!$p) { sleep 30; exit } push @k, $p } print scalar(@k), \"\\n\"; kill 9, @k'")
        .await;
    let started: u64 = out.trim().parse().unwrap_or_else(|_| panic!("not a count: {out:?}"));
    assert!(started < 64, "{started} of 400 children started in a sandbox limited to 64 processes");
    assert!(started >= 32, "the limit should still allow many processes: {started}");
}

pub async fn host_files_and_other_workspaces_are_invisible(h: &dyn Harness) {
    let a = Fixture::new(h);
    let b = Fixture::new(h);
    b.put("secret.txt", SECRET);
    let b_path = b.host("secret.txt").display().to_string();
    let script = format!(
        "cat {b_path} 2>/dev/null; test -e {b_path} && echo VISIBLE || echo invisible; \
         cat /etc/shadow 2>/dev/null && echo SHADOW; ls /root /home 2>/dev/null | head -n 3"
    );
    let out = a.sh(&script).await;
    assert!(!out.contains(SECRET), "{out}");
    assert!(out.starts_with("invisible\n") && !out.contains("SHADOW"), "{out}");
    let top = a.sh("ls -A /").await;
    let seen: BTreeSet<&str> = top.lines().collect();
    let expected: BTreeSet<&str> =
        ["bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "mnt", "proc", "sbin", "tmp", "usr", "workspace"]
            .into();
    assert!(seen.is_subset(&expected), "unexpected top-level entries: {:?}", seen.difference(&expected));
    // `/mnt` holds only the session mounts' link, which leads back into the workspace.
    if seen.contains("mnt") {
        assert_eq!(a.sh("ls -A /mnt; readlink /mnt/session").await, "session\n/workspace/mnt/session\n");
    }
}

pub async fn resource_limits_apply(h: &dyn Harness) {
    let mut p = policy();
    p.limits.max_file_size = 1 << 20;
    p.limits.max_memory = 1 << 30;
    p.limits.max_processes = 100;
    let f = Fixture::with_policy(h, p);
    assert_eq!(f.sh("ulimit -f; ulimit -v; ulimit -u").await, "1024\n1048576\n100\n");
    let big = f.sh("head -c 3000000 /dev/zero > big 2>/dev/null; echo rc=$?").await;
    assert!(!big.starts_with("rc=0"), "writing past the file size limit succeeded: {big}");
    let size = std::fs::metadata(f.host("big")).map(|m| m.len()).unwrap_or(0);
    assert!(size <= 1 << 20, "a {size}-byte file was written");
    assert_eq!(f.sh("ulimit -f unlimited 2>/dev/null && echo RAISED || echo held").await, "held\n");
}

pub async fn the_hostname_is_the_sandbox(h: &dyn Harness) {
    let f = Fixture::new(h);
    assert_eq!(f.sh("cat /proc/sys/kernel/hostname").await, "sandbox\n");
}
