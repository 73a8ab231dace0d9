// MindSpore's SimpleNet quick-start in C++: define a Cell, wrap it in train::Model with a loss and an
// optimizer, train with callbacks, evaluate, checkpoint and predict. Trains on the bundled 8x8 digits.
//
//   example_simplenet [data/digits.csv.gz] [graph|pynative]
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <spore/spore.h>

#include "data/sources.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "train/model.h"

using namespace spore;

// conv 3x3 (1 -> 32, pad same) -> ReLU -> MaxPool 2 -> Flatten -> Dense -> 10 logits, for 1x8x8 inputs.
class SimpleNet : public nn::Cell {
 public:
  SimpleNet() { SPORE_REGISTER_CELLS(conv, relu, pool, flatten, fc); }
  Tensor construct(const Tensor& x) override { return fc(flatten(pool(relu(conv(x))))); }

 private:
  nn::Conv2d conv{1, 32, 3, {.pad_mode = "same"}};
  nn::ReLU relu;
  nn::MaxPool2d pool{2, 2};
  nn::Flatten flatten;
  nn::Dense fc{32 * 4 * 4, 10};
};

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "data/digits.csv.gz";
  const std::string mode = argc > 2 ? argv[2] : "graph";
  try {
    // Data: the first 80% trains, the rest is held out.
    const data::LabeledData all = data::load_digits(path);
    const int64_t n = all.x.dim(0), cut = n * 4 / 5;
    const data::Dataset train_ds =
        data::Dataset::from_tensors(all.x.slice(0, 0, cut).contiguous(), all.y.slice(0, 0, cut).contiguous())
            .shuffle(1)
            .batch(16);
    const data::Dataset test_ds =
        data::Dataset::from_tensors(all.x.slice(0, cut, n).contiguous(), all.y.slice(0, cut, n).contiguous())
            .batch(128);

    // Network, loss, optimizer, model.
    nn::set_seed(1);
    SimpleNet net;
    nn::SoftmaxCrossEntropyWithLogits loss(/*sparse=*/true, "mean");
    auto opt = train::make_momentum(train::trainable_names(net), {.lr = 0.05, .momentum = 0.9});
    train::Model model(net, train::loss_of(loss), *opt, {"accuracy"}, {.mode = mode, .seed = 1});

    // Train with a loss monitor and per-epoch checkpoints (the newest two kept).
    const std::string ckpt_dir = (std::filesystem::temp_directory_path() / "spore_simplenet_ckpt").string();
    model.train(3, train_ds,
                {std::make_shared<train::LossMonitor>(30), std::make_shared<train::TimeMonitor>(),
                 std::make_shared<train::ModelCheckpoint>(ckpt_dir, 0, 1, 2)});

    const auto metrics = model.eval(test_ds);
    std::printf("held-out accuracy %.4f, loss %.5f (%lld samples)\n", metrics.at("accuracy"), metrics.at("loss"),
                static_cast<long long>(metrics.at("samples")));

    // Predict the first held-out digits.
    const Tensor logits = model.predict(all.x.slice(0, cut, cut + 8).contiguous());
    const std::vector<double> pred = ops::argmax(logits, 1).to_doubles();
    std::printf("predicted:");
    for (double p : pred) std::printf(" %d", static_cast<int>(p));
    std::printf("\nlabels:   ");
    for (int64_t i = 0; i < 8; ++i) std::printf(" %d", static_cast<int>(all.y.item_at(cut + i)));
    std::printf("\n");
    std::filesystem::remove_all(ckpt_dir);
    return metrics.at("accuracy") > 0.8 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "simplenet: error: %s\n", e.what());
    return 1;
  }
}
