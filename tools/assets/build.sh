#!/usr/bin/env bash
# Builds the real control-plane binaries the tests use (envtest and the emulated world):
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from k8s.io/kubernetes,
# and etcd from go.etcd.io/etcd/server/v3, through the wrapper modules beside this script.
# Only the Go module proxy is used. Idempotent: when every binary exists and the stamp
# matches the wrapper modules, it builds nothing.
#
# Usage: build.sh OUTPUT_DIR
set -euo pipefail

out=${1:?usage: build.sh OUTPUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
# The version a wrapper module requires, whether go.mod lists it in a block or on one line.
required() { awk -v m="$2" '$1==m && $2 ~ /^v/ {print $2} $1=="require" && $2==m {print $3}' "$1"; }
k8s_version=$(required "$here/kubernetes/go.mod" k8s.io/kubernetes)
etcd_version=$(required "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)
[[ -n $k8s_version && -n $etcd_version ]] || { echo "build.sh: cannot read pinned versions from $here/*/go.mod" >&2; exit 1; }

# The stamp names exactly what was built, so a changed pin rebuilds.
stamp=$(cat "$here/kubernetes/go.mod" "$here/kubernetes/go.sum" "$here/etcd/go.mod" "$here/etcd/go.sum" | sha256sum | cut -d' ' -f1)
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd)

up_to_date() {
  [[ -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]] || return 1
  local b
  for b in "${bins[@]}"; do [[ -x $out/$b ]] || return 1; done
}

if up_to_date; then
  echo "assets: up to date in $out (kubernetes $k8s_version, etcd $etcd_version)"
  exit 0
fi

mkdir -p "$out"
rm -f "$out/.stamp"
export GOWORK=off GOFLAGS=-mod=mod

minor=${k8s_version#v1.}; minor=${minor%%.*}
build_date=$(date -u -d @0 +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  if [[ -x $out/$b ]] && "$out/$b" --version 2>/dev/null | grep -q "$k8s_version"; then
    echo "assets: $b $k8s_version already built"
    continue
  fi
  echo "assets: building $b $k8s_version (a cold build takes minutes)"
  (cd "$here/kubernetes" && go build -ldflags "$ldflags" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b")
  mv "$out/$b.tmp" "$out/$b"
done

if [[ -x $out/etcd ]] && "$out/etcd" --version 2>/dev/null | grep -q "etcd Version: ${etcd_version#v}"; then
  echo "assets: etcd $etcd_version already built"
else
  echo "assets: building etcd $etcd_version"
  (cd "$here/etcd" && go build -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "$out/etcd.tmp" "$out/etcd"
fi

echo "$stamp" > "$out/.stamp"
echo "assets: kubernetes $k8s_version and etcd $etcd_version in $out"
