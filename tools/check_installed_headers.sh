#!/usr/bin/env bash
# Fails when an installed header includes something outside the installed tree
# and the library's dependencies: an include of zeroshard/<path> must be
# installed; any other ("absl/...", <vector>) must be found in the compiler's
# own directories or a dependency's (Abseil, Eigen, nlohmann-json, liburing
# under /usr/include; Open MPI; the CUDA toolkit), so a header that reaches a
# project path without the prefix ("runtime/tensor.h") or a file beside it
# fails.
#
#   tools/check_installed_headers.sh PREFIX
set -euo pipefail
prefix=$1
inc="$prefix/include"
[[ -d "$inc/zeroshard" ]] || { echo "check_installed_headers: no $inc/zeroshard" >&2; exit 1; }

dirs=()
while IFS= read -r d; do dirs+=("$d"); done < <(echo | ${CXX:-g++} -xc++ -std=c++20 -E -v - 2>&1 |
  sed -n '/#include <...> search starts here:/,/End of search list./p' | sed -n 's/^ \(\/.*\)$/\1/p')
dirs+=(/usr/include /usr/include/eigen3 /usr/lib/x86_64-linux-gnu/openmpi/include
       "${ZEROSHARD_CUDA_PATH:-/usr/local/cuda}/include")

problems=0
headers=0
while IFS= read -r -d '' h; do
  headers=$((headers + 1))
  rel=${h#"$inc/"}
  while IFS=: read -r line kind name; do
    if [[ $name == zeroshard/* ]]; then
      if [[ ! -f "$inc/$name" ]]; then
        echo "$rel:$line: includes \"$name\", which is not installed"; problems=$((problems + 1))
      fi
    else
      # A dependency's header ("absl/...", <Eigen/Core>, <mpi.h>, <cuda_runtime.h>,
      # the standard library): found in the compiler's or a dependency's
      # directories, never beside the header or under a project folder.
      found=0
      for d in "${dirs[@]}"; do [[ -e "$d/$name" ]] && { found=1; break; }; done
      if [[ $found -eq 0 ]]; then
        echo "$rel:$line: includes $([[ $kind == quote ]] && echo "\"$name\"" || echo "<$name>"), a path outside zeroshard/ that no dependency provides"
        problems=$((problems + 1))
      fi
    fi
  done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include' "$h" |
           sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1:quote:\2/; s/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*<([^>]+)>.*/\1:angle:\2/')
done < <(find "$inc/zeroshard" -type f -print0)

if [[ $problems -ne 0 ]]; then
  echo "check_installed_headers: $problems include(s) reach outside zeroshard/ and the dependencies in $headers headers"
  exit 1
fi
echo "check_installed_headers: $headers installed headers, every include is zeroshard/<installed> or a dependency's"
