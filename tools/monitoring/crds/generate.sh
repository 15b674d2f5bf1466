#!/usr/bin/env bash
# Generates the CustomResourceDefinitions of prometheus-operator's
# ServiceMonitor and PrometheusRule from its own API module (the version
# tools/monitoring/go.mod pins) with controller-gen, as prometheus-operator
# generates its CRDs, without descriptions. tools/chart applies the chart's
# monitoring objects to a real API server with them installed.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOWORK=off go tool controller-gen crd:crdVersions=v1,maxDescLen=0 \
  paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 output:crd:dir="$tmp"
for kind in servicemonitors prometheusrules; do
  cp "$tmp/monitoring.coreos.com_$kind.yaml" crds/
done
