//! Micro-benchmarks of stator-hash. They print figures and never fail on timing; goals (from
//! DESIGN.md and the Maglev paper) live in `scripts/bench_goals.json` and are compared by
//! `scripts/bench.sh`.
//!
//! - `maglev/build/1000x65537`, `maglev/build/1000x655373`: table build for 1000 equal-weight
//!   backends (paper: 1.8 ms and 22.9 ms; goal ≤ 1.0 ms and ≤ 15 ms on one core).
//! - `flow/v4_hash_lookup`: IPv4 5-tuple flow hash plus Maglev lookup (goal ≤ 10 ns).
//! - `flow/v4_hash`, `flow/v6_hash`: the flow hash alone.
//! - `toeplitz/v4_ports`, `toeplitz/v6_ports`: RSS hash of the 4-tuple.
use criterion::{Criterion, criterion_group, criterion_main};
use stator_hash::{MaglevBackend, MaglevTable, Toeplitz, flow_hash_v4, flow_hash_v6};
use std::hint::black_box;
use std::time::Duration;

fn backend_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.{}.{}.{}:8080", i >> 16, (i >> 8) & 255, i & 255))
        .collect()
}

fn maglev_build(c: &mut Criterion) {
    let names = backend_names(1000);
    let backends: Vec<MaglevBackend<'_>> = names
        .iter()
        .zip(0..)
        .map(|(name, id)| MaglevBackend::new(name, 1, id))
        .collect();
    let mut group = c.benchmark_group("maglev/build");
    for size in [65_537u32, 655_373] {
        group.bench_function(format!("1000x{size}"), |b| {
            b.iter(|| MaglevTable::build(black_box(&backends), black_box(size)))
        });
    }
    group.finish();
}

fn flow(c: &mut Criterion) {
    let names = backend_names(1000);
    let backends: Vec<MaglevBackend<'_>> = names
        .iter()
        .zip(0..)
        .map(|(name, id)| MaglevBackend::new(name, 1, id))
        .collect();
    // DEFAULT_SIZE is prime and the names are distinct, so the build cannot fail.
    let table = MaglevTable::build(&backends, MaglevTable::DEFAULT_SIZE).expect("valid table");
    let mut group = c.benchmark_group("flow");
    // The source port changes every iteration so that lookups hit different slots.
    let mut sport = 0u16;
    group.bench_function("v4_hash_lookup", |b| {
        b.iter(|| {
            sport = sport.wrapping_add(1);
            let hash = flow_hash_v4(
                black_box([198, 51, 100, 7]),
                black_box([203, 0, 113, 1]),
                black_box(sport),
                black_box(443),
                black_box(6),
            );
            table.lookup(hash)
        })
    });
    group.bench_function("v4_hash", |b| {
        b.iter(|| {
            sport = sport.wrapping_add(1);
            flow_hash_v4(
                black_box([198, 51, 100, 7]),
                black_box([203, 0, 113, 1]),
                black_box(sport),
                black_box(443),
                black_box(6),
            )
        })
    });
    let src6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    let dst6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
    group.bench_function("v6_hash", |b| {
        b.iter(|| {
            sport = sport.wrapping_add(1);
            flow_hash_v6(
                black_box(src6),
                black_box(dst6),
                black_box(sport),
                black_box(443),
                black_box(17),
            )
        })
    });
    group.finish();
}

fn toeplitz(c: &mut Criterion) {
    let toeplitz = Toeplitz::default();
    let mut group = c.benchmark_group("toeplitz");
    group.bench_function("v4_ports", |b| {
        b.iter(|| {
            toeplitz.hash_v4_ports(
                black_box([66, 9, 149, 187]),
                black_box([161, 142, 100, 80]),
                black_box(2794),
                black_box(1766),
            )
        })
    });
    let src6 = [
        0x3f, 0xfe, 0x25, 0x01, 0x02, 0, 0x1f, 0xff, 0, 0, 0, 0, 0, 0, 0, 7,
    ];
    let dst6 = [
        0x3f, 0xfe, 0x25, 0x01, 0x02, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1,
    ];
    group.bench_function("v6_ports", |b| {
        b.iter(|| {
            toeplitz.hash_v6_ports(
                black_box(src6),
                black_box(dst6),
                black_box(2794),
                black_box(1766),
            )
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = maglev_build, flow, toeplitz
}
criterion_main!(benches);
