#!/usr/bin/env bash
# Fuzz every target in fuzz/ (fuzz/README.md: what each feeds and checks) for a bounded time or
# number of executions; print the executions and coverage of each; fail if any target crashes.
#
#   scripts/fuzz.sh                        # every target, FUZZ_TIME seconds each (default 20)
#   FUZZ_TIME=300 scripts/fuzz.sh parse_flow tcp
#   FUZZ_RUNS=10000000 scripts/fuzz.sh config   # until 10 million executions (or FUZZ_TIME,
#                                               # default 3600 s then, whichever comes first)
#
# cargo-fuzz needs nightly compiler flags (-Zsanitizer=address, sancov passes). This machine has
# a stable toolchain only, which accepts them when RUSTC_BOOTSTRAP=1: a deliberate, local,
# fuzzing-only opt-in, never used for the real build. (`make check` only runs `cargo check`
# over the targets, on stable, so that a target that drifts from the code fails CI.)
#
# Targets are built with optimisations *and* debug assertions (-O -a), so that arithmetic
# overflow is a crash too. Each run starts from the corpus in fuzz/corpus/<target> (git-ignored,
# grows across runs), seeded below when empty, with the dictionary fuzz/dicts/<target>.dict when
# there is one; crashes land in fuzz/artifacts/<target>/ and are listed at the end. A crash that
# was fixed is kept as a regression input in fuzz/regressions/<target>/ (replayed by a test of
# the crate that owns the code) and is run here first.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${FUZZ_RUNS:-}" ]; then
  FUZZ_TIME="${FUZZ_TIME:-3600}"
  limit=(-runs="$FUZZ_RUNS" -max_total_time="$FUZZ_TIME")
  what="$FUZZ_RUNS executions (at most ${FUZZ_TIME}s)"
else
  FUZZ_TIME="${FUZZ_TIME:-20}"
  limit=(-max_total_time="$FUZZ_TIME")
  what="${FUZZ_TIME}s"
fi
export RUSTC_BOOTSTRAP=1

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# One realistic seed per target (hex), so that the first seconds are spent past the length
# checks: a Linux SYN in Ethernet/IPv4 and in a VLAN tag, an IPv6 UDP packet behind hop-by-hop
# options and a first-fragment header, each protocol's unit-test vector; for the targets whose
# input is a little language of their own (described in each target's source), inputs that
# reach their main paths. config and api_body are seeded from examples/*.toml below.
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
  # flags 0 (IPv4 client and destination), 192.0.2.1:40000 → 198.51.100.7:53, stride 8,
  # two datagrams: "payload!" and one that opens with the PROXY v2 signature
  [udp_datagram]=00c00002019c40c6336407003500087061796c6f6164210d0a0d0a000d0a515549540a
  # capacity 4, timeout 100 ms; inserts of clients 1–5, a touch, an expiry, a reload to 2
  [session_table]=03640001000002010003010004010005010302050664ff070232
)
# http_head: a trusted IPv4 client 192.0.2.7 (mode append), then a POST in absolute form with a
# chunked body and a forwarding header.
SEED[http_head]=05c0000207000000000000000000000000$(printf 'POST http://a.example:8080/p?q HTTP/1.1\r\nHost: other\r\nTransfer-Encoding: chunked\r\nX-Forwarded-For: 10.9.9.9\r\n\r\n' | od -An -v -tx1 | tr -d ' \n')

# core_process (its input layout: fuzz_targets/core_process/{world,frames}.rs): four VIPs
# (plain, fragments over GUE, a group VIP with failover, an IPv6 one without backend), two
# peers, and a SYN and ACK, a datagram's fragments in order and out of order, a redirect, a
# failover, a traced packet, ICMP, a snapshot switch and time passing (fuzz/seeds/).
SEED[core_process]=$(tr -d ' \n' <fuzz/seeds/core_process.hex)

# Writes the seeds of a target whose corpus is empty.
seed() {
  local t=$1 corpus=$2
  [ -z "$(ls -A "$corpus")" ] || return 0
  case "$t" in
    config)
      cp examples/*.toml "$corpus/" ;;
    api_body)
      # 0x00 + a JSON configuration (examples/minimal.toml as JSON); 0x01 + a drain timeout
      { printf '\0'; printf '{"node":{"name":"lb1","address_v4":"10.0.0.10"},"dataplane":{"interfaces":["eth0"]},"pool":[{"name":"web","backend":[{"address":"10.1.1.11","port":80},{"address":"10.1.1.12","port":80}]}],"vip":[{"address":"192.0.2.10","port":80,"protocol":"tcp","pools":["web"]}]}'; } >"$corpus/minimal.json"
      printf '\0011m30.5s' >"$corpus/drain" ;;
    *)
      if [ -n "${SEED[$t]:-}" ]; then
        printf '%b' "$(sed 's/../\\x&/g' <<<"${SEED[$t]}")" >"$corpus/seed"
      fi ;;
  esac
}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi

echo "fuzz: building the fuzz targets"
cargo fuzz build -O -a --fuzz-dir fuzz

failed=()
summary=()
for t in "${targets[@]}"; do
  corpus="fuzz/corpus/$t"
  mkdir -p "$corpus"
  seed "$t" "$corpus"
  extra=()
  [ -f "fuzz/dicts/$t.dict" ] && extra+=(-dict="fuzz/dicts/$t.dict")
  # Fixed crashes first: each must now pass.
  if [ -d "fuzz/regressions/$t" ] && [ -n "$(ls -A "fuzz/regressions/$t")" ]; then
    if ! cargo fuzz run -O -a --fuzz-dir fuzz "$t" fuzz/regressions/"$t"/* -- -runs=1 \
         2>"fuzz/$t.log" >/dev/null; then
      tail -n 40 "fuzz/$t.log"
      failed+=("$t (a regression input)")
      continue
    fi
  fi
  echo "fuzz: $t for $what"
  if ! cargo fuzz run -O -a --fuzz-dir fuzz "$t" "$corpus" -- "${limit[@]}" "${extra[@]}" \
       -print_final_stats=1 2>"fuzz/$t.log"; then
    tail -n 40 "fuzz/$t.log"
    failed+=("$t")
  else
    # "#123456 DONE cov: 812 ft: 2345 corp: 301/21Kb ..." and the final stats
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "fuzz/$t.log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "fuzz/$t.log" | tail -n 1)
    last=$(grep -E '^#[0-9]+' "fuzz/$t.log" | tail -n 1)
    cov=$(sed -nE 's/.* cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+)\/([^ ]+).*/cov \1, ft \2, corpus \3 inputs (\4)/p' <<<"$last")
    line=$(printf '%-14s %12s executions %9s/s  %s' "$t" "${runs:-?}" "${rate:-?}" "$cov")
    echo "fuzz: $line"
    summary+=("$line")
  fi
  rm -f "fuzz/$t.log"
done

echo "fuzz: executions per target"
for line in "${summary[@]}"; do
  echo "  $line"
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: CRASHED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran $what without a crash"
