#!/usr/bin/env bash
# Writes monitoring.yaml beside this script: the Prometheus Operator's custom
# resource definitions the monitoring addon uses, generated as upstream's
# Makefile generates them (its generate-crds target: controller-gen
# "crd:crdVersions=v1" over the API module's v1 and v1alpha1 packages, then
# scripts/generate/append-operator-version.sh's annotation), from the API
# module github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring
# at the operator's release, as the Go module proxy serves it.
#
#   render/assets/manifests/crds/monitoring.sh OPERATOR_VERSION CONTROLLER_GEN_VERSION
#
# Run with v0.85.0 v0.18.0 it gives, byte for byte, upstream v0.85.0's
# example/prometheus-operator-crd files (the main module's zip has them).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OPERATOR_VERSION CONTROLLER_GEN_VERSION (v0.95.2 v0.22.0)" >&2; exit 2; }
op=$1 gen=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
mod=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring
dir=$(cd "$work" && go mod download -json "$mod@$op" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] || { echo "$0: $mod@$op could not be downloaded" >&2; exit 1; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
GOBIN="$work/bin" go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$gen"
(cd "$work/src" && "$work/bin/controller-gen" "crd:crdVersions=v1" paths=./v1/. paths=./v1alpha1/. output:crd:dir="$work/out")
# The definitions the addon uses: not PrometheusAgent, ScrapeConfig and
# ThanosRuler (the operator runs without them, saying so once at its start).
{
  cat <<HEAD
# The Prometheus Operator's custom resource definitions, ${op}: generated from
# $mod@${op} with controller-gen ${gen}
# as upstream's make generate-crds generates them (monitoring.sh beside this file), the ones
# the monitoring addon uses (not the PrometheusAgent, ScrapeConfig and ThanosRuler
# definitions: the operator runs without them, saying so once at its start).
HEAD
  first=1
  for k in alertmanagerconfigs alertmanagers podmonitors probes prometheuses prometheusrules servicemonitors; do
    f="$work/out/monitoring.coreos.com_$k.yaml"
    [ -f "$f" ] || { echo "$0: controller-gen wrote no $k definition" >&2; exit 1; }
    [ $first -eq 1 ] || echo ---
    first=0
    sed -e '/^---$/d' -e "/^    controller-gen.kubebuilder.io\/version: /a\\    operator.prometheus.io/version: ${op#v}" "$f"
  done
} >"$work/monitoring.yaml"
mv "$work/monitoring.yaml" "$here/monitoring.yaml"
