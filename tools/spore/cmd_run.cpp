// spore run: runs a model file (.spore, .onnx or text IR) once on .npy inputs (random ones, seeded,
// for inputs not given), prints each output and optionally writes one .npy per output.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <spore/spore.h>

#include "deploy/session.h"
#include "io/npy.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"

namespace spore::cli {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A file name for an output: characters outside [A-Za-z0-9_.-] become '_', never "", "." or "..".
std::string safe_file_name(const std::string& name, size_t index) {
  std::string s;
  for (char c : name) s += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ? c : '_';
  if (s.empty() || s.find_first_not_of('.') == std::string::npos) s = "output" + std::to_string(index);
  if (s[0] == '.') s[0] = '_';  // no hidden files
  return s;
}

// "[0.5, -1, 3, ...]": the first `n` elements in row-major order.
std::string first_values(const Tensor& t, int64_t n) {
  std::string s = "[";
  for (int64_t i = 0; i < std::min(n, t.numel()); ++i) {
    if (i) s += ", ";
    s += fmt::format("{:.6g}", t.item_at(i));
  }
  return s + (t.numel() > n ? ", ...]" : "]");
}

}  // namespace

int cmd_run(int argc, char** argv) {
  CLI::App app("spore run: run a model (.spore, .onnx or text-IR .ir) once on .npy inputs (random for inputs not "
               "given) and print or save its outputs",
               "spore run");
  std::string model, output_dir;
  std::vector<std::string> input_specs, shape_specs;
  int threads = 0;
  uint64_t seed = 0;
  int64_t batch = 1;
  bool no_random = false;
  app.add_option("model", model, "model file: .spore, .onnx or text IR")->required();
  app.add_option("--input", input_specs,
                 "NAME=FILE.npy (repeatable); inputs not given get random values. An ONNX sequence input: "
                 "NAME=A.npy,B.npy,... (its elements in order; NAME=[] for an empty one); an optional input not given "
                 "holds nothing")
      ->allow_extra_args(false);
  app.add_option("--input-shape", shape_specs, "NAME:D0,D1,... fixes input dims (repeatable; ';' joins several)")
      ->allow_extra_args(false);
  app.add_option("--batch", batch, "size of a symbolic first dim of random inputs (default 1)")->check(CLI::PositiveNumber);
  app.add_flag("--no-random", no_random, "every input must be given with --input (no random inputs)");
  bool fast_conv = false;
  app.add_flag("--fast-conv", fast_conv, "3x3 convs may use Winograd F(4x4,3x3): faster, ~3x the f32 error of the default against float64 (docs/PERFORMANCE.md)");
  app.add_option("--output", output_dir, "write <output name>.npy for every output into this directory");
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "seed of the random inputs (default 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_threads(threads);

  auto t0 = std::chrono::steady_clock::now();
  deploy::SessionOptions sopts;
  sopts.compile.fast_conv = fast_conv;
  sopts.input_dims = input_dims_of(parse_input_shapes(shape_specs));
  deploy::Session session(model, sopts);
  const std::vector<deploy::SessionInput>& model_inputs = session.inputs();
  const double load_ms = ms_since(t0);

  const RunInputs given = gather_run_inputs(session, input_specs, batch, /*batch_given=*/false, seed, no_random, model);
  const std::vector<Tensor>& inputs = given.tensors;

  t0 = std::chrono::steady_clock::now();
  deploy::Specialization& spec = session.specialize(inputs, given.layout);
  const double compile_ms = ms_since(t0);
  const std::vector<Tensor> plan_in = spec.select(inputs);
  t0 = std::chrono::steady_clock::now();
  const std::vector<Tensor> outs = spec.plan.run(plan_in);
  const double run_ms = ms_since(t0);
  const Graph& pg = spec.plan.graph();

  std::cout << fmt::format("{}: {}, loaded in {:.1f} ms, compiled in {:.1f} ms ({} kernels, {}), ran in {:.3f} ms\n",
                           model, session.model_name(), load_ms, compile_ms, spec.plan.num_kernels(), spec.how, run_ms);
  // A sequence or optional input prints its length (or that it holds nothing), then its tensors as NAME.i.
  for (size_t i = 0; i < model_inputs.size(); ++i) {
    const deploy::SessionInput& in = model_inputs[i];
    if (in.kind == io::OnnxValueKind::sequence || in.kind == io::OnnxValueKind::optional_sequence ||
        given.layout[i] == io::kOnnxAbsent)
      std::cout << fmt::format("input  {}: {}\n", in.name,
                               given.layout[i] == io::kOnnxAbsent ? std::string("(optional, holds nothing)")
                                                                  : fmt::format("sequence of {}", given.layout[i]));
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    std::cout << fmt::format("input  {}: {}{} {}\n", given.names[i], dtype_name(inputs[i].dtype()),
                             shape_str(inputs[i].shape()),
                             given.files[i].empty() ? fmt::format("random (seed {})", seed) : "from " + given.files[i]);
  // The same for sequence and optional outputs (Specialization::outputs); their tensors are named NAME.i.
  for (const io::OnnxValueLayout& o : spec.outputs)
    if (o.kind != io::OnnxValueKind::tensor && (o.count == io::kOnnxAbsent || o.kind != io::OnnxValueKind::optional))
      std::cout << fmt::format("output {}: {}\n", o.name,
                               o.count == io::kOnnxAbsent ? std::string("(optional, holds nothing)")
                                                          : fmt::format("sequence of {}", o.count));
  // With sequence or optional outputs, each tensor is named after its model output (NAME, NAME.0, NAME.1, ...): the
  // plan may have merged equal outputs into one value, which then has one name.
  std::vector<std::string> out_names;
  for (const io::OnnxValueLayout& o : spec.outputs) {
    if (o.kind == io::OnnxValueKind::sequence || o.kind == io::OnnxValueKind::optional_sequence)
      for (int64_t e = 0; e < o.count; ++e) out_names.push_back(io::sequence_element_name(o.name, e));
    else if (o.count != io::kOnnxAbsent) out_names.push_back(o.name);
  }
  std::set<std::string> used;
  if (!output_dir.empty()) std::filesystem::create_directories(output_dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& t = outs[i];
    const std::string& name = out_names.empty() ? pg.outputs()[i]->name : out_names.at(i);
    std::cout << fmt::format("output {}: {}{} {}\n", name, dtype_name(t.dtype()), shape_str(t.shape()), first_values(t, 8));
    if (output_dir.empty()) continue;
    std::string file = safe_file_name(name, i);
    if (!used.insert(file).second) {  // two outputs with one file name (e.g. the same value returned twice)
      file += "_" + std::to_string(i);
      used.insert(file);
    }
    const std::string path = (std::filesystem::path(output_dir) / (file + ".npy")).string();
    // NumPy has no bf16: such outputs are written as f32 (exactly: every bf16 is an f32).
    io::write_npy(path, t.dtype() == DType::bf16 ? ops::cast(t, DType::f32) : t);
    std::cout << fmt::format("       -> {}{}\n", path, t.dtype() == DType::bf16 ? " (bf16 written as f32)" : "");
  }
  return 0;
}

}  // namespace spore::cli
