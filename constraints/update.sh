#!/usr/bin/env bash
# Regenerate constraints/<extra>.txt: the exact version of every Python package that a
# fresh `python -m pip install -e ".[<extra>]"` brings from today's package index, so that
# a run can hold the harness fixed (`-c constraints/<extra>.txt`) while the driver changes.
#
#   constraints/update.sh [EXTRA ...]      default: cu13 cu12
#   PYTHON=python3.11 constraints/update.sh   the interpreter of the fresh venvs (default python3;
#                                              CI's Python is 3.11)
#
# Each extra is installed into a new venv WITHOUT the old constraints, then
# `pip freeze --exclude-editable` gives the pins. The script then asks pip (a dry run,
# nothing installed) whether every pin has a wheel for CPython 3.11-3.14 on this platform and
# on linux aarch64, and writes what lacks one into the header.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PY_VERSIONS=(3.11 3.12 3.13 3.14)
[ "$#" -gt 0 ] || set -- cu13 cu12
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for extra in "$@"; do
  out=constraints/$extra.txt
  echo "constraints/update.sh: $extra: a fresh venv ($PY), pip install -e \".[$extra]\"" >&2
  rm -rf "$tmp/venv"
  "$PY" -m venv "$tmp/venv"
  "$tmp/venv/bin/python" -m pip install -q --upgrade pip
  "$tmp/venv/bin/python" -m pip install -q -e ".[$extra]"
  "$tmp/venv/bin/python" -m pip freeze --exclude-editable | grep -v '^#' > "$tmp/pins"
  pyver=$("$tmp/venv/bin/python" -c 'import platform; print(platform.python_version())')
  plat=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_platform())')
  notes=()
  check() {   # check LABEL PIP-ARGS...: the pins pip finds no wheel for, as one note line
    local label=$1; shift
    if ! "$tmp/venv/bin/python" -m pip install -q --dry-run --ignore-installed --no-deps \
        --only-binary=:all: --target "$tmp/dry" -r "$tmp/pins" "$@" >"$tmp/dry.log" 2>&1; then
      missing=$(grep -oE "No matching distribution found for [^ ]+" "$tmp/dry.log" \
                | sed 's/.* for //' | sort -u | paste -sd " " || true)   # none named: said below
      notes+=("#   no wheel for $label: ${missing:-see pip install --dry-run}")
    fi
  }
  for v in "${PY_VERSIONS[@]}"; do
    check "CPython $v ($plat)" --python-version "$v"
    check "CPython $v (linux aarch64)" --python-version "$v" --platform manylinux_2_28_aarch64 \
      --platform manylinux2014_aarch64
  done
  [ "${#notes[@]}" -gt 0 ] || notes=("#   every pin has a wheel for CPython ${PY_VERSIONS[*]} on $plat and on linux aarch64")
  {
    echo "# constraints/$extra.txt: the exact version of every Python package that"
    echo "# \`python -m pip install -e \".[$extra]\"\` brings, frozen from a fresh venv on $(date -u +%Y-%m-%d)"
    echo "# (CPython $pyver, $plat). Install with the harness held fixed:"
    echo "#   python -m pip install -e \".[$extra]\" -c constraints/$extra.txt"
    echo "# A run records in environment.json (harness -> constraints) whether its packages match."
    echo "# Regenerate (today's index, not these pins): constraints/update.sh $extra"
    echo "# Frozen on CPython $pyver: a fresh install on a newer Python may choose newer releases"
    echo "# (NumPy 2.5 needs 3.12); the pins hold every Python to these, and where they have wheels:"
    echo "# Wheels (pip --dry-run --only-binary=:all:):"
    printf '%s\n' "${notes[@]}"
    cat "$tmp/pins"
  } > "$out.tmp"
  mv "$out.tmp" "$out"
  echo "constraints/update.sh: wrote $out ($(wc -l < "$tmp/pins") pins)" >&2
done
