// Reads safetensors files written from PyTorch by tools/golden/make_reference_files.py
// (committed under tests/checkpoint/testdata/; torch is not needed to run this).
// Every expected value is rebuilt here from the formulas that script documents.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/runtime/half.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr char kReference[] = "tests/checkpoint/testdata/torch_reference.safetensors";
constexpr char kShuffled[] = "tests/checkpoint/testdata/torch_shuffled.safetensors";

// memcmp of two tensors' bytes (empty tensors have no data pointer).
bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename T>
std::vector<T> RawElements(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), t.raw_data(), t.nbytes());
  return out;
}

// The float32 sources of round.bf16 / round.f16, as read from the file.
std::vector<float> RoundSource(const SafetensorsFile& f) {
  auto t = f.Read("round.source");
  ZS_CHECK(t.ok(), t.status().ToString());
  return RawElements<float>(*t);
}

// The tensors of torch_reference.safetensors, rebuilt in C++ (round.* from the
// float32 sources by zeroshard's own conversions).
SafetensorsTensors ExpectedReferenceTensors(const std::vector<float>& round_source) {
  std::vector<float> matrix(12);
  for (int i = 0; i < 12; ++i) matrix[i] = static_cast<float>(i) * 0.5f - 2.0f;
  std::vector<uint32_t> special = {0x7f800000u, 0xff800000u, 0x7fc00000u,
                                   0x80000000u, 0x00000001u, 0x7f7fffffu};
  std::vector<float> special_f(special.size());
  std::memcpy(special_f.data(), special.data(), special.size() * 4);
  std::vector<int32_t> i32 = {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
                              -1, 0, 1, 7, -7, 123456789};
  std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(), -1, 0, (int64_t{1} << 40) + 3};
  std::vector<int64_t> ids(16);
  for (int64_t i = 0; i < 16; ++i) ids[i] = (i * 7 + 3) % 50257;
  auto make = [](auto values, std::initializer_list<int64_t> shape, DType dtype) {
    using T = typename decltype(values)::value_type;
    auto t = Tensor::FromVector<T>(values, absl::Span<const int64_t>(shape.begin(), shape.size()), dtype);
    ZS_CHECK(t.ok(), t.status().ToString());
    return *t;
  };
  const int64_t n = static_cast<int64_t>(round_source.size());
  return {
      {"f32.matrix", make(matrix, {3, 4}, DType::kF32)},
      {"f32.special", make(special_f, {6}, DType::kF32)},
      {"round.source", make(round_source, {n}, DType::kF32)},
      {"round.bf16", make(round_source, {n}, DType::kBF16)},
      {"round.f16", make(round_source, {n}, DType::kF16)},
      {"i32.values", make(i32, {2, 2, 2}, DType::kI32)},
      {"i64.values", make(i64, {5}, DType::kI64)},
      {"token_ids", make(ids, {2, 8}, DType::kI64)},
      {"scalar", make(std::vector<float>{42.5f}, {}, DType::kF32)},
      {"empty", make(std::vector<float>{}, {0, 3}, DType::kF32)},
  };
}

TEST(TorchInteropTest, ReferenceFileValues) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(kReference));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("generator"), "tools/golden/make_reference_files.py");
  EXPECT_TRUE(f.metadata().contains("torch_version"));
  const std::vector<float> source = RoundSource(f);
  ASSERT_EQ(source.size(), 10u);
  EXPECT_EQ(source[0], 1.0f / 3.0f);
  EXPECT_EQ(source[4], 65519.0f);

  const SafetensorsTensors expected = ExpectedReferenceTensors(source);
  ASSERT_EQ(f.entries().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, want] = expected[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(f.entries()[i].name, name);  // zeroshard's layout: data in the listed order
    ZS_ASSERT_OK_AND_ASSIGN(Tensor got, f.Read(name));
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(got.shape(), want.shape());
    // Bit for bit: NaN payloads, -0.0, subnormals; and torch's bf16/f16 rounding
    // equals zeroshard's (round to nearest-even, f16 overflow at 65520).
    EXPECT_TRUE(SameBytes(got, want));
  }
  // A few values spelled out, so a shared mistake cannot hide.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor f16, f.Read("round.f16"));
  const std::vector<Float16> h = RawElements<Float16>(f16);
  EXPECT_EQ(h[4].bits, 0x7bffu);  // 65519 rounds down to 65504, the largest half
  EXPECT_EQ(h[5].bits, 0x7c00u);  // 65520 rounds to +inf
  ZS_ASSERT_OK_AND_ASSIGN(Tensor bf16, f.Read("round.bf16"));
  EXPECT_EQ(RawElements<BFloat16>(bf16)[0].bits, 0x3eabu);  // 1/3
  ZS_ASSERT_OK_AND_ASSIGN(Tensor scalar, f.Read("scalar"));
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(*scalar.Item(), 42.5);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor special, f.Read("f32.special"));
  const std::vector<float> s = RawElements<float>(special);
  EXPECT_TRUE(std::isinf(s[0]) && s[0] > 0);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_TRUE(std::signbit(s[3]) && s[3] == 0.0f);
}

TEST(TorchInteropTest, OurWriterMakesTheSameBytes) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(kReference));
  ZS_ASSERT_OK_AND_ASSIGN(std::string ours,
                          SerializeSafetensors(ExpectedReferenceTensors(RoundSource(f)), f.metadata()));
  EXPECT_EQ(ours, ReadFileBytes(kReference));
}

TEST(TorchInteropTest, PackageLayoutWithShuffledHeader) {
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile f, SafetensorsFile::Open(kShuffled));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  std::vector<std::string> order;
  for (const SafetensorsEntry& e : f.entries()) order.push_back(e.name);
  // Sorted by offset: 8-byte dtypes first, then 4-byte, then 2-byte, by name.
  EXPECT_THAT(order, ElementsAre("i64.values", "f32.matrix", "scalar", "na\xc3\xafve.weight",
                                 "round.bf16"));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile ref, SafetensorsFile::Open(kReference));
  for (const char* name : {"i64.values", "f32.matrix", "scalar", "round.bf16"}) {
    SCOPED_TRACE(name);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor got, f.Read(name));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, ref.Read(name));
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(SameBytes(got, want));
  }
  ZS_ASSERT_OK_AND_ASSIGN(Tensor naive, f.Read("na\xc3\xafve.weight"));
  EXPECT_EQ(naive.dtype(), DType::kF16);
  EXPECT_THAT(*naive.ToVector<float>(), ElementsAre(1.5f, -2.25f));
  // Byte ranges work on this layout too.
  ZS_ASSERT_OK_AND_ASSIGN(Tensor part, Tensor::Zeros({2}, DType::kF32));
  ZS_ASSERT_OK(f.ReadRange("f32.matrix", 5, 2, part));
  EXPECT_THAT(*part.ToVector<float>(), ElementsAreArray({0.5f, 1.0f}));
}

}  // namespace
}  // namespace zeroshard
