// TODO(issue 2): conformance cases of the conv family.
#include "conformance/harness.h"

namespace spore::conformance {
void add_conv_cases(CaseList& c, ErrorList& e) {}
}  // namespace spore::conformance
