//! Golden Maglev tables (`testdata/maglev_golden.txt`): any change to the name hashes, the turn
//! order, the weight rule or the fill algorithm fails here loudly. Every Stator node, of every
//! version, must derive these exact tables from these backend sets.
#[allow(unused_imports)]
use crate::common;

use stator_hash::{MaglevBackend, MaglevPermutation, MaglevTable, siphash24};

fn digest(slots: &[u32]) -> u64 {
    let bytes: Vec<u8> = slots.iter().flat_map(|s| s.to_le_bytes()).collect();
    siphash24(*b"stator-golden-v1", &bytes)
}

struct Golden {
    line: usize,
    size: u32,
    backends: Vec<(u32, u32, String)>,
    slots: Option<Vec<u32>>,
    digest: Option<u64>,
}

#[test]
fn golden_permutations_and_tables() {
    let path = common::testdata("maglev_golden.txt");
    let text = std::fs::read_to_string(&path).expect("read golden file");
    let mut tables: Vec<Golden> = Vec::new();
    let mut permutations = 0;
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |s: &str| -> u32 { s.parse().unwrap_or_else(|e| panic!("line {line_no}: {e}")) };
        match f.first().copied() {
            None | Some("#") => {}
            Some(w) if w.starts_with('#') => {}
            Some("perm") => {
                let p = MaglevPermutation::from_name(f[2], num(f[1]), 0, 1);
                assert_eq!(
                    (p.offset, p.skip),
                    (num(f[3]), num(f[4])),
                    "line {line_no}: {line}"
                );
                permutations += 1;
            }
            Some("table") => tables.push(Golden {
                line: line_no,
                size: num(f[1]),
                backends: Vec::new(),
                slots: None,
                digest: None,
            }),
            Some("backend") => {
                let table = tables.last_mut().expect("backend before table");
                table.backends.push((num(f[1]), num(f[2]), f[3].to_owned()));
            }
            Some("slots") => {
                let table = tables.last_mut().expect("slots before table");
                table.slots = Some(f[1..].iter().map(|s| num(s)).collect());
            }
            Some("digest") => {
                let table = tables.last_mut().expect("digest before table");
                table.digest = Some(u64::from_str_radix(f[1], 16).expect("hex digest"));
            }
            Some(other) => panic!("line {line_no}: unknown record {other}"),
        }
    }
    assert!(permutations >= 12, "the golden file lost permutations");
    assert!(tables.len() >= 6, "the golden file lost tables");
    for golden in &tables {
        let backends: Vec<MaglevBackend<'_>> = golden
            .backends
            .iter()
            .map(|(id, weight, name)| MaglevBackend::new(name, *weight, *id))
            .collect();
        let table = MaglevTable::build(&backends, golden.size)
            .unwrap_or_else(|e| panic!("table at line {}: {e}", golden.line));
        if let Some(slots) = &golden.slots {
            assert_eq!(
                table.slots(),
                slots.as_slice(),
                "table at line {}",
                golden.line
            );
        }
        if let Some(want) = golden.digest {
            assert_eq!(digest(table.slots()), want, "table at line {}", golden.line);
        }
        assert!(golden.slots.is_some() || golden.digest.is_some());
    }
}
