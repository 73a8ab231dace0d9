#include "data/dataset.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>

#include "base/rng.h"

namespace spore::data {
namespace {

// Philox words for (seed, salt, epoch, index): salt separates the shuffle from each augmentation.
std::array<uint32_t, 4> draw(uint64_t seed, uint32_t salt, int64_t epoch, int64_t index) {
  auto e = static_cast<uint64_t>(epoch), i = static_cast<uint64_t>(index);
  return philox4x32({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), static_cast<uint32_t>(e),
                     (static_cast<uint32_t>(e >> 32) & 0xffffu) | (salt << 16)},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
double to_unit(uint32_t w) { return w * (1.0 / 4294967296.0); }

constexpr uint32_t kSaltShuffle = 1, kSaltCrop = 2, kSaltFlip = 3;

// The i-th sample along dim 0, as a view.
Tensor row(const Tensor& t, int64_t i) {
  Shape shape(t.shape().begin() + 1, t.shape().end());
  Strides strides(t.strides().begin() + 1, t.strides().end());
  return t.as_strided(shape, strides, t.offset() + i * t.strides()[0]);
}

Tensor stack(const std::vector<Tensor>& parts, const std::vector<int64_t>& indices, const char* what) {
  const Tensor& first = parts.front();
  Shape shape{static_cast<int64_t>(parts.size())};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  Tensor out = Tensor::empty(shape, first.dtype());
  char* dst = static_cast<char*>(out.raw_data());
  const size_t nb = first.nbytes();
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& p = parts[k];
    SPORE_CHECK(p.defined(), ErrorCode::invalid_argument, "dataset batch: sample {} has no {}", indices[k], what);
    SPORE_CHECK(p.shape() == first.shape() && p.dtype() == first.dtype(), ErrorCode::shape_mismatch,
                "dataset batch: sample {} {} is {} {}, but sample {} {} is {} {} (all samples of a batch must match)",
                indices[k], what, dtype_name(p.dtype()), shape_str(p.shape()), indices[0], what,
                dtype_name(first.dtype()), shape_str(first.shape()));
    Tensor c = p.contiguous();
    if (nb) std::memcpy(dst + k * nb, c.raw_data(), nb);
  }
  return out;
}

}  // namespace

Dataset Dataset::from_tensors(Tensor x, Tensor y) {
  SPORE_CHECK(x.defined() && x.rank() >= 1, ErrorCode::invalid_argument,
              "Dataset::from_tensors: x must have a leading sample dimension, got {}",
              x.defined() ? shape_str(x.shape()) : "an undefined tensor");
  if (y.defined())
    SPORE_CHECK(y.rank() >= 1 && y.dim(0) == x.dim(0), ErrorCode::shape_mismatch,
                "Dataset::from_tensors: x has {} samples ({}) but y has shape {}", x.dim(0), shape_str(x.shape()),
                shape_str(y.shape()));
  Dataset d;
  d.x_ = std::move(x);
  d.y_ = std::move(y);
  d.n_ = d.x_.dim(0);
  return d;
}

Dataset Dataset::map(MapFn fn) const {
  SPORE_CHECK(static_cast<bool>(fn), ErrorCode::invalid_argument, "Dataset::map: empty function");
  Dataset d = *this;
  d.maps_.push_back(std::move(fn));
  return d;
}

Dataset Dataset::map(std::function<Sample(Sample)> fn) const {
  SPORE_CHECK(static_cast<bool>(fn), ErrorCode::invalid_argument, "Dataset::map: empty function");
  return map(MapFn([fn = std::move(fn)](Sample s, const SampleContext&) { return fn(std::move(s)); }));
}

Dataset Dataset::shuffle(uint64_t seed) const {
  Dataset d = *this;
  d.shuffle_ = true;
  d.seed_ = seed;
  return d;
}

Dataset Dataset::seed(uint64_t seed) const {
  Dataset d = *this;
  d.seed_ = seed;
  return d;
}

Dataset Dataset::batch(int64_t size, bool drop_remainder) const {
  SPORE_CHECK(size >= 1, ErrorCode::invalid_argument, "Dataset::batch: size must be >= 1, got {}", size);
  Dataset d = *this;
  d.batch_ = size;
  d.drop_remainder_ = drop_remainder;
  return d;
}

Dataset Dataset::repeat(int64_t epochs) const {
  SPORE_CHECK(epochs >= 1 || epochs == -1, ErrorCode::invalid_argument,
              "Dataset::repeat: epochs must be >= 1 or -1 (forever), got {}", epochs);
  Dataset d = *this;
  d.epochs_ = epochs;
  return d;
}

Dataset Dataset::prefetch(int64_t depth) const {
  SPORE_CHECK(depth >= 0, ErrorCode::invalid_argument, "Dataset::prefetch: depth must be >= 0, got {}", depth);
  Dataset d = *this;
  d.prefetch_ = depth;
  return d;
}

int64_t Dataset::batches_per_epoch() const { return drop_remainder_ ? n_ / batch_ : (n_ + batch_ - 1) / batch_; }

std::vector<int64_t> Dataset::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(n_);
  for (int64_t i = 0; i < n_; ++i) order[i] = i;
  if (!shuffle_) return order;
  // Fisher-Yates; 64 random bits per step make the modulo bias negligible.
  for (int64_t i = n_ - 1; i > 0; --i) {
    auto w = draw(seed_, kSaltShuffle, epoch, i);
    uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    std::swap(order[i], order[r % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

Batch Dataset::make_batch(int64_t epoch, int64_t b) const { return make_batch(epoch, b, epoch_order(epoch)); }

int64_t Dataset::batch_size(int64_t b) const {
  SPORE_CHECK(b >= 0 && b < batches_per_epoch(), ErrorCode::invalid_argument,
              "Dataset::make_batch: batch {} out of range [0, {})", b, batches_per_epoch());
  return std::min(n_, (b + 1) * batch_) - b * batch_;
}

Batch Dataset::make_batch(int64_t epoch, int64_t b, const std::vector<int64_t>& order) const {
  return make_batch(epoch, b, order, 0, batch_size(b));
}

Batch Dataset::make_batch(int64_t epoch, int64_t b, const std::vector<int64_t>& order, int64_t first,
                          int64_t count) const {
  const int64_t size = batch_size(b);
  SPORE_CHECK(first >= 0 && count >= 0 && first + count <= size, ErrorCode::invalid_argument,
              "Dataset::make_batch: rows [{}, {}) out of batch {}'s {} rows", first, first + count, b, size);
  SPORE_CHECK(static_cast<int64_t>(order.size()) == n_, ErrorCode::invalid_argument,
              "Dataset::make_batch: the order has {} entries for {} samples", order.size(), n_);
  const int64_t begin = b * batch_ + first, end = begin + count;
  Batch out;
  out.epoch = epoch;
  if (maps_.empty() && x_.is_contiguous() && (!y_.defined() || y_.is_contiguous())) {
    // No per-sample transforms: gather the rows straight into the batch (per-sample views and a stack of
    // them cost about a third of a small model's training step).
    const auto gather = [&](const Tensor& src) {
      Shape shape = src.shape();
      shape[0] = end - begin;
      Tensor dst = Tensor::empty(shape, src.dtype());
      const size_t nb = src.dim(0) ? src.nbytes() / static_cast<size_t>(src.dim(0)) : 0;
      const char* from = static_cast<const char*>(src.raw_data());
      char* to = static_cast<char*>(dst.raw_data());
      for (int64_t k = begin; k < end; ++k)
        if (nb) std::memcpy(to + static_cast<size_t>(k - begin) * nb, from + static_cast<size_t>(order[k]) * nb, nb);
      return dst;
    };
    out.indices.assign(order.begin() + begin, order.begin() + end);
    out.x = gather(x_);
    if (y_.defined()) out.y = gather(y_);
    return out;
  }
  std::vector<Tensor> xs, ys;
  for (int64_t k = begin; k < end; ++k) {
    int64_t i = order[k];
    Sample s{row(x_, i), y_.defined() ? row(y_, i) : Tensor{}};
    SampleContext ctx{seed_, epoch, i};
    for (const MapFn& fn : maps_) s = fn(std::move(s), ctx);
    out.indices.push_back(i);
    xs.push_back(std::move(s.x));
    ys.push_back(std::move(s.y));
  }
  out.x = stack(xs, out.indices, "x");
  bool any_y = std::any_of(ys.begin(), ys.end(), [](const Tensor& t) { return t.defined(); });
  if (any_y) out.y = stack(ys, out.indices, "y");
  return out;
}

// ---- iteration ----

struct BatchIterator::Cursor {
  Dataset ds;
  int64_t epoch = 0, batch = 0;
  std::vector<int64_t> order;
  bool have_order = false;

  std::optional<Batch> next() {
    if (ds.batches_per_epoch() == 0) return std::nullopt;
    if (batch == ds.batches_per_epoch()) {
      ++epoch;
      batch = 0;
      have_order = false;
    }
    if (ds.epochs() != -1 && epoch >= ds.epochs()) return std::nullopt;
    if (!have_order) {
      order = ds.epoch_order(epoch);
      have_order = true;
    }
    return ds.make_batch(epoch, batch++, order);
  }
};

struct BatchIterator::Shared {
  std::mutex mu;
  std::condition_variable not_full, not_empty;
  std::deque<Batch> queue;
  int64_t capacity = 1;
  bool stop = false, done = false;
  std::exception_ptr error;
};

BatchIterator Dataset::begin_iteration() const { return BatchIterator(*this, prefetch_); }

BatchIterator::BatchIterator(Dataset ds, int64_t prefetch) : cursor_(std::make_unique<Cursor>()) {
  cursor_->ds = std::move(ds);
  if (prefetch <= 0) return;
  shared_ = std::make_shared<Shared>();
  shared_->capacity = prefetch;
  // The worker owns the cursor; the caller only touches the queue.
  worker_ = std::thread([sh = shared_, cur = std::move(cursor_)]() mutable {
    try {
      while (true) {
        {
          std::unique_lock lk(sh->mu);
          sh->not_full.wait(lk, [&] { return sh->stop || static_cast<int64_t>(sh->queue.size()) < sh->capacity; });
          if (sh->stop) break;
        }
        std::optional<Batch> b = cur->next();  // built outside the lock
        std::lock_guard lk(sh->mu);
        if (!b) break;
        sh->queue.push_back(std::move(*b));
        sh->not_empty.notify_one();
      }
    } catch (...) {
      std::lock_guard lk(sh->mu);
      sh->error = std::current_exception();
    }
    std::lock_guard lk(sh->mu);
    sh->done = true;
    sh->not_empty.notify_all();
  });
}

BatchIterator::BatchIterator(BatchIterator&& o) noexcept
    : cursor_(std::move(o.cursor_)), shared_(std::move(o.shared_)), worker_(std::move(o.worker_)) {}

BatchIterator::~BatchIterator() {
  if (worker_.joinable()) {
    {
      std::lock_guard lk(shared_->mu);
      shared_->stop = true;
    }
    shared_->not_full.notify_all();
    worker_.join();
  }
}

std::optional<Batch> BatchIterator::next() {
  if (!shared_) return cursor_ ? cursor_->next() : std::nullopt;
  std::unique_lock lk(shared_->mu);
  shared_->not_empty.wait(lk, [&] { return !shared_->queue.empty() || shared_->done; });
  if (!shared_->queue.empty()) {
    Batch b = std::move(shared_->queue.front());
    shared_->queue.pop_front();
    shared_->not_full.notify_one();
    return b;
  }
  if (shared_->error) {
    std::exception_ptr e = shared_->error;
    shared_->error = nullptr;  // rethrown once; later calls report the end
    std::rethrow_exception(e);
  }
  return std::nullopt;
}

// ---- transforms ----

namespace transforms {

MapFn normalize(std::vector<float> mean, std::vector<float> std) {
  SPORE_CHECK(!mean.empty() && mean.size() == std.size(), ErrorCode::invalid_argument,
              "normalize: mean has {} values and std {}, expected the same non-zero count", mean.size(), std.size());
  for (float s : std) SPORE_CHECK(s > 0, ErrorCode::invalid_argument, "normalize: std values must be > 0, got {}", s);
  return [mean = std::move(mean), std = std::move(std)](Sample s, const SampleContext&) {
    const Tensor& x = s.x;
    SPORE_CHECK(x.rank() >= 1, ErrorCode::shape_mismatch, "normalize: expected x [C, ...], got {}",
                shape_str(x.shape()));
    int64_t c = x.dim(0), inner = c ? x.numel() / c : 0;
    SPORE_CHECK(mean.size() == 1 || static_cast<int64_t>(mean.size()) == c, ErrorCode::shape_mismatch,
                "normalize: x has {} channels but mean/std have {} values", c, mean.size());
    Tensor in = x.dtype() == DType::f32 ? x.contiguous() : Tensor{};
    Tensor out = Tensor::empty(x.shape(), DType::f32);
    float* o = out.data<float>();
    for (int64_t ch = 0; ch < c; ++ch) {
      float m = mean[mean.size() == 1 ? 0 : ch], inv = 1.0f / std[std.size() == 1 ? 0 : ch];
      for (int64_t k = 0; k < inner; ++k) {
        int64_t i = ch * inner + k;
        float v = in.defined() ? in.data<float>()[i] : static_cast<float>(x.item_at(i));
        o[i] = (v - m) * inv;
      }
    }
    s.x = out;
    return s;
  };
}

MapFn random_crop(int64_t height, int64_t width, int64_t padding) {
  SPORE_CHECK(height >= 1 && width >= 1 && padding >= 0, ErrorCode::invalid_argument,
              "random_crop: expected size >= 1 and padding >= 0, got {}x{} padding {}", height, width, padding);
  return [=](Sample s, const SampleContext& ctx) {
    SPORE_CHECK(s.x.rank() == 3, ErrorCode::shape_mismatch, "random_crop: expected x [C, H, W], got {}",
                shape_str(s.x.shape()));
    Tensor x = s.x.contiguous();
    int64_t c = x.dim(0), h = x.dim(1), w = x.dim(2);
    SPORE_CHECK(h + 2 * padding >= height && w + 2 * padding >= width, ErrorCode::shape_mismatch,
                "random_crop: crop {}x{} larger than padded image {}x{}", height, width, h + 2 * padding,
                w + 2 * padding);
    auto r = draw(ctx.seed, kSaltCrop, ctx.epoch, ctx.index);
    int64_t oy = static_cast<int64_t>(r[0] % static_cast<uint64_t>(h + 2 * padding - height + 1)) - padding;
    int64_t ox = static_cast<int64_t>(r[1] % static_cast<uint64_t>(w + 2 * padding - width + 1)) - padding;
    Tensor out = Tensor::zeros({c, height, width}, x.dtype());
    const size_t es = dtype_size(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    // Copy the overlap of the window with the image; the rest stays zero (the padding).
    int64_t x0 = std::max<int64_t>(0, -ox), x1 = std::min<int64_t>(width, w - ox);
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t yy = 0; yy < height; ++yy) {
        int64_t sy = oy + yy;
        if (sy < 0 || sy >= h || x1 <= x0) continue;
        std::memcpy(dst + ((ch * height + yy) * width + x0) * es, src + ((ch * h + sy) * w + ox + x0) * es,
                    (x1 - x0) * es);
      }
    s.x = out;
    return s;
  };
}

MapFn random_flip_horizontal(float p) {
  SPORE_CHECK(p >= 0 && p <= 1, ErrorCode::invalid_argument, "random_flip_horizontal: p must be in [0, 1], got {}", p);
  return [=](Sample s, const SampleContext& ctx) {
    SPORE_CHECK(s.x.rank() >= 1, ErrorCode::shape_mismatch,
                "random_flip_horizontal: expected x [..., W], got a scalar");
    if (to_unit(draw(ctx.seed, kSaltFlip, ctx.epoch, ctx.index)[0]) >= p) return s;
    Tensor x = s.x.contiguous();
    Tensor out = Tensor::empty(x.shape(), x.dtype());
    int64_t w = x.dim(-1), rows = w ? x.numel() / w : 0;
    const size_t es = dtype_size(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < w; ++k) std::memcpy(dst + (r * w + k) * es, src + (r * w + w - 1 - k) * es, es);
    s.x = out;
    return s;
  };
}

}  // namespace transforms
}  // namespace spore::data
