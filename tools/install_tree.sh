#!/usr/bin/env bash
# Assembles the install tree (tools/install.bzl's zs_install_tree runs this;
# `make install PREFIX=...` copies its result). Relocatable: the CMake package
# and the pkg-config file find the prefix from where they are.
#
#   install_tree.sh OUT HEADERS ARCHIVES FLAGS DEFINES CC VERSION CUDA
#
# HEADERS: lines "zeroshard/<path> <file>"; ARCHIVES: the project's static
# libraries, one per line; FLAGS: the link flags of the dependencies, one per
# line (from the Bazel targets: Abseil, OpenMP, MPI, liburing, CUDA);
# DEFINES: preprocessor definitions the headers need; CC: the C++ compiler
# driver that links; CUDA: 1 when the CUDA kernels are in the libraries.
set -euo pipefail
out=$1 headers=$2 archives=$3 flags=$4 defines=$5 cc=$6 version=$7 cuda=$8

mkdir -p "$out/include" "$out/lib/cmake/zeroshard" "$out/lib/pkgconfig" "$out/share/zeroshard"

while read -r dest src; do
  mkdir -p "$out/include/$(dirname "$dest")"
  cp -L "$src" "$out/include/$dest"
done < "$headers"

# One static library from every archive: an ar MRI script (ADDLIB keeps
# members with the same name from different archives).
{
  echo "CREATE $out/lib/libzeroshard.a"
  while read -r a; do echo "ADDLIB $a"; done < "$archives"
  echo "SAVE"
  echo "END"
} | ar -M
ranlib "$out/lib/libzeroshard.a"

mapfile -t link_flags < "$flags"
# The shared library: every object (the op registrations run at load time),
# and -z defs so that a missing dependency fails here, not in a consumer.
"$cc" -shared -o "$out/lib/libzeroshard.so" -Wl,-soname,libzeroshard.so \
  -Wl,--whole-archive "$out/lib/libzeroshard.a" -Wl,--no-whole-archive \
  "${link_flags[@]}" -lstdc++ -lm -Wl,-z,defs
cp "$flags" "$out/share/zeroshard/link_flags.txt"

mapfile -t defs < "$defines"
cmake_list() { local IFS=';'; echo "$*"; }
compile_defs=$(cmake_list "${defs[@]}")
static_link=$(cmake_list "${link_flags[@]}" -lstdc++ -lm)
pc_defs=""
for d in "${defs[@]}"; do pc_defs+=" -D$d"; done
pc_libs="${link_flags[*]}"

cat > "$out/lib/cmake/zeroshard/zeroshardConfig.cmake" <<CMAKE
# The zeroshard CMake package (made by tools/install_tree.sh, version $version).
#
#   find_package(zeroshard REQUIRED)        # CMAKE_PREFIX_PATH=<prefix>
#   target_link_libraries(app PRIVATE zeroshard::zeroshard)
#
# zeroshard::zeroshard is the shared library; zeroshard::zeroshard_static
# links libzeroshard.a whole (the kernels register themselves at static
# initialisation: an object nothing names would otherwise be dropped) with
# its dependencies. Both carry what the headers need: C++20, OpenMP, the
# include directory, and -ffp-contract=off (the library's bitwise guarantees
# assume no implicit fused multiply-add in its inline math).
include(CMakeFindDependencyMacro)
get_filename_component(_zeroshard_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(zeroshard_CUDA $([[ $cuda == 1 ]] && echo ON || echo OFF))

find_dependency(Threads)
find_dependency(OpenMP)
find_dependency(absl CONFIG)
find_dependency(MPI)
if(zeroshard_CUDA)
  find_dependency(CUDAToolkit)
endif()

set(_zeroshard_usage
  INTERFACE_INCLUDE_DIRECTORIES "\${_zeroshard_prefix}/include"
  INTERFACE_COMPILE_FEATURES "cxx_std_20"
  INTERFACE_COMPILE_OPTIONS "\$<\$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>"
  INTERFACE_COMPILE_DEFINITIONS "$compile_defs")

if(NOT TARGET zeroshard::zeroshard)
  add_library(zeroshard::zeroshard SHARED IMPORTED)
  set_target_properties(zeroshard::zeroshard PROPERTIES
    IMPORTED_LOCATION "\${_zeroshard_prefix}/lib/libzeroshard.so"
    IMPORTED_SONAME "libzeroshard.so"
    \${_zeroshard_usage}
    INTERFACE_LINK_LIBRARIES "OpenMP::OpenMP_CXX;Threads::Threads;MPI::MPI_CXX;$static_link")

  add_library(zeroshard::archive STATIC IMPORTED)
  set_target_properties(zeroshard::archive PROPERTIES
    IMPORTED_LOCATION "\${_zeroshard_prefix}/lib/libzeroshard.a")
  add_library(zeroshard::zeroshard_static INTERFACE IMPORTED)
  set_target_properties(zeroshard::zeroshard_static PROPERTIES
    \${_zeroshard_usage}
    INTERFACE_LINK_LIBRARIES "\$<LINK_LIBRARY:WHOLE_ARCHIVE,zeroshard::archive>;OpenMP::OpenMP_CXX;Threads::Threads;MPI::MPI_CXX;$static_link")
endif()
set(zeroshard_FOUND TRUE)
CMAKE

cat > "$out/lib/cmake/zeroshard/zeroshardConfigVersion.cmake" <<CMAKE
# Same major version, and at least the one asked for.
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION_MAJOR STREQUAL "${version%%.*}" AND NOT PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
CMAKE

cat > "$out/lib/pkgconfig/zeroshard.pc" <<PC
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: zeroshard
Description: ZeRO-3 / FSDP training runtime in C++20 (its own tensors, autograd, kernels, collectives, sharding)
Version: $version
Requires: ompi-c
Cflags: -I\${includedir} -std=c++20 -fopenmp -ffp-contract=off -pthread$pc_defs
Libs: -L\${libdir} -lzeroshard $pc_libs -lstdc++ -lm
PC
