#include "serve/kserve.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "serve/errors.h"
#include "serve/json_fields.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"

namespace spore::serve {

using nlohmann::json;

std::string kserve_datatype(DType t) {
  switch (t) {
    case DType::f64: return "FP64";
    case DType::f32: return "FP32";
    case DType::f16: return "FP16";
    case DType::bf16: return "BF16";
    case DType::i64: return "INT64";
    case DType::i32: return "INT32";
    case DType::i8: return "INT8";
    case DType::u8: return "UINT8";
    case DType::boolean: return "BOOL";
  }
  return "UNKNOWN";
}

std::optional<DType> dtype_of_kserve(std::string_view n) {
  static const std::pair<const char*, DType> table[] = {
      {"FP64", DType::f64}, {"FP32", DType::f32}, {"FP16", DType::f16}, {"BF16", DType::bf16}, {"INT64", DType::i64},
      {"INT32", DType::i32}, {"INT8", DType::i8}, {"UINT8", DType::u8},  {"BOOL", DType::boolean}};
  for (const auto& [name, t] : table)
    if (n == name) return t;
  return std::nullopt;
}

json tensor_meta_json(const TensorMeta& m) {
  json shape = json::array();
  for (const Dim& d : m.type.dims) shape.push_back(d.is_static() ? d.size : -1);
  return json{{"name", m.name}, {"datatype", kserve_datatype(m.type.dtype)}, {"shape", std::move(shape)}};
}

namespace {

[[noreturn]] void bad_tensor(const std::string& param, const std::string& msg) { bad_request(param, msg); }

// Flattens nested arrays (Triton accepts both flat and nested data) in row-major order.
void flatten(const json& j, std::vector<const json*>& out) {
  if (j.is_array()) {
    for (const json& e : j) flatten(e, out);
  } else {
    out.push_back(&j);
  }
}

template <typename T>
void fill_integers(Tensor& t, const std::vector<const json*>& vals, const std::string& what) {
  T* p = t.data<T>();
  for (size_t i = 0; i < vals.size(); ++i) {
    const json& v = *vals[i];
    int64_t x = 0;
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        bad_tensor(what, fmt::format("element {} ({}) is out of range", i, v.dump()));
      x = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
               std::fabs(v.get<double>()) < 9.0e18) {
      x = static_cast<int64_t>(v.get<double>());
    } else {
      bad_tensor(what, fmt::format("element {} is {}, expected an integer", i, v.is_number() ? v.dump() : json_kind(v)));
    }
    if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) || x > static_cast<int64_t>(std::numeric_limits<T>::max()))
      bad_tensor(what, fmt::format("element {} ({}) does not fit the datatype", i, x));
    p[i] = static_cast<T>(x);
  }
}

Tensor tensor_from_json(const json& data, DType dtype, const Shape& shape, const std::string& name,
                        const std::string& param) {
  std::vector<const json*> vals;
  flatten(data, vals);
  const int64_t n = shape_numel(shape);
  const std::string what = fmt::format("{} (input '{}')", param, name);
  if (static_cast<int64_t>(vals.size()) != n)
    bad_tensor(param, fmt::format("input '{}': shape {} has {} elements, data has {}", name, shape_str(shape), n,
                                  vals.size()));
  Tensor t = Tensor::empty(shape, dtype);
  switch (dtype) {
    case DType::i64: fill_integers<int64_t>(t, vals, what); break;
    case DType::i32: fill_integers<int32_t>(t, vals, what); break;
    case DType::i8: fill_integers<int8_t>(t, vals, what); break;
    case DType::u8: fill_integers<uint8_t>(t, vals, what); break;
    case DType::boolean: {
      auto* p = static_cast<uint8_t*>(t.raw_data());
      for (size_t i = 0; i < vals.size(); ++i) {
        const json& v = *vals[i];
        if (v.is_boolean()) p[i] = v.get<bool>() ? 1 : 0;
        else if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) p[i] = static_cast<uint8_t>(v.get<int64_t>());
        else bad_tensor(param, fmt::format("input '{}': element {} is {}, expected a boolean", name, i, json_kind(v)));
      }
      break;
    }
    default: {  // floating point
      std::vector<double> d(vals.size());
      for (size_t i = 0; i < vals.size(); ++i) {
        if (!vals[i]->is_number())
          bad_tensor(param, fmt::format("input '{}': element {} is {}, expected a number", name, i, json_kind(*vals[i])));
        d[i] = vals[i]->get<double>();
      }
      if (dtype == DType::f32) {
        float* p = t.data<float>();
        for (size_t i = 0; i < d.size(); ++i) p[i] = static_cast<float>(d[i]);
      } else if (dtype == DType::f64) {
        std::memcpy(t.raw_data(), d.data(), d.size() * sizeof(double));
      } else {
        t = Tensor::from_doubles(d, shape, dtype);
      }
    }
  }
  return t;
}

json tensor_to_json(const Tensor& t0) {
  const Tensor t = t0.contiguous();
  json a = json::array();
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::i64: {
      const auto* p = static_cast<const int64_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) a.push_back(p[i]);
      break;
    }
    case DType::i32: {
      const auto* p = static_cast<const int32_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) a.push_back(p[i]);
      break;
    }
    case DType::i8: {
      const auto* p = static_cast<const int8_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) a.push_back(static_cast<int>(p[i]));
      break;
    }
    case DType::u8: {
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) a.push_back(static_cast<int>(p[i]));
      break;
    }
    case DType::boolean: {
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) a.push_back(p[i] != 0);
      break;
    }
    case DType::f32: {
      const auto* p = static_cast<const float*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) a.push_back(p[i]);
      break;
    }
    default:
      for (double v : t.to_doubles()) a.push_back(v);
  }
  return a;
}

}  // namespace

InferRequest parse_infer_request(std::string_view body, std::optional<size_t> header_length) {
  std::string_view head = body, binary;
  if (header_length) {
    if (*header_length > body.size())
      bad_request("Inference-Header-Content-Length",
                  fmt::format("{} is larger than the body ({} bytes)", *header_length, body.size()));
    head = body.substr(0, *header_length);
    binary = body.substr(*header_length);
  }
  const json j = parse_json_body(std::string(head));
  Fields f(j, "");
  InferRequest r;
  r.id = f.str("id").value_or("");
  if (const json* p = f.get("parameters")) {
    Fields pf(*p, "parameters");
    r.binary_output = pf.boolean("binary_data_output").value_or(false);
  }
  const json* ins = f.get("inputs");
  if (!ins) bad_request("inputs", "is required");
  if (!ins->is_array()) bad_request("inputs", fmt::format("expected an array, got {}", json_kind(*ins)));
  size_t consumed = 0;
  for (size_t i = 0; i < ins->size(); ++i) {
    const std::string path = json_path("inputs", i);
    Fields inf((*ins)[i], path);
    const auto name = inf.str("name");
    if (!name) bad_request(inf.path("name"), "is required");
    for (const std::string& seen : r.names)
      if (seen == *name) bad_request(inf.path("name"), fmt::format("input '{}' is given twice", *name));
    const auto dt_name = inf.str("datatype");
    if (!dt_name) bad_request(inf.path("datatype"), fmt::format("input '{}': datatype is required", *name));
    const auto dtype = dtype_of_kserve(*dt_name);
    if (!dtype)
      bad_request(inf.path("datatype"), fmt::format("input '{}': datatype '{}' is not supported (FP64, FP32, FP16, BF16, "
                                                    "INT64, INT32, INT8, UINT8, BOOL)", *name, *dt_name));
    const json* sh = inf.get("shape");
    if (!sh || !sh->is_array()) bad_request(inf.path("shape"), fmt::format("input '{}': shape must be an array", *name));
    Shape shape;
    for (size_t d = 0; d < sh->size(); ++d)
      shape.push_back(expect_integer((*sh)[d], json_path(inf.path("shape"), d), 0, int64_t{1} << 40));
    const int64_t numel = shape_numel(shape);
    if (numel > (int64_t{1} << 32)) bad_request(inf.path("shape"), fmt::format("input '{}': too many elements", *name));
    std::optional<int64_t> binary_size;
    if (const json* p = inf.get("parameters")) {
      Fields pf(*p, inf.path("parameters"));
      binary_size = pf.integer("binary_data_size", 0, INT64_MAX);
    }
    Tensor t;
    if (binary_size) {
      if (!header_length)
        bad_request(inf.path("parameters.binary_data_size"),
                    fmt::format("input '{}': binary data without an Inference-Header-Content-Length header", *name));
      const int64_t want = numel * static_cast<int64_t>(dtype_size(*dtype));
      if (*binary_size != want)
        bad_request(inf.path("parameters.binary_data_size"),
                    fmt::format("input '{}': {} {} elements of shape {} are {} bytes, binary_data_size is {}", *name,
                                numel, *dt_name, shape_str(shape), want, *binary_size));
      if (consumed + static_cast<size_t>(want) > binary.size())
        bad_request(inf.path("parameters.binary_data_size"),
                    fmt::format("input '{}': the body has {} binary bytes left, {} needed", *name,
                                binary.size() - consumed, want));
      t = Tensor::empty(shape, *dtype);
      if (want > 0) std::memcpy(t.raw_data(), binary.data() + consumed, static_cast<size_t>(want));
      if (*dtype == DType::boolean) {
        auto* p = static_cast<uint8_t*>(t.raw_data());
        for (int64_t e = 0; e < numel; ++e) p[e] = p[e] != 0;
      }
      consumed += static_cast<size_t>(want);
    } else {
      const json* data = inf.get("data");
      if (!data) bad_request(inf.path("data"), fmt::format("input '{}': data is required (or binary_data_size)", *name));
      t = tensor_from_json(*data, *dtype, shape, *name, inf.path("data"));
    }
    r.names.push_back(*name);
    r.tensors.push_back(std::move(t));
  }
  if (consumed != binary.size())
    bad_request("inputs", fmt::format("{} bytes of binary data follow the JSON header, the inputs use {}", binary.size(),
                                      consumed));
  if (const json* outs = f.get("outputs")) {
    if (!outs->is_array()) bad_request("outputs", fmt::format("expected an array, got {}", json_kind(*outs)));
    for (size_t i = 0; i < outs->size(); ++i) {
      Fields of((*outs)[i], json_path("outputs", i));
      const auto name = of.str("name");
      if (!name) bad_request(of.path("name"), "is required");
      InferRequest::Output o{*name, r.binary_output};
      if (const json* p = of.get("parameters")) {
        Fields pf(*p, of.path("parameters"));
        o.binary = pf.boolean("binary_data").value_or(r.binary_output);
      }
      r.outputs.push_back(std::move(o));
    }
  }
  return r;
}

std::vector<Tensor> match_inputs(const InferRequest& r, const std::vector<TensorMeta>& inputs) {
  std::vector<Tensor> out(inputs.size());
  std::map<std::string, std::pair<int64_t, std::string>> symbols;  // symbol -> (size, where it was bound)
  for (size_t i = 0; i < r.names.size(); ++i) {
    size_t k = inputs.size();
    for (size_t m = 0; m < inputs.size(); ++m)
      if (inputs[m].name == r.names[i]) k = m;
    const std::string param = json_path("inputs", i);
    if (k == inputs.size()) {
      std::string names;
      for (const TensorMeta& m : inputs) names += (names.empty() ? "" : ", ") + m.name;
      bad_request(param + ".name", fmt::format("the model has no input '{}' (inputs: {})", r.names[i], names));
    }
    const TensorMeta& m = inputs[k];
    const Tensor& t = r.tensors[i];
    if (t.dtype() != m.type.dtype)
      bad_request(param + ".datatype", fmt::format("input '{}': datatype {}, the model expects {}", m.name,
                                                   kserve_datatype(t.dtype()), kserve_datatype(m.type.dtype)));
    if (t.rank() != m.type.rank())
      bad_request(param + ".shape", fmt::format("input '{}': shape {} has rank {}, the model expects {} (rank {})", m.name,
                                                shape_str(t.shape()), t.rank(), m.type.str(), m.type.rank()));
    for (int d = 0; d < t.rank(); ++d) {
      const Dim& want = m.type.dims[static_cast<size_t>(d)];
      const int64_t have = t.shape()[static_cast<size_t>(d)];
      if (want.is_static()) {
        if (have != want.size)
          bad_request(param + ".shape", fmt::format("input '{}': dim {} is {}, the model expects {} (shape {})", m.name,
                                                    d, have, want.size, m.type.str()));
        continue;
      }
      auto [it, fresh] = symbols.emplace(want.sym, std::make_pair(have, fmt::format("input '{}' dim {}", m.name, d)));
      if (!fresh && it->second.first != have)
        bad_request(param + ".shape", fmt::format("input '{}': dim {} ({}) is {}, but {} made it {}", m.name, d, want.sym,
                                                  have, it->second.second, it->second.first));
    }
    out[k] = t;
  }
  for (size_t k = 0; k < inputs.size(); ++k)
    if (!out[k].defined()) bad_request("inputs", fmt::format("input '{}' is missing", inputs[k].name));
  return out;
}

InferResponse write_infer_response(const std::string& model, const InferRequest& r, const std::vector<TensorMeta>& metas,
                                   const std::vector<Tensor>& outputs) {
  struct Pick {
    size_t index;
    bool binary;
  };
  std::vector<Pick> picks;
  if (r.outputs.empty()) {
    for (size_t i = 0; i < outputs.size(); ++i) picks.push_back({i, r.binary_output});
  } else {
    for (size_t o = 0; o < r.outputs.size(); ++o) {
      size_t k = metas.size();
      for (size_t m = 0; m < metas.size(); ++m)
        if (metas[m].name == r.outputs[o].name) k = m;
      if (k == metas.size()) {
        std::string names;
        for (const TensorMeta& m : metas) names += (names.empty() ? "" : ", ") + m.name;
        bad_request(json_path("outputs", o) + ".name",
                    fmt::format("the model has no output '{}' (outputs: {})", r.outputs[o].name, names));
      }
      picks.push_back({k, r.outputs[o].binary});
    }
  }
  json j = {{"model_name", model}, {"model_version", "1"}};
  if (!r.id.empty()) j["id"] = r.id;
  json outs = json::array();
  std::string blobs;
  bool any_binary = false;
  for (const Pick& p : picks) {
    const Tensor t = outputs[p.index].contiguous();
    json o = {{"name", metas[p.index].name}, {"datatype", kserve_datatype(t.dtype())}, {"shape", t.shape()}};
    if (p.binary) {
      any_binary = true;
      o["parameters"] = {{"binary_data_size", t.nbytes()}};
      blobs.append(static_cast<const char*>(t.raw_data()), t.nbytes());
    } else {
      o["data"] = tensor_to_json(t);
    }
    outs.push_back(std::move(o));
  }
  j["outputs"] = std::move(outs);
  InferResponse resp;
  resp.body = dump_json(j);
  if (any_binary) {
    resp.header_length = resp.body.size();
    resp.body += blobs;
  }
  return resp;
}

}  // namespace spore::serve
