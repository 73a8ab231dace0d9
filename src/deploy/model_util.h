#pragma once
// What the front ends (the CLI's deployment commands, the Python package) and deploy's convert / profile share:
// input-shape specs, loading a model file with shapes applied, the inputs of a run, compiling for shapes, planned
// memory, evaluating a classifier on tensors. The CLI's tools/spore/model_util.h forwards to these.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "deploy/session.h"
#include "ir/graph.h"
#include "runtime/plan.h"

namespace spore::deploy {

// One `--input-shape` entry: "x:1,1,28,28" (ATC style). A dim may be a symbol ("batch") to keep it dynamic
// or -1 to keep the model's own dim. Several entries may be joined with ';'.
struct InputShapeSpec {
  std::string name;
  std::vector<Dim> dims;
};
std::vector<InputShapeSpec> parse_input_shapes(const std::vector<std::string>& specs);

// Replaces the named graph inputs' types with the spec'd dims (static dims fix symbolic ones; a static
// dim that disagrees with a static model dim is an error naming the input) and re-infers every type.
void apply_input_shapes(Graph& g, const std::vector<InputShapeSpec>& specs);

// load_model + apply_input_shapes.
std::unique_ptr<Graph> load_model_file(const std::string& path, const std::vector<InputShapeSpec>& specs = {});

// Concrete shapes for the graph inputs: static dims as they are, symbolic dims -> `batch` for the first
// dim, else an error naming the input and dim (the user must fix it with --input-shape).
std::vector<Shape> concrete_input_shapes(const Graph& g, int64_t batch = 1);
std::vector<Shape> concrete_input_shapes(const std::vector<SessionInput>& inputs, int64_t batch = 1);

// concrete_input_shapes for `spore bench` / `spore profile`: `batch_given` (the user passed --batch) needs an input
// with a symbolic first dim, else an error naming the model.
std::vector<Shape> shapes_for_batch(const Graph& g, int64_t batch, bool batch_given, const std::string& model);
std::vector<Shape> shapes_for_batch(const std::vector<SessionInput>& inputs, int64_t batch, bool batch_given,
                                    const std::string& model);

// The inputs of one run of a session's model, as `spore run`, `bench` and `profile` take them: `--input NAME=FILE.npy`
// specs and tensors given by name (`given`, the Python front end's; every name a model input, each given once; their
// shapes bind the symbolic dims), and seeded random tensors (random_input.h) for the inputs not given, shaped by the
// dims the given ones bound, `batch` for a free first dim. `batch_given` (the user passed --batch) needs an input
// with a symbolic first dim; `no_random` needs every input given. Errors name the option, the input and the file.
// ONNX sequence inputs are given as `--input NAME=A.npy,B.npy,...` (its elements in order; `NAME=[]` for an empty
// one) and get no random values; an optional input not given holds nothing (Layout).
struct RunInputs {
  std::vector<Tensor> tensors;     // in the session's input order (a sequence input: its elements; see `layout`)
  std::vector<std::string> files;  // per tensor: the .npy it was read from, "" for a given or random one
  std::vector<std::string> names;  // per tensor: the input's name (a sequence's elements NAME.0, NAME.1, ...)
  Layout layout;                   // per model input: how many of `tensors` it is (Session::run(tensors, layout))
};
RunInputs gather_run_inputs(const Session& s, const std::vector<std::string>& input_specs, int64_t batch,
                            bool batch_given, uint64_t seed, bool no_random, const std::string& model,
                            const std::map<std::string, Tensor>& given = {});

// The --input-shape specs as SessionOptions::input_dims.
std::map<std::string, std::vector<Dim>> input_dims_of(const std::vector<InputShapeSpec>& specs);

// Bytes of a tensor of this (static) type.
inline int64_t tensor_bytes(const TensorType& t) { return t.numel() * static_cast<int64_t>(dtype_size(t.dtype)); }

// What a compiled plan needs in memory: its arena, its constants, and its graph inputs and computed outputs.
struct PlannedMemory {
  int64_t arena = 0, weights = 0, io = 0;
  int64_t total() const { return arena + weights + io; }
};
PlannedMemory planned_memory(const Plan& plan);

// Compiles a copy of `g` for the given input shapes (an inference plan).
Plan compile_for_shapes(const Graph& g, const std::vector<Shape>& shapes, const CompileOptions& opts = {});

// Accuracy of a classifier model (input 0 = images, output 0 = [N, classes] scores) on images `x` ([N, ...]) with
// integer labels `y` ([N], i64). Images are multiplied by `scale` (1 for spore-trained models; 255 for models trained
// on raw pixels). If the model's batch dim is static (e.g. 1), it runs that many samples at a time.
struct ClassifierEval {
  double accuracy = 0;
  int64_t samples = 0;
  int64_t correct = 0;
  double loss = 0;  // mean softmax cross-entropy, taking output 0 as logits
};
ClassifierEval evaluate_classifier(const Graph& g, const Tensor& x, const Tensor& y, int64_t batch = 64,
                                   float scale = 1.f);

}  // namespace spore::deploy
