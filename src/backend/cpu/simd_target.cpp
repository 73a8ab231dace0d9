// Reports the SIMD target Highway's dynamic dispatch picks on this CPU.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_target.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace spore::cpu::HWY_NAMESPACE {
const char* target_name() { return hwy::TargetName(HWY_TARGET); }
}  // namespace spore::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <string>

#include "backend/cpu/cpu.h"

namespace spore {
namespace cpu {
HWY_EXPORT(target_name);
}
std::string cpu_simd_target() { return HWY_DYNAMIC_DISPATCH(cpu::target_name)(); }
}  // namespace spore
#endif
