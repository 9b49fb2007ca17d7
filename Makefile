# Stator — one entry point over cargo. Every target depends on `deps`, so on a fresh machine
# `make demo` and `make test` are all a user types.
SHELL := /bin/bash
CARGO ?= cargo
# Debian packages Stator needs to build, test, benchmark and run its lab.
APT_PACKAGES := clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev pkg-config gcc libc6-dev \
                bird2 iproute2 util-linux mount ethtool tcpdump netsniff-ng wrk iperf3 hyperfine \
                fonts-dejavu-core libfontconfig1-dev libfreetype-dev procps psmisc kmod \
                nginx-light libnginx-mod-stream haproxy valgrind \
                chromium prometheus ca-certificates dpkg-dev

.PHONY: all deps build check test test-stress bench demo fuzz fmt lint clean abi install deb

all: build

# Install whatever is missing with apt-get; quiet and quick when everything is present.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "make deps: cargo not found (install Rust stable >= 1.95 with rustup)"; exit 1; }
	@rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy >/dev/null 2>&1 || true

build: deps
	$(CARGO) build --release --workspace

fmt: deps
	$(CARGO) fmt --all

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Every test that needs neither root nor the kernel (unit, doc, golden, property, config,
# controller over stator-core): fast, and runs as any user.
check: deps lint
	$(CARGO) check --manifest-path fuzz/Cargo.toml --bins
	./scripts/test-tier.sh check

# `make check`, then the tests that need root: BPF programs, namespaces, BIRD, the lab.
test: check
	./scripts/test-tier.sh root

# `make test` with every CPU kept busy by a spinning loop while the root tier runs: catches
# tests that lean on timing or race their neighbours before CI does (scripts/test-stress.sh).
test-stress: check
	./scripts/test-stress.sh

bench: deps
	./scripts/bench.sh

# The lab: a router, three Stator nodes and four backends in namespaces (BFD between router
# and nodes, Prometheus scraping the nodes), traffic, a node failure and a backend failure in
# a live view, then teardown (docs/lab.md). Needs root.
demo: deps build
	./target/release/stator lab demo --prometheus

fuzz: deps
	./scripts/fuzz.sh

clean:
	$(CARGO) clean

# Install like a system service (scripts/install.sh): the binary, stator.service, the
# configuration (kept if present), completions, man pages, docs. PREFIX and DESTDIR as usual;
# SYSCONFDIR defaults to /etc. `make build` first (as yourself), then `sudo make install`.
PREFIX ?= /usr/local
install:
	@[ -x target/release/stator ] || { echo "make install: run 'make build' first"; exit 1; }
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" ./scripts/install.sh

# A Debian package built from the workspace with dpkg-deb (scripts/deb.sh): target/deb/*.deb.
deb: deps build
	./scripts/deb.sh

# Regenerate the Rust mirror of bpf/include/stator_abi.h (checked in; a test fails when stale).
abi:
	cc -Wall -Werror -Ibpf/include crates/stator-abi/gen/abi_gen.c -o target/abi_gen
	./target/abi_gen > crates/stator-abi/src/generated.rs
