// TODO(issue 2): conformance cases of the binary family.
#include "conformance/harness.h"

namespace spore::conformance {
void add_binary_cases(CaseList& c, ErrorList& e) {}
}  // namespace spore::conformance
