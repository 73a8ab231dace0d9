#pragma once
// Shared by the deployment commands (export, convert, check-ops, run, bench, eval of model files). The model helpers
// live in the deploy layer (deploy/model_util.h), where the Python package reaches them too; this header names them
// in spore::cli and adds what only the CLI needs (a dataset's LabeledData to evaluate on, --max-memory sizes).
#include <cstddef>
#include <string>

#include "data/sources.h"
#include "deploy/model_util.h"

namespace spore::cli {

using deploy::apply_input_shapes;
using deploy::ClassifierEval;
using deploy::compile_for_shapes;
using deploy::concrete_input_shapes;
using deploy::evaluate_classifier;
using deploy::gather_run_inputs;
using deploy::input_dims_of;
using deploy::InputShapeSpec;
using deploy::load_model_file;
using deploy::parse_input_shapes;
using deploy::planned_memory;
using deploy::PlannedMemory;
using deploy::RunInputs;
using deploy::shapes_for_batch;
using deploy::tensor_bytes;

// Accuracy of a classifier model on a labelled dataset (deploy::evaluate_classifier on its images and labels).
inline ClassifierEval evaluate_classifier(const Graph& g, const data::LabeledData& d, int64_t batch = 64,
                                          float scale = 1.f) {
  return deploy::evaluate_classifier(g, d.x, d.y, batch, scale);
}

// "2GB", "512MiB", "1.5e9", "300000000B" -> bytes (decimal units are powers of 1000, *iB of 1024); errors name
// --max-memory.
size_t parse_bytes(const std::string& text);

}  // namespace spore::cli
