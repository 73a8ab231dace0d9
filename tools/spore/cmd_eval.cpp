// spore eval: evaluates a model file (.onnx / .spore, as a classifier) or a checkpoint written by `spore train`
// on the test split of a dataset.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "data/sources.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"
#include "train/checkpoint.h"
#include "train/model.h"
#include "train/models.h"

namespace spore::cli {

namespace {

// The test images of a dataset spec for a model file: by default the same test split as spore train and
// `spore eval --ckpt` (so an exported model scores exactly its checkpoint's accuracy); split "t10k" takes all of the
// MNIST/Fashion-MNIST t10k images, for models trained elsewhere (e.g. the ONNX zoo's mnist-8).
data::LabeledData model_eval_data(const std::string& spec, const std::string& split, int64_t limit_test,
                                  std::string* description) {
  const size_t colon = spec.find(':');
  const std::string kind = colon == std::string::npos ? "" : spec.substr(0, colon);
  data::LabeledData d;
  if (split == "t10k") {
    SPORE_CHECK(kind == "mnist" || kind == "fashion-mnist", ErrorCode::invalid_argument,
                "--split t10k needs an mnist:DIR or fashion-mnist:DIR dataset, got '{}'", spec);
    d = data::load_mnist(spec.substr(colon + 1), "t10k");
    *description = kind + " t10k";
  } else {
    const train::TrainTestSplit s = train::load_dataset_spec(spec, 0, 0);
    d = s.test;
    *description = s.description + " (test split)";
  }
  if (limit_test > 0 && limit_test < d.x.dim(0)) {
    d.x = d.x.slice(0, 0, limit_test).contiguous();
    d.y = d.y.slice(0, 0, limit_test).contiguous();
    *description += fmt::format("[:{}]", limit_test);
  }
  return d;
}

int eval_model_file(const std::string& path, const std::string& dataset, const std::string& split, int64_t batch,
                    int64_t limit_test,
                    float input_scale, const std::vector<std::string>& input_shapes, bool json) {
  std::unique_ptr<Graph> g = load_model_file(path, parse_input_shapes(input_shapes));
  std::string description;
  const data::LabeledData d = model_eval_data(dataset, split, limit_test, &description);
  const ClassifierEval r = evaluate_classifier(*g, d, batch, input_scale);
  if (json)
    std::cout << nlohmann::json{{"accuracy", r.accuracy}, {"loss", r.loss}, {"samples", r.samples}, {"correct", r.correct}}
                     .dump()
              << std::endl;
  else
    std::cout << fmt::format("{} on {} (inputs x {}): accuracy {:.4f} ({}/{}), loss {:.5f}\n", path, description,
                             input_scale, r.accuracy, r.correct, r.samples, r.loss);
  return 0;
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  CLI::App app(
      "spore eval: test accuracy and loss of a model file (.onnx/.spore, as a classifier: input 0 = images, output 0 "
      "= class scores) or of a checkpoint written by spore train (weights only, with --model and --ckpt)",
      "spore eval");
  std::string model_file, model_name = "simplenet", dataset, ckpt, mode = "pynative", eval_split = "test";
  int64_t batch = 256, limit_test = 0;
  int threads = 0;
  float input_scale = 1.f;
  std::vector<std::string> input_shapes;
  bool json = false;
  app.add_option("model_file", model_file, "model file (.onnx or .spore) to evaluate as a classifier");
  app.add_option("--model", model_name, "checkpoint mode: simplenet | simplenet_bn | lenet | mlp | transformer")
      ->check(CLI::IsMember({"simplenet", "simplenet_bn", "lenet", "mlp", "transformer"}));
  app.add_option("--ckpt", ckpt, "checkpoint mode: checkpoint (.safetensors) written by spore train");
  app.add_option("--dataset", dataset, "mnist:DIR | fashion-mnist:DIR | digits:FILE (its test split)")->required();
  app.add_option("--split", eval_split,
                 "model file: test (the test split spore train uses; default) | t10k (all MNIST/Fashion-MNIST t10k "
                 "images, for models trained elsewhere)")
      ->check(CLI::IsMember({"test", "t10k"}));
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--mode", mode, "checkpoint mode: graph | pynative")->check(CLI::IsMember({"graph", "pynative"}));
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--limit-test", limit_test, "use only the first N test samples")->check(CLI::NonNegativeNumber);
  app.add_option("--input-scale", input_scale,
                 "model file: multiply the [0,1] images by S first (255 for models trained on raw pixels, e.g. the ONNX "
                 "zoo mnist-8)");
  app.add_option("--input-shape", input_shapes, "model file: NAME:D0,D1,... (fixes symbolic input dims)");
  app.add_flag("--json", json, "print {\"accuracy\", \"loss\", \"samples\"}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_threads(threads);
  if (!model_file.empty()) {
    SPORE_CHECK(ckpt.empty(), ErrorCode::invalid_argument, "give either a model file or --ckpt, not both");
    return eval_model_file(model_file, dataset, eval_split, batch, limit_test, input_scale, input_shapes, json);
  }
  SPORE_CHECK(!ckpt.empty(), ErrorCode::invalid_argument,
              "nothing to evaluate: give a model file (spore eval model.onnx --dataset ...) or --ckpt FILE");
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
