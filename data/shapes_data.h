// ShapesData: a 10-class image classification set that the project generates
// itself, deterministically (no download): procedurally drawn shapes and
// textures in random colours, positions, sizes and orientations, with pixel
// noise, at S x S (32 by default), split into train and validation.
//
//   ZS_ASSIGN_OR_RETURN(ShapesData data, ShapesData::Create({.image_size = 32}));
//   ZS_ASSIGN_OR_RETURN(ImageBatch b, data.TrainBatch({.step = s, .rank = r, .world_size = R,
//                                                      .batch_size = B}));
//   b.images   // [B, 3, S, S] f32, normalised to about zero mean, unit spread
//   b.labels   // [B] i64 in [0, 10)
//
// Classes: 0 disk, 1 square, 2 triangle, 3 ring, 4 cross (the shapes: random
// centre, size, rotation), 5 horizontal stripes, 6 vertical stripes, 7
// diagonal stripes, 8 checkerboard, 9 dot grid (the textures: random period,
// phase, up to 15 degrees of tilt). Foreground and background colours are
// drawn independently of the class (with a minimum contrast), so colour says
// nothing about the label; each pixel gets uniform noise of +-noise.
//
// Sample `index` of a split is a pure function of (seed, split, index): the
// label is drawn from it too, so the classes are balanced in expectation.
// Training batches follow TokenData's batch rule (data/token_data.h):
// step s, micro-step m (of A), rank r (of R), row b reads global row
// g = (s A + m)(B R) + r B + b, which is training sample g mod train_size.
#ifndef ZEROSHARD_DATA_SHAPES_DATA_H_
#define ZEROSHARD_DATA_SHAPES_DATA_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "zeroshard/data/token_data.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct ShapesOptions {
  int64_t image_size = 32;   // S, at least 8
  int64_t train_size = 20000;
  int64_t val_size = 2000;
  uint64_t seed = 0;
  float noise = 0.1f;        // uniform pixel noise amplitude, in [0, 1) units before normalising
  std::string ToString() const;
};

struct ImageBatch {
  Tensor images;  // [B, 3, S, S] f32
  Tensor labels;  // [B] i64
};

enum class ShapesSplit { kTrain, kVal };

class ShapesData {
 public:
  static constexpr int kNumClasses = 10;
  static absl::string_view ClassName(int label);

  static absl::StatusOr<ShapesData> Create(const ShapesOptions& options);
  const ShapesOptions& options() const { return options_; }
  int64_t size(ShapesSplit split) const;

  // Draws sample `index` of `split` into `out` (3 S S floats, CHW); returns its label.
  int Render(ShapesSplit split, int64_t index, float* out) const;
  absl::StatusOr<ImageBatch> Samples(ShapesSplit split, absl::Span<const int64_t> indices) const;
  // The training rows of one rank's micro-batch (spec.block_size is ignored).
  absl::StatusOr<ImageBatch> TrainBatch(const BatchSpec& spec) const;
  // Validation samples [start, start + count).
  absl::StatusOr<ImageBatch> ValBatch(int64_t start, int64_t count) const;

 private:
  explicit ShapesData(ShapesOptions o) : options_(o) {}
  ShapesOptions options_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_DATA_SHAPES_DATA_H_
