#!/usr/bin/env bash
# Fails when a source file includes a layer above its own (docs/design.md,
# "Layers"). The layers, bottom to top, and what each may include:
#
#   runtime      runtime
#   kernels      runtime kernels
#   data         runtime data
#   collectives  runtime kernels collectives
#   autograd     runtime kernels autograd
#   sharding     runtime kernels collectives autograd sharding
#   optim        ... sharding optim
#   checkpoint   ... optim checkpoint
#   train        ... checkpoint data train
#   sim          ... train sim (the simulator runs the real step)
#   examples, bench, tools, tests: anything
#
# Only project includes ("zeroshard/folder/...") are checked; Abseil, the
# standard library and vendor headers are not layers. Every file (tests and
# examples too) must name project headers with the zeroshard/ prefix
# (tools/cc.bzl); one without it is reported. The BUILD files say the same with
# visibility (tools/layers.bzl), so a dependency that points up fails the
# build; this script also catches an include that reaches a header through
# another target's transitive deps.
#
#   tools/check_layers.sh            # from the repository root; exit 1 on a violation
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A allowed=(
  [runtime]="runtime"
  [kernels]="runtime kernels"
  [data]="runtime data"
  [collectives]="runtime kernels collectives"
  [autograd]="runtime kernels autograd"
  [sharding]="runtime kernels collectives autograd sharding"
  [optim]="runtime kernels collectives autograd sharding optim"
  [checkpoint]="runtime kernels collectives autograd sharding optim checkpoint"
  [train]="runtime kernels collectives autograd sharding optim checkpoint data train"
  [sim]="runtime kernels collectives autograd sharding optim checkpoint data train sim"
)
# Folders that are not layers: anything below them may be included from anywhere
# above, nothing in a layer may include them.
top="examples bench tools tests third_party"

violations=0
checked=0
unprefixed=0
while IFS= read -r file; do
  layer=${file%%/*}
  [[ "$layer" == third_party ]] && continue
  is_layer=0
  if [[ -n "${allowed[$layer]:-}" ]]; then
    is_layer=1
    checked=$((checked + 1))
  fi
  while IFS=: read -r line inc; do
    target=${inc%%/*}
    if [[ "$target" == zeroshard ]]; then
      rest=${inc#zeroshard/}
      target=${rest%%/*}
    elif [[ -n "${allowed[$target]:-}" || " $top " == *" $target "* ]]; then
      # Every project include names the project (tools/cc.bzl): "runtime/tensor.h"
      # would collide with an embedder's own runtime/.
      echo "$file:$line: includes \"$inc\" without the project prefix: write \"zeroshard/$inc\""
      unprefixed=$((unprefixed + 1))
      continue
    else
      continue  # not a project folder (absl/..., cuda headers, ...)
    fi
    [[ $is_layer -eq 1 ]] || continue
    if [[ -z "${allowed[$target]:-}" && " $top " != *" $target "* ]]; then
      echo "$file:$line: includes \"$inc\", which names no folder of the project"
      violations=$((violations + 1))
    elif [[ " ${allowed[$layer]} " != *" $target "* ]]; then
      echo "$file:$line: layer '$layer' includes \"$inc\" from '$target', a layer above it or outside the library (may include: ${allowed[$layer]})"
      violations=$((violations + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" | sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1:\2/')
done < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' '*.inc' 2>/dev/null || find . -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' | sed 's#^\./##')

if [[ $unprefixed -ne 0 ]]; then
  echo "check_layers: $unprefixed project include(s) without the zeroshard/ prefix"
  exit 1
fi
if [[ $violations -ne 0 ]]; then
  echo "check_layers: $violations include(s) point up a layer in $checked library files"
  exit 1
fi
echo "check_layers: $checked library files, every include points down or across its own layer; every project include has the zeroshard/ prefix"
