#!/usr/bin/env bash
# The test suites of `go tool task test`: every module's `go test ./...`,
# the chart's and the monitoring objects', and the console's vitest.
#
# The modules run in two lanes side by side, about as long as each other
# (most of their time is spent waiting on emulated reboots and restarts):
# the controller, CLI, installer and contracts modules in one, the e2e,
# ichor-ui and tools modules in the other, each line of output prefixed with
# its lane; the chart's and the monitoring objects' tests run after them.
# The emulated worlds of the suites use distinct loopback subnets, so they
# do not meet. Every
# suite runs even when an earlier one fails; the failures are listed at the
# end, with each suite's wall time (for CI's time budget).
set -uo pipefail
cd "$(dirname "$0")/.."

# The modules the Taskfile names (MODULES): each must have a place below.
first="controller cli installer contracts"
second="e2e uiserver tools"
for m in "$@"; do
	case " $first $second " in
	*" $m "*) ;;
	*)
		echo "test: module $m is in the Taskfile's MODULES but not in tools/test-suites.sh: give it a place there" >&2
		exit 1
		;;
	esac
done

results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

# suite NAME COMMAND: runs COMMAND, records NAME's result and wall time.
suite() {
	local start rc=0
	start=$(date +%s)
	echo "== $1"
	(eval "$2") || rc=$?
	local took=$(($(date +%s) - start))
	if [ "$rc" -ne 0 ]; then
		echo "$1 (failed after $took s)" >>"$results/failed"
		echo "== $1: FAILED after $took s"
	else
		echo "== $1: $took s"
	fi
	echo "$1: $took s" >>"$results/times"
}

# go test's default 10-minute limit per package binary is too short for the
# emulator suites on a busy 2-core machine.
gotest() { echo "cd $1 && go test -timeout 45m ./..."; }

# lane NAME MODULE...: the modules' suites one after another, each line
# prefixed with [NAME].
lane() {
	local name=$1
	shift
	for m in "$@"; do suite "$m" "$(gotest "$m")"; done 2>&1 | sed -u "s/^/[$name] /" | tee "$results/lane-$name.log"
}

suite webapp 'go tool task test:webapp'

# shellcheck disable=SC2086 # the lists are words
lane controller $first &
# shellcheck disable=SC2086
lane e2e $second &
wait

suite tools/chart 'cd tools/chart && GOWORK=off go test -timeout 30m ./...'
suite tools/monitoring 'cd tools/monitoring && GOWORK=off go test -timeout 30m ./...'

echo "test: wall time per suite:"
sed 's/^/  /' "$results/times"
if [ -s "$results/failed" ]; then
	echo "test: these suites failed:" >&2
	sed 's/^/  /' "$results/failed" >&2
	# The failed tests and packages again, last, where a truncated log's
	# tail still shows them.
	echo "test: the failed tests and packages:" >&2
	cat "$results"/lane-*.log 2>/dev/null | grep -a -E -e '--- FAIL|^\[[a-z]+\] (FAIL|panic:)' | sed 's/^/  /' >&2
	exit 1
fi
echo "test: every suite passed"
