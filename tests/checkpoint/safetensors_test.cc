#include "zeroshard/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::zeroshard::testing::StatusIs;

// ---------------------------------------------------------------- helpers

std::string TempPath(absl::string_view name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", info->test_suite_name(), ".",
                                       info->name());
  std::filesystem::create_directories(dir);
  return absl::StrCat(dir, "/", name);
}

void WriteFileBytes(const std::string& path, absl::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A file from a hand-written header and data section: the way corrupted files
// are made below.
std::string MakeFile(absl::string_view json, absl::string_view data = "") {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  absl::StrAppend(&out, json, data);
  return out;
}

absl::StatusOr<SafetensorsHeader> Parse(absl::string_view file) {
  return ParseSafetensorsHeader(file, file.size(), "test.safetensors");
}

// Values exactly representable in every dtype (so round trips compare exactly).
Tensor Sample(DType dtype, absl::Span<const int64_t> shape, int salt = 0) {
  const int64_t n = NumElements(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = IsFloatingPoint(dtype) ? static_cast<float>(i - 3 + salt) * 0.75f
                                  : static_cast<float>((i - 3 + salt) * 1000);
  }
  auto t = Tensor::FromVector<float>(absl::MakeConstSpan(v), shape, dtype);
  ZS_CHECK(t.ok(), t.status().ToString());
  return *t;
}

void ExpectSameValues(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.shape(), want.shape());
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<double> g, got.ToVector<double>());
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<double> w, want.ToVector<double>());
  EXPECT_EQ(g, w);
}

// The raw bytes of a tensor's elements in row-major order.
std::string RawBytes(const Tensor& t) {
  auto c = t.Contiguous();
  ZS_CHECK(c.ok(), c.status().ToString());
  return std::string(static_cast<const char*>(c->raw_data()), c->nbytes());
}

// ---------------------------------------------------------------- dtypes

TEST(SafetensorsDTypeTest, NamesRoundTrip) {
  for (DType d : kAllDTypes) {
    ZS_ASSERT_OK_AND_ASSIGN(DType back, ParseSafetensorsDType(SafetensorsDTypeName(d)));
    EXPECT_EQ(back, d);
  }
  EXPECT_EQ(SafetensorsDTypeName(DType::kBF16), "BF16");
  EXPECT_THAT(ParseSafetensorsDType("F64"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("\"F64\"")));
  EXPECT_THAT(ParseSafetensorsDType("U8"), StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("U8")));
  EXPECT_THAT(ParseSafetensorsDType("f32"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown dtype \"f32\"")));
  EXPECT_THAT(ParseSafetensorsDType(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown")));
}

// ---------------------------------------------------------------- round trips

TEST(SafetensorsRoundTripTest, EveryDType) {
  SafetensorsTensors tensors;
  for (DType d : kAllDTypes) {
    tensors.emplace_back(absl::StrCat("t.", DTypeName(d)), Sample(d, {2, 3}));
  }
  const std::string path = TempPath("all.safetensors");
  ZS_ASSERT_OK(WriteSafetensors(path, tensors));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path));
  ASSERT_EQ(f.entries().size(), tensors.size());
  EXPECT_THAT(f.metadata(), IsEmpty());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    // Entries come back in file order, which is the writer's order.
    EXPECT_EQ(f.entries()[i].name, name);
    EXPECT_EQ(f.entries()[i].dtype, t.dtype());
    EXPECT_EQ(f.entries()[i].shape, t.shape());
    ZS_ASSERT_OK_AND_ASSIGN(Tensor got, f.Read(name));
    EXPECT_TRUE(got.is_contiguous());
    ExpectSameValues(got, t);
    EXPECT_EQ(RawBytes(got), RawBytes(t)) << name;
  }
}

// Written files honour the umask, as open(path, O_CREAT, 0666) would (issue 26:
// they were forced to 0644, readable by all under umask 077 or 027).
TEST(SafetensorsRoundTripTest, WrittenFilesHonourTheUmask) {
  std::vector<float> values = {1, 2};
  const Tensor t = Tensor::Wrap(values.data(), {2}, DType::kF32);
  for (const mode_t mask : {mode_t{022}, mode_t{027}, mode_t{077}}) {
    const mode_t before = ::umask(mask);  // the test is single-threaded here
    const std::string path = TempPath(absl::StrCat("umask", mask, ".safetensors"));
    const absl::Status written = WriteSafetensors(path, {{"t", t}});
    ::umask(before);
    ZS_ASSERT_OK(written);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask) << "umask " << std::oct << mask;
  }
}

TEST(SafetensorsRoundTripTest, HalfBitPatternsSurviveUnchanged) {
  // NaNs with payloads, signed zero, infinities, subnormals, extremes: copied bit for bit.
  std::vector<uint16_t> bits = {0x0000, 0x8000, 0x0001, 0x8001, 0x7f80, 0xff80, 0x7fc1, 0xffff,
                                0x7f7f, 0x3f80, 0x7e01, 0x7c00, 0xfc00, 0x03ff, 0x7bff, 0x3c00};
  const Tensor bf16 = Tensor::Wrap(bits.data(), {4, 4}, DType::kBF16);
  const Tensor f16 = Tensor::Wrap(bits.data(), {16}, DType::kF16);
  const std::string path = TempPath("half.safetensors");
  ZS_ASSERT_OK(WriteSafetensors(path, {{"bf16", bf16}, {"f16", f16}}));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path));
  for (const char* name : {"bf16", "f16"}) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor got, f.Read(name));
    ASSERT_EQ(got.nbytes(), bits.size() * 2);
    EXPECT_EQ(std::memcmp(got.raw_data(), bits.data(), got.nbytes()), 0) << name;
  }
}

TEST(SafetensorsRoundTripTest, IntegerExtremes) {
  std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(), -1, 0, 1,
                              std::numeric_limits<int64_t>::max()};
  std::vector<int32_t> i32 = {std::numeric_limits<int32_t>::min(), -1, 0,
                              std::numeric_limits<int32_t>::max()};
  ZS_ASSERT_OK_AND_ASSIGN(std::string bytes,
                          SerializeSafetensors({{"a", Tensor::Wrap(i64.data(), {5}, DType::kI64)},
                                                {"b", Tensor::Wrap(i32.data(), {4}, DType::kI32)}}));
  const std::string path = TempPath("ints.safetensors");
  WriteFileBytes(path, bytes);
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, f.Read("a"));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor b, f.Read("b"));
  EXPECT_EQ(*a.ToVector<int64_t>(), i64);
  EXPECT_EQ(*b.ToVector<int32_t>(), i32);
}

TEST(SafetensorsRoundTripTest, ScalarsAndEmptyTensors) {
  const Tensor scalar = Sample(DType::kF32, {}, 7);  // 0-d: shape []
  const Tensor empty = Sample(DType::kBF16, {0});
  const Tensor empty2d = Sample(DType::kI64, {3, 0});
  const Tensor after = Sample(DType::kI32, {2});
  const SafetensorsTensors tensors = {
      {"scalar", scalar}, {"empty", empty}, {"empty2d", empty2d}, {"after", after}};
  ZS_ASSERT_OK_AND_ASSIGN(std::string header, BuildSafetensorsHeader(tensors));
  EXPECT_THAT(header, HasSubstr(R"("scalar":{"dtype":"F32","shape":[],"data_offsets":[0,4]})"));
  EXPECT_THAT(header, HasSubstr(R"("empty":{"dtype":"BF16","shape":[0],"data_offsets":[4,4]})"));
  EXPECT_THAT(header, HasSubstr(R"("empty2d":{"dtype":"I64","shape":[3,0],"data_offsets":[4,4]})"));

  const std::string path = TempPath("scalars.safetensors");
  ZS_ASSERT_OK(WriteSafetensors(path, tensors));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path));
  for (const auto& [name, t] : tensors) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor got, f.Read(name));
    ExpectSameValues(got, t);
  }
  ZS_ASSERT_OK_AND_ASSIGN(Tensor s, f.Read("scalar"));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(*s.Item(), 3.0);  // (0 - 3 + 7) * 0.75
}

TEST(SafetensorsRoundTripTest, NonContiguousInputsAreWrittenContiguous) {
  const Tensor base = Sample(DType::kF32, {4, 6});
  ZS_ASSERT_OK_AND_ASSIGN(Tensor transposed, base.Transpose(0, 1));   // [6, 4]
  ZS_ASSERT_OK_AND_ASSIGN(Tensor stepped, base.Slice(1, 1, 6, 2));    // [4, 3]
  ZS_ASSERT_OK_AND_ASSIGN(Tensor row, Sample(DType::kF16, {1, 5}).Expand({3, 5}));  // stride 0
  ZS_ASSERT_OK_AND_ASSIGN(Tensor narrowed, base.Narrow(0, 1, 2));    // contiguous, offset 6
  ASSERT_FALSE(transposed.is_contiguous());
  ASSERT_FALSE(stepped.is_contiguous());
  const SafetensorsTensors tensors = {
      {"transposed", transposed}, {"stepped", stepped}, {"expanded", row}, {"narrowed", narrowed}};
  const std::string path = TempPath("strided.safetensors");
  ZS_ASSERT_OK(WriteSafetensors(path, tensors));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path));
  for (const auto& [name, t] : tensors) {
    ZS_ASSERT_OK_AND_ASSIGN(Tensor got, f.Read(name));
    ExpectSameValues(got, t);
  }
  // The same bytes as writing contiguous copies.
  SafetensorsTensors copies;
  for (const auto& [name, t] : tensors) copies.emplace_back(name, *t.Clone());
  ZS_ASSERT_OK_AND_ASSIGN(std::string want, SerializeSafetensors(copies));
  EXPECT_EQ(ReadFileBytes(path), want);
}

TEST(SafetensorsRoundTripTest, Metadata) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"step", "100"}, {"empty", ""}, {"unicode", "caf\xc3\xa9 \"quoted\""}};
  const std::string path = TempPath("meta.safetensors");
  ZS_ASSERT_OK(WriteSafetensors(path, {{"x", Sample(DType::kF32, {2})}}, metadata));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path));
  EXPECT_EQ(f.metadata(), metadata);
  // Metadata only, no tensors: a valid file too.
  ZS_ASSERT_OK(WriteSafetensors(path, {}, {{"only", "metadata"}}));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile g, SafetensorsFile::Open(path));
  EXPECT_THAT(g.entries(), IsEmpty());
  EXPECT_EQ(g.metadata().at("only"), "metadata");
}

// ---------------------------------------------------------------- determinism

TEST(SafetensorsWriterTest, ExactBytes) {
  std::vector<float> x = {1.0f, 2.0f};
  std::vector<int64_t> ids = {7};
  const SafetensorsTensors tensors = {{"x", Tensor::Wrap(x.data(), {2}, DType::kF32)},
                                      {"ids", Tensor::Wrap(ids.data(), {1, 1}, DType::kI64)}};
  ZS_ASSERT_OK_AND_ASSIGN(std::string bytes, SerializeSafetensors(tensors, {{"b", "2"}, {"a", "1"}}));
  const std::string json =
      R"({"__metadata__":{"a":"1","b":"2"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("ids":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]}})";
  std::string padded = json;
  padded.append((8 - json.size() % 8) % 8, ' ');
  std::string data(16, '\0');
  std::memcpy(data.data(), x.data(), 8);
  std::memcpy(data.data() + 8, ids.data(), 8);
  EXPECT_EQ(bytes, MakeFile(padded, data));
  EXPECT_EQ((bytes.size() - 16) % 8, 0u);  // the data section starts 8-aligned

  // Same input, same bytes; and the file on disk is exactly the serialized form.
  ZS_ASSERT_OK_AND_ASSIGN(std::string again, SerializeSafetensors(tensors, {{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(again, bytes);
  const std::string path = TempPath("exact.safetensors");
  ZS_ASSERT_OK(WriteSafetensors(path, tensors, {{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(ReadFileBytes(path), bytes);
}

TEST(SafetensorsWriterTest, RefusesBadEntries) {
  const Tensor t = Sample(DType::kF32, {2});
  const std::string path = TempPath("bad.safetensors");
  EXPECT_THAT(WriteSafetensors(path, {{"a", t}, {"a", t}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'a' appears twice")));
  EXPECT_THAT(WriteSafetensors(path, {{"", t}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty name")));
  EXPECT_THAT(WriteSafetensors(path, {{"__metadata__", t}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reserves")));
  EXPECT_THAT(WriteSafetensors(path, {{"u", Tensor()}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("undefined")));
  EXPECT_THAT(WriteSafetensors(path, {{"bad\xff", t}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("UTF-8")));
  EXPECT_THAT(WriteSafetensors(path, {{"x", t}}, {{"k", "\xc3"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("UTF-8")));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THAT(WriteSafetensors(TempPath("no/such/dir/x.safetensors"), {{"x", t}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("temporary file")));
}

// ---------------------------------------------------------------- atomic writes

std::vector<std::string> DirectoryListing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(SafetensorsAtomicWriteTest, FailedWriteKeepsThePreviousFile) {
  const std::string path = TempPath("model.safetensors");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const SafetensorsTensors old_tensors = {{"w", Sample(DType::kF32, {3, 4})}};
  ZS_ASSERT_OK(WriteSafetensors(path, old_tensors, {{"step", "1"}}));
  const std::string old_bytes = ReadFileBytes(path);

  const SafetensorsTensors new_tensors = {{"w", Sample(DType::kF32, {3, 4}, 5)},
                                          {"b", Sample(DType::kBF16, {64})}};
  ZS_ASSERT_OK_AND_ASSIGN(std::string new_bytes, SerializeSafetensors(new_tensors, {{"step", "2"}}));
  const int64_t total = static_cast<int64_t>(new_bytes.size());
  const int64_t header = total - 48 - 128;
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{8}, header - 1, header, header + 5,
                    total - 1, total}) {
    SCOPED_TRACE(absl::StrCat("fail_after_bytes = ", k));
    EXPECT_THAT(WriteSafetensors(path, new_tensors, {{"step", "2"}},
                                 SafetensorsWriteOptions{.fail_after_bytes = k}),
                // The hook is a full disk (Note [Full disk] in checkpoint/atomic_file.h).
                StatusIs(absl::StatusCode::kResourceExhausted,
                         AllOf(HasSubstr("model.safetensors.tmp."),
                               HasSubstr("No space left on device (injected: fail_after_bytes)"))));
    EXPECT_EQ(ReadFileBytes(path), old_bytes);
    // The temporary file is gone: the directory holds the old file only.
    EXPECT_THAT(DirectoryListing(dir), ElementsAre("model.safetensors"));
    ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path));
    EXPECT_EQ(f.metadata().at("step"), "1");
  }
  // A budget larger than the file is never reached: the write succeeds.
  ZS_ASSERT_OK(WriteSafetensors(path, new_tensors, {{"step", "2"}},
                                SafetensorsWriteOptions{.fail_after_bytes = total + 1}));
  EXPECT_EQ(ReadFileBytes(path), new_bytes);
  EXPECT_THAT(DirectoryListing(dir), ElementsAre("model.safetensors"));
}

TEST(SafetensorsAtomicWriteTest, StaleTemporaryFilesDoNotInterfere) {
  // A crash mid-save leaves `<path>.tmp.<pid>.<suffix>` behind; later saves and
  // loads ignore it.
  const std::string path = TempPath("model.safetensors");
  WriteFileBytes(absl::StrCat(path, ".tmp.", getpid(), ".AAAAAA"), "partial garbage");
  ZS_ASSERT_OK(WriteSafetensors(path, {{"w", Sample(DType::kF32, {2})}}));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path));
  EXPECT_EQ(f.entries().size(), 1u);
}

TEST(SafetensorsAtomicWriteTest, WrittenFileIsWorldReadable) {
  const std::string path = TempPath("perm.safetensors");
  ZS_ASSERT_OK(WriteSafetensors(path, {{"w", Sample(DType::kF32, {2})}}));
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

// ---------------------------------------------------------------- reading

class SafetensorsReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("read.safetensors");
    ZS_ASSERT_OK(WriteSafetensors(path_, {{"a", Sample(DType::kF32, {4, 5})},
                                          {"ids", Sample(DType::kI64, {6})},
                                          {"h", Sample(DType::kBF16, {2, 3})}}));
  }
  std::string path_;
};

TEST_F(SafetensorsReadTest, HeaderDescribesEntries) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  ASSERT_EQ(f.entries().size(), 3u);
  const SafetensorsEntry& a = f.entries()[0];
  EXPECT_EQ(a.DebugString(), "a: F32 [4, 5] bytes [0, 80)");
  EXPECT_EQ(f.entries()[1].DebugString(), "ids: I64 [6] bytes [80, 128)");
  EXPECT_EQ(f.entries()[2].DebugString(), "h: BF16 [2, 3] bytes [128, 140)");
  EXPECT_EQ(f.header().data_offset, 8 + f.header().header_size);
  EXPECT_EQ(f.header().data_size, 140u);
  EXPECT_EQ(f.file_size(), f.header().data_offset + 140);
  EXPECT_TRUE(f.Contains("ids"));
  EXPECT_FALSE(f.Contains("nope"));
  EXPECT_THAT(f.Find("nope"), StatusIs(absl::StatusCode::kNotFound,
                                       AllOf(HasSubstr("no entry 'nope'"), HasSubstr("read.safetensors"),
                                             HasSubstr("3 entries: a, ids, h"))));
  EXPECT_THAT(f.Read("nope"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nope'")));
}

TEST_F(SafetensorsReadTest, ReadIntoStridedOutputAndConvertedDType) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  // A transposed view of a bigger buffer: the scatter goes through CopyFrom.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor buffer, Tensor::Zeros({5, 6}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor view, buffer.Narrow(1, 1, 4));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, view.Transpose(0, 1));  // [4, 5], not contiguous
  ZS_ASSERT_OK(f.ReadInto("a", out));
  ExpectSameValues(out, Sample(DType::kF32, {4, 5}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor untouched, buffer.Narrow(1, 0, 1));
  EXPECT_THAT(*untouched.ToVector<float>(), ::testing::Each(0.0f));

  // f32 file, bf16 output (and back): converted, round to nearest-even.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bf, Tensor::Zeros({4, 5}, DType::kBF16));
  ZS_ASSERT_OK(f.ReadInto("a", bf));
  EXPECT_EQ(*bf.ToVector<float>(), *Sample(DType::kF32, {4, 5}).ToVector<float>());
  ZS_ASSERT_OK_AND_ASSIGN(Tensor f32, Tensor::Zeros({2, 3}, DType::kF32));
  ZS_ASSERT_OK(f.ReadInto("h", f32));
  EXPECT_EQ(*f32.ToVector<float>(), *Sample(DType::kBF16, {2, 3}).ToVector<float>());
  // i64 -> i32 is an integer conversion, allowed.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor i32, Tensor::Zeros({6}, DType::kI32));
  ZS_ASSERT_OK(f.ReadInto("ids", i32));
  EXPECT_EQ(*i32.ToVector<int64_t>(), *Sample(DType::kI64, {6}).ToVector<int64_t>());
}

TEST_F(SafetensorsReadTest, ReadIntoRefusesMismatches) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor wrong_shape, Tensor::Zeros({5, 4}, DType::kF32));
  EXPECT_THAT(f.ReadInto("a", wrong_shape),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'a'"), HasSubstr("[4, 5]"), HasSubstr("[5, 4]"))));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ints, Tensor::Zeros({4, 5}, DType::kI32));
  EXPECT_THAT(f.ReadInto("a", ints), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("between floating and integer")));
  EXPECT_THAT(f.ReadInto("a", Tensor()), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("undefined")));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor one, Tensor::Zeros({1, 5}, DType::kF32));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor expanded, one.Expand({4, 5}));
  EXPECT_THAT(f.ReadInto("a", expanded), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("stride-0")));
}

TEST_F(SafetensorsReadTest, ReadRange) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  const std::vector<float> all = *Sample(DType::kF32, {4, 5}).ToVector<float>();
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Zeros({7}, DType::kF32));
  ZS_ASSERT_OK(f.ReadRange("a", 5, 7, out));
  EXPECT_EQ(*out.ToVector<float>(), std::vector<float>(all.begin() + 5, all.begin() + 12));
  // Any output shape with the right count; converted dtype.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bf, Tensor::Zeros({2, 3}, DType::kBF16));
  ZS_ASSERT_OK(f.ReadRange("a", 14, 6, bf));
  EXPECT_EQ(*bf.ToVector<float>(), std::vector<float>(all.begin() + 14, all.end()));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, Tensor::Zeros({2}, DType::kI64));
  ZS_ASSERT_OK(f.ReadRange("ids", 4, 2, ids));
  EXPECT_THAT(*ids.ToVector<int64_t>(), ElementsAre(1000, 2000));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor none, Tensor::Zeros({0}, DType::kF32));
  ZS_ASSERT_OK(f.ReadRange("a", 20, 0, none));

  EXPECT_THAT(f.ReadRange("a", 15, 6, *Tensor::Zeros({6}, DType::kF32)),
              StatusIs(absl::StatusCode::kOutOfRange,
                       AllOf(HasSubstr("6 elements from element 15"), HasSubstr("20 elements"))));
  EXPECT_THAT(f.ReadRange("a", -1, 1, *Tensor::Zeros({1}, DType::kF32)),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'a'")));
  EXPECT_THAT(f.ReadRange("a", 0, std::numeric_limits<int64_t>::max(), out),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'a'")));
  EXPECT_THAT(f.ReadRange("a", 15, std::numeric_limits<int64_t>::max(), out),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("'a'")));
  EXPECT_THAT(f.ReadRange("a", 0, 3, out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("output of 7 elements")));
}

TEST_F(SafetensorsReadTest, ReadRangeReadsOnlyItsBytes) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  // Cut the file after element 9 of "a": elements [2, 10) still read; the rest
  // of "a" is gone, and reading it reports the short file instead of crashing.
  ASSERT_EQ(truncate(path_.c_str(), static_cast<off_t>(f.header().data_offset + 40)), 0);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Zeros({8}, DType::kF32));
  ZS_ASSERT_OK(f.ReadRange("a", 2, 8, out));
  const std::vector<float> all = *Sample(DType::kF32, {4, 5}).ToVector<float>();
  EXPECT_EQ(*out.ToVector<float>(), std::vector<float>(all.begin() + 2, all.begin() + 10));
  EXPECT_THAT(f.ReadRange("a", 9, 2, *Tensor::Zeros({2}, DType::kF32)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("did it shrink")));
  EXPECT_THAT(f.Read("h"), StatusIs(absl::StatusCode::kDataLoss,
                                    AllOf(HasSubstr("read.safetensors"), HasSubstr("entry 'h'"))));
  // Opened afresh, the truncated file is refused up front.
  EXPECT_THAT(SafetensorsFile::Open(path_),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
}

TEST_F(SafetensorsReadTest, ReadWithAllocator) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  CpuAllocator budget(CpuAllocator::Options{.name = "budget", .capacity_bytes = 64});
  ZS_ASSERT_OK_AND_ASSIGN(Tensor ids, f.Read("ids", &budget));
  EXPECT_EQ(ids.allocator(), &budget);
  EXPECT_EQ(budget.stats().bytes_in_use, 48);
  EXPECT_THAT(f.Read("a", &budget), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("budget")));
}

TEST_F(SafetensorsReadTest, MovedFileStillReads) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  SafetensorsFile g = std::move(f);
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile h, SafetensorsFile::Open(path_));
  h = std::move(g);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, h.Read("a"));
  ExpectSameValues(a, Sample(DType::kF32, {4, 5}));
}

// Device tensors are written through a host copy and read through a host
// staging buffer. Skipped without a GPU.
TEST_F(SafetensorsReadTest, DeviceTensors) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator gpu(0);
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(path_));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor a, f.Read("a", &gpu));
  EXPECT_EQ(a.device(), gpu.device());
  ExpectSameValues(a, Sample(DType::kF32, {4, 5}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor out, Tensor::Zeros({4, 5}, DType::kBF16, &gpu));
  ZS_ASSERT_OK(f.ReadInto("a", out));
  ExpectSameValues(out, Sample(DType::kBF16, {4, 5}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor part, Tensor::Zeros({3}, DType::kI64, &gpu));
  ZS_ASSERT_OK(f.ReadRange("ids", 1, 3, part));
  EXPECT_THAT(*part.ToVector<int64_t>(), ElementsAre(-2000, -1000, 0));
  // Writing a device tensor (and a transposed view of one) gives the host bytes.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor at, a.Transpose(0, 1));
  const std::string path = TempPath("device.safetensors");
  ZS_ASSERT_OK(WriteSafetensors(path, {{"a", a}, {"at", at}}));
  ZS_ASSERT_OK_AND_ASSIGN(std::string want,
                          SerializeSafetensors({{"a", Sample(DType::kF32, {4, 5})},
                                                {"at", *Sample(DType::kF32, {4, 5}).Transpose(0, 1)}}));
  EXPECT_EQ(ReadFileBytes(path), want);
}

TEST(SafetensorsOpenTest, MissingFileAndDirectory) {
  EXPECT_THAT(SafetensorsFile::Open(TempPath("missing.safetensors")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.safetensors")));
  const std::string dir = TempPath("adir");
  std::filesystem::create_directories(dir);
  EXPECT_THAT(SafetensorsFile::Open(dir),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a regular file")));
}

// A FIFO in a file's place (issue 26): open(2) of a FIFO for reading blocks
// until a writer comes, i.e. forever; Open refuses it at once instead.
TEST(SafetensorsOpenTest, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = TempPath("fifo.safetensors");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_THAT(SafetensorsFile::Open(fifo),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("fifo.safetensors"), HasSubstr("not a regular file"))));
}

// ---------------------------------------------------------------- corruption

struct CorruptCase {
  std::string label;
  std::string file;  // the whole file
  absl::StatusCode code;
  std::string message;  // a substring of the error
};

std::string F32Entry(absl::string_view name, absl::string_view shape, uint64_t begin, uint64_t end) {
  return absl::StrCat("\"", name, "\":{\"dtype\":\"F32\",\"shape\":", shape,
                      ",\"data_offsets\":[", begin, ",", end, "]}");
}

std::string WithSize(uint64_t n, absl::string_view rest) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  absl::StrAppend(&out, rest);
  return out;
}

std::vector<CorruptCase> CorruptCases() {
  const std::string d8(8, 'x'), d12(12, 'x'), d20(20, 'x'), d24(24, 'x');
  const auto kLoss = absl::StatusCode::kDataLoss;
  return {
      {"empty file", "", kLoss, "shorter than the 8-byte header size"},
      {"5 bytes", "\x10\0\0\0\0", kLoss, "shorter than the 8-byte"},
      {"header size 0", WithSize(0, ""), kLoss, "at least 2"},
      {"header size huge", WithSize(uint64_t{1} << 60, "{}"), kLoss, "more than the limit"},
      {"header overruns file", WithSize(100, "{}"), kLoss,
       "header size is 100 bytes but only 2 bytes follow"},
      {"header past limit", WithSize(kMaxSafetensorsHeaderSize + 1, "{}"), kLoss, "limit"},
      {"not an object", MakeFile("[1, 2]"), kLoss, "should start with '{', found byte 0x5b"},
      {"bad json", MakeFile("{\"a\":"), kLoss, "not valid JSON"},
      {"trailing junk", MakeFile("{}}"), kLoss, "not valid JSON"},
      {"invalid utf-8", MakeFile("{\"\xff\":1}"), kLoss, "not valid JSON"},
      {"nul in header", MakeFile(std::string("{}\0", 3)), kLoss, "not valid JSON"},
      {"duplicate entry", MakeFile("{" + F32Entry("a", "[2]", 0, 8) + "," + F32Entry("a", "[2]", 0, 8) + "}", d8),
       kLoss, "the key 'a' twice"},
      {"duplicate field", MakeFile(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8),
       kLoss, "the key 'dtype' twice"},
      {"too deep", MakeFile("{\"__x\":" + std::string(40, '[') + std::string(40, ']') + "}"), kLoss,
       "deeper than 32"},
      {"entry not object", MakeFile(R"({"a":[1]})"), kLoss, "entry 'a': expected an object"},
      {"missing dtype", MakeFile(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", d8), kLoss,
       "entry 'a': missing \"dtype\""},
      {"missing shape", MakeFile(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", d8), kLoss,
       "missing \"shape\""},
      {"missing offsets", MakeFile(R"({"a":{"dtype":"F32","shape":[2]}})", d8), kLoss,
       "missing \"data_offsets\""},
      {"dtype not string", MakeFile(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", d8),
       kLoss, "\"dtype\" should be a string, found the value 4"},
      {"unknown dtype", MakeFile(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", d8),
       absl::StatusCode::kInvalidArgument, "entry 'a': unknown dtype \"F33\""},
      {"unsupported dtype", MakeFile(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", d8),
       absl::StatusCode::kUnimplemented, "entry 'w': dtype \"F64\" is a safetensors dtype"},
      {"shape not array", MakeFile(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", d8),
       kLoss, "\"shape\" should be an array"},
      {"negative dim", MakeFile("{" + F32Entry("a", "[-2]", 0, 8) + "}", d8), kLoss,
       "entry 'a': shape[0]: expected an integer in [0, 2^63), found the value -2"},
      {"fractional dim", MakeFile("{" + F32Entry("a", "[2,1.5]", 0, 8) + "}", d8), kLoss,
       "shape[1]: expected an integer"},
      {"huge dim", MakeFile("{" + F32Entry("a", "[18446744073709551615]", 0, 8) + "}", d8), kLoss,
       "shape[0]: expected an integer in [0, 2^63)"},
      {"dims overflow", MakeFile("{" + F32Entry("a", "[4294967296,4294967296]", 0, 8) + "}", d8),
       kLoss, "more elements than any file can hold"},
      // No elements, so no bytes, but the contiguous strides (4, then 4 * 2^62)
      // overflow int64: every product of dimensions is checked, zeros counted as 1.
      {"zero dim beside dims that overflow",
       MakeFile("{" + F32Entry("a", "[0,4611686018427387904,4]", 0, 0) + "}"), kLoss,
       "entry 'a': shape [0, 4611686018427387904, 4] has no elements, but the product of its other "
       "dimensions overflows int64"},
      {"zero dim last", MakeFile("{" + F32Entry("a", "[4611686018427387904,4,0]", 0, 0) + "}"), kLoss,
       "entry 'a': shape [4611686018427387904, 4, 0] has no elements, but the product of its other"},
      {"zero dim between huge dims",
       MakeFile("{" + F32Entry("a", "[4611686018427387904,0,4611686018427387904]", 0, 0) + "}"), kLoss,
       "shape [4611686018427387904, 0, 4611686018427387904] has no elements, but"},
      {"elements times itemsize overflow",
       MakeFile("{" + F32Entry("a", "[4611686018427387904]", 0, 8) + "}", d8), kLoss,
       "more elements than any file can hold"},
      {"offsets not pair", MakeFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", d8),
       kLoss, "\"data_offsets\" should be an array [begin, end], found an array of 3"},
      {"negative offset", MakeFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", d8),
       kLoss, "entry 'a': data_offsets[0]: expected an integer in [0, 2^63), found the value -1"},
      {"offsets reversed", MakeFile("{" + F32Entry("a", "[0]", 8, 4) + "," + F32Entry("b", "[2]", 0, 8) + "}", d8),
       kLoss, "entry 'a': data_offsets [8, 4] are out of order"},
      {"size mismatch", MakeFile("{" + F32Entry("a", "[2,3]", 0, 20) + "}", d20), kLoss,
       "shape [2, 3] of F32 needs 6 * 4 = 24 bytes, but data_offsets [0, 20] hold 20"},
      {"truncated data", MakeFile("{" + F32Entry("a", "[2,3]", 0, 24) + "}", d20), kLoss,
       "extend past the end of the data section (20 bytes)"},
      {"overlap", MakeFile("{" + F32Entry("a", "[2]", 0, 8) + "," + F32Entry("b", "[2]", 4, 12) + "}", d12),
       kLoss, "entry 'b' (bytes [4, 12)) overlaps entry 'a' (bytes [0, 8))"},
      {"same range twice", MakeFile("{" + F32Entry("a", "[2]", 0, 8) + "," + F32Entry("b", "[2]", 0, 8) + "}", d8),
       kLoss, "overlaps"},
      {"hole", MakeFile("{" + F32Entry("a", "[2]", 0, 8) + "," + F32Entry("b", "[2]", 12, 20) + "}", d20),
       kLoss, "hole: bytes [8, 12) belong to no entry"},
      {"hole at start", MakeFile("{" + F32Entry("a", "[2]", 4, 12) + "}", d12), kLoss,
       "hole: bytes [0, 4)"},
      {"trailing bytes", MakeFile("{" + F32Entry("a", "[2]", 0, 8) + "}", d12), kLoss,
       "cover 8 bytes of the data section but the file holds 12"},
      {"data without entries", MakeFile("{}", d8), kLoss, "cover 0 bytes"},
      {"metadata not object", MakeFile(R"({"__metadata__":["a"]})"), kLoss,
       "__metadata__ should be an object of strings"},
      {"metadata value number", MakeFile(R"({"__metadata__":{"step":3}})"), kLoss,
       "__metadata__ value of 'step' should be a string, found the value 3"},
  };
}

TEST(SafetensorsCorruptionTest, EveryKindGivesItsError) {
  for (const CorruptCase& c : CorruptCases()) {
    SCOPED_TRACE(c.label);
    // From memory...
    EXPECT_THAT(Parse(c.file), StatusIs(c.code, AllOf(HasSubstr(c.message),
                                                      HasSubstr("test.safetensors"))));
    // ...and from a file: the error names the file.
    const std::string path = TempPath("corrupt.safetensors");
    WriteFileBytes(path, c.file);
    EXPECT_THAT(SafetensorsFile::Open(path),
                StatusIs(c.code, AllOf(HasSubstr(c.message), HasSubstr(path))));
  }
}

TEST(SafetensorsCorruptionTest, ValidHandWrittenFilesParse) {
  // Entries listed out of data order; unknown fields ignored; whitespace padding;
  // zero-size entries sharing an offset.
  const std::string json = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12],"extra":[1,{"x":2}]},)"
                           R"("z":{"dtype":"I64","shape":[0,5],"data_offsets":[8,8]},)"
                           R"( "a" : {"data_offsets":[0,8],"shape":[4],"dtype":"BF16"}, )"
                           R"("e":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},)"
                           R"("__metadata__":{}}    )";
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsHeader h, Parse(MakeFile(json, std::string(12, '\0'))));
  std::vector<std::string> order;
  for (const auto& e : h.entries) order.push_back(e.name);
  EXPECT_THAT(order, ElementsAre("e", "a", "z", "b"));
  ASSERT_NE(h.Find("a"), nullptr);
  EXPECT_EQ(h.Find("a")->DebugString(), "a: BF16 [4] bytes [0, 8)");
  EXPECT_EQ(h.Find("missing"), nullptr);
  EXPECT_THAT(h.metadata, IsEmpty());
  // The smallest file: "{}" and nothing else.
  ZS_EXPECT_OK(Parse(MakeFile("{}")));
}

TEST(SafetensorsCorruptionTest, CallerErrors) {
  const std::string file = MakeFile("{}");
  EXPECT_THAT(ParseSafetensorsHeader(file, file.size() - 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("said to be")));
  EXPECT_THAT(ParseSafetensorsHeader(absl::string_view(file).substr(0, 5), file.size()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("first 8 bytes")));
  const std::string big = MakeFile(std::string("{}") + std::string(30, ' '));
  EXPECT_THAT(ParseSafetensorsHeader(absl::string_view(big).substr(0, 12), big.size()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the first 8 + N bytes")));
}

// Every prefix of a valid file, and every single-byte change to its header,
// parses or fails cleanly: never a crash, never a read past the buffer.
TEST(SafetensorsCorruptionTest, TruncationsAndByteFlipsNeverCrash) {
  ZS_ASSERT_OK_AND_ASSIGN(
      std::string file,
      SerializeSafetensors({{"w", Sample(DType::kF32, {2, 3})}, {"ids", Sample(DType::kI64, {2})},
                            {"s", Sample(DType::kBF16, {})}},
                           {{"k", "v"}}));
  ZS_ASSERT_OK(Parse(file));
  for (size_t len = 0; len < file.size(); ++len) {
    // A heap copy of exactly `len` bytes, so a sanitizer would see any overrun.
    std::vector<char> prefix(file.begin(), file.begin() + len);
    EXPECT_FALSE(ParseSafetensorsHeader(absl::string_view(prefix.data(), len), len).ok()) << len;
  }
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsHeader h, Parse(file));
  int accepted = 0;
  for (size_t i = 0; i < h.data_offset; ++i) {
    for (unsigned char flip : {0x01, 0x20, 0x80, 0xff}) {
      std::string mutated = file;
      mutated[i] = static_cast<char>(mutated[i] ^ flip);
      absl::StatusOr<SafetensorsHeader> r = Parse(mutated);
      if (r.ok()) ++accepted;  // e.g. a changed metadata value or name: still valid
    }
  }
  EXPECT_LT(accepted, static_cast<int>(h.data_offset));
}

}  // namespace
}  // namespace zeroshard
