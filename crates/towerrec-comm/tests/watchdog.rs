//! The collective watchdog on the in-process backend: a rank blocked outside the
//! collectives makes every collective that waits for it fail with `Error::Stalled`,
//! naming the collective, its phase, the step and the blocked rank, on every kind of
//! collective and on the world as on its intra-host and peer groups; and
//! `run_in_process_with` returns that error once the blocked rank is back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use towerrec_comm::{
    run_in_process_with, Comm, Error, HierarchicalAllReduce, Phase, Stall, Topology, Watchdog,
    WorkerFailure,
};

fn two_by_two() -> Topology {
    Topology::new(2, 2).unwrap()
}

#[test]
fn a_blocked_rank_fails_the_others_collective_naming_it() {
    let rank_1_back = AtomicBool::new(false);
    // What the other ranks' collective returned, and whether rank 1 was back by then.
    let seen: Mutex<Vec<(usize, String, bool)>> = Mutex::new(Vec::new());
    let out = run_in_process_with(
        two_by_two(),
        Watchdog::new(0.5).unwrap(),
        |comm: Comm| -> Result<(), Error> {
            comm.set_step(7);
            if comm.rank() == 1 {
                std::thread::sleep(Duration::from_secs(3));
                rank_1_back.store(true, Ordering::SeqCst);
                // The cluster has failed meanwhile: its next collective says so at once.
                return comm.barrier();
            }
            let err = comm
                .all_to_all_v(&[1u32; 4], &[1; 4], Phase::OutputDist)
                .expect_err("rank 1 never arrives in time");
            let back = rank_1_back.load(Ordering::SeqCst);
            seen.lock()
                .unwrap()
                .push((comm.rank(), err.to_string(), back));
            Err(err)
        },
    );
    let stall = match out {
        Err(WorkerFailure::Stalled(stall)) => stall,
        Err(other) => panic!("expected the watchdog's error, got {other}"),
        Ok(_) => panic!("the collective passed without rank 1"),
    };
    assert_eq!(stall.collective, "all_to_all_v");
    assert_eq!(stall.phase, Some(Phase::OutputDist));
    assert_eq!(stall.step, 7);
    assert_eq!(stall.timeout, Duration::from_millis(500));
    assert_eq!(stall.silent, Some(vec![1]));
    assert!([0, 2, 3].contains(&stall.rank), "{stall}");
    let text = stall.to_string();
    assert!(
        text.contains(
            "collective all_to_all_v (phase output_dist) at step 7 made no progress for 0.5 s; \
             ranks not heard from: [1] (rank 1 outside any collective at step 7)"
        ),
        "{text}"
    );
    // Every other rank was released with that same error while rank 1 was still away.
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        [0, 2, 3],
        "{seen:?}"
    );
    for (rank, err, back) in &seen {
        assert_eq!(err, &text, "rank {rank}");
        assert!(!back, "rank {rank} waited for rank 1 to come back");
    }
}

/// Runs `op` on `group` ("world", "intra_host" or "peers") of a 2 × 2 cluster in which
/// rank 1 blocks after the groups are made, until another rank's collective fails (at
/// most 30 s). Returns the run's stall. The timeout, 0.4 s, leaves a thread slow to
/// start on a loaded machine time to join the groups' creation, which is watched too.
fn stall_of(op: &str, group: &str) -> Stall {
    let released = AtomicBool::new(false);
    let out = run_in_process_with(
        two_by_two(),
        Watchdog::new(0.4).unwrap(),
        |comm: Comm| -> Result<(), Error> {
            comm.set_step(3);
            let sub = match group {
                "world" => None,
                "intra_host" => Some(comm.intra_host()?),
                _ => Some(comm.peers()?),
            };
            let g = sub.as_ref().unwrap_or(&comm);
            let mut hierarchical = match op {
                "hierarchical_all_reduce" => Some(HierarchicalAllReduce::new(g)?),
                _ => None,
            };
            if comm.rank() == 1 {
                let start = Instant::now();
                while !released.load(Ordering::SeqCst) && start.elapsed().as_secs() < 30 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return Ok(());
            }
            let p = g.size();
            let mut v = vec![1.0f64; 2 * p];
            let done = match op {
                "all_to_all_v" => g.all_to_all_v(&v, &vec![2; p], Phase::InputDist).map(drop),
                "all_gather" => g.all_gather(&v, Phase::Control).map(drop),
                "reduce_scatter" => g
                    .reduce_scatter(&v, &vec![2; p], Phase::SparseGradSync)
                    .map(drop),
                "all_reduce" => g.all_reduce(&mut v, Phase::DenseGradSync),
                "hierarchical_all_reduce" => match &mut hierarchical {
                    Some(h) => h.all_reduce(&mut v, Phase::DenseGradSync),
                    None => unreachable!("made above"),
                },
                "broadcast" => g.broadcast(&mut v, 0, Phase::Control),
                "barrier" => g.barrier(),
                "split" => g.split(0, g.rank()).map(drop),
                _ => g.check_same("a value", 1),
            };
            if let Err(e) = &done {
                if matches!(e, Error::Stalled(_)) {
                    released.store(true, Ordering::SeqCst);
                }
            }
            done
        },
    );
    match out {
        Err(WorkerFailure::Stalled(stall)) => stall,
        Err(other) => panic!("{op} on {group}: expected the watchdog's error, got {other}"),
        Ok(_) => panic!("{op} on {group}: passed without rank 1"),
    }
}

#[test]
fn every_collective_on_every_group_is_watched() {
    let phases = [
        ("all_to_all_v", Some(Phase::InputDist)),
        ("all_gather", Some(Phase::Control)),
        ("reduce_scatter", Some(Phase::SparseGradSync)),
        ("all_reduce", Some(Phase::DenseGradSync)),
        ("broadcast", Some(Phase::Control)),
        ("barrier", None),
        ("split", None),
        ("check_same", Some(Phase::Control)),
    ];
    // Rank 1's groups: the world, host 0 = {0, 1}, the peers of local rank 1 = {1, 3}.
    for (group, reporters) in [
        ("world", &[0, 2, 3][..]),
        ("intra_host", &[0][..]),
        ("peers", &[3][..]),
    ] {
        for (op, phase) in phases {
            let s = stall_of(op, group);
            let case = format!("{op} on {group}: {s}");
            assert_eq!(s.collective, op, "{case}");
            assert_eq!(s.phase, phase, "{case}");
            assert_eq!(s.step, 3, "{case}");
            assert_eq!(s.silent, Some(vec![1]), "{case}");
            assert!(reporters.contains(&s.rank), "{case}");
        }
    }
}

#[test]
fn the_hierarchical_all_reduce_is_watched_under_its_own_name() {
    // On the world, rank 0 waits for rank 1 on their host and rank 3 for it among
    // their peers, but rank 2 waits for rank 0 among its peers: whichever reports first.
    for (group, reporters) in [
        ("world", &[(0, 1), (2, 0), (3, 1)][..]),
        ("intra_host", &[(0, 1)][..]),
        ("peers", &[(3, 1)][..]),
    ] {
        let s = stall_of("hierarchical_all_reduce", group);
        let case = format!("on {group}: {s}");
        assert_eq!(s.collective, "hierarchical_all_reduce", "{case}");
        assert_eq!(s.phase, Some(Phase::DenseGradSync), "{case}");
        assert_eq!(s.step, 3, "{case}");
        let silent = s.silent.as_deref().unwrap_or(&[]);
        assert!(
            reporters.iter().any(|&(r, w)| r == s.rank && silent == [w]),
            "{case}"
        );
    }
}

#[test]
fn without_a_stall_the_watchdog_stays_quiet() {
    // Ranks that reach their collectives at different times, each well within the
    // timeout, over many rounds.
    let out = run_in_process_with(
        two_by_two(),
        Watchdog::new(5.0).unwrap(),
        |comm: Comm| -> Result<f64, Error> {
            let mut v = [comm.rank() as f64];
            for round in 0..20 {
                if (round + comm.rank()).is_multiple_of(4) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                comm.set_step(round as u64);
                comm.all_reduce(&mut v, Phase::Control)?;
            }
            Ok(v[0])
        },
    );
    let sums = out.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sums.len(), 4);
    assert!(sums.iter().all(|&s| s == sums[0]), "{sums:?}");
}
