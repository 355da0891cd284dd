//! The machine the figures come from: cores, CPU model, kernel, memory, and the disk under
//! the work directory (where every database file and the fsync loop live).

use std::path::Path;

use super::results::Machine;

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn cpu_model(cpuinfo: &str) -> String {
    cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_owned()))
        .unwrap_or_else(|| "unknown".into())
}

fn mem_total(meminfo: &str) -> String {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| format!("{:.1} GiB", kib as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into())
}

/// The mount holding `path` (longest mount-point prefix): `device (fstype, mount point)`,
/// plus whether the block device is rotational when sysfs says.
pub fn disk_of(path: &Path, mounts: &str) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let best = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((*f.first()?, *f.get(1)?, *f.get(2)?))
        })
        .filter(|(_, mp, _)| path.starts_with(mp))
        .max_by_key(|(_, mp, _)| mp.len());
    let Some((dev, mp, fs)) = best else { return "unknown".into() };
    let name = dev.rsplit('/').next().unwrap_or_default();
    let kind = match read(&format!("/sys/block/{name}/queue/rotational")).trim() {
        "0" => ", non-rotational",
        "1" => ", rotational",
        _ => "",
    };
    format!("{dev} ({fs} at {mp}{kind})")
}

pub fn describe(work: &Path, nofile: u64, postgres: Option<String>) -> Machine {
    Machine {
        nproc: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        cpu_model: cpu_model(&read("/proc/cpuinfo")),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        memory: mem_total(&read("/proc/meminfo")),
        work_dir: work.display().to_string(),
        disk: disk_of(work, &read("/proc/self/mounts")),
        postgres,
        nofile_limit: nofile,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        assert_eq!(cpu_model("processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\n"), "Intel(R) Xeon(R)");
        assert_eq!(mem_total("MemTotal:       25165824 kB\n"), "24.0 GiB");
        let mounts = "/dev/vda / ext4 rw 0 0\ntmpfs /tmp tmpfs rw 0 0\n";
        assert!(disk_of(Path::new("/tmp/x"), mounts).starts_with("tmpfs (tmpfs at /tmp"));
        assert!(disk_of(Path::new("/var/x"), mounts).starts_with("/dev/vda (ext4 at /"));
    }
}
