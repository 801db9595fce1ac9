//! The servers table's startup phases (issue 26, item 6): a real srv-launch record of srv-sim
//! `--startup 4s` (which logs vLLM's startup lines at known shares of the 4 s) becomes one
//! cell per server, each phase with the duration the engine printed or, where it printed
//! none, when its line was seen after launch.

#[test]
fn the_servers_table_lists_each_startup_phase_with_the_engines_own_duration() {
    let out = testkit::sh("srv-launch sim -- --startup 4s | srv-kill | summarize");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text
        .lines()
        .skip_while(|l| !l.starts_with("# servers"))
        .nth(1)
        .expect("a servers table");
    assert!(header.ends_with("ready s  startup phases"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("sim "))
        .expect("a server row");
    let phases = &row[row.find("load_start").expect("the phases cell")..];
    let parts: Vec<&str> = phases.split(", ").collect();
    assert_eq!(parts.len(), 8, "{row}");
    for (part, want) in parts.iter().zip([
        "load_start @",
        "weights 1.00 s",
        "compile 1.00 s",
        "graph_capture 1.00 s",
        "kv_cache @",
        "engine_init 2.50 s",
        "listening @",
        "ready @",
    ]) {
        assert!(part.starts_with(want), "{part} is not {want}...: {row}");
    }
}
