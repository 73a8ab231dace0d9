// LoRA adapter files and their fit to a base (llm/lora.h).
#include "llm/lora.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "io/safetensors.h"
#include "llm/model.h"
#include "nn/llama.h"

namespace spore::llm {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPeftPrefix = "base_model.model.model.layers.";

// "blk.<i>.<cell>.weight" -> (i, cell); false when the name is not of that form.
bool parse_block_name(const std::string& name, int64_t& layer, std::string& cell) {
  const std::string pre = "blk.", suf = ".weight";
  if (name.rfind(pre, 0) != 0 || name.size() <= pre.size() + suf.size() ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return false;
  const std::string mid = name.substr(pre.size(), name.size() - pre.size() - suf.size());
  const size_t dot = mid.find('.');
  if (dot == std::string::npos || dot == 0 || mid.find_first_not_of("0123456789") != dot || dot > 9) return false;
  layer = std::stoll(mid.substr(0, dot));
  cell = mid.substr(dot + 1);
  for (const nn::LlamaProjection& p : nn::llama_projections())
    if (cell == p.cell) return true;
  return false;
}

const char* hf_module_of(const std::string& cell) {
  for (const nn::LlamaProjection& p : nn::llama_projections())
    if (cell == p.cell) return p.hf_module;
  return nullptr;
}

// The targets in nn::llama_projections' order, from the tensors' cells.
std::vector<std::string> targets_of(const std::map<std::string, LoraPair>& tensors) {
  std::vector<std::string> out;
  for (const nn::LlamaProjection& p : nn::llama_projections())
    for (const auto& [name, pair] : tensors) {
      int64_t l = 0;
      std::string cell;
      if (parse_block_name(name, l, cell) && cell == p.cell) {
        out.emplace_back(p.cell);
        break;
      }
    }
  return out;
}

void set_convention(LoraAdapter& a, bool permuted) {
  if (a.permuted_qk == permuted) return;
  for (auto& [name, pair] : a.tensors) {
    int64_t l = 0;
    std::string cell;
    if (!parse_block_name(name, l, cell) || (cell != "attn_q" && cell != "attn_k")) continue;
    SPORE_CHECK(a.n_head > 0 && a.n_head_kv > 0, ErrorCode::invalid_argument,
                "LoRA: the head counts are needed to reorder '{}' between GGUF and Hugging Face row order", name);
    pair.b = permute_qk_rows(pair.b, cell == "attn_q" ? a.n_head : a.n_head_kv, permuted);
  }
  a.permuted_qk = permuted;
}

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t.contiguous();
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  const auto v = t.to_doubles();
  for (size_t i = 0; i < v.size(); ++i) out.data<float>()[i] = static_cast<float>(v[i]);
  return out;
}

// Both halves present, both 2-D, one rank r for all: the adapter's r.
void check_pairs(LoraAdapter& a, const std::string& file) {
  SPORE_CHECK(!a.tensors.empty(), ErrorCode::parse_error, "LoRA adapter '{}' has no tensors", file);
  int64_t r = 0;
  for (const auto& [name, p] : a.tensors) {
    SPORE_CHECK(p.a.defined(), ErrorCode::parse_error, "LoRA adapter '{}': '{}' has lora_b but no lora_a", file, name);
    SPORE_CHECK(p.b.defined(), ErrorCode::parse_error, "LoRA adapter '{}': '{}' has lora_a but no lora_b", file, name);
    SPORE_CHECK(p.a.rank() == 2 && p.b.rank() == 2 && p.a.shape()[0] == p.b.shape()[1], ErrorCode::shape_mismatch,
                "LoRA adapter '{}': '{}' has lora_a {} and lora_b {}, expected [r, in] and [out, r]", file, name,
                shape_str(p.a.shape()), shape_str(p.b.shape()));
    if (r == 0) r = p.a.shape()[0];
    SPORE_CHECK(p.a.shape()[0] == r, ErrorCode::shape_mismatch, "LoRA adapter '{}': '{}' has rank {}, the others {}",
                file, name, p.a.shape()[0], r);
  }
  SPORE_CHECK(a.r == 0 || a.r == r, ErrorCode::shape_mismatch,
              "LoRA adapter '{}': the config says r = {}, the tensors {}", file, a.r, r);
  a.r = r;
  a.targets = targets_of(a.tensors);
}

}  // namespace

Tensor permute_qk_rows(const Tensor& b, int64_t heads, bool to_gguf) {
  SPORE_CHECK(b.rank() == 2 && b.dtype() == DType::f32, ErrorCode::invalid_argument,
              "q/k rows: need an f32 matrix, got {} {}", dtype_name(b.dtype()), shape_str(b.shape()));
  const Tensor src = b.contiguous();
  const int64_t rows = src.shape()[0], cols = src.shape()[1];
  SPORE_CHECK(heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0, ErrorCode::shape_mismatch,
              "q/k rows: {} rows do not split into {} heads of even size", rows, heads);
  const int64_t hd = rows / heads, half = hd / 2;
  Tensor out = Tensor::empty(src.shape(), DType::f32);
  const float* s = src.data<float>();
  float* d = out.data<float>();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t g = h * hd + 2 * j + k, f = h * hd + k * half + j;
        const int64_t from = to_gguf ? f : g, to = to_gguf ? g : f;
        std::copy(s + from * cols, s + (from + 1) * cols, d + to * cols);
      }
  return out;
}

void write_peft(const LoraAdapter& in, const std::string& dir) {
  LoraAdapter a = in;
  set_convention(a, false);
  std::vector<std::string> modules;
  for (const std::string& t : a.targets) modules.push_back(nn::peft_module_name(t));
  const json cfg{{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"r", a.r},
                 {"lora_alpha", a.alpha},
                 {"lora_dropout", a.dropout},
                 {"target_modules", modules},
                 {"base_model_name_or_path", a.base_model},
                 {"bias", "none"},
                 {"fan_in_fan_out", false},
                 {"inference_mode", true},
                 {"init_lora_weights", true},
                 {"modules_to_save", nullptr},
                 {"use_rslora", false},
                 {"use_dora", false}};
  fs::create_directories(dir);
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, p] : a.tensors) {
    int64_t l = 0;
    std::string cell;
    SPORE_CHECK(parse_block_name(name, l, cell), ErrorCode::invalid_argument, "LoRA: '{}' is not a block projection",
                name);
    const std::string key = fmt::format("{}{}.{}.", kPeftPrefix, l, hf_module_of(cell));
    tensors[key + "lora_A.weight"] = to_f32(p.a);
    tensors[key + "lora_B.weight"] = to_f32(p.b);
  }
  io::write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  const fs::path cp = fs::path(dir) / "adapter_config.json";
  std::ofstream f(cp, std::ios::trunc);
  f << cfg.dump(2) << "\n";
  SPORE_CHECK(f.good(), ErrorCode::io_error, "could not write '{}'", cp.string());
}

LoraAdapter read_peft(const std::string& dir) {
  const fs::path cp = fs::path(dir) / "adapter_config.json", wp = fs::path(dir) / "adapter_model.safetensors";
  SPORE_CHECK(fs::is_regular_file(cp), ErrorCode::not_found, "LoRA adapter '{}' has no adapter_config.json", dir);
  SPORE_CHECK(fs::is_regular_file(wp), ErrorCode::not_found, "LoRA adapter '{}' has no adapter_model.safetensors", dir);
  json cfg;
  {
    std::ifstream f(cp);
    std::stringstream ss;
    ss << f.rdbuf();
    try {
      cfg = json::parse(ss.str());
    } catch (const json::exception& e) {
      SPORE_FAIL(ErrorCode::parse_error, "'{}' is not valid JSON: {}", cp.string(), e.what());
    }
  }
  const std::string c = cp.string();
  SPORE_CHECK(cfg.is_object(), ErrorCode::parse_error, "'{}' is not a JSON object", c);
  SPORE_CHECK(cfg.value("peft_type", "") == "LORA", ErrorCode::unsupported,
              "'{}': peft_type is '{}', only LORA is supported", c,
              cfg.contains("peft_type") ? cfg["peft_type"].dump() : "missing");
  SPORE_CHECK(cfg.contains("r") && cfg["r"].is_number_integer() && cfg["r"].get<int64_t>() > 0, ErrorCode::parse_error,
              "'{}': key 'r' must be an integer > 0", c);
  SPORE_CHECK(cfg.contains("lora_alpha") && cfg["lora_alpha"].is_number() && cfg["lora_alpha"].get<double>() > 0,
              ErrorCode::parse_error, "'{}': key 'lora_alpha' must be a number > 0", c);
  for (const char* k : {"use_rslora", "use_dora", "fan_in_fan_out"})
    SPORE_CHECK(!cfg.contains(k) || !cfg[k].is_boolean() || !cfg[k].get<bool>(), ErrorCode::unsupported,
                "'{}': key '{}' true is not supported", c, k);
  SPORE_CHECK(!cfg.contains("bias") || cfg["bias"] == "none", ErrorCode::unsupported,
              "'{}': key 'bias' {} is not supported (none)", c, cfg.contains("bias") ? cfg["bias"].dump() : "");
  LoraAdapter a;
  a.r = cfg["r"].get<int64_t>();
  a.alpha = cfg["lora_alpha"].get<double>();
  a.dropout = cfg.contains("lora_dropout") && cfg["lora_dropout"].is_number() ? cfg["lora_dropout"].get<double>() : 0;
  if (cfg.contains("base_model_name_or_path") && cfg["base_model_name_or_path"].is_string())
    a.base_model = cfg["base_model_name_or_path"].get<std::string>();
  const io::SafetensorsFile st = io::read_safetensors(wp.string());
  for (const auto& [key, t] : st.tensors) {
    // base_model.model.model.layers.<i>.<module>.lora_<A|B>.weight
    bool ok = key.rfind(kPeftPrefix, 0) == 0;
    int64_t layer = -1;
    std::string cell;
    bool is_a = false;
    if (ok) {
      const std::string rest = key.substr(std::string(kPeftPrefix).size());
      const size_t dot = rest.find('.');
      ok = dot != std::string::npos && dot > 0 && dot < 10 && rest.find_first_not_of("0123456789") == dot;
      if (ok) {
        layer = std::stoll(rest.substr(0, dot));
        const std::string mod = rest.substr(dot + 1);
        ok = false;
        for (const nn::LlamaProjection& p : nn::llama_projections())
          for (const char* ab : {"A", "B"})
            if (mod == fmt::format("{}.lora_{}.weight", p.hf_module, ab)) {
              ok = true;
              cell = p.cell;
              is_a = ab[0] == 'A';
            }
      }
    }
    SPORE_CHECK(ok, ErrorCode::parse_error,
                "LoRA adapter '{}': tensor '{}' is not a LoRA A/B of a Llama projection "
                "(base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight, ...)",
                wp.string(), key);
    LoraPair& p = a.tensors[fmt::format("blk.{}.{}.weight", layer, cell)];
    (is_a ? p.a : p.b) = to_f32(t);
  }
  check_pairs(a, wp.string());
  if (cfg.contains("target_modules") && cfg["target_modules"].is_array()) {
    for (const json& m : cfg["target_modules"])
      SPORE_CHECK(m.is_string() && std::find(a.targets.begin(), a.targets.end(),
                                             nn::lora_target_cells(m.get<std::string>()).front()) != a.targets.end(),
                  ErrorCode::parse_error, "'{}': target module {} has no tensors in '{}'", c, m.dump(), wp.string());
  }
  a.permuted_qk = false;
  return a;
}

void write_gguf_adapter(const LoraAdapter& a, const std::string& path) {
  io::GgufWriter w;
  w.add_string("general.architecture", a.arch);
  w.add_string("general.type", "adapter");
  w.add_string("general.name", "spore finetune");
  w.add_string("adapter.type", "lora");
  w.add_float("adapter.lora.alpha", a.alpha, io::GgufValueType::f32);
  for (const auto& [name, p] : a.tensors) {
    w.add_tensor(name + ".lora_a", p.a, io::GgmlType::f32);
    w.add_tensor(name + ".lora_b", p.b, io::GgmlType::f32);
  }
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path());
  w.write(path);
}

LoraAdapter read_gguf_adapter(const std::string& path) {
  SPORE_CHECK(fs::is_regular_file(path), ErrorCode::not_found, "LoRA adapter '{}' does not exist", path);
  const io::GgufFile f = io::GgufFile::open(path);
  const std::string type = f.get_string_or("general.type", "");
  SPORE_CHECK(type == "adapter", ErrorCode::parse_error, "'{}': general.type is '{}', expected 'adapter'", path, type);
  const std::string at = f.get_string_or("adapter.type", "");
  SPORE_CHECK(at == "lora", ErrorCode::unsupported, "'{}': adapter.type is '{}', expected 'lora'", path, at);
  SPORE_CHECK(f.has("adapter.lora.alpha"), ErrorCode::parse_error, "'{}' has no adapter.lora.alpha", path);
  LoraAdapter a;
  a.arch = f.get_string("general.architecture");
  a.alpha = f.get_float("adapter.lora.alpha");
  for (const io::GgufTensorInfo& t : f.tensors()) {
    const bool is_a = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".lora_a") == 0;
    const bool is_b = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".lora_b") == 0;
    SPORE_CHECK(is_a || is_b, ErrorCode::parse_error, "'{}': tensor '{}' is neither a .lora_a nor a .lora_b", path,
                t.name);
    const std::string base = t.name.substr(0, t.name.size() - 7);
    int64_t l = 0;
    std::string cell;
    SPORE_CHECK(parse_block_name(base, l, cell), ErrorCode::unsupported,
                "'{}': tensor '{}' adapts '{}', which is not a block projection (blk.N.attn_q.weight, ...)", path,
                t.name, base);
    (is_a ? a.tensors[base].a : a.tensors[base].b) = f.dequantize_f32(t.name);
  }
  check_pairs(a, path);
  a.permuted_qk = a.arch == "llama";
  return a;
}

LoraAdapter read_adapter(const std::string& path) {
  SPORE_CHECK(fs::exists(path), ErrorCode::not_found, "LoRA adapter '{}' does not exist", path);
  return fs::is_directory(path) ? read_peft(path) : read_gguf_adapter(path);
}

void fit_adapter(LoraAdapter& a, const ModelConfig& c) {
  SPORE_CHECK(a.arch.empty() || a.arch == c.arch, ErrorCode::invalid_argument,
              "the LoRA adapter is for architecture '{}', the base model is '{}'", a.arch, c.arch);
  a.arch = c.arch;
  const int64_t E = c.n_embd, Dq = c.n_head * c.head_dim, Dkv = c.n_head_kv * c.head_dim;
  for (const auto& [name, p] : a.tensors) {
    int64_t l = 0;
    std::string cell;
    SPORE_CHECK(parse_block_name(name, l, cell), ErrorCode::invalid_argument,
                "LoRA tensor '{}' is not a block projection", name);
    SPORE_CHECK(l < c.n_layer, ErrorCode::shape_mismatch, "LoRA tensor '{}': the base model has {} layers", name,
                c.n_layer);
    int64_t out = 0, in = E;
    if (cell == "attn_q") out = Dq;
    if (cell == "attn_k" || cell == "attn_v") out = Dkv;
    if (cell == "attn_output") out = E, in = Dq;
    if (cell == "ffn_gate" || cell == "ffn_up") out = c.n_ff;
    if (cell == "ffn_down") out = E, in = c.n_ff;
    SPORE_CHECK(p.a.shape() == Shape({a.r, in}) && p.b.shape() == Shape({out, a.r}), ErrorCode::shape_mismatch,
                "LoRA tensor '{}': lora_a {} and lora_b {} do not fit the base's [{}, {}] matrix (expected [{}, {}] "
                "and [{}, {}]): wrong base model?",
                name, shape_str(p.a.shape()), shape_str(p.b.shape()), out, in, a.r, in, out, a.r);
  }
  a.n_head = c.n_head;
  a.n_head_kv = c.n_head_kv;
  set_convention(a, c.arch == "llama" && c.rope_mode == "normal");
}

void merge_lora(const std::string& base_gguf, LoraAdapter a, double scale, const std::string& out_path,
                const std::string& quantize) {
  SPORE_CHECK(quantize.empty() || quantize == "f32" || quantize == "q8_0", ErrorCode::invalid_argument,
              "merge: --quantize '{}' is not f32 or q8_0", quantize);
  SPORE_CHECK(std::isfinite(scale), ErrorCode::invalid_argument, "merge: the scale {} is not finite", scale);
  const Model base = Model::load(base_gguf);
  SPORE_CHECK(base.config().source == "gguf", ErrorCode::unsupported, "merge: the base '{}' must be a GGUF file",
              base_gguf);
  fit_adapter(a, base.config());
  const io::GgufFile f = io::GgufFile::open(base_gguf);
  io::GgufWriter w(3, f.alignment());
  for (const auto& [key, value] : f.metadata())
    if (key != "general.alignment") w.add(key, value);
  if (quantize == "q8_0") w.add_int("general.file_type", 7, io::GgufValueType::u32);  // MOSTLY_Q8_0
  if (quantize == "f32") w.add_int("general.file_type", 0, io::GgufValueType::u32);
  const double s = scale * a.scale();
  for (const io::GgufTensorInfo& t : f.tensors()) {
    const auto it = a.tensors.find(t.name);
    const bool matrix = t.shape.size() == 2;
    const io::GgmlType as = quantize == "q8_0" && matrix && t.shape[1] % 32 == 0 ? io::GgmlType::q8_0
                            : quantize.empty()                                   ? t.type
                                                                                 : io::GgmlType::f32;
    if (it == a.tensors.end() && as == t.type) {
      w.add_tensor_bytes(t.name, t.type, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes));
      continue;
    }
    Tensor m = f.dequantize_f32(t.name);
    if (it != a.tensors.end()) {
      // W += s * B A, each element's sum over r in double
      const Tensor& A = it->second.a;
      const Tensor& B = it->second.b;
      const int64_t out = B.shape()[0], in = A.shape()[1], r = a.r;
      const float* pa = A.data<float>();
      const float* pb = B.data<float>();
      float* pw = m.data<float>();
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
          double d = 0;
          for (int64_t k = 0; k < r; ++k) d += static_cast<double>(pb[o * r + k]) * pa[k * in + i];
          pw[o * in + i] = static_cast<float>(pw[o * in + i] + s * d);
        }
    }
    // A merged matrix keeps a float type (f32 unless asked); Q8_0 only when asked.
    const io::GgmlType store = it != a.tensors.end() && quantize.empty() ? io::GgmlType::f32 : as;
    w.add_tensor(t.name, m, store);
  }
  w.write(out_path);
}

}  // namespace spore::llm
