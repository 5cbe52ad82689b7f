#!/usr/bin/env bash
# The whole test suite: lint, types, and every test (netns tests need root and run too).
# README quick start command 2; .ci/run runs exactly this.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/setup.sh
source "$ROOT/scripts/setup.sh"
cd "$ROOT"

echo "== ruff"
ruff check meshhealth tests bench
ruff format --check meshhealth tests bench
echo "== mypy --strict"
mypy meshhealth

echo "== pytest"
set +e
python -m pytest "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "test: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit $rc
