// PLACEHOLDER (owned by the ONNX import helper).
#include "base/error.h"
#include "io/onnx/onnx.h"
namespace spore::io {
bool OnnxImportReport::has_unsupported() const { return false; }
std::string OnnxImportReport::format() const { return {}; }
std::unique_ptr<Graph> import_onnx(const std::string& path, const OnnxImportOptions&, OnnxImportReport*) { SPORE_FAIL(ErrorCode::unsupported, "import_onnx: not yet ({})", path); }
std::unique_ptr<Graph> import_onnx_bytes(const std::string&, const std::string& name, const OnnxImportOptions&, OnnxImportReport*) { SPORE_FAIL(ErrorCode::unsupported, "import_onnx: not yet ({})", name); }
OnnxImportReport check_onnx_ops(const std::string& path) { SPORE_FAIL(ErrorCode::unsupported, "check_onnx_ops: not yet ({})", path); }
bool looks_like_onnx(const std::string&) { return false; }
}  // namespace spore::io
