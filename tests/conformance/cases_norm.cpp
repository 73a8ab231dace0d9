// TODO(issue 2): conformance cases of the norm family.
#include "conformance/harness.h"

namespace spore::conformance {
void add_norm_cases(CaseList& c, ErrorList& e) {}
}  // namespace spore::conformance
