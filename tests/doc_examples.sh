#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks that the documentation's examples are real:
#   * every ```lua block of docs/spec.md is saved as spec.lua in a directory of its own and
#     loaded with `fusegen plan spec.lua`. A block whose first line is
#         -- error: TEXT
#     must fail, and fusegen's message must contain TEXT (messages start "spec.lua:LINE:",
#     so TEXT may name the line); every other block must load;
#   * the ```c block of docs/api.md is byte for byte tests/api_example.c;
#   * every ```text block of docs/spec.md quotes lines of `fusegen plan` for the spec
#     before it (see below);
#   * every ```text block of docs/cli.md that starts "usage: fusegen" is exactly what the
#     matching `fusegen [CMD] --help` prints.
#
# usage: tests/doc_examples.sh FUSEGEN_BINARY SOURCE_DIR
set -u
# planner knobs from the environment would change what the examples plan
unset FUSEGEN_STRATEGY FUSEGEN_CONV_TILE
if [ $# -ne 2 ]; then
  echo "usage: $0 FUSEGEN_BINARY SOURCE_DIR" >&2
  exit 2
fi
fusegen=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$2
spec_md=$src/docs/spec.md
api_md=$src/docs/api.md
example_c=$src/tests/api_example.c
for f in "$fusegen" "$spec_md" "$api_md" "$example_c"; do
  [ -e "$f" ] || { echo "doc_examples: missing $f" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/fusegen-doc-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Splits the fenced blocks of language $2 out of markdown file $1 into $3/1.txt, $3/2.txt, ...
# (a block starts at a line that is exactly ```$2 and ends at the next line that is ```).
extract() {
  mkdir -p "$3"
  awk -v lang="$2" -v dir="$3" '
    !inside && $0 == "```" lang { inside = 1; n++; file = dir "/" n ".txt"; printf "" > file; next }
    inside && $0 == "```" { inside = 0; close(file); next }
    inside { print > file }
    END { if (inside) { print "unterminated ```" lang " block" > "/dev/stderr"; exit 1 } }
  ' "$1"
}

failed=0
checked=0

# ---- docs/spec.md: every lua block ----------------------------------------------------
extract "$spec_md" lua "$work/lua" || exit 1
for block in $(ls "$work/lua" | sort -n); do
  n=${block%.txt}
  dir=$work/lua/$n.d
  mkdir -p "$dir"
  cp "$work/lua/$block" "$dir/spec.lua"
  first=$(head -n 1 "$dir/spec.lua")
  out=$( (cd "$dir" && "$fusegen" plan spec.lua) 2>&1)
  rc=$?
  checked=$((checked + 1))
  case $first in
    "-- error: "*)
      want=${first#-- error: }
      if [ $rc -eq 0 ]; then
        echo "FAIL spec.md lua block $n: expected an error containing \"$want\", but it loaded" >&2
        failed=$((failed + 1))
      elif [ $rc -ne 1 ]; then
        echo "FAIL spec.md lua block $n: fusegen plan exited $rc (expected 1):" >&2
        echo "$out" | sed 's/^/    /' >&2
        failed=$((failed + 1))
      elif [[ $out != *"$want"* ]]; then
        echo "FAIL spec.md lua block $n: the message lacks \"$want\":" >&2
        echo "$out" | sed 's/^/    /' >&2
        failed=$((failed + 1))
      else
        echo "ok   spec.md lua block $n fails as documented: $want"
      fi
      ;;
    *)
      if [ $rc -ne 0 ]; then
        echo "FAIL spec.md lua block $n does not load:" >&2
        echo "$out" | sed 's/^/    /' >&2
        sed 's/^/    | /' "$dir/spec.lua" >&2
        failed=$((failed + 1))
      else
        echo "ok   spec.md lua block $n loads: $(echo "$out" | head -n 1)"
      fi
      ;;
  esac
done
if [ "$checked" -eq 0 ]; then
  echo "FAIL docs/spec.md has no \`\`\`lua blocks" >&2
  failed=$((failed + 1))
fi

# ---- docs/spec.md: plan excerpts ------------------------------------------------------
# A ```text block is an excerpt of `fusegen plan` for the last ```lua block before it that
# loads: every line of it must appear in that plan. Exceptions: a block whose first line
# names a file of specs/ ("layer NAME (specs/X.lua, ...") is checked against
# `fusegen plan specs/X.lua` run in SOURCE_DIR; a block starting "FILE:" is a pattern.
mkdir -p "$work/seq"
awk -v dir="$work/seq" '
  !inside && /^```(lua|text)$/ { inside = 1; n++; file = dir "/" n "." substr($0, 4); printf "" > file; next }
  inside && $0 == "```" { inside = 0; close(file); next }
  inside { print > file }
' "$spec_md"
last_lua=""
for f in $(ls "$work/seq" | sort -n); do
  path=$work/seq/$f
  case $f in
    *.lua)
      head -n 1 "$path" | grep -q '^-- error: ' || last_lua=$path
      ;;
    *.text)
      first=$(head -n 1 "$path")
      case $first in FILE:*) continue ;; esac
      spec_file=$(echo "$first" | sed -n 's/^layer [^ ]* (\(specs\/[^,]*\), .*/\1/p')
      if [ -n "$spec_file" ]; then
        (cd "$src" && "$fusegen" plan "$spec_file") >"$work/plan.txt" 2>&1
      elif [ -n "$last_lua" ]; then
        mkdir -p "$work/excerpt"
        cp "$last_lua" "$work/excerpt/spec.lua"
        (cd "$work/excerpt" && "$fusegen" plan spec.lua) >"$work/plan.txt" 2>&1
      else
        continue
      fi
      missing=$(grep -vxF -f "$work/plan.txt" "$path" | grep -v '^[[:space:]]*$')
      if [ -n "$missing" ]; then
        echo "FAIL spec.md text block ${f%.text} is not in the plan it quotes; lines not found:" >&2
        echo "$missing" | sed 's/^/    /' >&2
        failed=$((failed + 1))
      else
        echo "ok   spec.md text block ${f%.text} matches fusegen plan"
      fi
      ;;
  esac
done

# ---- docs/api.md: the C example is tests/api_example.c --------------------------------
extract "$api_md" c "$work/c" || exit 1
n_c=$(ls "$work/c" | wc -l)
if [ "$n_c" -ne 1 ]; then
  echo "FAIL docs/api.md has $n_c \`\`\`c blocks; expected exactly one (the complete example)" >&2
  failed=$((failed + 1))
elif ! diff -u "$example_c" "$work/c/1.txt" >"$work/c.diff"; then
  echo "FAIL the \`\`\`c block of docs/api.md differs from tests/api_example.c:" >&2
  sed 's/^/    /' "$work/c.diff" >&2
  failed=$((failed + 1))
else
  echo "ok   docs/api.md C example = tests/api_example.c"
fi

# ---- docs/cli.md: every usage text is what --help prints ------------------------------
cli_md=$src/docs/cli.md
if [ -e "$cli_md" ]; then
  extract "$cli_md" text "$work/text" || exit 1
  helps=0
  for block in $(ls "$work/text" | sort -n); do
    first=$(head -n 1 "$work/text/$block")
    case $first in
      "usage: fusegen <command>"*) cmd="" ;;
      "usage: fusegen "*) cmd=$(echo "$first" | awk '{print $3}') ;;
      *) continue ;;
    esac
    helps=$((helps + 1))
    # shellcheck disable=SC2086
    "$fusegen" $cmd --help >"$work/help.txt" 2>&1
    if ! diff -u "$work/help.txt" "$work/text/$block" >"$work/help.diff"; then
      echo "FAIL docs/cli.md: the usage of 'fusegen $cmd' differs from --help:" >&2
      sed 's/^/    /' "$work/help.diff" >&2
      failed=$((failed + 1))
    else
      echo "ok   docs/cli.md usage of 'fusegen${cmd:+ $cmd}' = --help"
    fi
  done
  if [ $helps -ne 9 ]; then
    echo "FAIL docs/cli.md has $helps usage blocks; expected 9 (fusegen and its eight commands)" >&2
    failed=$((failed + 1))
  fi
fi

# ---- generated from the op registry (scripts/update-generated rewrites them) -----------
"$fusegen" ops --markdown >"$work/ops.md"
awk '/^<!-- BEGIN fusegen ops --markdown -->$/ { inside = 1; next }
     /^<!-- END fusegen ops --markdown -->$/ { inside = 0 }
     inside' "$spec_md" >"$work/ops-doc.md"
if ! diff -u "$work/ops.md" "$work/ops-doc.md" >"$work/ops.diff" || [ ! -s "$work/ops.md" ]; then
  echo "FAIL docs/spec.md's op table is not what \`fusegen ops --markdown\` prints (run scripts/update-generated):" >&2
  sed 's/^/    /' "$work/ops.diff" >&2
  failed=$((failed + 1))
else
  echo "ok   docs/spec.md op table = fusegen ops --markdown"
fi
want="| constructors | \`$("$fusegen" ops --names)\` |"
if ! grep -qxF -- "$want" "$spec_md"; then
  echo "FAIL docs/spec.md's constructors line is not: $want (run scripts/update-generated)" >&2
  failed=$((failed + 1))
else
  echo "ok   docs/spec.md constructors = fusegen ops --names"
fi
if ! "$fusegen" ops --fuzz-dict | diff -u - "$src/fuzz/fuzz_spec.dict" >"$work/dict.diff"; then
  echo "FAIL fuzz/fuzz_spec.dict is not what \`fusegen ops --fuzz-dict\` prints (run scripts/update-generated):" >&2
  sed 's/^/    /' "$work/dict.diff" | head -20 >&2
  failed=$((failed + 1))
else
  echo "ok   fuzz/fuzz_spec.dict = fusegen ops --fuzz-dict"
fi

if [ $failed -ne 0 ]; then
  echo "doc_examples: $failed failed" >&2
  exit 1
fi
echo "doc_examples: $checked spec blocks, their plan excerpts, the C example, the CLI usage texts and the registry's generated docs checked"
