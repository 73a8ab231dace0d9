#include "io/model_file.h"

#include <fstream>

#include "base/error.h"
#include "io/onnx/onnx.h"

namespace spore::io {

namespace {
std::string read_head(const std::string& path, size_t n) {
  std::ifstream f(path, std::ios::binary);
  SPORE_CHECK(f.good(), ErrorCode::io_error, "cannot open model file '{}'", path);
  std::string head(n, '\0');
  f.read(head.data(), static_cast<std::streamsize>(n));
  head.resize(static_cast<size_t>(f.gcount()));
  return head;
}
bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::unique_ptr<Graph> load_model(const std::string& path) {
  const std::string head = read_head(path, 64);
  if (head.rfind("SPOREMDL", 0) == 0) return load_spore(path);
  if (looks_like_onnx(head)) return import_onnx(path);
  SPORE_FAIL(ErrorCode::invalid_argument,
              "'{}' is neither a .spore model (magic 'SPOREMDL') nor an ONNX model ({} bytes read)", path, head.size());
}

void save_model(const Graph& g, const std::string& path, const std::map<std::string, std::string>& metadata) {
  if (ends_with(path, ".spore")) return save_spore(g, path, metadata);
  if (ends_with(path, ".onnx")) return export_onnx(g, path);
  SPORE_FAIL(ErrorCode::invalid_argument, "cannot tell the model format of '{}': use a .spore or .onnx extension", path);
}

}  // namespace spore::io
