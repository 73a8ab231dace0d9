// TODO(issue 2): conformance cases of the shape family.
#include "conformance/harness.h"

namespace spore::conformance {
void add_shape_cases(CaseList& c, ErrorList& e) {}
}  // namespace spore::conformance
