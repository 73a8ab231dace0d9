// TODO(issue 2): conformance cases of the elementwise family.
#include "conformance/harness.h"

namespace spore::conformance {
void add_elementwise_cases(CaseList& c, ErrorList& e) {}
}  // namespace spore::conformance
