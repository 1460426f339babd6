#!/usr/bin/env bash
# Puts the CUTLASS 4.2.0 headers (header-only; PyPI's nvidia-cutlass==4.2.0.0 wheel carries them
# under cutlass_library/source/include) into .deps/cutlass/include, where CMake looks for them.
# The wheel's hash is pinned. Safe to run again: a finished extraction is left alone. A GPU
# machine without registry access gets .deps/cutlass carried along instead.
set -euo pipefail
cd "$(dirname "$0")/.."

version=4.2.0.0
sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
target=.deps/cutlass
stamp=$target/.version

[[ -f $stamp && $(cat "$stamp") == "$version" ]] && exit 0

wheels=.deps/wheels
wheel=$wheels/nvidia_cutlass-$version-py3-none-any.whl
mkdir -p "$wheels"
if [[ ! -f $wheel ]] || ! echo "$sha256  $wheel" | sha256sum --check --status; then
  echo "fetch_cutlass: downloading nvidia-cutlass==$version"
  pip=(python3 -m pip)
  if ! python3 -m pip --version >/dev/null 2>&1; then  # Debian's python3 comes without pip
    python3 -m venv .deps/pip-venv
    pip=(.deps/pip-venv/bin/python -m pip)
  fi
  "${pip[@]}" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$wheels" "nvidia-cutlass==$version"
fi
echo "$sha256  $wheel" | sha256sum --check --status || {
  echo "fetch_cutlass: $wheel does not have the pinned sha256 $sha256" >&2
  exit 1
}

rm -rf "$target"
python3 - "$wheel" "$target" <<'PY'
import pathlib, sys, zipfile
wheel, target = sys.argv[1], pathlib.Path(sys.argv[2])
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(wheel) as archive:
    for member in archive.infolist():
        if member.filename.startswith(prefix) and not member.is_dir():
            out = target / "include" / member.filename[len(prefix):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(archive.read(member))
PY
echo "$version" >"$stamp"
echo "fetch_cutlass: CUTLASS $version headers in $target/include"
