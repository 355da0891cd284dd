//! A small tmpfs of one test's own, to run a database out of space.

use std::path::PathBuf;
use std::process::Command;

/// A tmpfs mounted on a fresh directory; unmounted and removed when dropped. Mounting needs
/// root (or `CAP_SYS_ADMIN`): the full-disk test must fail, not skip, without it.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    pub fn mount(name: &str, size: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("gateway-tmpfs-{name}-{}", std::process::id()));
        let _ = Command::new("umount").arg(&dir).output();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        assert!(
            out.status.success(),
            "cannot mount a {size} tmpfs on {} (this test needs root or CAP_SYS_ADMIN to put the \
             database on a small filesystem; it does not skip): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir }
    }

    /// Writes the file `name` until the filesystem has no space left; returns how many bytes it took.
    pub fn fill(&self, name: &str) -> u64 {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join(name)).expect("filler file");
        let block = vec![0x5a_u8; 4096];
        let mut written = 0;
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("filling {}: {e}", self.dir.display()),
            }
        }
        written
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success());
        if !unmounted {
            // Still busy (a process of a failed test not yet reaped): detach it now.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
