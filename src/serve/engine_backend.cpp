// LlmBackend over llm::Engine: the only file of src/serve that needs the engine's implementation.
#include <fmt/format.h>

#include "base/dtype.h"
#include "llm/lora.h"
#include "llm/model.h"
#include "serve/llm_backend.h"

namespace spore::serve {
namespace {

llm::Model with_adapters(llm::Model m, const std::vector<std::string>& loras, double scale) {
  for (const std::string& l : loras) m.add_lora(llm::read_adapter(l), scale);
  return m;
}

class EngineBackend final : public LlmBackend {
 public:
  EngineBackend(const std::string& path, const llm::EngineOptions& opts, const std::vector<std::string>& loras,
                double lora_scale)
      : model_(with_adapters(llm::Model::load(path), loras, lora_scale)), engine_(model_, opts) {}
  uint64_t submit(llm::Request r) override { return engine_.submit(std::move(r)); }
  void cancel(uint64_t id) override { engine_.cancel(id); }
  std::vector<float> embed(std::span<const int32_t> tokens) override { return engine_.embed(tokens); }
  llm::EngineStats stats() const override { return engine_.stats(); }
  int64_t ctx() const override { return engine_.options().ctx; }
  int64_t retry_after_s() const override { return engine_.retry_after_s(); }
  bool ready() const override { return engine_.ready(); }
  void wait_ready() override { engine_.wait_ready(); }
  double startup_ms() const override { return engine_.startup_ms(); }
  void shutdown(double deadline_s) override { engine_.shutdown(deadline_s); }
  const llm::Tokenizer& tokenizer() const override { return model_.tokenizer(); }
  int64_t embedding_size() const override { return model_.config().n_embd; }
  std::string description() const override {
    const llm::ModelConfig& c = model_.config();
    const llm::EngineOptions& o = engine_.options();
    return fmt::format("{} {}, {} layers, ctx {}, {} slots, KV {}", c.arch, c.weight_type, c.n_layer, o.ctx, o.slots,
                       dtype_name(o.kv_dtype));
  }

 private:
  llm::Model model_;
  llm::Engine engine_;
};

}  // namespace

std::unique_ptr<LlmBackend> make_engine_backend(const std::string& path, const llm::EngineOptions& opts,
                                                const std::vector<std::string>& loras, double lora_scale) {
  return std::make_unique<EngineBackend>(path, opts, loras, lora_scale);
}

}  // namespace spore::serve
