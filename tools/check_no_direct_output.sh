#!/usr/bin/env bash
# Fails when library code writes to stderr or stdout itself (issue 22): the
# library reports through its log (runtime/log.h), whose handler an embedder
# may replace, and a run's own output goes through train/log_sink.h.
#
#   tools/check_no_direct_output.sh          # the repository this script is in
#   tools/check_no_direct_output.sh ROOT     # another tree (the test's fixtures)
#
# Looks at the library's folders (runtime kernels autograd collectives sharding
# optim checkpoint data train sim), files *.h *.cc *.cu *.cuh, and flags on a
# code line (comments and the text inside string and character literals are
# not looked at):
#   - any mention of stderr, stdout, std::cerr, std::cout, std::clog,
#     STDERR_FILENO or STDOUT_FILENO (so `fputs(text,\n stderr)` over two lines
#     is caught too), except fflush(stderr) / fflush(stdout);
#   - the calls that write to stdout or stderr without naming them: printf,
#     vprintf, puts, putchar, perror, absl::PrintF, write(1, ...), write(2, ...).
# Exempt: programs (a file that defines `int main(`), and the two sinks
# themselves, runtime/log.cc and train/log_sink.cc. Each finding is printed as
# FILE:LINE: the line; exit 1 if there is any.
# //tools:check_no_direct_output_test runs it on this tree (in `make test`)
# and on fixtures with injected violations.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"

layers="runtime kernels autograd collectives sharding optim checkpoint data train sim"
exempt=" runtime/log.cc train/log_sink.cc "

files=()
for layer in $layers; do
  [[ -d "$layer" ]] || continue
  while IFS= read -r f; do
    [[ "$exempt" == *" $f "* ]] && continue
    grep -Eq '^[[:space:]]*int[[:space:]]+main[[:space:]]*\(' "$f" && continue  # a program
    files+=("$f")
  done < <(find "$layer" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | LC_ALL=C sort)
done
if [[ ${#files[@]} -eq 0 ]]; then
  echo "check_no_direct_output: no library files under $root"
  exit 1
fi

# One pass over every file: blank out comments (// and /* */, across lines)
# and the contents of string and character literals, then match the code.
awk '
  FNR == 1 { in_comment = 0 }
  {
    raw = $0; code = ""; s = $0
    while (length(s) > 0) {
      if (in_comment) {
        i = index(s, "*/")
        if (i == 0) { s = ""; break }
        s = substr(s, i + 2); in_comment = 0; continue
      }
      c = substr(s, 1, 1); two = substr(s, 1, 2)
      if (two == "//") break
      if (two == "/*") { in_comment = 1; s = substr(s, 3); code = code " "; continue }
      if (c == "\"" || c == "\047") {
        # a literal: skip to its unescaped closing quote
        j = 2
        while (j <= length(s)) {
          d = substr(s, j, 1)
          if (d == "\\") { j += 2; continue }
          if (d == c) break
          j++
        }
        code = code c c; s = substr(s, j + 1); continue
      }
      code = code c; s = substr(s, 2)
    }
    gsub(/fflush[ \t]*\([ \t]*(stderr|stdout)[ \t]*\)/, "", code)
    bad = 0
    if (code ~ ("(^|[^A-Za-z0-9_])(stderr|stdout|STDERR_FILENO|STDOUT_FILENO)([^A-Za-z0-9_]|$)")) bad = 1
    if (code ~ /std::(cerr|cout|clog)([^A-Za-z0-9_]|$)/) bad = 1
    if (code ~ /(^|[^A-Za-z0-9_:]|std::)(printf|vprintf|puts|putchar|perror)[ \t]*\(/) bad = 1
    if (code ~ /absl::PrintF[ \t]*\(/) bad = 1
    if (code ~ /(^|[^A-Za-z0-9_])write[ \t]*\([ \t]*[12][ \t]*,/) bad = 1
    if (bad) {
      sub(/^[ \t]+/, "", raw)
      printf "%s:%d: writes to stderr/stdout directly (report through Log, runtime/log.h): %s\n", FILENAME, FNR, raw
      found++
    }
  }
  END {
    if (found > 0) {
      printf "check_no_direct_output: %d direct write(s) to stderr/stdout in %d library files\n", found, ARGC - 1
      exit 1
    }
    printf "check_no_direct_output: %d library files, none writes to stderr or stdout itself\n", ARGC - 1
  }
' "${files[@]}"
