#include "io/model_file.h"

#include <fstream>

#include "base/error.h"
#include "io/file_util.h"
#include "io/onnx/onnx.h"
#include "ops/graph_ops.h"

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

std::unique_ptr<Graph> load_model(const std::string& path, const std::map<std::string, std::vector<Dim>>& input_dims) {
  const std::string head = read_head(path, 64);
  if (head.rfind("SPOREMDL", 0) == 0) return load_spore(path);
  // Text IR (docs/IR.md): a graph with its constants inline, e.g. written by hand or `spore graph`.
  if (const size_t first = head.find_first_not_of(" \t\r\n"); first != std::string::npos &&
      (head.compare(first, 5, "graph") == 0 || head[first] == '#')) {
    std::unique_ptr<Graph> g = parse_graph(read_file_bytes(path), path);  // errors carry path:line:col
    try {
      verify_graph(*g);
    } catch (const Error& e) {
      throw Error(e.code(), path + ": " + e.what());
    }
    return g;
  }
  if (looks_like_onnx(head)) {
    OnnxImportOptions o;
    o.input_dims = input_dims;
    return import_onnx(path, o);
  }
  SPORE_FAIL(ErrorCode::invalid_argument,
              "'{}' is neither a .spore model (magic 'SPOREMDL'), an ONNX model nor a text-IR graph ({} bytes read)", path, head.size());
}

void save_model(const Graph& g, const std::string& path, const std::map<std::string, std::string>& metadata) {
  if (ends_with(path, ".spore")) return save_spore(g, path, metadata);
  if (ends_with(path, ".onnx")) return export_onnx(g, path);
  SPORE_FAIL(ErrorCode::invalid_argument, "cannot tell the model format of '{}': use a .spore or .onnx extension", path);
}

}  // namespace spore::io
