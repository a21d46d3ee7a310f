#!/usr/bin/env bash
# Copies the install tree Bazel assembled (//:install_tree, tools/install.bzl)
# into PREFIX: `make install PREFIX=/some/where` runs it.
#
#   tools/install.sh TREE PREFIX
set -euo pipefail
tree=$1 prefix=$2
if [[ ! -d "$tree/include/zeroshard" || ! -f "$tree/lib/libzeroshard.so" ]]; then
  echo "install: expected the install tree (include/zeroshard, lib/libzeroshard.so) in $tree; build //:install_tree first" >&2
  exit 1
fi
mkdir -p "$prefix"
# The tree is relocatable (the CMake package and zeroshard.pc find the prefix
# from where they are); Bazel's outputs are read-only, the copies are not.
cp -R "$tree/." "$prefix/"
chmod -R u+w "$prefix/include/zeroshard" "$prefix/lib/libzeroshard.a" "$prefix/lib/libzeroshard.so" \
  "$prefix/lib/cmake/zeroshard" "$prefix/lib/pkgconfig/zeroshard.pc" "$prefix/share/zeroshard"
echo "installed zeroshard into $prefix: $(find "$prefix/include/zeroshard" -type f | wc -l) headers," \
  "lib/libzeroshard.{a,so}, lib/cmake/zeroshard, lib/pkgconfig/zeroshard.pc"
