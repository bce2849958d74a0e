#!/usr/bin/env bash
# tools.sh builds kao's pinned tool binaries from the Go module proxy into a
# cache outside the repository, keyed by tool set and version, so that later
# runs (and later sessions on the same machine) reuse them.
#
#   hack/tools.sh build [SET...]   build the named sets (default: all)
#   hack/tools.sh dir SET          print the bin directory of a set
#   hack/tools.sh env              print shell exports for the built tools
#   hack/tools.sh assets           print (and populate) the envtest assets directory:
#                                  kube-apiserver, kube-controller-manager, kubectl, etcd
#
# Sets and their versions are pinned below; the Go modules under
# hack/tools/<module>/ pin every dependency (go.sum is committed), exactly as
# the upstream release's own go.mod does, so each binary is built from the
# same sources, at the same dependency versions, as the upstream release.
#
# How a set is built (cold, this is what costs: see README, "make tools"):
#   - all binaries of a set come from ONE `go build -o DIR/ pkg...` (or one
#     `go install pkg@version ...`): the shared packages are loaded and
#     checked once and the links run in parallel;
#   - -trimpath (reproducible), CGO_ENABLED=0, -ldflags "-s -w ..." (no
#     symbol table, no DWARF) and -gcflags=all=-dwarf=false: the compiler does
#     not generate the DWARF the linker would throw away anyway. The machine
#     code is the same as without it; only the CPU time differs;
#   - GOGC=400 for the compiler and linker (both Go programs): they collect
#     garbage a quarter as often, at the price of more memory (GOMEMLIMIT=3GiB
#     per process bounds it). Same output, byte for byte; either variable set
#     in the environment wins;
#   - up to KAO_TOOLS_JOBS sets (default 2) build at the same time: one set
#     alone leaves a core idle whenever its build waits on one big package
#     or link, and another set's compiles fill it.
#
# Adding a set (for example kwok, or a second Karmada version for upgrade tests):
#   1. pin its version in a *_VERSION variable below and add the set to ALL_SETS;
#   2. either give it a tools module, hack/tools/<module>/go.mod with a
#      `tool` block naming its main packages (copy hack/tools/karmada, then
#      `go get PKG@VERSION && go mod tidy` in it) or a main package of its
#      own beside go.mod (hack/tools/coredns), or build it with
#      `go install pkg@version` (no module: the upstream go.mod pins the
#      dependencies);
#   3. add a case to set_spec: version, module (or none), ldflags, and the
#      "package=binary" pairs. Two versions of one project are two sets with
#      two modules (e.g. set karmada-v1.17, module hack/tools/karmada-v1.17),
#      so `hack/tools.sh dir karmada-v1.17` finds it.
# The cache key (set_key) is the set name, version and, for a module set, a
# digest of its go.mod and go.sum; a new set needs nothing else.
set -euo pipefail
# Under sudo, PATH is sudo's secure_path, without Go's usual directory. The
# Makefile adds it for its recipes, but make (4.3) runs $(shell ...), where
# it asks this script for the tools' directories, with its own environment.
command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${KAO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kao/tools}"
JOBS="${KAO_TOOLS_JOBS:-2}"

KUBERNETES_VERSION="v1.35.4"
ETCD_VERSION="v3.6.6"
KARMADA_VERSION="v1.18.1"
# KARMADA_PREVIOUS_VERSION is the Karmada version upgrades are tested from: its
# set (karmada-<version>, module hack/tools/karmada-<version>) builds only the
# components kao installs on hosts, against the dependencies of the current
# set's module, so most of its build comes from the Go build cache.
KARMADA_PREVIOUS_VERSION="v1.17.1"
CONTROLLER_GEN_VERSION="v0.20.0"
GOLANGCI_LINT_VERSION="v2.6.2"
KWOK_VERSION="v0.7.0"
HELM_VERSION="v3.22.0"
# Prometheus tags its Go module v0.3MM.P for its release 3.MM.P: v0.316.0 is
# Prometheus 3.16.0, the version promtool reports.
PROMTOOL_VERSION="v0.316.0"
COREDNS_VERSION="v1.14.7"

# ALL_SETS is also the build order: the longest first, so that with
# KAO_TOOLS_JOBS=2 the short ones fill in beside it. kubernetes-node comes
# after kubernetes and karmada, so it starts once the kubernetes set has put
# the packages the two share into Go's build cache.
ALL_SETS=(kubernetes karmada karmada-addons kubernetes-node golangci-lint promtool "karmada-$KARMADA_PREVIOUS_VERSION" etcd kwok helm coredns controller-gen)

log() { printf '[tools] %s\n' "$*" >&2; }

# set_spec fills, for one set:
#   S_VERSION  the pinned version
#   S_MODULE   the tools module directory under hack/tools/, or "" when the
#              set is built with `go install pkg@S_VERSION`
#   S_LDFLAGS  extra -ldflags (version stamping), after "-s -w"
#   S_TAGS     build tags, comma-separated, or ""
#   S_BINS     "package=binary" pairs; the binaries land in the set's bin/
set_spec() {
	S_VERSION="" S_MODULE="" S_LDFLAGS="" S_TAGS="" S_BINS=()
	case "$1" in
	kubernetes)
		local v="${KUBERNETES_VERSION#v}"
		S_VERSION="$KUBERNETES_VERSION" S_MODULE=kubernetes
		S_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
		S_LDFLAGS+=" -X k8s.io/component-base/version.gitMajor=${v%%.*}"
		S_LDFLAGS+=" -X k8s.io/component-base/version.gitMinor=$(echo "$v" | cut -d. -f2)"
		S_LDFLAGS+=" -X k8s.io/component-base/version.gitTreeState=clean"
		S_LDFLAGS+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
		S_BINS=(
			k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver
			k8s.io/kubernetes/cmd/kube-controller-manager=kube-controller-manager
			k8s.io/kubernetes/cmd/kubectl=kubectl
		)
		;;
	kubernetes-node)
		# The node components of the real test node (test/node): a set and a
		# module of their own, with the kubernetes set's version, ldflags and
		# dependency pins, so that adding them left that set's cache key (and
		# its 9-minute kube-apiserver build) untouched. The shared pins let
		# the Go build cache serve most of this build.
		set_spec kubernetes
		S_MODULE=kubernetes-node
		S_BINS=(
			k8s.io/kubernetes/cmd/kubelet=kubelet
			k8s.io/kubernetes/cmd/kube-scheduler=kube-scheduler
			k8s.io/kubernetes/cmd/kube-proxy=kube-proxy
		)
		;;
	etcd)
		S_VERSION="$ETCD_VERSION" S_MODULE=etcd
		S_BINS=(
			go.etcd.io/etcd/server/v3=etcd
			go.etcd.io/etcd/etcdctl/v3=etcdctl
			go.etcd.io/etcd/etcdutl/v3=etcdutl
		)
		;;
	karmada)
		local K=github.com/karmada-io/karmada/cmd
		S_VERSION="$KARMADA_VERSION" S_MODULE=karmada
		S_LDFLAGS="-X github.com/karmada-io/karmada/pkg/version.gitVersion=$KARMADA_VERSION"
		S_LDFLAGS+=" -X github.com/karmada-io/karmada/pkg/version.gitTreeState=clean"
		S_BINS=(
			"$K/aggregated-apiserver=karmada-aggregated-apiserver"
			"$K/controller-manager=karmada-controller-manager"
			"$K/scheduler=karmada-scheduler"
			"$K/webhook=karmada-webhook"
			"$K/agent=karmada-agent"
			"$K/karmadactl=karmadactl"
		)
		;;
	karmada-addons)
		# The addons: a set (and a tools module) of their own, so that adding
		# them did not change the key of the karmada set above; same version
		# and version stamping as that set.
		local K=github.com/karmada-io/karmada/cmd
		S_VERSION="$KARMADA_VERSION" S_MODULE=karmada-addons
		S_LDFLAGS="-X github.com/karmada-io/karmada/pkg/version.gitVersion=$KARMADA_VERSION"
		S_LDFLAGS+=" -X github.com/karmada-io/karmada/pkg/version.gitTreeState=clean"
		S_BINS=(
			"$K/karmada-search=karmada-search"
			"$K/descheduler=karmada-descheduler"
			"$K/metrics-adapter=karmada-metrics-adapter"
			"$K/scheduler-estimator=karmada-scheduler-estimator"
		)
		;;
	"karmada-$KARMADA_PREVIOUS_VERSION")
		# The control plane of the previous version, for upgrade tests: the
		# agent and karmadactl come only with the current version.
		local K=github.com/karmada-io/karmada/cmd
		S_VERSION="$KARMADA_PREVIOUS_VERSION" S_MODULE="karmada-$KARMADA_PREVIOUS_VERSION"
		S_LDFLAGS="-X github.com/karmada-io/karmada/pkg/version.gitVersion=$KARMADA_PREVIOUS_VERSION"
		S_LDFLAGS+=" -X github.com/karmada-io/karmada/pkg/version.gitTreeState=clean"
		S_BINS=(
			"$K/aggregated-apiserver=karmada-aggregated-apiserver"
			"$K/controller-manager=karmada-controller-manager"
			"$K/scheduler=karmada-scheduler"
			"$K/webhook=karmada-webhook"
		)
		;;
	controller-gen)
		S_VERSION="$CONTROLLER_GEN_VERSION"
		S_BINS=(sigs.k8s.io/controller-tools/cmd/controller-gen=controller-gen)
		;;
	golangci-lint)
		S_VERSION="$GOLANGCI_LINT_VERSION"
		S_BINS=(github.com/golangci/golangci-lint/v2/cmd/golangci-lint=golangci-lint)
		;;
	helm)
		# helm lint and helm template of charts/kao, and the chart's install
		# in the tests. Helm's go.mod has no replace directives: built with
		# go install, at the dependency versions of its release.
		S_VERSION="$HELM_VERSION"
		S_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
		S_BINS=(helm.sh/helm/v3/cmd/helm=helm)
		;;
	promtool)
		# `promtool check rules` and `promtool test rules` of the alerting
		# rules in config/prometheus (test/observability). Built with go
		# install: Prometheus's go.mod pins the dependencies of its release.
		# The version it prints is the release's (3.16.0), not the module's.
		# remove_all_sd leaves out Prometheus's service discoveries (the
		# clouds' SDKs), which rule checks and rule tests never use: most
		# of the build.
		local v="${PROMTOOL_VERSION#v0.}"
		S_VERSION="$PROMTOOL_VERSION" S_TAGS=remove_all_sd
		S_LDFLAGS="-X github.com/prometheus/common/version.Version=$((10#${v%%.*} / 100)).$((10#${v%%.*} % 100)).${v#*.}"
		S_BINS=(github.com/prometheus/prometheus/cmd/promtool=promtool)
		;;
	kwok)
		# The Containerized end-to-end test's simulated nodes and pods.
		S_VERSION="$KWOK_VERSION" S_MODULE=kwok
		S_LDFLAGS="-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
		S_BINS=(sigs.k8s.io/kwok/cmd/kwok=kwok)
		;;
	coredns)
		# The cluster DNS of the test node (test/node), run there as a pod.
		# The module's own main package (hack/tools/coredns/main.go) is
		# CoreDNS's main with only the plugins that DNS uses: 53 s cold and
		# a 52 MB binary, where all of CoreDNS's plugins take 78 s and make
		# 77 MB (Go modules downloaded, empty build cache, idle 2-core
		# machine). COREDNS_VERSION is the module's require of
		# github.com/coredns/coredns: change both together.
		S_VERSION="$COREDNS_VERSION" S_MODULE=coredns
		S_BINS=(github.com/kao-io/kao/hack/tools/coredns=coredns)
		;;
	*)
		log "unknown tool set: $1 (known: ${ALL_SETS[*]})"
		return 1
		;;
	esac
}

# set_version prints the pinned version of a tool set.
set_version() {
	set_spec "$1"
	echo "$S_VERSION"
}

# set_key prints the cache key of a set: name, version and, for sets built
# from a committed module, a digest of its go.mod, go.sum and Go files (a
# main package of its own, as in hack/tools/coredns) so a dependency or
# source change rebuilds, and its build tags. A module without Go files
# digests its go.mod and go.sum alone, as before such modules existed. Other
# build flags are deliberately not part of the key: they change how much a
# build costs, not what the binaries do.
set_key() {
	local set="$1" digest="" mod f files
	set_spec "$set"
	mod="$ROOT/hack/tools/$S_MODULE"
	if [[ -n "$S_MODULE" && -f "$mod/go.sum" ]]; then
		files=("$mod/go.mod" "$mod/go.sum")
		for f in "$mod"/*.go; do
			if [[ -e "$f" ]]; then files+=("$f"); fi
		done
		digest="-$(cat "${files[@]}" | sha256sum | cut -c1-12)"
	fi
	# Build tags change what a binary holds: they are part of the key.
	[[ -z "$S_TAGS" ]] || digest+="-${S_TAGS//,/-}"
	# A set named for its version (karmada-v1.17.1) does not repeat it.
	local name="$set"
	[[ "$set" == *"-$S_VERSION" ]] || name="$set-$S_VERSION"
	echo "${name}${digest}-$(go env GOOS)-$(go env GOARCH)"
}

set_dir() { echo "$CACHE/$(set_key "$1")/bin"; }

# go_exe_name prints the file name `go build -o DIR/` gives a main package:
# its last path element, or the one before a major-version suffix (/v3).
go_exe_name() {
	local pkg="$1" base
	base="${pkg##*/}"
	if [[ "$base" =~ ^v[0-9]+$ ]]; then
		pkg="${pkg%/*}"
		base="${pkg##*/}"
	fi
	echo "$base"
}

# build_set_into builds every binary of the set described by set_spec into $1.
build_set_into() {
	local out="$1" pair pkgs=() renames=()
	for pair in "${S_BINS[@]}"; do
		pkgs+=("${pair%%=*}")
		renames+=("$(go_exe_name "${pair%%=*}")=${pair##*=}")
	done
	local flags=(-trimpath -gcflags=all=-dwarf=false -ldflags "-s -w $S_LDFLAGS")
	[[ -z "$S_TAGS" ]] || flags+=(-tags "$S_TAGS")
	export GOGC="${GOGC:-400}" GOMEMLIMIT="${GOMEMLIMIT:-3GiB}"
	if [[ -n "$S_MODULE" ]]; then
		(cd "$ROOT/hack/tools/$S_MODULE" && CGO_ENABLED=0 go build -mod=mod "${flags[@]}" -o "$out/" "${pkgs[@]}")
	else
		local at=()
		for pair in "${pkgs[@]}"; do at+=("$pair@$S_VERSION"); done
		CGO_ENABLED=0 GOBIN="$out" go install "${flags[@]}" "${at[@]}"
	fi
	for pair in "${renames[@]}"; do
		[[ "${pair%%=*}" == "${pair##*=}" ]] || mv "$out/${pair%%=*}" "$out/${pair##*=}"
	done
}

# build_set builds one set into the cache unless it is there already. The
# set is built in a .partial directory and renamed into place, so a reader
# never sees half a set.
build_set() {
	local set="$1" dir tmp start
	dir="$(set_dir "$set")"
	set_spec "$set"
	if [[ -f "$dir/../.complete" ]]; then
		log "$set $S_VERSION: cached in $dir"
		return 0
	fi
	start=$(date +%s)
	log "$set $S_VERSION: building ${S_BINS[*]##*=} into $dir"
	tmp="$(dirname "$dir").partial"
	rm -rf "$tmp"
	mkdir -p "$tmp/bin"
	build_set_into "$tmp/bin"
	date -u +%Y-%m-%dT%H:%M:%SZ >"$tmp/.complete"
	rm -rf "$(dirname "$dir")"
	mv "$tmp" "$(dirname "$dir")"
	log "$set $S_VERSION: built in $(($(date +%s) - start))s"
}

# build_sets builds the named sets, up to $JOBS at a time. Each set's output
# goes to the terminal as it comes; the go tool's lines are prefixed by the set.
build_sets() {
	local s failed=() pids=() names=() i
	for s in "$@"; do
		while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || true; done
		(build_set "$s" 2>&1 | sed -u "/^\[tools\] /!s/^/[tools:$s] /" >&2; exit "${PIPESTATUS[0]}") &
		pids+=($!) names+=("$s")
	done
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed+=("${names[$i]}")
	done
	if [[ ${#failed[@]} -gt 0 ]]; then
		log "failed to build: ${failed[*]}"
		return 1
	fi
}

cmd="${1:-build}"
shift || true
case "$cmd" in
build)
	sets=("$@")
	[[ ${#sets[@]} -gt 0 ]] || sets=("${ALL_SETS[@]}")
	for s in "${sets[@]}"; do set_spec "$s"; done
	[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || {
		log "KAO_TOOLS_JOBS must be a positive number, not '$JOBS'"
		exit 2
	}
	total=$(date +%s)
	build_sets "${sets[@]}"
	log "all requested tools ready in $(($(date +%s) - total))s (cache: $CACHE)"
	;;
dir)
	set_dir "${1:?usage: tools.sh dir SET}"
	;;
assets)
	assets="$CACHE/envtest-$(set_key kubernetes)-$(set_key etcd)"
	kdir="$(set_dir kubernetes)"
	edir="$(set_dir etcd)"
	if [[ -f "$kdir/../.complete" && -f "$edir/../.complete" && ! -e "$assets/etcd" ]]; then
		mkdir -p "$assets"
		for b in kube-apiserver kube-controller-manager kubectl; do ln -sfn "$kdir/$b" "$assets/$b"; done
		for b in etcd etcdctl etcdutl; do ln -sfn "$edir/$b" "$assets/$b"; done
	fi
	echo "$assets"
	;;
env)
	for s in "${ALL_SETS[@]}"; do
		var="KAO_$(echo "$s" | tr 'a-z.-' 'A-Z__')_BIN"
		echo "export $var=$(set_dir "$s")"
	done
	;;
*)
	echo "usage: $0 build [SET...] | dir SET | env | assets" >&2
	exit 2
	;;
esac
