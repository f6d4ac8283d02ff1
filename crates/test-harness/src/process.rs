//! Process facts tests check: a free UDP port, and whether a process is alive. The
//! plumbing that starts and stops peers is local-peers'.

use std::net::Ipv4Addr;

/// A free UDP port on 127.0.0.1 (for a peer the test binds to it, such as a MAVLink
/// link); like `local_peers::free_port`, another process may take it before it is bound.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|socket| socket.local_addr())
        .map(|addr| addr.port())
        .expect("bind 127.0.0.1:0 (UDP) to find a free port")
}

/// Whether the process `pid` is alive: it exists and is not a zombie waiting to be
/// reaped (Linux: reads `/proc/PID/stat`).
pub fn process_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `PID (COMM) STATE ...`; COMM may itself contain parentheses and spaces.
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    !matches!(state, None | Some("Z" | "X" | "x"))
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::Duration;

    use super::*;

    #[test]
    fn running_means_alive_and_not_a_zombie() {
        assert!(process_running(std::process::id()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited but not reaped: a zombie.
        assert!(local_peers::wait_until(Duration::from_secs(10), || {
            !process_running(pid)
        }));
        child.wait().unwrap();
        assert!(!process_running(pid));
    }
}
