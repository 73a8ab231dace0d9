// TODO(issue 2): conformance cases of the reduce family.
#include "conformance/harness.h"

namespace spore::conformance {
void add_reduce_cases(CaseList& c, ErrorList& e) {}
}  // namespace spore::conformance
