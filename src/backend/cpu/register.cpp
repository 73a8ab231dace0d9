#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string_view>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/cpu/cpu.h"
#include "backend/cpu/families.h"
#include "backend/cpu/onednn_util.h"
#include "base/thread_pool.h"

namespace spore {

namespace cpu {
// dynamic_shape.cpp: nonzero, compress, unique, non_max_suppression. Declared here rather than in families.h, which
// every kernel file includes (one declaration, one caller).
void register_dynamic_shape(KernelRegistry& r);
}  // namespace cpu

namespace {
// identity: a plain copy (graph mode runs it as a kernel; eager mode returns a view).
void identity_kernel(KernelContext& k) { copy_strided(k.in(0), k.out(0)); }
}  // namespace

namespace {
// parallel_for on OpenMP's team (set_parallel_runner): one set of threads for spore's kernels and oneDNN's.
void omp_runner(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
  if (omp_in_parallel() && !cpu::in_team_body()) {  // a nested call: serial, as the pool does
    for (int64_t t = 0; t < num_tasks; ++t) fn(t);
    return;
  }
  cpu::run_omp_tasks(num_tasks, static_cast<int>(std::min<int64_t>(num_threads(), num_tasks)), fn);
}
}  // namespace

void register_cpu_kernels(KernelRegistry& r) {
  cpu::pin_onednn_isa();  // before any kernel exists that could query the ISA
  // parallel_for runs on OpenMP's team, the one oneDNN uses (SPORE_POOL=spore keeps spore's own pool, for A/B runs).
  if (const char* e = std::getenv("SPORE_POOL"); e == nullptr || std::string_view(e) != "spore") {
    omp_set_num_threads(num_threads());
    set_parallel_runner(omp_runner);
  }
  r.add(Backend::cpu, "identity"_op, dtypes::all, identity_kernel, "copy");
  cpu::register_elementwise(r);
  cpu::register_binary(r);
  cpu::register_reduce(r);
  cpu::register_linalg(r);
  cpu::register_conv(r);
  cpu::register_conv3d(r);
  cpu::register_norm(r);
  cpu::register_shape(r);
  cpu::register_quant(r);
  cpu::register_fused(r);
  cpu::register_fused_elementwise(r);
  cpu::register_attention(r);
  cpu::register_rnn(r);
  cpu::register_blockq(r);
  cpu::register_llm_attention(r);
  cpu::register_sample(r);
  cpu::register_dynamic_shape(r);
}

void cpu_set_num_threads(int n) { omp_set_num_threads(n); }

void cpu_run_in_team(const std::function<void()>& body) {
  if (cpu_team_sessions()) return cpu::run_in_team(body);
  body();
}

bool cpu_team_sessions() {
  static const bool on = [] {
    const char* e = std::getenv("SPORE_TEAM_SESSION");
    const char* pool = std::getenv("SPORE_POOL");
    return !(e && std::string_view(e) == "0") && !(pool && std::string_view(pool) == "spore");
  }();
  static const int cpus = hardware_threads();  // the affinity mask at first use
  return on && num_threads() > 1 && num_threads() <= cpus;
}

int64_t cpu_team_primitive_calls() { return cpu::team_primitive_calls(); }

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  // The kernels' ISA: the CPU's best unless SPORE_PORTABLE_NUMERICS=1 caps it at avx2 (onednn_util.cpp).
  const auto isa = dnnl::get_effective_cpu_isa();
  const char* name = isa == dnnl::cpu_isa::avx2                 ? "avx2"
                     : isa == dnnl::cpu_isa::avx512_core        ? "avx512_core"
                     : isa == dnnl::cpu_isa::avx512_core_vnni   ? "avx512_core_vnni"
                     : isa == dnnl::cpu_isa::avx512_core_bf16   ? "avx512_core_bf16"
                     : isa == dnnl::cpu_isa::avx512_core_amx    ? "avx512_core_amx"
                     : isa == dnnl::cpu_isa::avx2_vnni          ? "avx2_vnni"
                     : isa == dnnl::cpu_isa::sse41              ? "sse41"
                     : isa == dnnl::cpu_isa::avx                ? "avx"
                                                                : "other";
  return fmt::format("{}.{}.{} (kernels: {}{})", v->major, v->minor, v->patch, name,
                     cpu::portable_numerics() ? ", SPORE_PORTABLE_NUMERICS" : "");
}

std::string cpu_features() {
  std::string s;
  auto add = [&](bool ok, const char* name) {
    if (!ok) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  __builtin_cpu_init();
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512vnni"), "avx512_vnni");
  add(__builtin_cpu_supports("avx512bf16"), "avx512_bf16");
  return s;
}

}  // namespace spore
