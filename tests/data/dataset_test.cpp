#include "data/dataset.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "base/thread_pool.h"

namespace spore::data {
namespace {

// x[i] = [C=2, H=5, W=7] filled with i*1000 + position, y[i] = i.
Dataset make(int64_t n) {
  Tensor x = Tensor::empty({n, 2, 5, 7}, DType::f32);
  for (int64_t k = 0; k < x.numel(); ++k) x.data<float>()[k] = static_cast<float>((k / 70) * 1000 + k % 70);
  std::vector<int64_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = i;
  return Dataset::from_tensors(x, Tensor::from_vector(y, {n}));
}

std::vector<Batch> drain(const Dataset& d) {
  std::vector<Batch> out;
  BatchIterator it = d.begin_iteration();
  while (auto b = it.next()) out.push_back(std::move(*b));
  return out;
}

TEST(Dataset, BatchesInOrderWithRemainder) {
  auto bs = drain(make(10).batch(4));
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[0].x.shape(), (Shape{4, 2, 5, 7}));
  EXPECT_EQ(bs[2].x.shape(), (Shape{2, 2, 5, 7}));
  EXPECT_EQ(bs[2].y.to_doubles(), (std::vector<double>{8, 9}));
  EXPECT_EQ(bs[1].x.item_at(70), 5000.0);
  auto dropped = drain(make(10).batch(4, true).repeat(2));
  ASSERT_EQ(dropped.size(), 4u);
  EXPECT_EQ(dropped[2].epoch, 1);
  EXPECT_EQ(dropped[2].indices, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(drain(make(3).batch(4, true)).empty());
}

TEST(Dataset, ShuffleIsAPermutationDeterministicPerSeedAndEpoch) {
  Dataset d = make(1000).shuffle(42).batch(33).repeat(2);
  std::vector<int64_t> e0 = d.epoch_order(0), e1 = d.epoch_order(1);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 1000u);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, make(1000).shuffle(42).epoch_order(0));
  EXPECT_NE(e0, make(1000).shuffle(43).epoch_order(0));
  auto bs = drain(d);
  ASSERT_EQ(bs.size(), 62u);
  std::vector<int64_t> seen;
  for (int i = 0; i < 31; ++i) seen.insert(seen.end(), bs[i].indices.begin(), bs[i].indices.end());
  EXPECT_EQ(seen, e0);
  for (const Batch& b : bs)
    for (size_t k = 0; k < b.indices.size(); ++k) EXPECT_EQ(b.y.item_at(static_cast<int64_t>(k)), b.indices[k]);
}

TEST(Dataset, AugmentationDeterministicWhateverThreadsAndPrefetch) {
  auto pipeline = [](int64_t prefetch) {
    return make(37)
        .map(transforms::random_crop(5, 7, 2))
        .map(transforms::random_flip_horizontal())
        .map(transforms::normalize({100.f, 200.f}, {2.f, 4.f}))
        .shuffle(7)
        .batch(8)
        .repeat(3)
        .prefetch(prefetch);
  };
  set_num_threads(1);
  auto a = drain(pipeline(0));
  set_num_threads(std::max(2, hardware_threads()));
  auto b = drain(pipeline(3));
  set_num_threads(hardware_threads());
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 15u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].x.bit_equal(b[i].x)) << "batch " << i;
    EXPECT_TRUE(a[i].y.bit_equal(b[i].y)) << "batch " << i;
  }
  // Augmentation differs between epochs for the same sample.
  Dataset d = make(4).map(transforms::random_crop(5, 7, 3)).seed(1).batch(4).repeat(2);
  auto e = drain(d);
  EXPECT_FALSE(e[0].x.bit_equal(e[1].x));
}

TEST(Dataset, RandomCropAndFlipGeometry) {
  Tensor img = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  // Flip with p=1 always mirrors W.
  Sample s = transforms::random_flip_horizontal(1.0f)({img, {}}, {0, 0, 0});
  EXPECT_EQ(s.x.to_doubles(), (std::vector<double>{3, 2, 1, 6, 5, 4}));
  s = transforms::random_flip_horizontal(0.0f)({img, {}}, {0, 0, 0});
  EXPECT_EQ(s.x.to_doubles(), img.to_doubles());
  // Crop without padding to the full size is the identity; with padding every window is a shifted copy.
  s = transforms::random_crop(2, 3, 0)({img, {}}, {5, 1, 2});
  EXPECT_EQ(s.x.to_doubles(), img.to_doubles());
  std::set<std::vector<double>> windows;
  for (int64_t i = 0; i < 200; ++i) {
    Sample c = transforms::random_crop(2, 3, 1)({img, {}}, {9, 0, i});
    EXPECT_EQ(c.x.shape(), (Shape{1, 2, 3}));
    double sum = 0;
    for (double v : c.x.to_doubles()) sum += v;
    EXPECT_GT(sum, 0);  // a 2x3 window of a 4x5 padded image always overlaps the image
    windows.insert(c.x.to_doubles());
  }
  EXPECT_EQ(windows.size(), 9u);  // 3 vertical x 3 horizontal offsets
  Tensor u8 = Tensor::from_vector<uint8_t>({10, 20, 30, 40}, {1, 2, 2});
  Sample n = transforms::normalize({10.f}, {10.f})({u8, {}}, {});
  EXPECT_EQ(n.x.dtype(), DType::f32);
  EXPECT_EQ(n.x.to_doubles(), (std::vector<double>{0, 1, 2, 3}));
}

TEST(Dataset, PrefetchMatchesSynchronousAndStopsEarly) {
  Dataset d = make(100).shuffle(3).batch(7).repeat(-1);
  BatchIterator sync = d.begin_iteration();
  BatchIterator pre = d.prefetch(2).begin_iteration();
  for (int i = 0; i < 40; ++i) {  // crosses epoch boundaries of an endless stream
    auto a = sync.next();
    auto b = pre.next();
    ASSERT_TRUE(a && b);
    EXPECT_TRUE(a->x.bit_equal(b->x));
    EXPECT_EQ(a->epoch, b->epoch);
  }
  // Destroying `pre` here must stop and join its worker (would hang otherwise).
}

TEST(Dataset, ExceptionsPropagateAfterEarlierBatches) {
  std::atomic<int> calls{0};
  Dataset d = make(10)
                  .map([&calls](Sample s, const SampleContext& ctx) {
                    ++calls;
                    if (ctx.index == 6) throw Error(ErrorCode::invalid_argument, "bad sample 6");
                    return s;
                  })
                  .batch(3)
                  .prefetch(4);
  BatchIterator it = d.begin_iteration();
  ASSERT_TRUE(it.next());
  ASSERT_TRUE(it.next());
  try {
    it.next();
    FAIL() << "expected the map's error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "bad sample 6");
  }
  EXPECT_FALSE(it.next());
}

TEST(Dataset, ErrorsForBadArguments) {
  Tensor x = Tensor::zeros({4, 3}, DType::f32);
  EXPECT_THROW(Dataset::from_tensors(x, Tensor::zeros({5}, DType::i64)), Error);
  EXPECT_THROW(Dataset::from_tensors(Tensor::scalar(1, DType::f32)), Error);
  Dataset d = Dataset::from_tensors(x);
  EXPECT_THROW(d.batch(0), Error);
  EXPECT_THROW(d.repeat(0), Error);
  EXPECT_THROW(d.prefetch(-1), Error);
  EXPECT_THROW(transforms::normalize({1.f}, {0.f}), Error);
  // A map that changes shapes per sample cannot be batched: the error names both samples.
  Dataset ragged = d.map([](Sample s, const SampleContext& c) {
                      if (c.index == 2) s.x = Tensor::zeros({5}, DType::f32);
                      return s;
                    }).batch(4);
  try {
    ragged.make_batch(0, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 2"), std::string::npos) << e.what();
  }
  // Unlabeled datasets yield batches without y.
  auto b = d.batch(3).begin_iteration().next();
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->y.defined());
  EXPECT_EQ(b->x.shape(), (Shape{3, 3}));
}

}  // namespace
}  // namespace spore::data
