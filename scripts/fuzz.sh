#!/usr/bin/env bash
# Fuzz every target in fuzz/ — each stator-wire parser, parse_flow, and stator-core's
# Forwarder::process (core_process) — for a bounded time; fail if any target crashes.
#
#   scripts/fuzz.sh              # every target, FUZZ_TIME seconds each (default 20)
#   FUZZ_TIME=300 scripts/fuzz.sh parse_flow tcp
#
# cargo-fuzz needs nightly compiler flags (-Zsanitizer=address, sancov passes). This machine has
# a stable toolchain only, which accepts them when RUSTC_BOOTSTRAP=1: a deliberate, local,
# fuzzing-only opt-in, never used for the real build.
#
# Targets are built with optimisations *and* debug assertions (-O -a), so that arithmetic
# overflow is a crash too. Each run starts from the corpus in fuzz/corpus/<target> (git-ignored,
# grows across runs) seeded below with one realistic input; crashes land in
# fuzz/artifacts/<target>/ and are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_TIME="${FUZZ_TIME:-20}"
export RUSTC_BOOTSTRAP=1

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# One realistic seed per target (hex), so that the first seconds are spent past the length
# checks: a Linux SYN in Ethernet/IPv4 and in a VLAN tag, an IPv6 UDP packet behind hop-by-hop
# options and a first-fragment header, each protocol's unit-test vector, and for core_process
# (whose input layout is described in its source) a connection's first two segments.
TCP_SYN=9c40005000000001000000005002faf000000000
TCP_ACK=9c40005000000001000000005010faf000000000
declare -A SEED=(
  [parse_flow]=525400abcdef52540012345686dd60000000001c004020010db800000000000000000000000120010db80000000000000000000000022c0005020000010011000001deadbeef9c400035000c000061626364
  [ethernet]=525400abcdef5254001234568100200a08004500003c12344000400614860a0000010a000002d43100506a2c1f3b00000000a002faf037350000020405b40402080a0009a3e50000000001030307
  [ipv4]=4500003c12344000400614860a0000010a000002d43100506a2c1f3b00000000a002faf037350000020405b40402080a0009a3e50000000001030307
  [ipv6]=60000000001c004020010db800000000000000000000000120010db80000000000000000000000022c0005020000010011000001deadbeef9c400035000c000061626364
  [ipv6ext]=002c0005020000010011000001deadbeef9c400035000c000061626364
  [tcp]=d43100506a2c1f3b00000000a002faf037350000020405b40402080a0009a3e50000000001030307
  [udp]=9c40003500143326abcd01000001000000000000
  [icmpv4]=03042a8a00000578450005dc1c4640004006b290c6336407cb00710a01bbc73801020304
  [icmpv6]=02002b99000005006000000005ac114020010db800010000000000000000000520010db800020000000000000000008001bbea6005acabcd
  [gre]=b1000800561600000000abcd0000000745000014
  [gue]=01048000deadbeef4500
  # world 0x11 (ICMP echo, IPv4 template); a SYN then an ACK of one flow to 10.0.0.10:80
  [core_process]=110000011506${TCP_SYN}0000011506${TCP_ACK}
)

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi

echo "fuzz: building the fuzz targets"
cargo fuzz build -O -a --fuzz-dir fuzz

failed=()
for t in "${targets[@]}"; do
  corpus="fuzz/corpus/$t"
  mkdir -p "$corpus"
  if [ -n "${SEED[$t]:-}" ] && [ -z "$(ls -A "$corpus")" ]; then
    hex="${SEED[$t]}"
    printf '%b' "$(sed 's/../\\x&/g' <<<"$hex")" >"$corpus/seed"
  fi
  echo "fuzz: $t for ${FUZZ_TIME}s"
  if ! cargo fuzz run -O -a --fuzz-dir fuzz "$t" "$corpus" -- \
       -max_total_time="$FUZZ_TIME" -print_final_stats=1 2>"fuzz/$t.log"; then
    tail -n 40 "fuzz/$t.log"
    failed+=("$t")
  else
    grep -E "^Done" "fuzz/$t.log" | tail -n 1 | sed "s/^/fuzz: $t: /"
  fi
  rm -f "fuzz/$t.log"
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: CRASHED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${FUZZ_TIME}s without a crash"
