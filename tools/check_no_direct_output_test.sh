#!/usr/bin/env bash
# //tools:check_no_direct_output_test: tools/check_no_direct_output.sh
#   1. passes on a fixture tree whose library files only mention stderr/stdout
#      in comments and strings, flush them, or are exempt (a program with
#      main(), runtime/log.cc, train/log_sink.cc);
#   2. fails on injected violations, naming each one's file and line;
#   3. passes on this repository's tree (found through the script's runfile,
#      a link into the source tree; the test is tagged "external" so it runs
#      again on every `bazel test` instead of reusing a cached pass).
set -euo pipefail
script="$1"
fail() { echo "FAIL: $*"; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}/fixture"
rm -rf "$tmp"
mkdir -p "$tmp/runtime" "$tmp/train" "$tmp/sim" "$tmp/kernels/cuda" "$tmp/collectives"

cat > "$tmp/runtime/clean.cc" <<'EOF'
// Writes nothing to stderr: std::fprintf(stderr, "x") in a comment is fine.
/* A block comment: std::cout << x;
   printf("still a comment") */
#include <cstdio>
#include "zeroshard/runtime/log.h"
void F(bool to_stdout, char* buf) {
  Log(LogLevel::kError, "stream", "could not write to stderr or stdout");  // a string
  std::snprintf(buf, 8, "%d", 1);
  const std::string s = absl::StrFormat("%d", 2);
  const char c = '"';  // a quote in a char literal does not open a string: stderr
  std::fflush(stderr);
  fflush(stdout);
  std::fprintf(file_, "to a file\n");
  bool my_stderr_flag = to_stdout;
  Rewrite(3, buf);
}
EOF
cat > "$tmp/kernels/cuda/clean.cu" <<'EOF'
__global__ void K(float* x) { x[0] = 1; }  // no printf here
EOF
cat > "$tmp/sim/tool_main.cc" <<'EOF'
#include <cstdio>
int main(int argc, char** argv) {
  std::fprintf(stderr, "a program may print\n");
  std::printf("so may this\n");
}
EOF
cat > "$tmp/runtime/log.cc" <<'EOF'
void DefaultLogHandler() { std::fwrite("x", 1, 1, stderr); }
EOF
cat > "$tmp/train/log_sink.cc" <<'EOF'
void Line() { std::fputs("x", stdout); }
EOF

out="$("$script" "$tmp" 2>&1)" || fail "the clean fixture should pass: $out"
[[ "$out" == *": 2 library files, none writes"* ]] || fail "expected 2 files checked (2 sinks and 1 program exempt): $out"
echo "clean fixture: $out"

# Each violation on its own line; the expected FILE:LINE of each.
cat > "$tmp/runtime/bad.cc" <<'EOF'
#include <cstdio>
void G(const char* m) {
  std::fprintf(stderr, "zeroshard: %s\n", m);
  fputs(m,
        stderr);
  std::cerr << m;
  std::cout << m << "\n";
  printf("%s\n", m);
  std::puts(m);
  perror("open");
  absl::PrintF("%s\n", m);
  ::write(2, m, 1);
  FILE* f = stdout;  // a stream handed on
  std::clog << m;
  if (m) std::fprintf(stderr, "x"); /* a comment after code does not hide it */
}
EOF
cat > "$tmp/collectives/bad.h" <<'EOF'
// A header that prints.
inline void H() { std::fputs("ring\n", stderr); }
EOF
set +e
out="$("$script" "$tmp" 2>&1)"; rc=$?
set -e
echo "$out"
[[ $rc -eq 1 ]] || fail "expected exit 1 on the injected violations, got $rc"
for where in runtime/bad.cc:3 runtime/bad.cc:5 runtime/bad.cc:6 runtime/bad.cc:7 runtime/bad.cc:8 \
             runtime/bad.cc:9 runtime/bad.cc:10 runtime/bad.cc:11 runtime/bad.cc:12 runtime/bad.cc:13 \
             runtime/bad.cc:14 runtime/bad.cc:15 collectives/bad.h:2; do
  grep -q "^$where: writes to stderr/stdout directly" <<< "$out" || fail "not named: $where"
done
n=$(grep -c ': writes to stderr/stdout directly' <<< "$out")
[[ $n -eq 13 ]] || fail "expected exactly the 13 injected lines, found $n"
grep -q "^check_no_direct_output: 13 direct write(s) to stderr/stdout in 4 library files$" <<< "$out" ||
  fail "summary line"
echo "injected violations: all 13 named with file and line, exit 1"

# This repository: the runfile of the script links into the source tree.
real="$(readlink -f "$script")"
repo="$(dirname "$(dirname "$real")")"
[[ -f "$repo/runtime/log.h" && -f "$repo/tools/check_no_direct_output.sh" ]] ||
  fail "cannot find the source tree from $script (resolved to $real)"
"$script" "$repo" || fail "the repository's library writes to stderr/stdout directly (above)"
echo "PASS"
