#!/usr/bin/env bash
# Builds the real control-plane binaries the tests use (envtest and the emulated world):
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from k8s.io/kubernetes,
# and etcd from go.etcd.io/etcd/server/v3, through the wrapper modules beside this script.
# Only the Go module proxy is used. Idempotent: when every binary exists and the stamp
# matches the wrapper modules, it builds nothing.
#
# With PREVIOUS_DIR it also links the previous Kubernetes minor for the upgrade tests (issue 22)
# into PREVIOUS_DIR, whose name is that version (e.g. …/assets/v1.36.3): kube-apiserver,
# kube-controller-manager and kube-scheduler from the SAME source as OUTPUT_DIR's, with that
# version stamped into the version ldflags. With a warm build cache it only links (a cold second
# Kubernetes build would cost 12–20 minutes of CI). What they report (/version, the
# --version output, the version-dependent defaults of the apiserver) is the previous minor;
# their API surface is the source's, v1.37's. Idempotent too: a binary that reports the
# stamped version is kept.
#
# Usage: build.sh [--previous-only] OUTPUT_DIR [PREVIOUS_DIR]
# (--previous-only runs only the previous minor's step, e.g. while another build fills OUTPUT_DIR)
set -euo pipefail

previous_only=false
if [[ ${1:-} == --previous-only ]]; then
  previous_only=true
  shift
fi
out=${1:?usage: build.sh [--previous-only] OUTPUT_DIR [PREVIOUS_DIR]}
prev_out=${2:-}
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

# stamped_ldflags VERSION: the version ldflags of a Kubernetes build that reports VERSION.
stamped_ldflags() {
  local v=$1 m=${1#v1.} pkg flags="-s -w"
  m=${m%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$m"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u -d @0 +%Y-%m-%dT%H:%M:%SZ)"
  done
  echo "$flags"
}

# build_previous: the previous minor's control plane, linked from the pinned source.
build_previous() {
  [[ -n $prev_out ]] || return 0
  local v b
  v=$(basename "$prev_out")
  [[ $v =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "build.sh: PREVIOUS_DIR must be named after its version (…/v1.36.3), not $v" >&2; exit 1; }
  mkdir -p "$prev_out"
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    if [[ -x $prev_out/$b ]] && "$prev_out/$b" --version 2>/dev/null | grep -qx "Kubernetes $v"; then
      echo "assets: $b $v (the $k8s_version source, $v stamped) already linked"
      continue
    fi
    echo "assets: linking $b $v from the $k8s_version source (only a link when the build cache is warm)"
    (cd "$here/kubernetes" && GOWORK=off GOFLAGS=-mod=mod go build -ldflags "$(stamped_ldflags "$v")" -o "$prev_out/$b.tmp" "k8s.io/kubernetes/cmd/$b")
    mv "$prev_out/$b.tmp" "$prev_out/$b"
  done
  echo "assets: kubernetes $v (API surface of $k8s_version) in $prev_out"
}

if $previous_only; then
  [[ -n $prev_out ]] || { echo "build.sh: --previous-only needs PREVIOUS_DIR" >&2; exit 1; }
  build_previous
  exit 0
fi

if up_to_date; then
  echo "assets: up to date in $out (kubernetes $k8s_version, etcd $etcd_version)"
  build_previous
  exit 0
fi

mkdir -p "$out"
rm -f "$out/.stamp"
export GOWORK=off GOFLAGS=-mod=mod

ldflags=$(stamped_ldflags "$k8s_version")

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
build_previous
