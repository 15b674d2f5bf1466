#!/usr/bin/env bash
# Builds the real versitygw S3 gateway (github.com/versity/versitygw/cmd/versitygw, the
# version the wrapper module beside this script requires). The backup tests and the demo
# serve S3 with it on loopback, POSIX backend (tools/testenv.StartS3). Only the Go module
# proxy is used. Idempotent: when the binary exists and the stamp matches the wrapper
# module, it builds nothing. A cold build takes minutes.
#
# Usage: build.sh OUTPUT_FILE
set -euo pipefail

out=${1:?usage: build.sh OUTPUT_FILE}
here=$(cd "$(dirname "$0")" && pwd)
# The version the wrapper requires, whether go.mod lists it in a block or on one line.
m=github.com/versity/versitygw
version=$(awk -v m=$m '$1==m && $2 ~ /^v/ {print $2} $1=="require" && $2==m {print $3}' "$here/go.mod")
[[ -n $version ]] || { echo "versitygw build.sh: cannot read the versitygw version from $here/go.mod" >&2; exit 1; }

stamp=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -d' ' -f1)

if [[ -x $out && -f $out.stamp && $(cat "$out.stamp") == "$stamp" ]]; then
  echo "versitygw: up to date at $out ($version)"
  exit 0
fi

mkdir -p "$(dirname "$out")"
rm -f "$out.stamp"
export GOWORK=off GOFLAGS=-mod=mod
echo "versitygw: building $version (a cold build takes minutes)"
(cd "$here" && go build -ldflags "-s -w" -o "$out.tmp" $m/cmd/versitygw)
mv "$out.tmp" "$out"
echo "$stamp" > "$out.stamp"
echo "versitygw: $version at $out"
