//! The PFC experiments of mrc-sim (issue 22), run through the library on seed 1: exact
//! counts, every check, and no drop in any lossless run.

use mrc_examples::sim::experiments;
use mrc_examples::sim::output::ResultTable;

fn value(t: &ResultTable, row: &str, col: &str) -> f64 {
    t.rows
        .iter()
        .find(|r| r.label == row)
        .and_then(|r| r.values.iter().find(|(k, _)| k == col))
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {row} / {col}"))
}

/// 0.1 precision, for goodput shares.
fn tenth(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[test]
fn incast_victim_roce_pfc_hurts_the_victim_mrc_does_not() {
    let t = experiments::run("incast-victim", 1, &mut |_, _| {}).unwrap();
    let labels: Vec<&str> = t.rows.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(
        labels,
        ["7:1 roce+pfc", "7:1 mrc", "16:1 roce+pfc", "16:1 mrc"]
    );
    assert_eq!(t.checks.len(), 8);
    assert!(t.all_pass(), "{}", t.render());
    // Lossless: PFC paused the fabric instead of dropping; mrc trims, never pauses.
    for (row, pauses) in [("7:1 roce+pfc", 209.0), ("16:1 roce+pfc", 239.0)] {
        assert_eq!(value(&t, row, "drops"), 0.0);
        assert_eq!(value(&t, row, "trims"), 0.0);
        assert_eq!(value(&t, row, "retransmitted"), 0.0);
        assert_eq!(value(&t, row, "pauses"), pauses);
        assert!(value(&t, row, "shared_port_paused_us") > 0.0);
    }
    for (row, trims) in [("7:1 mrc", 484.0), ("16:1 mrc", 2367.0)] {
        assert_eq!(value(&t, row, "pauses"), 0.0);
        assert_eq!(value(&t, row, "drops"), 0.0);
        assert_eq!(value(&t, row, "trims"), trims);
    }
    // Seed 1: the RoCE victim keeps 58.4% (7:1) and 73.8% (16:1) of its solo goodput,
    // mrc's 99.8% and 99.6%.
    let share = |row| tenth(value(&t, row, "pct_victim_of_solo"));
    assert_eq!(
        [
            share("7:1 roce+pfc"),
            share("7:1 mrc"),
            share("16:1 roce+pfc"),
            share("16:1 mrc")
        ],
        [58.4, 99.8, 73.8, 99.6]
    );
    // The JSON carries the rows and the checks.
    let json = serde_json::to_string(&t).unwrap();
    assert!(json.contains("\"label\":\"16:1 mrc\""));
    assert!(json.contains("lossless, no buffer dropped a frame"));
}
