#!/usr/bin/env bash
# artifacts.sh assembles kao's offline bundle from the pinned tools cache
# (hack/tools.sh) into ${KAO_ARTIFACTS_DIR:-_out/artifacts}:
#
#   manifest.json                      {"karmada":"vX","kubernetes":"vY","etcd":"vZ"}
#   SHA256SUMS                         sha256sum lines for every file below
#   kubernetes/<version>/bin/{kube-apiserver,kube-controller-manager,kubectl}
#   etcd/<version>/bin/{etcd,etcdctl,etcdutl}
#   karmada/<version>/bin/{karmada-aggregated-apiserver,...,karmadactl}
#   karmada/<version>/bin/{karmada-search,karmada-descheduler,karmada-metrics-adapter,karmada-scheduler-estimator}
#                                      the addons, from the karmada-addons tool set
#   karmada/<version>/crds.tar.gz      charts/karmada/_crds of the Karmada module, as crds/...
#   karmada/<previous>/bin/{karmada-aggregated-apiserver,-controller-manager,-scheduler,-webhook}
#   karmada/<previous>/crds.tar.gz     the same for the Karmada version upgrades are tested from
#
# Versions are the ones pinned in hack/tools.sh; manifest.json names the
# current ones, the defaults of a deployment that names none. The bundle is built in a
# temporary directory next to the destination and renamed into place, so a
# reader never sees half a bundle. A bundle whose manifest and files already
# match the tools cache (same layout, sizes and modification times) is left
# alone.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/hack/tools.sh"
OUT="${KAO_ARTIFACTS_DIR:-$ROOT/_out/artifacts}"

log() { printf '[artifacts] %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# pinned prints the version tools.sh pins in the variable $1. tools.sh is a
# command, not a library, so its assignments are read rather than sourced.
pinned() {
	local v
	v="$(sed -n "s/^$1=\"\(v[0-9][0-9.]*\)\"\$/\1/p" "$TOOLS")"
	[[ -n "$v" ]] || die "cannot read $1 from $TOOLS"
	echo "$v"
}

KUBERNETES_VERSION="$(pinned KUBERNETES_VERSION)"
ETCD_VERSION="$(pinned ETCD_VERSION)"
KARMADA_VERSION="$(pinned KARMADA_VERSION)"
KARMADA_PREVIOUS_VERSION="$(pinned KARMADA_PREVIOUS_VERSION)"

KUBERNETES_BINS=(kube-apiserver kube-controller-manager kubectl)
ETCD_BINS=(etcd etcdctl etcdutl)
KARMADA_BINS=(karmada-aggregated-apiserver karmada-controller-manager karmada-scheduler karmada-webhook karmada-agent karmadactl)
# The addons are built by a tool set of their own (karmada-addons, same
# version) but live in the same karmada/<version>/bin/ of the bundle.
ADDON_BINS=(karmada-search karmada-descheduler karmada-metrics-adapter karmada-scheduler-estimator)
KARMADA_PREVIOUS_BINS=(karmada-aggregated-apiserver karmada-controller-manager karmada-scheduler karmada-webhook)

MANIFEST="$(printf '{"karmada":"%s","kubernetes":"%s","etcd":"%s"}' "$KARMADA_VERSION" "$KUBERNETES_VERSION" "$ETCD_VERSION")"
CRDS=("karmada/$KARMADA_VERSION/crds.tar.gz" "karmada/$KARMADA_PREVIOUS_VERSION/crds.tar.gz")

# The binaries come from the tools cache; building a set that is cached is a
# no-op, so this only costs time on a machine without `make tools`.
"$TOOLS" build kubernetes etcd karmada karmada-addons "karmada-$KARMADA_PREVIOUS_VERSION"
KUBE_DIR="$("$TOOLS" dir kubernetes)"
ETCD_DIR="$("$TOOLS" dir etcd)"
KARMADA_DIR="$("$TOOLS" dir karmada)"
ADDONS_DIR="$("$TOOLS" dir karmada-addons)"
KARMADA_PREVIOUS_DIR="$("$TOOLS" dir "karmada-$KARMADA_PREVIOUS_VERSION")"

# binaries prints "<source> <bundle path>" for every binary of the bundle.
binaries() {
	local b
	for b in "${KUBERNETES_BINS[@]}"; do echo "$KUBE_DIR/$b kubernetes/$KUBERNETES_VERSION/bin/$b"; done
	for b in "${ETCD_BINS[@]}"; do echo "$ETCD_DIR/$b etcd/$ETCD_VERSION/bin/$b"; done
	for b in "${KARMADA_BINS[@]}"; do echo "$KARMADA_DIR/$b karmada/$KARMADA_VERSION/bin/$b"; done
	for b in "${ADDON_BINS[@]}"; do echo "$ADDONS_DIR/$b karmada/$KARMADA_VERSION/bin/$b"; done
	for b in "${KARMADA_PREVIOUS_BINS[@]}"; do echo "$KARMADA_PREVIOUS_DIR/$b karmada/$KARMADA_PREVIOUS_VERSION/bin/$b"; done
}

# up_to_date succeeds when $OUT holds exactly this bundle: the same manifest,
# the same file list in SHA256SUMS, and every binary with the size and
# modification time of its source (copies keep the source's time).
up_to_date() {
	local src rel want
	[[ -f "$OUT/manifest.json" && -f "$OUT/SHA256SUMS" ]] || return 1
	for c in "${CRDS[@]}"; do [[ -f "$OUT/$c" ]] || return 1; done
	[[ "$(cat "$OUT/manifest.json")" == "$MANIFEST" ]] || return 1
	want="$({
		binaries | cut -d' ' -f2
		printf '%s\n' "${CRDS[@]}"
	} | sort)"
	[[ "$(sed 's/^[0-9a-f]\{64\}  //' "$OUT/SHA256SUMS" | sort)" == "$want" ]] || return 1
	while read -r src rel; do
		[[ -f "$OUT/$rel" ]] || return 1
		[[ "$(stat -c '%s %Y' "$src")" == "$(stat -c '%s %Y' "$OUT/$rel")" ]] || return 1
	done < <(binaries)
}

if up_to_date; then
	log "bundle is up to date: $OUT"
	log "  karmada $KARMADA_VERSION (and $KARMADA_PREVIOUS_VERSION), kubernetes $KUBERNETES_VERSION, etcd $ETCD_VERSION"
	exit 0
fi

start=$(date +%s)
mkdir -p "$(dirname "$OUT")"
TMP="$(mktemp -d "$(dirname "$OUT")/.$(basename "$OUT").tmp.XXXXXX")"
OLD=""
GOTMP=""
cleanup() {
	rm -rf "$TMP"
	[[ -z "$OLD" ]] || rm -rf "$OLD"
	[[ -z "$GOTMP" ]] || rm -rf "$GOTMP"
}
trap cleanup EXIT

log "assembling the bundle in $TMP"
while read -r src rel; do
	[[ -x "$src" ]] || die "$src is missing: run \`make tools\`"
	log "  $rel"
	mkdir -p "$TMP/$(dirname "$rel")"
	cp -p "$src" "$TMP/$rel"
	chmod 0755 "$TMP/$rel"
done < <(binaries)

# Karmada's CRDs, packed like the crds.tar.gz of a Karmada release: the
# chart's _crds directory (bases/, patches/, kustomization.yaml) as crds/.
# Go commands run outside any module so that kao's go.mod and go.sum stay
# untouched.
GOTMP="$(mktemp -d)"
pack_crds() {
	local version="$1" dest="karmada/$1/crds.tar.gz" modjson moddir modtime
	log "  $dest (charts/karmada/_crds of github.com/karmada-io/karmada@$version)"
	modjson="$(cd "$GOTMP" && GOWORK=off GOFLAGS= go mod download -json "github.com/karmada-io/karmada@$version")" ||
		die "go mod download github.com/karmada-io/karmada@$version failed: $modjson"
	field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"$modjson" | head -n1; }
	moddir="$(field Dir)"
	[[ -d "$moddir/charts/karmada/_crds/bases" ]] || die "no charts/karmada/_crds/bases in the Karmada module at ${moddir:-?}"
	# The release time of the module makes the archive reproducible.
	modtime="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(field Info)")"
	rm -rf "$TMP/.crds"
	mkdir -p "$TMP/.crds" "$TMP/karmada/$version"
	cp -r "$moddir/charts/karmada/_crds" "$TMP/.crds/crds"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mode='u+w,a+rX' --mtime="${modtime:-1970-01-01T00:00:00Z}" \
		-C "$TMP/.crds" -cf - crds | gzip -9n >"$TMP/$dest"
	chmod -R u+w "$TMP/.crds"
	rm -rf "$TMP/.crds"
	chmod 0644 "$TMP/$dest"
}
pack_crds "$KARMADA_VERSION"
pack_crds "$KARMADA_PREVIOUS_VERSION"

log "  SHA256SUMS, manifest.json"
(
	cd "$TMP"
	{
		binaries | cut -d' ' -f2
		printf '%s\n' "${CRDS[@]}"
	} | sort | xargs sha256sum >SHA256SUMS
)
echo "$MANIFEST" >"$TMP/manifest.json"
chmod 0644 "$TMP/SHA256SUMS" "$TMP/manifest.json"
chmod 0755 "$TMP"

# Swap the new bundle in: two renames, the old bundle is removed afterwards.
if [[ -e "$OUT" ]]; then
	OLD="$(dirname "$OUT")/.$(basename "$OUT").old.$$"
	mv "$OUT" "$OLD"
fi
mv "$TMP" "$OUT"
log "bundle ready in $(($(date +%s) - start))s: $OUT ($(du -sh "$OUT" | cut -f1))"
log "  karmada $KARMADA_VERSION (and $KARMADA_PREVIOUS_VERSION), kubernetes $KUBERNETES_VERSION, etcd $ETCD_VERSION"
