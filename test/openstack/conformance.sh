#!/bin/bash
# make conformance: bring up the real control plane (up.sh), run every contract test
# (TestContract*: the simulator's, the cloud adapter's, the engine's) against it instead of
# the simulator, print how many checks ran against it, and take it down again.
#
# Env: OSREAL_DIR (default /tmp/opke-conformance), KEEP=1 leaves the cloud up afterwards
# (then OPKE_CONFORMANCE_CLOUDS=$OSREAL_DIR/clouds.yaml go test -run '^TestContract' ./...
# runs the suite again in seconds), SKIP_UP=1 uses a cloud already up in OSREAL_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export OSREAL_DIR=${OSREAL_DIR:-/tmp/opke-conformance}
mkdir -p "$OSREAL_DIR"
start=$(date +%s)
if [ "${KEEP:-0}" != 1 ]; then
  trap 'bash "$here/down.sh" >/dev/null 2>&1 || true' EXIT
fi
if [ "${SKIP_UP:-0}" != 1 ]; then
  echo "== conformance: bringing up the control plane (logs in $OSREAL_DIR/log)"
  bash "$here/up.sh"
fi
up=$(date +%s)
echo "== conformance: the contract suites against the real cloud"
log="$OSREAL_DIR/contract.log"
cd "$root"
set +e
# One package at a time: the suites share one project and its quotas.
OPKE_CONFORMANCE_CLOUDS="$OSREAL_DIR/clouds.yaml" go test -count=1 -p 1 -timeout 12m -v -run '^TestContract' ./... >"$log" 2>&1
rc=$?
set -e
grep -E '^(ok|FAIL|---)|^\s+--- FAIL' "$log" | grep -vE '^ok .*\[no test(s to run| files)\]' || true
passed=$(grep -cE '^\s*--- PASS' "$log" || true)
failed=$(grep -cE '^\s*--- FAIL' "$log" || true)
skipped=$(grep -cE '^\s*--- SKIP' "$log" || true)
real=$(grep -c 'contract target: the real cloud' "$log" || true)
sim=$(grep -c 'contract target: the simulator' "$log" || true)
end=$(date +%s)
echo "== conformance: $passed checks passed, $failed failed, $skipped skipped, in $real tests against the real control plane" \
  "(Keystone at http://127.0.0.1:5000/v3); bring-up $((up - start))s, suites $((end - up))s; full log: $log"
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$skipped" -ne 0 ] || [ "$real" -eq 0 ] || [ "$sim" -ne 0 ] || [ "$passed" -eq 0 ]; then
  echo "conformance: FAILED (go test exit $rc; a contract test must neither skip nor fall back to the simulator)" >&2
  exit 1
fi
