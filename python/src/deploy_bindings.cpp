// spore.convert and spore.profile's C++ half (docs/PYTHON.md): deploy::convert_model and deploy::profile_model, the
// code `spore convert` and `spore profile` run, with the GIL released; the reports come back as the dicts of the JSON
// the CLI prints with --json. Argument checks that need Python types are in spore/tools.py; the engine checks the
// values (one-line spore.Error naming the CLI option the argument mirrors).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common.h"
#include "deploy/convert.h"
#include "deploy/profile.h"
#include "tensor/tensor.h"
#include "train/models.h"

namespace py = pybind11;

namespace spore_py {
namespace {

py::object json_to_python(const std::string& text) { return py::module_::import("json").attr("loads")(text); }

// Dataset specs ("digits:FILE", "mnist:DIR", ...) as `spore train --dataset` reads them (the train layer).
spore::deploy::DatasetTensors load_dataset(const std::string& spec, int64_t limit_train, int64_t limit_test) {
  spore::train::TrainTestSplit split = spore::train::load_dataset_spec(spec, limit_train, limit_test);
  return {split.train.x, split.test.x, split.test.y};
}

py::object convert(const std::string& model, const std::string& output, const std::string& precision_mode,
                   const std::string& mix_dtype, const std::string& quantize, const std::string& calib_data,
                   const py::object& calib_tensor, int64_t calib_samples, const std::string& calib_method, int act_bits,
                   const std::string& eval_data, const std::vector<std::string>& input_shapes, int optimize_level,
                   float input_scale) {
  spore::deploy::ConvertOptions o;
  o.input = model;
  o.output = output;
  o.input_shapes = input_shapes;
  o.precision_mode = precision_mode;
  o.mix_dtype = mix_dtype;
  o.quantize = quantize;
  o.calib_data = calib_data;
  if (!calib_tensor.is_none()) o.calib_tensor = calib_tensor.cast<spore::Tensor>();
  o.calib_samples = calib_samples;
  o.calib_method = calib_method;
  o.act_bits = act_bits;
  o.eval_data = eval_data;
  o.input_scale = input_scale;
  o.optimize_level = optimize_level;
  o.load_dataset = load_dataset;
  std::string report;
  {
    py::gil_scoped_release nogil;
    report = spore::deploy::convert_model(o).to_json();
  }
  return json_to_python(report);
}

py::object profile(const std::string& model, const std::vector<std::string>& input_files,
                   const std::map<std::string, spore::Tensor>& inputs, const std::vector<std::string>& input_shapes,
                   const py::object& batch, int64_t iters, int64_t warmup, uint64_t seed, int opt_level,
                   int memory_optimize_level, bool fast_conv, const std::string& trace, int top, bool train,
                   double lr) {
  spore::deploy::ProfileOptions o;
  o.model = model;
  o.input_files = input_files;
  o.inputs = inputs;
  o.input_shapes = input_shapes;
  if (!batch.is_none()) {
    o.batch = batch.cast<int64_t>();
    o.batch_given = true;
  }
  o.iters = iters;
  o.warmup = warmup;
  o.seed = seed;
  o.opt_level = opt_level;
  o.memory_optimize_level = memory_optimize_level;
  o.fast_conv = fast_conv;
  o.trace_path = trace;
  o.top_k = top;
  o.train = train;
  o.lr = lr;
  std::string report;
  {
    py::gil_scoped_release nogil;
    report = spore::deploy::profile_model(o).to_json();
  }
  return json_to_python(report);
}

}  // namespace

void bind_deploy(py::module_& m) {
  m.def("_convert", &convert, py::arg("model"), py::arg("output"), py::arg("precision_mode"), py::arg("mix_dtype"),
        py::arg("quantize"), py::arg("calib_data"), py::arg("calib_tensor"), py::arg("calib_samples"),
        py::arg("calib_method"), py::arg("act_bits"), py::arg("eval_data"), py::arg("input_shapes"),
        py::arg("optimize_level"), py::arg("input_scale"),
        "deploy::convert_model (spore convert): the report as a dict (spore convert --json's object)");
  m.def("_profile", &profile, py::arg("model"), py::arg("input_files"), py::arg("inputs"), py::arg("input_shapes"),
        py::arg("batch"), py::arg("iters"), py::arg("warmup"), py::arg("seed"), py::arg("opt_level"),
        py::arg("memory_optimize_level"), py::arg("fast_conv"), py::arg("trace"), py::arg("top"), py::arg("train"),
        py::arg("lr"), "deploy::profile_model (spore profile): the report as a dict (spore profile --json's object)");
}

}  // namespace spore_py
