// spore eval: evaluates a checkpoint written by `spore train` on the test split of a dataset.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "nn/init.h"
#include "nn/loss.h"
#include "tools/spore/commands.h"
#include "train/checkpoint.h"
#include "train/model.h"
#include "train/models.h"

namespace spore::cli {

int cmd_eval(int argc, char** argv) {
  CLI::App app("spore eval: test accuracy and loss of a checkpoint (weights only)", "spore eval");
  std::string model_name = "simplenet", dataset, ckpt, mode = "pynative";
  int64_t batch = 256, limit_test = 0;
  int threads = 0;
  bool json = false;
  app.add_option("--model", model_name, "simplenet | lenet | mlp")->check(CLI::IsMember({"simplenet", "lenet", "mlp"}));
  app.add_option("--ckpt", ckpt, "checkpoint (.safetensors) written by spore train")->required();
  app.add_option("--dataset", dataset, "mnist:DIR | fashion-mnist:DIR | digits:FILE (its test split)")->required();
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--mode", mode, "graph | pynative")->check(CLI::IsMember({"graph", "pynative"}));
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--limit-test", limit_test, "use only the first N test samples")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "print {\"accuracy\", \"loss\", \"samples\"}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_threads(threads);
  const train::TrainTestSplit split = train::load_dataset_spec(dataset, 0, limit_test);
  const Shape& xs = split.test.x.shape();
  std::unique_ptr<nn::Cell> net = train::make_model(model_name, {xs[1], xs[2], xs[3]});
  const train::CheckpointInfo info = train::load_checkpoint(ckpt, *net);
  // Model wants an optimizer; eval never steps it.
  std::unique_ptr<train::Optimizer> opt = train::make_optimizer("sgd", train::trainable_names(*net), 0.1);
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  train::ModelOptions mo;
  mo.mode = mode;
  train::Model model(*net, train::loss_of(ce), *opt, {"accuracy"}, mo);
  const auto m = model.eval(data::Dataset::from_tensors(split.test.x, split.test.y).batch(batch));
  if (json)
    std::cout << nlohmann::json{{"accuracy", m.at("accuracy")}, {"loss", m.at("loss")},
                                {"samples", static_cast<int64_t>(m.at("samples"))}, {"step", info.step},
                                {"epoch", info.epoch}}
                     .dump()
              << std::endl;
  else
    std::cout << fmt::format("{} ({} steps, {} epochs) on {}: accuracy {:.4f}, loss {:.5f}, {} samples\n", ckpt,
                             info.step, info.epoch, split.description, m.at("accuracy"), m.at("loss"),
                             static_cast<int64_t>(m.at("samples")));
  return 0;
}

}  // namespace spore::cli
