# Stator — one entry point over cargo. Every target installs what it needs first, so on a fresh
# machine `make build` and `make test` are all a user types.
SHELL := /bin/bash
CARGO ?= cargo
# Debian packages that building needs (`make build`, `make install`, `make deb`): the BPF
# programs' compiler and headers, the C toolchain, fontconfig/freetype for the plots of
# `stator bench hashing` (linked into the binary), dpkg-dev for the package. Nothing that runs
# a service. Build on a build machine and install the .deb on production hosts
# (docs/operations.md, "Installing").
BUILD_PACKAGES := clang llvm libbpf-dev libelf-dev zlib1g-dev pkg-config gcc libc6-dev \
                  libfontconfig1-dev libfreetype-dev ca-certificates dpkg-dev
# What testing, benchmarking, fuzzing and the lab need on top: BIRD, namespaces and traffic tools,
# the rivals of the benchmarks (nginx, HAProxy), Chromium for the status page, Prometheus for the
# monitoring tests, valgrind. Some of them start services (nginx may take port 80): never on a
# production host.
TEST_PACKAGES := bpftool bird2 iproute2 util-linux mount ethtool tcpdump netsniff-ng wrk iperf3 \
                 hyperfine fonts-dejavu-core procps psmisc kmod python3 \
                 nginx-light libnginx-mod-stream haproxy valgrind chromium prometheus

# Installs with apt-get whichever of the packages in $(1) are missing; quiet and quick when
# every one is present.
define apt_install
@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make $@: installing$$missing"; \
	  if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	fi
endef

.PHONY: all deps test-deps build check test test-stress bench demo fuzz fmt lint clean abi install deb

all: build

# What building needs, and the Rust toolchain's check.
deps:
	$(call apt_install,$(BUILD_PACKAGES))
	@command -v $(CARGO) >/dev/null || { echo "make deps: cargo not found (install Rust stable >= 1.95 with rustup)"; exit 1; }
	@rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy >/dev/null 2>&1 || true

# What testing and benchmarking need, on top of building.
test-deps: deps
	$(call apt_install,$(TEST_PACKAGES))

build: deps
	$(CARGO) build --release --workspace

fmt: deps
	$(CARGO) fmt --all

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Every test that needs neither root nor the kernel (unit, doc, golden, property, config,
# controller over stator-core): fast, and runs as any user. The fuzz targets are checked in the
# main workspace's target directory, where clippy has just checked every dependency they share.
check: test-deps lint
	CARGO_TARGET_DIR=target $(CARGO) check --manifest-path fuzz/Cargo.toml --bins
	./scripts/test-tier.sh check

# `make check`, then the tests that need root: BPF programs, namespaces, BIRD, the lab.
test: check
	./scripts/test-tier.sh root

# `make test` with every CPU kept busy by a spinning loop while the root tier runs: catches
# tests that lean on timing or race their neighbours before CI does (scripts/test-stress.sh).
test-stress: check
	./scripts/test-stress.sh

bench: test-deps
	./scripts/bench.sh

# The lab: a router, three Stator nodes and four backends in namespaces (BFD between router
# and nodes, Prometheus scraping the nodes), traffic, a node failure and a backend failure in
# a live view, then teardown (docs/lab.md). Needs root.
demo: test-deps build
	./target/release/stator lab demo --prometheus

fuzz: test-deps
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
