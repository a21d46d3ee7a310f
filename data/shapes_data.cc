#include "zeroshard/data/shapes_data.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

// SplitMix64: the sample's private stream of draws.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float Uniform(float lo, float hi) {  // 24 random bits
    return lo + (hi - lo) * static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f);
  }
  int Int(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
};

constexpr float kPi = 3.14159265358979f;
constexpr float kMean = 0.5f, kSpread = 0.25f;  // pixel normalisation

float Luma(const float* c) { return 0.299f * c[0] + 0.587f * c[1] + 0.114f * c[2]; }

// Everything drawn for one sample.
struct Scene {
  int label;
  float fg[3], bg[3];
  float cx, cy, r, angle;   // shapes (pixel units)
  float period, phase;      // textures
};

Scene Draw(Rng& rng, int64_t s) {
  Scene sc;
  sc.label = rng.Int(ShapesData::kNumClasses);
  do {
    for (int c = 0; c < 3; ++c) sc.fg[c] = rng.Uniform(0, 1);
    for (int c = 0; c < 3; ++c) sc.bg[c] = rng.Uniform(0, 1);
  } while (std::fabs(Luma(sc.fg) - Luma(sc.bg)) < 0.25f);
  const float fs = static_cast<float>(s);
  sc.r = rng.Uniform(0.22f, 0.4f) * fs;
  sc.cx = rng.Uniform(sc.r, fs - sc.r);
  sc.cy = rng.Uniform(sc.r, fs - sc.r);
  sc.angle = sc.label <= 4 ? rng.Uniform(0, 2 * kPi) : rng.Uniform(-kPi / 12, kPi / 12);
  sc.period = rng.Uniform(0.15f, 0.3f) * fs;
  sc.phase = rng.Uniform(0, 1);
  return sc;
}

// Fractional part in [0, 1).
float Frac(float v) { return v - std::floor(v); }

// 1 where pixel (x, y) (its centre) is foreground.
bool Inside(const Scene& sc, float x, float y) {
  const float c = std::cos(sc.angle), sn = std::sin(sc.angle);
  // Rotated coordinates around the shape centre (shapes) or the image origin (textures).
  const float dx = x - sc.cx, dy = y - sc.cy;
  const float u = c * dx + sn * dy, v = -sn * dx + c * dy;
  const float tu = c * x + sn * y, tv = -sn * x + c * y;
  switch (sc.label) {
    case 0: return u * u + v * v < sc.r * sc.r;                                   // disk
    case 1: return std::fabs(u) < 0.8f * sc.r && std::fabs(v) < 0.8f * sc.r;      // square
    case 2: {                                                                      // triangle
      // Equilateral, circumradius r: three half-planes at 120 degrees.
      for (int k = 0; k < 3; ++k) {
        const float a = 2 * kPi * k / 3;
        if (std::cos(a) * u + std::sin(a) * v > 0.5f * sc.r) return false;
      }
      return true;
    }
    case 3: {                                                                      // ring
      const float d = std::sqrt(u * u + v * v);
      return d < sc.r && d > 0.55f * sc.r;
    }
    case 4:                                                                        // cross
      return (std::fabs(u) < 0.25f * sc.r && std::fabs(v) < sc.r) ||
             (std::fabs(v) < 0.25f * sc.r && std::fabs(u) < sc.r);
    case 5: return Frac(tv / sc.period + sc.phase) < 0.5f;                         // horizontal stripes
    case 6: return Frac(tu / sc.period + sc.phase) < 0.5f;                         // vertical stripes
    case 7: return Frac((tu + tv) / (1.41421356f * sc.period) + sc.phase) < 0.5f;  // diagonal
    case 8:                                                                        // checkerboard
      return (static_cast<int64_t>(std::floor(tu / sc.period + sc.phase)) +
              static_cast<int64_t>(std::floor(tv / sc.period + sc.phase))) % 2 == 0;
    case 9: {                                                                      // dot grid
      const float fu = Frac(tu / sc.period + sc.phase) - 0.5f, fv = Frac(tv / sc.period + sc.phase) - 0.5f;
      return fu * fu + fv * fv < 0.09f;
    }
  }
  return false;
}

}  // namespace

std::string ShapesOptions::ToString() const {
  return absl::StrCat("shapes ", image_size, "x", image_size, ", ", train_size, " train / ", val_size,
                      " val, seed ", seed, ", noise ", noise);
}

absl::string_view ShapesData::ClassName(int label) {
  static constexpr absl::string_view kNames[kNumClasses] = {
      "disk", "square", "triangle", "ring", "cross",
      "horizontal stripes", "vertical stripes", "diagonal stripes", "checkerboard", "dot grid"};
  return label >= 0 && label < kNumClasses ? kNames[label] : "?";
}

absl::StatusOr<ShapesData> ShapesData::Create(const ShapesOptions& o) {
  if (o.image_size < 8 || o.train_size < 1 || o.val_size < 0 || !(o.noise >= 0 && o.noise < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("ShapesData: ", o.ToString(),
                                                   "; expected image_size >= 8, train_size >= 1, "
                                                   "val_size >= 0, noise in [0, 1)"));
  }
  return ShapesData(o);
}

int64_t ShapesData::size(ShapesSplit split) const {
  return split == ShapesSplit::kTrain ? options_.train_size : options_.val_size;
}

int ShapesData::Render(ShapesSplit split, int64_t index, float* out) const {
  // A distinct stream per (seed, split, index).
  Rng rng{options_.seed * 0x2545F4914F6CDD1Dull + (split == ShapesSplit::kTrain ? 0 : 0x5851F42D4C957F2Dull) +
          static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull};
  rng.Next();
  const Scene sc = Draw(rng, options_.image_size);
  const int64_t s = options_.image_size;
  for (int64_t y = 0; y < s; ++y) {
    for (int64_t x = 0; x < s; ++x) {
      const bool fg = Inside(sc, static_cast<float>(x) + 0.5f, static_cast<float>(y) + 0.5f);
      for (int c = 0; c < 3; ++c) {
        const float v = (fg ? sc.fg[c] : sc.bg[c]) + rng.Uniform(-options_.noise, options_.noise);
        out[(c * s + y) * s + x] = (v - kMean) / kSpread;
      }
    }
  }
  return sc.label;
}

absl::StatusOr<ImageBatch> ShapesData::Samples(ShapesSplit split, absl::Span<const int64_t> indices) const {
  const int64_t s = options_.image_size, n = static_cast<int64_t>(indices.size());
  std::vector<float> pixels(static_cast<size_t>(n * 3 * s * s));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (indices[i] < 0 || indices[i] >= size(split)) {
      return absl::OutOfRangeError(absl::StrCat("ShapesData: sample ", indices[i], " of a split of ",
                                                size(split), ", expected [0, ", size(split), ")"));
    }
  }
#pragma omp parallel for schedule(static) if (n > 1)
  for (int64_t i = 0; i < n; ++i) labels[i] = Render(split, indices[i], pixels.data() + i * 3 * s * s);
  ImageBatch b;
  ZS_ASSIGN_OR_RETURN(b.images, Tensor::FromVector(pixels, {n, 3, s, s}));
  ZS_ASSIGN_OR_RETURN(b.labels, Tensor::FromVector(labels, {n}));
  return b;
}

absl::StatusOr<ImageBatch> ShapesData::TrainBatch(const BatchSpec& spec) const {
  if (spec.batch_size < 1 || spec.world_size < 1 || spec.accum_steps < 1 || spec.rank < 0 ||
      spec.rank >= spec.world_size || spec.micro_step < 0 || spec.micro_step >= spec.accum_steps ||
      spec.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShapesData::TrainBatch: step ", spec.step, ", micro-step ", spec.micro_step, " of ",
        spec.accum_steps, ", rank ", spec.rank, " of ", spec.world_size, ", batch ", spec.batch_size,
        "; expected batch, world and accumulation >= 1 and rank, micro-step in range"));
  }
  const int64_t base = (spec.step * spec.accum_steps + spec.micro_step) * (spec.batch_size * spec.world_size) +
                       spec.rank * spec.batch_size;
  std::vector<int64_t> idx(spec.batch_size);
  for (int64_t b = 0; b < spec.batch_size; ++b) idx[b] = (base + b) % options_.train_size;
  return Samples(ShapesSplit::kTrain, idx);
}

absl::StatusOr<ImageBatch> ShapesData::ValBatch(int64_t start, int64_t count) const {
  std::vector<int64_t> idx(count);
  for (int64_t i = 0; i < count; ++i) idx[i] = start + i;
  return Samples(ShapesSplit::kVal, idx);
}

}  // namespace zeroshard
