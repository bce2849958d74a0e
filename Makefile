# kao: every entry point a user or CI types. `make help` lists them.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# One target at a time, in the order given: `check` is deps, tools, verify,
# lint and test in that order, and two tool builds must not share the cache.
.NOTPARALLEL:

# sudo resets PATH to its secure_path, which lacks Go's usual directory.
ifeq ($(shell command -v go),)
export PATH := $(PATH):/usr/local/go/bin
endif

# `make demo` refuses a non-root user at once, in one line, before it installs
# or builds anything (`make -n demo` only prints and needs no root).
ifneq ($(filter demo,$(MAKECMDGOALS)),)
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
ifneq ($(shell id -u),0)
$(error make demo needs root: its three test hosts are systemd-nspawn containers in network namespaces of their own; run: sudo make demo)
endif
endif
endif

TOOLS := hack/tools.sh
CONTROLLER_GEN = $(shell $(TOOLS) dir controller-gen)/controller-gen
GOLANGCI_LINT = $(shell $(TOOLS) dir golangci-lint)/golangci-lint
PROMTOOL = $(shell $(TOOLS) dir promtool)/promtool

# envtest finds kube-apiserver, etcd and kubectl in one directory, which
# `hack/tools.sh assets` fills only once the kubernetes and etcd sets are
# built. So it is asked in the recipes that need it, after `make tools`, and
# never when make starts (on a cold cache that gave an empty directory and a
# failed first run). A KUBEBUILDER_ASSETS from the environment wins.
WITH_ASSETS = KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$$($(TOOLS) assets)}"

# Go test flags: override with `make test GOTESTFLAGS=...`. make test runs
# the suite in two phases (test-light, then test-heavy; they say why). The
# heavy packages (HEAVY_PACKAGES), all four together, whose heavy tests
# (those that boot test hosts or a real node and install control planes, or
# build images) share the machine's test lanes: two on the 2-core machine
# (testenv.Lane, KAO_TEST_LANES), longest first, whatever their package.
# Run beside them, even at nice 10, the unit packages slowed them past their
# deadlines (control planes missed etcd heartbeats, leases and kubectl's
# minute; first installs their ten minutes). Under load envtest's control
# plane may take longer than its default 20 s to start:
# KUBEBUILDER_CONTROLPLANE_START_TIMEOUT gives it two minutes. The timeout
# is per package, whose tests may wait most of the run for a lane; CI's
# hour is the goal, not this bound. go test's own vet pass is off: make
# lint runs go vet's analyzers (golangci-lint's govet) once. The test
# binaries carry no DWARF (-ldflags=-w, -gcflags=all=-dwarf=false), which
# only a debugger reads: stack traces and test output come from the Go
# symbol tables that stay. Linking the e2e binary took 4.7 instead of 12.7
# CPU-seconds; the suite links 35 of them, and compiles everything they
# import on a fresh machine. Tests that build kao's programs use the same
# flags (testenv.BuildFlags), so those builds reuse the compiled packages.
GOTESTFLAGS ?= -count=1 -timeout=150m -vet=off -ldflags=-w -gcflags=all=-dwarf=false

# The packages, in go test's order (./...); the lanes order the heavy tests.
# hack/gotest prints the slowest tests of each run and their slow steps.
TEST_PACKAGES ?= ./...
HEAVY_PACKAGES = test/e2e test/roles test/incluster test/image
# GOTEST runs go test through hack/gotest; under make check-suite the failed
# tests of both halves of the suite are collected in KAO_TEST_FAILURES.
GOTEST = go run ./hack/gotest $${KAO_TEST_FAILURES:+-failures=$$KAO_TEST_FAILURES}

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Set-up

.PHONY: deps
deps: ## Install the Debian packages the demo and tests need (root; skipped when all are installed).
	hack/deps.sh

.PHONY: tools
tools: ## Build the pinned tools (kube-apiserver, etcd, Karmada, controller-gen, golangci-lint, kwok, helm, promtool) into the cache.
	$(TOOLS) build

##@ Development

.PHONY: artifacts
artifacts: ## Assemble the offline bundle (binaries, Karmada CRDs, SHA256SUMS) into KAO_ARTIFACTS_DIR (default _out/artifacts).
	hack/artifacts.sh

# IMAGE names the operator image `make image` writes: set your registry's
# name to push it (`make image IMAGE=registry.dc1.example/kao/kao-manager:v0.1.0`).
IMAGE ?= kao-manager:dev

.PHONY: image
image: artifacts ## Build the operator image, offline and reproducibly, as an OCI archive in _out/image (root: mmdebstrap).
	go run ./hack/image -name $(IMAGE)

# IMAGE_REGISTRY names the registry the control plane's images are named
# under when `make images` loads them into containerd: your deployments'
# spec.artifacts.imageRegistry. Pushing them with skopeo names the registry
# anew (docs/containerized.md#images).
IMAGE_REGISTRY ?= registry.kao.local

.PHONY: images
images: artifacts ## Build the Karmada control plane's images (Containerized mode, Pull members' agents) from the bundle as one OCI archive in _out/images.
	go run ./hack/image -components -registry $(IMAGE_REGISTRY) -out _out/images

.PHONY: manifests
manifests: ## Generate CRDs, RBAC, the PrometheusRule and the Grafana dashboard into config/, and the chart's copies.
	$(TOOLS) build controller-gen
	$(CONTROLLER_GEN) rbac:roleName=kao-manager crd paths="./api/...;./internal/controller/...;./cmd/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	{ echo '# Generated by make manifests from config/rbac/role.yaml: the same rules, in one namespace.'; \
	  sed 's/^kind: ClusterRole$$/kind: Role/' config/rbac/role.yaml; } > config/rbac-namespaced/role.yaml
	@# The chart installs the same CRDs and rules: copied, never edited by hand.
	rm -f charts/kao/crds/*.yaml && cp config/crd/bases/*.yaml charts/kao/crds/
	{ echo '# Generated by make manifests from config/rbac/role.yaml.'; sed -n '/^rules:/,$$p' config/rbac/role.yaml; } > charts/kao/files/manager-rules.yaml
	{ echo '# Generated by make manifests from config/rbac-host-cluster/role.yaml.'; sed -n '/^rules:/,$$p' config/rbac-host-cluster/role.yaml; } > charts/kao/files/host-cluster-rules.yaml
	{ echo '# Generated by make manifests from config/rbac-job-executor/role.yaml: its rules, without the key.'; sed -n '/^rules:/,$$p' config/rbac-job-executor/role.yaml | tail -n +2 | sed 's/^  //'; } > charts/kao/files/job-executor-rules.yaml
	@# The alerting rules: config/prometheus/rules.yaml is the source; the
	@# PrometheusRule beside it and the chart's copy hold the same groups.
	{ echo '# Generated by make manifests from config/prometheus/rules.yaml: the same groups, as a PrometheusRule.'; \
	  printf 'apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: kao\n  labels:\n    app.kubernetes.io/name: kao\nspec:\n'; \
	  sed -n '/^groups:/,$$p' config/prometheus/rules.yaml | sed 's/^./  &/'; } > config/prometheus/prometheusrule.yaml
	{ echo '# Generated by make manifests from config/prometheus/rules.yaml.'; sed -n '/^groups:/,$$p' config/prometheus/rules.yaml; } > charts/kao/files/prometheus-rules.yaml
	@# The Grafana dashboard, from hack/dashboard, and the chart's copy.
	go run ./hack/dashboard -o config/grafana/kao-dashboard.json
	cp config/grafana/kao-dashboard.json charts/kao/files/kao-dashboard.json

.PHONY: generate
generate: ## Generate deepcopy code for the API types.
	$(TOOLS) build controller-gen
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt on the module.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: verify
verify: manifests generate ## Fail when generated files or go.mod are stale.
	go mod tidy
	@if [ -n "$$(git status --porcelain -- api config charts go.mod go.sum)" ]; then \
		echo "Generated files are stale; run 'make manifests generate' and 'go mod tidy' and commit:"; \
		git status --porcelain -- api config charts go.mod go.sum; git --no-pager diff --stat -- api config charts go.mod go.sum; exit 1; fi
	@test -z "$$(gofmt -s -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -s -l $$(git ls-files '*.go'); exit 1; }

.PHONY: lint
lint: ## Run golangci-lint, yamllint, promtool (the alerting rules and their tests) and ansible-lint.
	$(TOOLS) build golangci-lint
	$(GOLANGCI_LINT) run ./...
	yamllint -s .
	@# The alerting rules: valid, and their unit tests on synthetic series pass.
	$(TOOLS) build promtool
	$(PROMTOOL) check rules config/prometheus/rules.yaml
	$(PROMTOOL) test rules test/observability/testdata/rules_test.yaml
	@# Roles' own module_utils are found by ansible-playbook, not by ansible-lint's argument checks.
	@if [ -n "$$(ls roles playbooks 2>/dev/null | grep -v README)" ]; then \
		ANSIBLE_MODULE_UTILS="$$(ls -d $(CURDIR)/roles/*/module_utils 2>/dev/null | paste -sd:)" ansible-lint --offline playbooks roles; \
	else echo "ansible-lint: no playbooks or roles yet"; fi

##@ Demo

.PHONY: demo
demo: deps tools ## Packages, tools, then kao installs a control plane on three local test hosts, shown live (root).
	$(WITH_ASSETS) go run ./hack/demo

##@ Test

.PHONY: test
test: tools ## Run every test against the real tools (builds them first; root for the test hosts).
	@status=0; $(MAKE) --no-print-directory test-light || status=$$?; \
	$(MAKE) --no-print-directory test-heavy || status=$$?; exit $$status

# The suite's two phases, one after the other. test-light: every package but
# the heavy ones, two at a time, after compiling the heavy ones (and running
# their TestMain, which builds e2e's artifacts bundle) with no test selected,
# so that test-heavy starts every heavy test within seconds and the lanes
# take the longest first. test-heavy: the heavy packages, whose heavy tests
# share the machine's lanes. On 2026-12-02 the two phases at once (the light
# one at nice 10, which counts only within a session, and test hosts start
# their own) put the load average over 20 for half an hour: the first
# Binary installs ran past ten minutes, their hosts getting 199 CPU-seconds
# in that time, and both failed.
HEAVY_SELECT = mod="$$(go list -m)"; light=; heavy=; \
	for p in $$(go list $(TEST_PACKAGES)); do \
		case " $(addprefix $$mod/,$(HEAVY_PACKAGES)) " in *" $$p "*) heavy="$$heavy $$p";; *) light="$$light $$p";; esac; \
	done

.PHONY: test-light
test-light:
	@$(HEAVY_SELECT); status=0; \
	if [ -n "$$heavy" ]; then echo "[test] compiling the heavy packages:$$heavy"; \
		$(WITH_ASSETS) $(GOTEST) -- -p=2 $(GOTESTFLAGS) -run '^$$' $$heavy || status=$$?; fi; \
	if [ -n "$$light" ]; then echo "[test] every package but the heavy ones, two at a time"; \
		$(WITH_ASSETS) KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=2m $(GOTEST) -- -p=2 $(GOTESTFLAGS) $$light || status=$$?; fi; \
	exit $$status

.PHONY: test-heavy
test-heavy:
	@$(HEAVY_SELECT); \
	if [ -n "$$heavy" ]; then echo "[test] the heavy packages, their heavy tests in $${KAO_TEST_LANES:-2} lanes:$$heavy"; \
		$(WITH_ASSETS) KAO_TEST_LANES_SETTLE="$${KAO_TEST_LANES_SETTLE:-45s}" $(GOTEST) -- -p=4 $(GOTESTFLAGS) $$heavy; fi

.PHONY: test-short
test-short: ## Run the tests that need neither an API server nor test hosts.
	go test -short $(GOTESTFLAGS) ./...

.PHONY: check-root
check-root:
	@if [ "$$(id -u)" -ne 0 ]; then \
		echo "make check must run as root: the test hosts are systemd-nspawn containers in network namespaces" >&2; exit 1; fi

.PHONY: check
check: check-root deps ## What CI runs: packages (root), tools and verify, then lint beside test.
	@# On a fresh machine the test hosts' Debian root and the operator
	@# image's Debian layer are built beside the tools: debootstrap and
	@# mmdebstrap mostly wait on downloads and dpkg while the tools' compiles
	@# take the CPU, where the first tests would otherwise wait for them. A
	@# failure here is reported and not fatal: the tests build what is
	@# missing themselves, and fail there if it cannot be built.
	@prep="$$(mktemp)"; \
	{ go run ./hack/testhosts base && go run ./hack/image -base-only; } >"$$prep" 2>&1 & prepid=$$!; \
	status=0; $(MAKE) --no-print-directory tools verify || status=$$?; \
	if wait $$prepid; then echo "[check] test hosts' root and image layer ready"; else cat "$$prep"; echo "[check] building the test hosts' root or the image layer failed: the tests try again"; fi; \
	rm -f "$$prep"; exit $$status
	@$(MAKE) --no-print-directory check-suite

.PHONY: check-all
check-all: ## make check with the long tier too: the heavy scenarios make check leaves out (testenv's longTier); 53 minutes on a fast day (2026-12-02), more on a loaded machine.
	@KAO_LONG_TESTS=1 $(MAKE) --no-print-directory check

# reap-test-leftovers stops the API servers and etcds that envtest started
# for a test binary that was killed (a run stopped at CI's time limit): they
# outlive it, adopted by process 1, and an idle pair takes a few percent of a
# core for as long as the machine runs, a share of every later run's CPU.
# They are told apart by envtest's directories (k8s_test_framework_*) and by
# having no parent left; test hosts and nodes left behind are the harness's
# to reclaim (test/hosts, test/node).
.PHONY: reap-test-leftovers
reap-test-leftovers:
	@pids="$$(ps -eo pid=,ppid=,args= | awk '$$2 == 1 && /k8s_test_framework_/ { print $$1 }')"; \
	if [ -n "$$pids" ]; then echo "[check] stopping envtest servers left by a killed test run: PIDs" $$pids; \
		kill $$pids 2>/dev/null || true; sleep 5; kill -9 $$pids 2>/dev/null || true; fi

# check-suite is the second half of make check: lint beside the light phase
# of the tests, then the heavy phase alone.
.PHONY: check-suite
check-suite: reap-test-leftovers
	@# lint (about 4 CPU-minutes) runs beside test-light at nice 10, and both
	@# end before test-heavy starts: the heavy tests' control planes have
	@# the machine to themselves (see test-light). lint's output comes after
	@# the suite's; either failing fails the check.
	@# hack/cpusample watches the machine meanwhile and reports last where
	@# the CPU went: whether the run waited or computed, and on what, and
	@# how much each test's hosts used (test/hosts records it at teardown).
	@# It prints nothing until it is stopped, then straight to the output,
	@# so that a run killed at CI's time limit still ends with its report.
	@# The last lines are what failed (hack/gotest -failures), as CI's page
	@# of a run shows only its end.
	@status=0; log="$$(mktemp)"; sampler="$$(mktemp -d)"; \
	export KAO_TEST_CPU_RECORDS="$$sampler/hosts" KAO_TEST_FAILURES="$$sampler/failures"; \
	cpu=; if go build -o "$$sampler/cpusample" ./hack/cpusample; then "$$sampler/cpusample" -hosts "$$sampler/hosts" & cpu=$$!; fi; \
	nice -n 10 $(MAKE) --no-print-directory lint >"$$log" 2>&1 & lint=$$!; \
	$(MAKE) --no-print-directory test-light || status=$$?; \
	if wait $$lint; then lintstatus=passed; else lintstatus=failed; status=1; fi; \
	echo "[check] lint $$lintstatus; the heavy tests follow"; \
	$(MAKE) --no-print-directory test-heavy || status=$$?; \
	cat "$$log"; rm -f "$$log"; echo "[check] lint $$lintstatus"; \
	if [ -n "$$cpu" ]; then kill -TERM $$cpu; wait $$cpu; fi; \
	if [ -s "$$sampler/failures" ]; then echo "[check] failed:"; cat "$$sampler/failures"; fi; \
	[ "$$lintstatus" = passed ] || echo "[check] lint failed: its output is above the CPU report"; \
	rm -rf "$$sampler"; exit $$status
