#include "train/models.h"

#include <filesystem>

#include "base/error.h"
#include "nn/init.h"
#include "ops/ops.h"

namespace spore::train {
namespace {

nn::Conv2dConfig conv_cfg(const std::string& pad_mode) {
  nn::Conv2dConfig c;
  c.pad_mode = pad_mode;
  return c;
}

void check_input(const char* model, int64_t c, int64_t h, int64_t w, int64_t min_hw) {
  SPORE_CHECK(c > 0 && h >= min_hw && w >= min_hw, ErrorCode::invalid_argument,
              "train::{}: expected an input [C, H, W] with C > 0 and H, W >= {}, got [{}, {}, {}]", model, min_hw, c,
              h, w);
}

// LeNet's second conv is valid on MNIST-sized maps (the classic 16x5x5 features) but would shrink an
// 8x8 input to nothing, so small maps keep their size.
bool lenet_conv2_valid(int64_t h, int64_t w) { return h / 2 >= 10 && w / 2 >= 10; }

}  // namespace

SimpleNet::SimpleNet(int64_t c, int64_t h, int64_t w, int64_t classes)
    : conv((check_input("SimpleNet", c, h, w, 2), c), 64, 3, conv_cfg("same")),
      pool(2, 2),
      fc(64 * (h / 2) * (w / 2), classes) {
  SPORE_REGISTER_CELLS(conv, relu, pool, flatten, fc);
}

Tensor SimpleNet::construct(const Tensor& x) { return fc(flatten(pool(relu(conv(x))))); }

SimpleNetBN::SimpleNetBN(int64_t c, int64_t h, int64_t w, int64_t classes)
    : conv((check_input("SimpleNetBN", c, h, w, 2), c), 64, 3, conv_cfg("same")),
      pool(2, 2),
      fc(64 * (h / 2) * (w / 2), classes) {
  SPORE_REGISTER_CELLS(conv, bn, relu, pool, flatten, fc);
}

Tensor SimpleNetBN::construct(const Tensor& x) { return fc(flatten(pool(relu(bn(conv(x)))))); }

LeNet5::LeNet5(int64_t c, int64_t h, int64_t w, int64_t classes)
    : conv1((check_input("LeNet5", c, h, w, 4), c), 6, 5, conv_cfg("same")),
      conv2(6, 16, 5, conv_cfg(lenet_conv2_valid(h, w) ? "valid" : "same")),
      pool(2, 2),
      fc1(16 * (lenet_conv2_valid(h, w) ? ((h / 2 - 4) / 2) * ((w / 2 - 4) / 2) : (h / 4) * (w / 4)), 120),
      fc2(120, 84),
      fc3(84, classes) {
  SPORE_REGISTER_CELLS(conv1, conv2, relu, pool, flatten, fc1, fc2, fc3);
}

Tensor LeNet5::construct(const Tensor& x) {
  Tensor y = pool(relu(conv1(x)));
  y = flatten(pool(relu(conv2(y))));
  return fc3(relu(fc2(relu(fc1(y)))));
}

Mlp::Mlp(int64_t in, int64_t hidden, int64_t classes) : fc1(in, hidden, true, "relu"), fc2(hidden, classes) {
  SPORE_REGISTER_CELLS(flatten, fc1, fc2);
}

Tensor Mlp::construct(const Tensor& x) { return fc2(fc1(flatten(x))); }

RowTransformer::RowTransformer(int64_t c, int64_t h, int64_t w, int64_t classes, int64_t d_model, int64_t nhead,
                               int64_t layers)
    : c_((check_input("RowTransformer", c, h, w, 1), c)),
      h_(h),
      w_(w),
      embed(c * w, d_model),
      norm({d_model}),
      head(d_model, classes) {
  pos_ = &register_parameter("pos_embedding", nn::init::normal({h, d_model}, 0.0, 0.02));
  for (int64_t i = 0; i < layers; ++i)
    blocks.append(std::make_unique<nn::TransformerEncoderLayer>(d_model, nhead, 2 * d_model, 0.1, "gelu", true));
  SPORE_REGISTER_CELLS(embed, blocks, norm, head);
}

Tensor RowTransformer::construct(const Tensor& x) {
  // [N, C, H, W] -> [N, H, C, W] -> [N, H, C * W]: a token per image row.
  Tensor t = ops::reshape(ops::transpose(x, {0, 2, 1, 3}), {-1, h_, c_ * w_});
  t = ops::add(embed(t), *pos_);
  for (size_t i = 0; i < blocks.size(); ++i) t = blocks[i](t);
  return head(ops::reduce_mean(norm(t), {1}));
}

std::unique_ptr<nn::Cell> make_model(const std::string& name, const Shape& s, int64_t classes) {
  SPORE_CHECK(s.size() == 3, ErrorCode::invalid_argument,
              "train::make_model: expected an input shape [C, H, W], got {}", shape_str(s));
  SPORE_CHECK(classes > 0, ErrorCode::invalid_argument, "train::make_model: expected num_classes > 0, got {}",
              classes);
  if (name == "simplenet") return std::make_unique<SimpleNet>(s[0], s[1], s[2], classes);
  if (name == "simplenet_bn") return std::make_unique<SimpleNetBN>(s[0], s[1], s[2], classes);
  if (name == "lenet") return std::make_unique<LeNet5>(s[0], s[1], s[2], classes);
  if (name == "mlp") return std::make_unique<Mlp>(s[0] * s[1] * s[2], 128, classes);
  if (name == "transformer") return std::make_unique<RowTransformer>(s[0], s[1], s[2], classes);
  SPORE_FAIL(ErrorCode::invalid_argument,
             "train::make_model: unknown model '{}' (expected simplenet, simplenet_bn, lenet, mlp or transformer)",
             name);
}

namespace {

data::LabeledData rows(const data::LabeledData& d, int64_t begin, int64_t end) {
  return {d.x.slice(0, begin, end).contiguous(), d.y.slice(0, begin, end).contiguous()};
}

bool has_idx(const std::filesystem::path& dir, const std::string& stem) {
  return std::filesystem::exists(dir / stem) || std::filesystem::exists(dir / (stem + ".gz"));
}

}  // namespace

TrainTestSplit load_dataset_spec(const std::string& spec, int64_t limit_train, int64_t limit_test) {
  const size_t colon = spec.find(':');
  SPORE_CHECK(colon != std::string::npos && colon + 1 < spec.size(), ErrorCode::invalid_argument,
              "dataset: expected mnist:DIR, fashion-mnist:DIR or digits:FILE, got '{}'", spec);
  const std::string kind = spec.substr(0, colon), where = spec.substr(colon + 1);
  TrainTestSplit r;
  if (kind == "mnist" || kind == "fashion-mnist") {
    if (has_idx(where, "train-images-idx3-ubyte") && has_idx(where, "train-labels-idx1-ubyte")) {
      r.train = data::load_mnist(where, "train");
      r.test = data::load_mnist(where, "t10k");
      r.description = kind + " train / t10k";
    } else {
      const data::LabeledData all = data::load_mnist(where, "t10k");
      const int64_t n = all.x.dim(0), cut = n == 10000 ? 8000 : n * 4 / 5;
      SPORE_CHECK(cut > 0 && cut < n, ErrorCode::invalid_argument, "dataset {}: too few images to split: {}", spec, n);
      r.train = rows(all, 0, cut);
      r.test = rows(all, cut, n);
      r.description = fmt::format("{} t10k[0:{}] / t10k[{}:{}]", kind, cut, cut, n);
    }
  } else if (kind == "digits") {
    const data::LabeledData all = data::load_digits(where);
    const int64_t n = all.x.dim(0), cut = n * 4 / 5;
    SPORE_CHECK(cut > 0 && cut < n, ErrorCode::invalid_argument, "dataset {}: too few rows to split: {}", spec, n);
    r.train = rows(all, 0, cut);
    r.test = rows(all, cut, n);
    r.description = fmt::format("digits [0:{}] / [{}:{}]", cut, cut, n);
  } else {
    SPORE_FAIL(ErrorCode::invalid_argument, "dataset: unknown kind '{}' (expected mnist, fashion-mnist or digits)",
               kind);
  }
  SPORE_CHECK(limit_train >= 0 && limit_test >= 0, ErrorCode::invalid_argument,
              "dataset: expected limits >= 0, got {}, {}", limit_train, limit_test);
  if (limit_train > 0 && limit_train < r.train.x.dim(0)) r.train = rows(r.train, 0, limit_train);
  if (limit_test > 0 && limit_test < r.test.x.dim(0)) r.test = rows(r.test, 0, limit_test);
  return r;
}

}  // namespace spore::train
