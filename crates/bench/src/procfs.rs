//! Server-process accounting from `/proc/<pid>/stat` (CPU) and `/proc/<pid>/status` (memory).

use std::path::PathBuf;
use std::sync::OnceLock;

/// CPU time of one process, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    /// User-mode ticks (`utime`, field 14).
    pub utime: u64,
    /// Kernel-mode ticks (`stime`, field 15).
    pub stime: u64,
}

impl CpuTicks {
    /// `utime + stime`.
    pub fn total(self) -> u64 {
        self.utime + self.stime
    }
}

/// Memory figures from `/proc/<pid>/status`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemStatus {
    /// Resident set size now (`VmRSS`).
    pub rss: u64,
    /// Lifetime peak resident set size (`VmHWM`).
    pub hwm: u64,
}

/// Why a `/proc` file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The file could not be read (usually: the process is gone).
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file did not have the expected layout.
    #[error("unexpected format in {0}")]
    Format(&'static str),
}

/// Parse the text of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and `)`,
/// so fields are counted from the **last** `)`.
pub fn parse_stat(text: &str) -> Result<CpuTicks, ProcError> {
    let bad = || ProcError::Format("stat");
    let after = &text[text.rfind(')').ok_or_else(bad)? + 1..];
    // After the name: field 3 (state) is index 0, so field N is index N - 3.
    let mut fields = after.split_ascii_whitespace().skip(14 - 3);
    let utime = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
    let stime = fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
    Ok(CpuTicks { utime, stime })
}

/// Parse the text of `/proc/<pid>/status` for `VmRSS` and `VmHWM` (kB → bytes). A kernel
/// thread has neither and reads as zero.
pub fn parse_status(text: &str) -> Result<MemStatus, ProcError> {
    let mut m = MemStatus::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let slot = match key {
            "VmRSS" => &mut m.rss,
            "VmHWM" => &mut m.hwm,
            _ => continue,
        };
        let kb: u64 = rest
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .map_err(|_| ProcError::Format("status"))?;
        *slot = kb * 1024;
    }
    Ok(m)
}

fn read(pid: u32, file: &str) -> Result<String, ProcError> {
    let path = PathBuf::from(format!("/proc/{pid}/{file}"));
    std::fs::read_to_string(&path).map_err(|source| ProcError::Read { path, source })
}

/// Current CPU ticks of `pid`.
pub fn read_cpu(pid: u32) -> Result<CpuTicks, ProcError> {
    parse_stat(&read(pid, "stat")?)
}

/// Current memory figures of `pid`.
pub fn read_mem(pid: u32) -> Result<MemStatus, ProcError> {
    parse_status(&read(pid, "status")?)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), asked once of `getconf CLK_TCK` since
/// `unsafe` (and so a libc call) is forbidden here; 100 (the Linux value on every mainstream
/// architecture) when `getconf` is missing.
pub fn clock_ticks_per_sec() -> u64 {
    static TCK: OnceLock<u64> = OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::{clock_ticks_per_sec, parse_stat, parse_status, read_cpu, read_mem};

    #[test]
    fn stat_with_hostile_comm() {
        let text = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 12345 1000000 500 18446744073709551615\n";
        let t = parse_stat(text).expect("parses");
        assert_eq!((t.utime, t.stime, t.total()), (250, 75, 325));
        assert!(parse_stat("1234 (x) S 1 2").is_err());
        assert!(parse_stat("no paren").is_err());
    }

    #[test]
    fn status_rss_and_hwm() {
        let text = "Name:\tgenfront\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t3\n";
        let m = parse_status(text).expect("parses");
        assert_eq!((m.rss, m.hwm), (1024 * 1024, 2048 * 1024));
        assert_eq!(parse_status("Name:\tkthreadd\n").expect("parses").rss, 0);
        assert!(parse_status("VmRSS:\tlots kB\n").is_err());
    }

    #[test]
    fn this_process() {
        let pid = std::process::id();
        let cpu = read_cpu(pid).expect("own stat");
        let mem = read_mem(pid).expect("own status");
        assert!(mem.rss > 0 && mem.hwm >= mem.rss, "{mem:?}");
        let _ = cpu.total();
        assert!(clock_ticks_per_sec() > 0);
        assert!(read_cpu(u32::MAX).is_err());
    }
}
