#!/usr/bin/env bash
# deps.sh installs the Debian packages kao's demo and tests need (`make deps`;
# `make demo` and `make check` run it first). On Debian or Ubuntu:
#   - every package installed already: nothing is done (no apt-get update), so
#     a warm run costs one dpkg-query;
#   - some missing, as root: apt-get update, then apt-get install of those;
#   - some missing, not root: one line naming them, and exit 1.
# Elsewhere (no dpkg-query) it prints what to install and carries on: the
# steps after it say what they cannot find.
#
# Go is not installed from here: Debian bookworm's golang is older than the
# go line of go.mod. Install Go from https://go.dev/dl/.
set -euo pipefail

# What each package is for:
#   ansible, python3-kubernetes  the runs (ansible-core with kubernetes.core,
#                                community.crypto, ansible.posix)
#   ansible-lint, yamllint       make lint
#   openssh-client, openssh-server, systemd-container, debootstrap, iproute2
#                                the test hosts (test/hosts, hack/testhosts)
#   openssl                      certificate checks in the tests
#   procps                       pgrep and pkill in the fault tests
#   git, make, ca-certificates   make verify, the Makefile, the Go module proxy
#   mmdebstrap, skopeo           make image: the operator image's Debian root,
#                                built reproducibly; skopeo reads and pushes
#                                the OCI archive
#   containerd, runc, containernetworking-plugins, iptables, conntrack
#                                the real Kubernetes node of the tests (test/node)
PACKAGES=(
	ansible ansible-lint yamllint python3-kubernetes
	openssh-client openssh-server
	systemd-container debootstrap iproute2
	openssl procps git make ca-certificates
	mmdebstrap skopeo
	containerd runc containernetworking-plugins iptables conntrack
)

log() { printf '[deps] %s\n' "$*" >&2; }

if ! command -v go >/dev/null; then
	log "Go not found in PATH: install Go (the version of go.mod's go line or newer) from https://go.dev/dl/"
	exit 1
fi

if ! command -v dpkg-query >/dev/null; then
	log "not a Debian system: install the equivalents of: ${PACKAGES[*]}"
	exit 0
fi

# Each test host's systemd, and each node's kubelet and containerd, take
# inotify instances, all counted against root; the kernel's default of 128
# ran out with the test suite's hosts and nodes up at once (a host's systemd
# then fails to start units). Raise the limits for this boot when they are
# lower; a machine that is not ours to change is told what to set.
raise_sysctl() {
	local key=$1 want=$2 have file
	file="/proc/sys/${key//.//}"
	have="$(cat "$file" 2>/dev/null || echo 0)"
	((have >= want)) && return 0
	if [[ $(id -u) -eq 0 ]] && echo "$want" 2>/dev/null >"$file"; then
		log "raised $key from $have to $want"
	else
		log "$key is $have: the tests need $want (as root: sysctl -w $key=$want)"
	fi
}
raise_sysctl fs.inotify.max_user_instances 8192
raise_sysctl fs.inotify.max_user_watches 1048576

missing=()
for p in "${PACKAGES[@]}"; do
	status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)"
	[[ "$status" == "ii "* ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	log "Debian packages installed: ${#PACKAGES[@]} of ${#PACKAGES[@]}"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	log "missing Debian packages: ${missing[*]}; install them as root: sudo make deps"
	exit 1
fi

start=$(date +%s)
log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed in $(($(date +%s) - start))s"
