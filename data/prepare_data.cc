// prepare_data: text files to token files for training.
//
//   bazel build -c opt //data:prepare_data
//   bazel-bin/data/prepare_data --tokenizer=gpt2 --format=nanogpt data/tinyshakespeare.txt shakespeare.bin
//   bazel-bin/data/prepare_data --tokenizer=gpt2 --format=llmc --val_fraction=0.1 a.txt b.txt out.bin
//       # writes out_train.bin (the first 90% of the tokens) and out_val.bin (the rest)
//
// The inputs are encoded one after the other into one token stream (with --eot, the
// end-of-text token after each file). With --val_fraction=f > 0 the stream is split:
// the first floor(N * (1 - f)) tokens go to OUT_train.bin, the rest to OUT_val.bin
// (OUT without its ".bin"), so the two files together are the ids of the whole text;
// with f = 0 (the default) everything goes to OUT. Formats: data/token_file.h; both
// read back with TokenData::Load. A progress bar goes to stderr for inputs of 8 MiB
// or more (--progress=always|never to choose).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/data/token_data.h"
#include "zeroshard/data/token_file.h"
#include "zeroshard/data/tokenizer.h"
#include "zeroshard/runtime/status.h"

ABSL_FLAG(std::string, tokenizer, "gpt2",
          "gpt2 (GPT-2's byte-level BPE, vocabulary 50257) or bytes (one token per byte, vocabulary 256)");
ABSL_FLAG(std::string, format, "nanogpt",
          "nanogpt (raw little-endian uint16) or llmc (llm.c's 1 KiB header, magic 20240520, then uint16)");
ABSL_FLAG(double, val_fraction, 0.0,
          "fraction of the tokens, at the end, for validation; > 0 writes OUT_train.bin and OUT_val.bin "
          "instead of OUT");
ABSL_FLAG(bool, eot, false, "append the end-of-text token (gpt2: 50256) after each input file");
ABSL_FLAG(std::string, progress, "auto", "progress bar on stderr: auto (inputs of 8 MiB or more), always, never");

namespace zeroshard {
namespace {

class ProgressBar {
 public:
  ProgressBar(int64_t total_bytes, bool enabled) : total_(total_bytes), enabled_(enabled), start_(Clock::now()) {}

  void Update(int64_t done_bytes, int64_t tokens, bool last = false) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!last && now - drawn_ < std::chrono::milliseconds(100)) return;
    drawn_ = now;
    const double fraction = total_ > 0 ? static_cast<double>(done_bytes) / total_ : 1.0;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\rprepare_data [%s] %3d%% %.1f/%.1f MB, %.1f MB/s, %lld tokens%s", bar.c_str(),
                 static_cast<int>(fraction * 100), done_bytes / 1e6, total_ / 1e6,
                 seconds > 0 ? done_bytes / 1e6 / seconds : 0.0, static_cast<long long>(tokens), last ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  bool enabled_;
  Clock::time_point start_, drawn_;
};

absl::StatusOr<std::string> ReadText(const std::string& path) {
  // ReadDataFile: a read error is an error, never a shorter text.
  absl::StatusOr<std::string> text = ReadDataFile(path);
  if (!text.ok()) return absl::Status(text.status().code(), absl::StrCat("prepare_data: ", text.status().message()));
  return text;
}

absl::Status Run(const std::vector<std::string>& inputs, const std::string& output) {
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, MakeTokenizer(absl::GetFlag(FLAGS_tokenizer)));
  ZS_ASSIGN_OR_RETURN(TokenFileFormat format, ParseTokenFileFormat(absl::GetFlag(FLAGS_format)));
  const double val_fraction = absl::GetFlag(FLAGS_val_fraction);
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--val_fraction=", val_fraction, ", expected 0 <= f < 1"));
  }
  if (absl::GetFlag(FLAGS_eot) && tokenizer->eot_token() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eot: the tokenizer \"", tokenizer->name(), "\" has no end-of-text token"));
  }
  const std::string progress = absl::GetFlag(FLAGS_progress);
  if (progress != "auto" && progress != "always" && progress != "never") {
    return absl::InvalidArgumentError(
        absl::StrCat("--progress=", progress, ", expected auto, always or never"));
  }

  std::vector<std::string> texts;
  int64_t total_bytes = 0;
  for (const std::string& path : inputs) {
    ZS_ASSIGN_OR_RETURN(std::string text, ReadText(path));
    total_bytes += static_cast<int64_t>(text.size());
    texts.push_back(std::move(text));
  }
  ProgressBar bar(total_bytes,
                  progress == "always" || (progress == "auto" && total_bytes >= (int64_t{8} << 20)));
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(total_bytes / 3));
  int64_t done = 0;
  constexpr size_t kPiece = size_t{1} << 20;  // bytes encoded between two progress updates
  for (std::string& text : texts) {
    for (size_t pos = 0; pos < text.size();) {
      const size_t cut = tokenizer->NextCut(text, pos + kPiece);
      tokenizer->EncodeTo(absl::string_view(text).substr(pos, cut - pos), &ids);
      done += static_cast<int64_t>(cut - pos);
      pos = cut;
      bar.Update(done, static_cast<int64_t>(ids.size()));
    }
    if (absl::GetFlag(FLAGS_eot)) ids.push_back(tokenizer->eot_token());
    std::string().swap(text);
  }
  bar.Update(done, static_cast<int64_t>(ids.size()), /*last=*/true);

  auto write = [&](const std::string& path, absl::Span<const int32_t> part) -> absl::Status {
    ZS_RETURN_IF_ERROR(WriteTokenFile(path, part, format));
    std::cout << absl::StrFormat("prepare_data: wrote %s: %d tokens (%s, %s)\n", path, part.size(),
                                 tokenizer->name(), TokenFileFormatName(format));
    return absl::OkStatus();
  };
  if (val_fraction == 0) return write(output, ids);
  const std::string stem = absl::EndsWith(output, ".bin") ? output.substr(0, output.size() - 4) : output;
  const size_t n_train = static_cast<size_t>(static_cast<double>(ids.size()) * (1 - val_fraction));
  const absl::Span<const int32_t> all(ids);
  ZS_RETURN_IF_ERROR(write(stem + "_train.bin", all.subspan(0, n_train)));
  return write(stem + "_val.bin", all.subspan(n_train));
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "text files to token files.\n"
      "  prepare_data [--tokenizer=gpt2|bytes] [--format=nanogpt|llmc] [--val_fraction=F] [--eot]\n"
      "               IN.txt [IN2.txt ...] OUT.bin\n"
      "The inputs are encoded in order into one token stream. With --val_fraction=F > 0 the first\n"
      "floor(N*(1-F)) tokens go to OUT_train.bin and the rest to OUT_val.bin (OUT without .bin);\n"
      "with F = 0 (the default) all go to OUT. nanogpt: raw little-endian uint16; llmc: llm.c's\n"
      "header (256 int32: 20240520, 1, count) then uint16. Both read back with TokenData::Load.");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 3) {
    std::cerr << "prepare_data: expected IN.txt [more.txt ...] OUT.bin, found " << args.size() - 1
              << " file argument(s); see --help\n";
    return 2;
  }
  const std::vector<std::string> inputs(args.begin() + 1, args.end() - 1);
  const absl::Status status = zeroshard::Run(inputs, args.back());
  if (!status.ok()) {
    std::cerr << status.message() << "\n";
    return 1;
  }
  return 0;
}
