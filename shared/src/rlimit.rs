//! This process's own resource limits. Tools holding thousands of sockets (loadgen's streams,
//! srv-sim's connections) raise the open-files soft limit to the hard one before they start,
//! then check what they need against what they got. Uses no other module.

/// Raises the open-files soft limit to its hard maximum; returns the soft limit now in force
/// (0 when it cannot be read).
pub fn raise_nofile_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on our own process with a valid struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
        lim.rlim_cur
    }
}
