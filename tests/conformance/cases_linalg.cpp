// TODO(issue 2): conformance cases of the linalg family.
#include "conformance/harness.h"

namespace spore::conformance {
void add_linalg_cases(CaseList& c, ErrorList& e) {}
}  // namespace spore::conformance
