#pragma once
// A small model zoo for the CLI and examples: SimpleNet (MindSpore's quick-start CNN), a LeNet-5 style
// CNN and an MLP, each sized for a [C, H, W] input (28x28 MNIST or 8x8 digits).
#include <memory>
#include <string>

#include "data/sources.h"
#include "nn/cell.h"
#include "nn/layers.h"
#include "nn/transformer.h"

namespace spore::train {

// conv 3x3 (C -> 64, pad same) -> ReLU -> MaxPool 2 -> Flatten -> Dense 64*(H/2)*(W/2) -> classes. 64 channels:
// with 32 the net reached 90.3% on Fashion-MNIST in 5 epochs whatever the optimizer (too close to the 90% bar), 64
// gives 90.6%.
class SimpleNet : public nn::Cell {
 public:
  SimpleNet(int64_t channels, int64_t height, int64_t width, int64_t num_classes = 10);
  Tensor construct(const Tensor& x) override;

 private:
  nn::Conv2d conv;
  nn::ReLU relu;
  nn::MaxPool2d pool;
  nn::Flatten flatten;
  nn::Dense fc;
};

// SimpleNet with BatchNorm2d after the conv ("simplenet_bn"): a network with running statistics (buffers).
class SimpleNetBN : public nn::Cell {
 public:
  SimpleNetBN(int64_t channels, int64_t height, int64_t width, int64_t num_classes = 10);
  Tensor construct(const Tensor& x) override;

 private:
  nn::Conv2d conv;
  nn::BatchNorm2d bn{64};
  nn::ReLU relu;
  nn::MaxPool2d pool;
  nn::Flatten flatten;
  nn::Dense fc;
};

// conv 5x5 (-> 6, same) -> ReLU -> pool 2 -> conv 5x5 (-> 16; valid when the map is >= 10 wide, else same)
// -> ReLU -> pool 2 -> Dense 120 -> ReLU -> Dense 84 -> ReLU -> Dense classes.
class LeNet5 : public nn::Cell {
 public:
  LeNet5(int64_t channels, int64_t height, int64_t width, int64_t num_classes = 10);
  Tensor construct(const Tensor& x) override;

 private:
  nn::Conv2d conv1, conv2;
  nn::ReLU relu;
  nn::MaxPool2d pool;
  nn::Flatten flatten;
  nn::Dense fc1, fc2, fc3;
};

// Flatten -> Dense hidden (ReLU) -> Dense classes.
class Mlp : public nn::Cell {
 public:
  Mlp(int64_t in_features, int64_t hidden, int64_t num_classes = 10);
  Tensor construct(const Tensor& x) override;

 private:
  nn::Flatten flatten;
  nn::Dense fc1, fc2;
};

// A Transformer encoder classifier over image rows (ViT-style, a token per row): the [C, H, W] image as H tokens of
// C * W values -> Dense to d_model -> + a learned position embedding [H, d_model] -> `layers` pre-norm encoder layers
// (nhead heads, feed-forward 2 * d_model, GELU, dropout 0.1) -> LayerNorm -> mean over tokens -> Dense classes.
class RowTransformer : public nn::Cell {
 public:
  RowTransformer(int64_t channels, int64_t height, int64_t width, int64_t num_classes = 10, int64_t d_model = 64,
                 int64_t nhead = 4, int64_t layers = 2);
  Tensor construct(const Tensor& x) override;

 private:
  int64_t c_, h_, w_;
  nn::Dense embed;
  Tensor* pos_;
  nn::CellList blocks;
  nn::LayerNorm norm;
  nn::Dense head;
};

// "simplenet" | "simplenet_bn" | "lenet" | "mlp" | "transformer" for inputs of shape [C, H, W]; weights drawn from
// nn::set_seed's stream.
std::unique_ptr<nn::Cell> make_model(const std::string& name, const Shape& input_shape, int64_t num_classes = 10);

// A train/test split loaded from a CLI dataset spec:
//   mnist:DIR | fashion-mnist:DIR  the train/t10k IDX files in DIR; when DIR has only the t10k split, its
//                                  first 8000 images train and the last 2000 test (80/20 for other sizes)
//   digits:FILE                    scikit-learn digits CSV: first 80% train, the rest test
// limit_train / limit_test (> 0) keep only the first N samples of each split.
struct TrainTestSplit {
  data::LabeledData train, test;
  std::string description;  // e.g. "mnist t10k[0:8000] / t10k[8000:10000]"
};
TrainTestSplit load_dataset_spec(const std::string& spec, int64_t limit_train = 0, int64_t limit_test = 0);

}  // namespace spore::train
