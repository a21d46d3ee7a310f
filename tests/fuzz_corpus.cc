#include "zeroshard/tests/fuzz_corpus.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zeroshard::testing {

std::vector<std::string> CorpusFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) files.push_back(e.path().string());  // follows the runfiles' symlinks
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void RunFuzzInput(const std::string& bytes) {
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  // An empty vector's data() may be null; libFuzzer passes a valid pointer.
  uint8_t empty = 0;
  LLVMFuzzerTestOneInput(copy.empty() ? &empty : copy.data(), copy.size());
}

CorpusRun RunFuzzCorpus(const std::string& dir, const CorpusMutations& m) {
  CorpusRun run;
  for (const std::string& path : CorpusFiles(dir)) {
    // Named before each file, so an abort in the target says which input.
    std::fprintf(stderr, "fuzz corpus: %s\n", path.c_str());
    const std::string file = ReadFileBytes(path);
    ++run.files;
    RunFuzzInput(file);
    ++run.inputs;
    if (m.prefix_step > 0) {
      const size_t step = std::max(m.prefix_step, file.size() / std::max<size_t>(m.max_prefixes, 1) + 1);
      for (size_t len = 0; len < file.size(); len += step, ++run.inputs) RunFuzzInput(file.substr(0, len));
    }
    for (size_t i = 0; i < std::min(m.flip_bytes, file.size()); i += std::max<size_t>(m.flip_step, 1)) {
      for (unsigned char flip : {0x01, 0x10, 0x80}) {
        std::string mutated = file;
        mutated[i] = static_cast<char>(mutated[i] ^ flip);
        RunFuzzInput(mutated);
        ++run.inputs;
      }
    }
  }
  return run;
}

}  // namespace zeroshard::testing
