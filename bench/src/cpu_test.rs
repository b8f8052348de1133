//! `contended`/`uncontended --members N`: the scenario on a cluster of its own, with the CPU
//! each committed entry cost the members. No figure is compared to a target (the machine is
//! shared): the test checks that every figure was measured and that they agree.

use clap::Parser;

use super::kv_scenarios_test::{Cli, bench, refused};

#[test]
fn contended_on_its_own_cluster_reports_each_members_cpu_per_entry() {
    let report = bench(&[
        "contended",
        "--members",
        "3",
        "--agents",
        "10",
        "--locks",
        "1",
        "--duration-s",
        "2",
        "--json",
    ]);
    assert_eq!(report.parameters["members"], 3);
    assert_eq!(report.parameters["home"], "spread");
    assert_eq!(report.parameters["brokers"], "its own cluster");
    assert_eq!(report.errors.total, 0, "{report:#?}");
    assert!(report.passed(), "{report:#?}");
    assert!(report.cycles > 0, "{report:#?}");
    let cpu = report.cpu.as_ref().expect("the CPU figures");
    assert!(cpu.entries > 0, "{cpu:?}");
    let roles: Vec<&str> = cpu
        .members
        .iter()
        .map(|member| member.role.as_str())
        .collect();
    assert_eq!(
        roles.iter().filter(|role| **role == "leader").count(),
        1,
        "{cpu:?}"
    );
    assert_eq!(roles.len(), 3, "{cpu:?}");
    for member in &cpu.members {
        assert!(member.cpu_us.is_some_and(|us| us > 0), "{cpu:?}");
    }
    let each: Vec<f64> = cpu
        .members
        .iter()
        .map(|member| member.us_per_entry.expect("every member's CPU was read"))
        .collect();
    let summed = cpu.cluster_us_per_entry.expect("the summed figure");
    assert!(summed > 0.0, "{cpu:?}");
    assert!((summed - each.iter().sum::<f64>()).abs() < 1e-6, "{cpu:?}");
    assert!(cpu.bench_us_per_entry.is_some_and(|us| us > 0.0), "{cpu:?}");
}

#[test]
fn agents_homed_on_the_leader_run_through_it() {
    let report = bench(&[
        "uncontended",
        "--members",
        "3",
        "--home",
        "leader",
        "--agents",
        "4",
        "--duration-s",
        "1",
        "--json",
    ]);
    assert_eq!(report.parameters["home"], "leader");
    assert_eq!(report.errors.total, 0, "{report:#?}");
    assert!(report.cycles > 0, "{report:#?}");
    assert!(report.cpu.is_some_and(|cpu| cpu.entries > 0));
}

#[test]
fn home_needs_a_cluster_of_its_own() {
    let error = Cli::try_parse_from(["bench", "contended", "--home", "leader"])
        .expect_err("--home without --members");
    assert!(error.to_string().contains("--members"), "{error}");
}

#[test]
fn a_flood_is_not_measured_on_a_cluster_of_its_own() {
    let error = refused(&["uncontended", "--members", "3", "--flood"]);
    assert!(error.to_string().contains("leave out --members"), "{error}");
}
