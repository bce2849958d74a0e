# kao: every entry point a user or CI types. `make help` lists them.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

TOOLS := hack/tools.sh
CONTROLLER_GEN = $(shell $(TOOLS) dir controller-gen)/controller-gen
GOLANGCI_LINT = $(shell $(TOOLS) dir golangci-lint)/golangci-lint
KUBE_BIN = $(shell $(TOOLS) dir kubernetes)
ETCD_BIN = $(shell $(TOOLS) dir etcd)
KARMADA_BIN = $(shell $(TOOLS) dir karmada)

# envtest finds kube-apiserver, etcd and kubectl in one directory.
KUBEBUILDER_ASSETS ?= $(shell $(TOOLS) assets)
export KUBEBUILDER_ASSETS

# Go test flags: override with `make test GOTESTFLAGS=...`.
GOTESTFLAGS ?= -count=1 -timeout=45m

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-14s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: tools
tools: ## Build the pinned tools (kube-apiserver, etcd, Karmada, controller-gen, golangci-lint) into the cache.
	$(TOOLS) build

.PHONY: artifacts
artifacts: ## Assemble the offline bundle (binaries, Karmada CRDs, SHA256SUMS) into KAO_ARTIFACTS_DIR (default _out/artifacts).
	hack/artifacts.sh

.PHONY: manifests
manifests: ## Generate CRDs and RBAC into config/.
	$(CONTROLLER_GEN) rbac:roleName=kao-manager crd paths="./api/...;./controllers/...;./cmd/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: ## Generate deepcopy code for the API types.
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
	@if [ -n "$$(git status --porcelain -- api config go.mod go.sum)" ]; then \
		echo "Generated files are stale; run 'make manifests generate' and 'go mod tidy' and commit:"; \
		git status --porcelain -- api config go.mod go.sum; git --no-pager diff --stat -- api config go.mod go.sum; exit 1; fi
	@test -z "$$(gofmt -s -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -s -l $$(git ls-files '*.go'); exit 1; }

.PHONY: lint
lint: ## Run golangci-lint, yamllint and ansible-lint.
	$(GOLANGCI_LINT) run ./...
	yamllint -s .
	@if [ -n "$$(ls roles playbooks 2>/dev/null | grep -v README)" ]; then ansible-lint --offline playbooks roles; else echo "ansible-lint: no playbooks or roles yet"; fi

##@ Demo

.PHONY: demo
demo: ## Install kao's control plane on three local test hosts and show it live (root).
	go run ./hack/demo

##@ Test

.PHONY: test
test: ## Run every test against the real tools (needs `make tools`; root for test hosts).
	go test $(GOTESTFLAGS) ./...

.PHONY: test-short
test-short: ## Run the tests that need neither an API server nor test hosts.
	go test -short $(GOTESTFLAGS) ./...

.PHONY: check
check: verify lint test ## What CI runs after installing the tools: verify, lint and test.
