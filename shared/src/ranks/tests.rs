use super::rendezvous::{self, Hello, Protocol};
use super::*;
use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

const TOOL_VARS: &[Launcher] = &[Launcher {
    rank_var: "TOOL_RANK",
    world_var: "TOOL_WORLD",
    name: "tool",
}];

#[test]
fn flags_then_the_tools_variables_then_the_launchers() {
    let d =
        |flags: &Flags, env: &[(&str, &str)]| detect(flags, TOOL_VARS, "TOOL_COORD", env_of(env));
    assert_eq!(d(&Flags::default(), &[]).unwrap(), Detected::Nothing);
    let rank = |rank, world, c: &str| {
        Detected::Rank(Identity {
            rank,
            world,
            coordinator: c.into(),
        })
    };
    let flags = Flags {
        rank: Some(1),
        world: Some(3),
        coordinator: Some("h:1".into()),
    };
    // Flags win over any launcher.
    let ompi = [("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4")];
    assert_eq!(d(&flags, &ompi).unwrap(), rank(1, 3, "h:1"));
    let err = d(&Flags::default(), &ompi).unwrap_err().to_string();
    assert!(
        err.contains("--coordinator") && err.contains("mpirun"),
        "{err}"
    );
    let with_env = [
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("TOOL_COORD", "c:9"),
    ];
    assert_eq!(d(&Flags::default(), &with_env).unwrap(), rank(2, 4, "c:9"));
    let slurm = [
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_STEP_ID", "0"),
        ("TOOL_COORD", "c:9"),
    ];
    assert_eq!(d(&Flags::default(), &slurm).unwrap(), rank(1, 2, "c:9"));
    // The tool's own variables come before the launchers'.
    let both = [
        ("TOOL_RANK", "0"),
        ("TOOL_WORLD", "2"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "3"),
        ("SLURM_STEP_ID", "0"),
        ("TOOL_COORD", "c:9"),
    ];
    assert_eq!(d(&Flags::default(), &both).unwrap(), rank(0, 2, "c:9"));
    // A launcher's world of one is no job; --world 1 is a job of one.
    let pmi = [("PMI_RANK", "0"), ("PMI_SIZE", "1")];
    assert_eq!(d(&Flags::default(), &pmi).unwrap(), Detected::Nothing);
    let single = Flags {
        rank: Some(0),
        world: Some(1),
        coordinator: None,
    };
    assert_eq!(d(&single, &[]).unwrap(), Detected::Single);
    // `--world 1` alone opts out of a launcher's job (a plain run inside an sbatch script).
    let alone = Flags {
        world: Some(1),
        ..Default::default()
    };
    let step = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_STEP_ID", "3"),
    ];
    assert_eq!(d(&alone, &step).unwrap(), Detected::Single);
    let err = d(&Flags::default(), &step).unwrap_err().to_string();
    assert!(err.contains("--world 1"), "{err}");
    let nan = [
        ("SLURM_PROCID", "x"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_STEPID", "0"),
    ];
    // Out of range, half given, not a number: usage errors naming the source.
    let bad = Flags {
        rank: Some(3),
        world: Some(2),
        coordinator: Some("h:1".into()),
    };
    assert!(
        d(&bad, &[])
            .unwrap_err()
            .to_string()
            .contains("outside a world of 2")
    );
    let half = Flags {
        rank: Some(0),
        ..Default::default()
    };
    assert!(d(&half, &[]).is_err());
    let err = d(&Flags::default(), &nan).unwrap_err().to_string();
    assert!(
        err.contains("SLURM_PROCID='x'") && err.contains("srun"),
        "{err}"
    );
}

#[test]
fn shares_add_up_and_spread_the_remainder_over_the_first_ranks() {
    let cases: &[(u64, usize, &[u64])] = &[
        (256, 4, &[64, 64, 64, 64]),
        (10, 3, &[4, 3, 3]),
        (2, 3, &[1, 1, 0]),
        (0, 2, &[0, 0]),
        (7, 1, &[7]),
    ];
    for (total, world, want) in cases {
        let got: Vec<u64> = (0..*world).map(|r| share(*total, *world, r)).collect();
        assert_eq!(&got, want, "{total} over {world}");
        assert_eq!(got.iter().sum::<u64>(), *total);
    }
}

#[test]
fn rank_seeds_differ_by_rank_and_are_reproducible() {
    let seeds: Vec<u64> = (0..64).map(|r| rank_seed(42, r)).collect();
    let mut distinct = seeds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), seeds.len());
    assert_eq!(rank_seed(42, 3), seeds[3]);
    assert_ne!(rank_seed(43, 3), seeds[3]);
}

const PROTO: Protocol = Protocol {
    magic: *b"TST1",
    tool: "test",
    args_hint: "the test's",
};

fn joiner(coordinator: String, hello: Hello) -> std::thread::JoinHandle<TcpStream> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut s = rendezvous::connect(hello.rank, &coordinator, deadline).unwrap();
        rendezvous::greet(&mut s, &PROTO, &hello).unwrap();
        s
    })
}

#[test]
fn a_stray_connection_to_the_coordinator_port_does_not_end_the_rendezvous() {
    let listener = rendezvous::listen("127.0.0.1:0").unwrap();
    let coordinator = listener.local_addr().unwrap().to_string();
    // Something that is not a rank: it sends garbage, then another one sends nothing at all.
    let mut stray = TcpStream::connect(&coordinator).unwrap();
    stray.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let _silent = TcpStream::connect(&coordinator).unwrap();
    let hello = |rank| Hello {
        rank,
        world: 3,
        fingerprint: 7,
        port: 0,
    };
    let j1 = joiner(coordinator.clone(), hello(1));
    let j2 = joiner(coordinator.clone(), hello(2));
    let deadline = Instant::now() + Duration::from_secs(30);
    let joined = rendezvous::gather(&listener, 3, &PROTO, 7, deadline).unwrap();
    assert!(joined[0].is_none());
    assert_eq!(joined[1].as_ref().unwrap().hello, hello(1));
    assert_eq!(joined[2].as_ref().unwrap().hello, hello(2));
    j1.join().unwrap();
    j2.join().unwrap();
}

#[test]
fn silent_connections_to_the_coordinator_port_do_not_hold_up_the_real_ranks() {
    let listener = rendezvous::listen("127.0.0.1:0").unwrap();
    let coordinator = listener.local_addr().unwrap().to_string();
    // K4: five connections that say nothing, open before the real rank and kept open. Greeted
    // one after another, each held the rendezvous for the whole greeting wait (5 s); greeted
    // side by side, rank 1 joins within a deadline shorter than one such wait.
    let silent: Vec<TcpStream> = (0..5)
        .map(|_| TcpStream::connect(&coordinator).unwrap())
        .collect();
    let hello = Hello {
        rank: 1,
        world: 2,
        fingerprint: 7,
        port: 0,
    };
    let j = joiner(coordinator.clone(), hello);
    let deadline = Instant::now() + Duration::from_secs(4);
    let joined = rendezvous::gather(&listener, 2, &PROTO, 7, deadline).unwrap();
    assert_eq!(joined[1].as_ref().unwrap().hello, hello);
    j.join().unwrap();
    drop(silent);
}

#[test]
fn a_rank_with_other_arguments_or_a_taken_rank_is_refused_with_the_fix() {
    let listener = rendezvous::listen("127.0.0.1:0").unwrap();
    let coordinator = listener.local_addr().unwrap().to_string();
    let j = joiner(
        coordinator.clone(),
        Hello {
            rank: 1,
            world: 2,
            fingerprint: 8,
            port: 0,
        },
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = rendezvous::gather(&listener, 2, &PROTO, 7, deadline).unwrap_err();
    assert!(
        err.to_string()
            .contains("different arguments than rank 0 (the test's)"),
        "{err}"
    );
    j.join().unwrap();

    let j = joiner(
        coordinator.clone(),
        Hello {
            rank: 1,
            world: 3,
            fingerprint: 7,
            port: 0,
        },
    );
    let err = rendezvous::gather(&listener, 2, &PROTO, 7, deadline).unwrap_err();
    assert!(err.to_string().contains("the same --world"), "{err}");
    j.join().unwrap();

    // Nobody joins: the missing ranks are named.
    let soon = Instant::now() + Duration::from_millis(200);
    let err = rendezvous::gather(&listener, 3, &PROTO, 7, soon).unwrap_err();
    assert!(
        format!("{err:#}").contains("rank(s) 1,2 never joined"),
        "{err:#}"
    );
}

#[test]
fn an_sbatch_shell_is_not_an_srun_task() {
    // The batch script's shell: the job's SLURM_PROCID and SLURM_NTASKS, and either no step id
    // or the batch step's (0xfffffffe); the interactive step (salloc) is 0xfffffffa.
    for step in [None, Some("4294967294"), Some("4294967290"), Some("batch")] {
        let mut vars = vec![
            ("SLURM_JOB_ID", "812"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "0"),
        ];
        vars.extend(step.map(|s| ("SLURM_STEP_ID", s)));
        let env = env_of(&vars);
        assert!(!is_srun_task(&env), "{step:?}");
        assert_eq!(
            detect(&Flags::default(), &[], "TOOL_COORD", &env).unwrap(),
            Detected::Nothing,
            "{step:?}"
        );
        assert_eq!(local_rank(&env), None, "{step:?}");
    }
    // srun's task 2 of step 0.
    let env = env_of(&[
        ("SLURM_PROCID", "2"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_LOCALID", "2"),
        ("TOOL_COORD", "c:9"),
    ]);
    assert!(is_srun_task(&env));
    assert_eq!(local_rank(&env), Some((2, "SLURM_LOCALID")));
    assert!(matches!(
        detect(&Flags::default(), &[], "TOOL_COORD", &env).unwrap(),
        Detected::Rank(Identity {
            rank: 2,
            world: 4,
            ..
        })
    ));
}

#[test]
fn the_launchers_own_local_rank_wins_over_the_allocations() {
    // Hydra (MPICH, Intel MPI) run inside an sbatch allocation: every rank inherits the batch
    // shell's SLURM_LOCALID=0; MPI_LOCALRANKID is Hydra's own.
    let allocation = [
        ("SLURM_JOB_ID", "812"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_STEP_ID", "0"),
    ];
    for (vars, rank_vars, want) in [
        (
            vec![("MPI_LOCALRANKID", "3")],
            ("PMI_RANK", "PMI_SIZE"),
            (3, "MPI_LOCALRANKID"),
        ),
        (
            vec![("PMI_LOCAL_RANK", "1")],
            ("PMI_RANK", "PMI_SIZE"),
            (1, "PMI_LOCAL_RANK"),
        ),
        (
            vec![("OMPI_COMM_WORLD_LOCAL_RANK", "2")],
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
            (2, "OMPI_COMM_WORLD_LOCAL_RANK"),
        ),
        (
            vec![("MV2_COMM_WORLD_LOCAL_RANK", "5")],
            ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
            (5, "MV2_COMM_WORLD_LOCAL_RANK"),
        ),
    ] {
        let mut all: Vec<(&str, &str)> = allocation.to_vec();
        all.extend(vars);
        all.extend([
            (rank_vars.0, "7"),
            (rank_vars.1, "8"),
            ("TOOL_COORD", "c:9"),
        ]);
        let env = env_of(&all);
        assert_eq!(local_rank(&env), Some(want));
        // The rank is the launcher's too, not Slurm's.
        assert!(
            matches!(
                detect(&Flags::default(), &[], "TOOL_COORD", &env).unwrap(),
                Detected::Rank(Identity {
                    rank: 7,
                    world: 8,
                    ..
                })
            ),
            "{rank_vars:?}"
        );
    }
}
