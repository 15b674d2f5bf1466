#!/usr/bin/env bash
# Builds the real talosctl (github.com/siderolabs/talos/cmd/talosctl, the version the wrapper
# module beside this script requires) that TestTalosctlConformance runs against the emulator.
# Only the Go module proxy is used. Idempotent: when the binary exists and the stamp matches
# the wrapper module, it builds nothing. A cold build takes minutes.
#
# Usage: build.sh OUTPUT_FILE
set -euo pipefail

out=${1:?usage: build.sh OUTPUT_FILE}
here=$(cd "$(dirname "$0")" && pwd)
# The version the wrapper requires, whether go.mod lists it in a block or on one line.
version=$(awk -v m=github.com/siderolabs/talos '$1==m && $2 ~ /^v/ {print $2} $1=="require" && $2==m {print $3}' "$here/go.mod")
[[ -n $version ]] || { echo "talosctl build.sh: cannot read the talos version from $here/go.mod" >&2; exit 1; }

stamp=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -d' ' -f1)

if [[ -x $out && -f $out.stamp && $(cat "$out.stamp") == "$stamp" ]]; then
  echo "talosctl: up to date at $out ($version)"
  exit 0
fi

mkdir -p "$(dirname "$out")"
rm -f "$out.stamp"
export GOWORK=off GOFLAGS=-mod=mod
echo "talosctl: building $version (a cold build takes minutes)"
(cd "$here" && go build -ldflags "-s -w" -o "$out.tmp" github.com/siderolabs/talos/cmd/talosctl)
mv "$out.tmp" "$out"
echo "$stamp" > "$out.stamp"
echo "talosctl: $version at $out"
