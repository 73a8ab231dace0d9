#pragma once
// Input pipelines: Dataset::from_tensors(x, y).map(f).shuffle(seed).batch(64, true).repeat(3).prefetch(2).
//
// The stages always run in one fixed order, whatever the order of the builder calls: per-epoch
// permutation (shuffle), per-sample maps (in the order added), batching, epochs (repeat). Every
// random choice (the permutation, augmentations) is a Philox draw keyed by (seed, epoch, sample
// index), so the stream of batches is a pure function of the seed: threads and prefetch depth
// never change it.
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "tensor/tensor.h"

namespace spore::data {

struct Sample {
  Tensor x;
  Tensor y;  // may be undefined (unlabeled data)
};

// What a map function may key its randomness on.
struct SampleContext {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;  // the sample's index in the source, not its position in the shuffled order
};

using MapFn = std::function<Sample(Sample, const SampleContext&)>;

struct Batch {
  Tensor x;  // [B, ...]
  Tensor y;  // [B, ...] or undefined
  int64_t epoch = 0;
  std::vector<int64_t> indices;  // source indices of the samples, in batch order
};

class BatchIterator;

class Dataset {
 public:
  // x is [N, ...] and y [N, ...] (or undefined); samples are x[i], y[i].
  static Dataset from_tensors(Tensor x, Tensor y = {});

  Dataset map(MapFn fn) const;
  Dataset map(std::function<Sample(Sample)> fn) const;
  Dataset shuffle(uint64_t seed) const;  // reshuffled every epoch; also seeds the augmentations
  Dataset seed(uint64_t seed) const;     // seeds augmentations without shuffling
  Dataset batch(int64_t size, bool drop_remainder = false) const;
  Dataset repeat(int64_t epochs = -1) const;  // -1: forever
  Dataset prefetch(int64_t depth) const;      // 0: produce batches on the caller's thread

  int64_t size() const { return n_; }
  int64_t batches_per_epoch() const;
  // The source-index order of `epoch` (identity when not shuffled).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // Builds batch `b` of `epoch` synchronously (what the iterator does, on whichever thread).
  Batch make_batch(int64_t epoch, int64_t b) const;
  Batch make_batch(int64_t epoch, int64_t b, const std::vector<int64_t>& order) const;
  // Rows [first, first + count) of that batch only (a distributed sampler's share: data-parallel ranks each build
  // their own rows of the global batch, without overlap). Maps see the same (seed, epoch, index) keys as in the whole
  // batch, so the rows equal the whole batch's.
  Batch make_batch(int64_t epoch, int64_t b, const std::vector<int64_t>& order, int64_t first, int64_t count) const;
  // The size of batch b (the last one may be short without drop_remainder).
  int64_t batch_size(int64_t b) const;
  int64_t epochs() const { return epochs_; }

  BatchIterator begin_iteration() const;

 private:
  Tensor x_, y_;
  int64_t n_ = 0;
  std::vector<MapFn> maps_;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  int64_t batch_ = 1;
  bool drop_remainder_ = false;
  int64_t epochs_ = 1;
  int64_t prefetch_ = 0;
};

// Yields the batches of all epochs in order. With prefetch > 0 a background thread fills a bounded
// queue; an exception there (a failing map, say) is rethrown by next() after the batches before it.
// Destroying the iterator early stops and joins the thread.
class BatchIterator {
 public:
  explicit BatchIterator(Dataset ds, int64_t prefetch);
  ~BatchIterator();
  BatchIterator(BatchIterator&&) noexcept;
  BatchIterator& operator=(BatchIterator&&) = delete;

  std::optional<Batch> next();

 private:
  struct Shared;
  struct Cursor;
  std::unique_ptr<Cursor> cursor_;  // used when producing on the caller's thread
  std::shared_ptr<Shared> shared_;
  std::thread worker_;
};

// Common per-sample transforms. All expect x as [C, H, W] (normalize: [C, ...]).
namespace transforms {
// x -> f32 (x - mean[c]) / std[c]; one value broadcasts over all channels.
MapFn normalize(std::vector<float> mean, std::vector<float> std);
// Pads H and W by `padding` zeros each side, then crops a random [height, width] window.
MapFn random_crop(int64_t height, int64_t width, int64_t padding);
// Mirrors W with probability p.
MapFn random_flip_horizontal(float p = 0.5f);
}  // namespace transforms

}  // namespace spore::data
