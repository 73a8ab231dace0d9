// spore export: a built-in model + its checkpoint -> a deployable model file (.spore or .onnx).
// The model is traced in eval mode, so its weights become constants (named after their parameters) and
// BatchNorm/Dropout take their inference form; cheap cleanup (DCE, CSE, constant folding) runs before writing.
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "io/model_file.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"
#include "train/checkpoint.h"
#include "train/export.h"
#include "train/models.h"

namespace spore::cli {
namespace {

// "1,28,28" -> {1, 28, 28}.
Shape parse_image_shape(const std::string& s) {
  Shape out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string part = s.substr(pos, comma - pos);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    SPORE_CHECK(!part.empty() && end && *end == '\0' && v > 0, ErrorCode::invalid_argument,
                "--image-shape '{}': expected positive sizes C,H,W (e.g. 1,28,28)", s);
    out.push_back(v);
    pos = comma + 1;
  }
  SPORE_CHECK(out.size() == 3, ErrorCode::invalid_argument, "--image-shape '{}': expected 3 sizes C,H,W, got {}", s,
              out.size());
  return out;
}

}  // namespace

int cmd_export(int argc, char** argv) {
  CLI::App app("spore export: a built-in model and its checkpoint -> .spore or .onnx model file", "spore export");
  std::string model_name = "simplenet", ckpt, out, image_shape, dataset, input_name = "x";
  std::vector<std::string> input_shapes;
  bool json = false;
  app.add_option("--model", model_name, "simplenet | simplenet_bn | lenet | mlp | transformer")
      ->check(CLI::IsMember({"simplenet", "simplenet_bn", "lenet", "mlp", "transformer"}));
  app.add_option("--ckpt", ckpt, "checkpoint (.safetensors) written by spore train")->required();
  app.add_option("-o,--output", out, "output model file: OUT.spore or OUT.onnx")->required();
  app.add_option("--input-shape", input_shapes,
                 "input shape NAME:D0,D1,... (e.g. x:1,1,28,28, or x:batch,1,28,28 for a symbolic batch)");
  app.add_option("--image-shape", image_shape, "C,H,W of one image (the batch dim stays symbolic, \"batch\")");
  app.add_option("--dataset", dataset, "take the image shape from a dataset: mnist:DIR | fashion-mnist:DIR | digits:FILE");
  app.add_option("--name", input_name, "name of the model input (default x)");
  app.add_flag("--json", json, "print the summary as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // The input type: --input-shape wins, else [batch, C, H, W] from --image-shape or the dataset.
  TensorType in_type;
  if (!input_shapes.empty()) {
    const std::vector<InputShapeSpec> specs = parse_input_shapes(input_shapes);
    SPORE_CHECK(specs.size() == 1, ErrorCode::invalid_argument, "--input-shape: the model has one input, got {} shapes",
                specs.size());
    input_name = specs[0].name;
    SPORE_CHECK(specs[0].dims.size() == 4, ErrorCode::invalid_argument,
                "--input-shape '{}': the model takes [N,C,H,W] (4 dims), got {}", input_shapes[0], specs[0].dims.size());
    for (size_t i = 0; i < specs[0].dims.size(); ++i) {
      const Dim& d = specs[0].dims[i];
      SPORE_CHECK(i == 0 || d.is_static(), ErrorCode::invalid_argument,
                  "--input-shape '{}': only the batch dim may be symbolic", input_shapes[0]);
      SPORE_CHECK(d.is_static() ? d.size > 0 : !d.sym.empty(), ErrorCode::invalid_argument,
                  "--input-shape '{}': dim {} must be a positive size or a symbol name", input_shapes[0], i);
    }
    in_type = TensorType(DType::f32, specs[0].dims);
  } else {
    Shape chw;
    if (!image_shape.empty()) {
      chw = parse_image_shape(image_shape);
    } else {
      SPORE_CHECK(!dataset.empty(), ErrorCode::invalid_argument,
                  "give the input shape: --input-shape x:batch,1,28,28, --image-shape 1,28,28 or --dataset SPEC");
      const train::TrainTestSplit split = train::load_dataset_spec(dataset, 1, 1);
      const Shape& xs = split.test.x.shape();
      chw = {xs[1], xs[2], xs[3]};
    }
    in_type = TensorType(DType::f32, {Dim::symbol("batch"), chw[0], chw[1], chw[2]});
  }
  const Shape chw = {in_type.dims[1].size, in_type.dims[2].size, in_type.dims[3].size};

  std::unique_ptr<nn::Cell> net = train::make_model(model_name, chw);
  const train::CheckpointInfo info = train::load_checkpoint(ckpt, *net);
  train::ExportSpec spec;
  spec.inputs = {in_type};
  spec.input_names = {input_name};
  const std::unique_ptr<Graph> g = train::export_graph(*net, spec);

  io::save_model(*g, out, {{"model", model_name}, {"checkpoint", ckpt}, {"input", in_type.str()}});

  const train::GraphSummary sum = train::summarize(*g);
  const int64_t ops = sum.ops, params = sum.params, weight_bytes = sum.weight_bytes;
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(out));
  if (json) {
    std::cout << nlohmann::json{{"path", out},        {"model", model_name},          {"ops", ops},
                                {"params", params},   {"weight_bytes", weight_bytes}, {"file_bytes", file_bytes},
                                {"input", in_type.str()}, {"step", info.step}}
                     .dump()
              << std::endl;
  } else {
    std::cout << fmt::format("exported {} ({} steps) as {}: input {} {}, output logits {}; {} ops, {} parameters "
                             "({} weight bytes), {} bytes\n",
                             model_name, info.step, out, input_name, in_type.str(), g->outputs()[0]->type.str(), ops,
                             params, weight_bytes, file_bytes);
  }
  return 0;
}

}  // namespace spore::cli
