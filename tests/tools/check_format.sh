#!/bin/sh
# Checks that the C++ sources git tracks are formatted as .clang-format says: prints every
# difference and exits 1 on any (2 when clang-format is missing). Run from anywhere;
# CLANG_FORMAT names another binary. Fix a file with: clang-format -i FILE
set -eu
cd "$(dirname "$0")/../.."
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format: $clang_format not found (Debian package clang-format)" >&2
  exit 2
fi
if git ls-files -z -- '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu' '*.cuh' | xargs -0 -r "$clang_format" --dry-run --Werror; then
  exit 0
fi
echo "check_format: the files above differ from .clang-format" >&2
exit 1
