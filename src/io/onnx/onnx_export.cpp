// PLACEHOLDER (owned by the ONNX export helper).
#include "base/error.h"
#include "io/onnx/onnx.h"
namespace spore::io {
void export_onnx(const Graph&, const std::string& path, const OnnxExportOptions&) { SPORE_FAIL(ErrorCode::unsupported, "export_onnx: not yet ({})", path); }
std::string export_onnx_bytes(const Graph&, const OnnxExportOptions&) { SPORE_FAIL(ErrorCode::unsupported, "export_onnx: not yet"); }
}  // namespace spore::io
