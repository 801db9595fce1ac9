//! Parsers of the kernel's TCP socket tables (/proc/net/tcp, tcp6): who listens on a port,
//! which ports are taken, and a free one to give a server.

/// LISTEN sockets on `port` from the text of /proc/net/tcp or tcp6: their inodes.
pub fn parse_listen_inodes(table: &str, port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 10 {
            continue;
        }
        // local_address is HEXADDR:HEXPORT; state 0A is LISTEN.
        let local_port = cols[1]
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        if local_port == Some(port)
            && cols[3] == "0A"
            && let Ok(inode) = cols[9].parse::<u64>()
            && inode != 0
        {
            inodes.push(inode);
        }
    }
    inodes
}

/// What [`pick_free_port`] reads: the ephemeral port range, then the TCP socket tables.
pub const PORT_TABLES: &str = "/proc/sys/net/ipv4/ip_local_port_range /proc/net/tcp /proc/net/tcp6";

/// A port for a server to listen on, from the contents of [`PORT_TABLES`]: below the ephemeral
/// range, so no outgoing connection takes it between this choice and the server's bind, and
/// used by no socket at all; a time-derived offset makes each call guess differently.
pub fn pick_free_port(text: &str) -> Option<u16> {
    let (range, table) = text.split_once('\n')?;
    let ephemeral_start = range
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(32768);
    let used = used_local_ports(&format!("\n{table}"));
    let (low, high) = if ephemeral_start > 11_000 {
        (10_000, ephemeral_start)
    } else {
        (ephemeral_start.max(1024), 65_536)
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (0..500u32)
        .map(|i| (low + (seed / 1000 + i * 7919) % (high - low)) as u16)
        .find(|port| !used.contains(port))
}

/// Every local port in a /proc/net/tcp table, whatever the socket's state (a port an
/// established connection holds cannot be bound either).
pub fn used_local_ports(table: &str) -> std::collections::HashSet<u16> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(1))
        .filter_map(|local| local.rsplit(':').next())
        .filter_map(|port| u16::from_str_radix(port, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_table() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0 100 0 0 10 0\n";
        assert_eq!(parse_listen_inodes(t, 8080), vec![12345]);
        assert!(parse_listen_inodes(t, 8081).is_empty());
        // Every local port counts as used, listening or not; remote ports do not.
        let used = used_local_ports(t);
        assert!(used.contains(&8080));
        assert!(!used.contains(&0xC350));
    }

    #[test]
    fn free_ports_are_chosen_below_the_ephemeral_range_and_unused() {
        let table = "  sl  local_address rem_address   st\n   0: 0100007F:2710 00000000:0000 0A\n";
        for _ in 0..50 {
            let port = pick_free_port(&format!("32768\t60999\n{table}")).unwrap();
            assert!((10_000..32_768).contains(&port) && port != 0x2710, "{port}");
        }
    }
}
