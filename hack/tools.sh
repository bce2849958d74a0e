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
# hack/tools/<set>/ pin every dependency (go.sum is committed).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${KAO_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kao/tools}"

KUBERNETES_VERSION="v1.35.4"
ETCD_VERSION="v3.6.6"
KARMADA_VERSION="v1.18.1"
CONTROLLER_GEN_VERSION="v0.20.0"
GOLANGCI_LINT_VERSION="v2.6.2"
KWOK_VERSION="v0.7.0"

ALL_SETS=(kubernetes etcd karmada controller-gen golangci-lint kwok)

log() { printf '[tools] %s\n' "$*" >&2; }

# set_version prints the pinned version of a tool set.
set_version() {
	case "$1" in
	kubernetes) echo "$KUBERNETES_VERSION" ;;
	etcd) echo "$ETCD_VERSION" ;;
	karmada) echo "$KARMADA_VERSION" ;;
	controller-gen) echo "$CONTROLLER_GEN_VERSION" ;;
	golangci-lint) echo "$GOLANGCI_LINT_VERSION" ;;
	kwok) echo "$KWOK_VERSION" ;;
	*)
		log "unknown tool set: $1 (known: ${ALL_SETS[*]})"
		return 1
		;;
	esac
}

# set_key prints the cache key of a set: name, version and, for sets built
# from a committed module, a digest of its go.sum so a dependency change
# rebuilds.
set_key() {
	local set="$1" version digest=""
	version="$(set_version "$set")"
	if [[ -f "$ROOT/hack/tools/$set/go.sum" ]]; then
		digest="-$(cat "$ROOT/hack/tools/$set/go.mod" "$ROOT/hack/tools/$set/go.sum" | sha256sum | cut -c1-12)"
	fi
	echo "${set}-${version}${digest}-$(go env GOOS)-$(go env GOARCH)"
}

set_dir() { echo "$CACHE/$(set_key "$1")/bin"; }

# build_module_tools builds every tool named in a committed tools module.
#   $1 set  $2 out dir  $3 ldflags  $4... "package=binary" pairs
build_module_tools() {
	local set="$1" out="$2" ldflags="$3"
	shift 3
	local pair pkg bin
	for pair in "$@"; do
		pkg="${pair%%=*}"
		bin="${pair##*=}"
		log "  building $bin ($pkg)"
		(cd "$ROOT/hack/tools/$set" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$out/$bin" "$pkg")
	done
}

build_set() {
	local set="$1" dir tmp start
	dir="$(set_dir "$set")"
	if [[ -f "$dir/../.complete" ]]; then
		log "$set $(set_version "$set"): cached in $dir"
		return 0
	fi
	start=$(date +%s)
	log "$set $(set_version "$set"): building into $dir"
	tmp="$(dirname "$dir").partial"
	rm -rf "$tmp"
	mkdir -p "$tmp/bin"
	case "$set" in
	kubernetes)
		local v="${KUBERNETES_VERSION#v}" ld
		ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
		ld+=" -X k8s.io/component-base/version.gitMajor=${v%%.*}"
		ld+=" -X k8s.io/component-base/version.gitMinor=$(echo "$v" | cut -d. -f2)"
		ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
		ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
		build_module_tools kubernetes "$tmp/bin" "$ld" \
			k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver \
			k8s.io/kubernetes/cmd/kube-controller-manager=kube-controller-manager \
			k8s.io/kubernetes/cmd/kubectl=kubectl
		;;
	etcd)
		build_module_tools etcd "$tmp/bin" "-s -w" \
			go.etcd.io/etcd/server/v3=etcd \
			go.etcd.io/etcd/etcdctl/v3=etcdctl \
			go.etcd.io/etcd/etcdutl/v3=etcdutl
		;;
	karmada)
		local K=github.com/karmada-io/karmada/cmd ld
		ld="-s -w -X github.com/karmada-io/karmada/pkg/version.gitVersion=$KARMADA_VERSION"
		ld+=" -X github.com/karmada-io/karmada/pkg/version.gitTreeState=clean"
		build_module_tools karmada "$tmp/bin" "$ld" \
			"$K/aggregated-apiserver=karmada-aggregated-apiserver" \
			"$K/controller-manager=karmada-controller-manager" \
			"$K/scheduler=karmada-scheduler" \
			"$K/webhook=karmada-webhook" \
			"$K/agent=karmada-agent" \
			"$K/karmadactl=karmadactl"
		;;
	controller-gen)
		log "  building controller-gen"
		GOBIN="$tmp/bin" go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION"
		;;
	golangci-lint)
		log "  building golangci-lint"
		GOBIN="$tmp/bin" go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
		;;
	kwok)
		# The Containerized end-to-end test's simulated nodes and pods.
		build_module_tools kwok "$tmp/bin" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
			sigs.k8s.io/kwok/cmd/kwok=kwok
		;;
	esac
	date -u +%Y-%m-%dT%H:%M:%SZ >"$tmp/.complete"
	rm -rf "$(dirname "$dir")"
	mv "$tmp" "$(dirname "$dir")"
	log "$set $(set_version "$set"): built in $(($(date +%s) - start))s"
}

cmd="${1:-build}"
shift || true
case "$cmd" in
build)
	sets=("$@")
	[[ ${#sets[@]} -gt 0 ]] || sets=("${ALL_SETS[@]}")
	total=$(date +%s)
	for s in "${sets[@]}"; do
		set_version "$s" >/dev/null
		build_set "$s"
	done
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
		var="KAO_$(echo "$s" | tr 'a-z-' 'A-Z_')_BIN"
		echo "export $var=$(set_dir "$s")"
	done
	;;
*)
	echo "usage: $0 build [SET...] | dir SET | env" >&2
	exit 2
	;;
esac
