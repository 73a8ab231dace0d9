#pragma once
// The KServe v2 / Triton inference protocol's tensors: parsing an infer request (JSON tensor data, or the binary
// tensor data extension: a JSON header of `Inference-Header-Content-Length` bytes followed by raw tensors whose
// sizes `parameters.binary_data_size` gives), checking it against the model's inputs, and writing the response.
// Errors are 400s that name the tensor ("input 'x': shape [2,3] has 6 elements, data has 5").
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/dtype.h"
#include "ir/type.h"
#include "tensor/tensor.h"

namespace spore::serve {

// "FP32", "INT64", "BOOL", ... for a spore dtype; the dtype of a KServe datatype name (nullopt: not supported).
std::string kserve_datatype(DType t);
std::optional<DType> dtype_of_kserve(std::string_view name);

struct TensorMeta {
  std::string name;
  TensorType type;  // symbolic dims are reported as -1
};
nlohmann::json tensor_meta_json(const TensorMeta& m);

struct InferRequest {
  std::string id;
  std::vector<std::string> names;  // inputs, in request order
  std::vector<Tensor> tensors;
  struct Output {
    std::string name;
    bool binary = false;
  };
  std::vector<Output> outputs;  // requested outputs (empty: all, as JSON unless binary_output)
  bool binary_output = false;   // parameters.binary_data_output
};

// Parses the body. `header_length`: the Inference-Header-Content-Length header's value (nullopt: all JSON).
InferRequest parse_infer_request(std::string_view body, std::optional<size_t> header_length);

// Orders the request's tensors as the model's inputs and checks names, datatypes, ranks and static dims (symbolic
// dims must agree across inputs: one size per symbol). Errors name the tensor.
std::vector<Tensor> match_inputs(const InferRequest& r, const std::vector<TensorMeta>& inputs);

// The response body and, when some output is binary, the JSON header's length (the caller sets
// Inference-Header-Content-Length). `outputs`: the model's outputs as computed, in model order.
struct InferResponse {
  std::string body;
  std::optional<size_t> header_length;
};
InferResponse write_infer_response(const std::string& model, const InferRequest& r, const std::vector<TensorMeta>& metas,
                                   const std::vector<Tensor>& outputs);

}  // namespace spore::serve
