# SPDX-License-Identifier: Apache-2.0
# Sourced by the CLI test scripts: a scratch folder with its own kernel cache, removed on exit
# ($work), and the pass/fail counters with check().
work=$(mktemp -d "${TMPDIR:-/tmp}/fusegen-${CLI_TEST:-cli}-XXXXXX")
trap 'rm -rf "$work"' EXIT
export FUSEGEN_CACHE_DIR=$work/cache FUSEGEN_CACHE_PATH=
passed=0
failed=0
# check NAME FRAGMENT TEXT: TEXT contains FRAGMENT (else the first 30 lines of TEXT are shown)
check() {
  if grep -qF -- "$2" <<<"$3"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $1: expected to find: $2" >&2
    sed 's/^/    /' <<<"$3" | head -30 >&2
  fi
}
