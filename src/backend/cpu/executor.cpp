// The CPU backend's step executor and BackendImpl (ops/backend.h).
//
// Two things decide how a plan's steps run on the CPU, neither of which changes a bit of any result (kernels split
// work into the same tasks whichever thread runs them):
//   - Team sessions (cpu_run_in_team): consecutive steps that run no self-parallelizing oneDNN primitive share one
//     fork/join of the OpenMP team, each of their parallel_for calls a job posted to it (a post costs a fraction
//     of a fork/join). The first run records which steps run such a primitive, so sessions start with the second.
//   - Per-step thread mode, calibrated: with 2+ threads, runs 0..kWarm warm up (page faults, constant transforms,
//     caches); then kRuns pairs of runs, the first of a pair timing every step on the team, the second timing the
//     steps that took under kSmallUs again on the calling thread alone (a large step never pays a slow trial); a
//     step then runs alone where that was faster by 10% (best of kRuns each). Alternating keeps a drift in speed
//     over the first runs from favouring either mode. Per-step times miss what a step alone costs its neighbours
//     (its output sits in one core's cache), so a whole-run check follows: kCheck runs with the decisions against
//     kCheck with every step on the team, alternating; the decisions stay only where their median is lower by 3%.
//     Restarts when the thread count changes. docs/PERFORMANCE.md has the measurements behind these numbers.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "backend/cpu/blockq.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/pool_blocked.h"
#include "base/thread_pool.h"
#include "ops/backend.h"

namespace spore {
namespace {

constexpr int kWarm = 4, kRuns = 4, kCheck = 10;
constexpr float kSmallUs = 200;

class CpuExecutor final : public StepExecutor {
 public:
  explicit CpuExecutor(const ExecutorOptions& o) : calibrate_threads_(o.calibrate_threads) {}

  void run(size_t num_steps, const std::function<void(size_t)>& run_step) override;
  bool calibrated() const override {
    if (calib_threads_ == 0) return false;  // not run yet
    for (const StepState& st : steps_)
      if (st.mode == Mode::undecided) return false;
    return check_runs_ >= 2 * kCheck;
  }
  int64_t serial_steps() const override {
    int64_t n = 0;
    for (const StepState& st : steps_) n += st.mode == Mode::serial;
    return n;
  }

 private:
  enum class Mode : uint8_t { undecided, team, serial };
  // Whether the step runs a oneDNN primitive that parallelizes itself (cpu_team_primitive_calls), seen in the
  // first run: such a step runs outside the team sessions.
  enum class Primitive : uint8_t { unknown, none, team };
  struct StepState {
    Mode mode = Mode::undecided;
    Primitive primitive = Primitive::unknown;
    float team_us = 0, serial_us = 0;  // best time seen in each mode while calibrating
  };

  bool calibrating(int threads) const {
    static const bool enabled = [] {
      const char* e = std::getenv("SPORE_PLAN_CALIBRATE");
      return !(e && std::string_view(e) == "0");
    }();
    return threads > 1 && enabled && calibrate_threads_;
  }

  bool calibrate_threads_;
  std::vector<StepState> steps_;
  int calib_runs_ = 0;    // runs of the calibration so far
  int check_runs_ = 0;    // runs of the whole-run check so far
  std::vector<float> check_us_[2];  // run times with the decisions (even runs) and all on the team (odd runs)
  int calib_threads_ = 0;  // the thread count the state is for (a change restarts it)
};

void CpuExecutor::run(size_t num_steps, const std::function<void(size_t)>& run_step) {
  const int threads = num_threads();
  const bool calibrate = calibrating(threads);
  if (threads != calib_threads_ || steps_.size() != num_steps) {
    calib_threads_ = threads;
    calib_runs_ = 0;
    check_runs_ = calibrate ? 0 : 2 * kCheck;
    check_us_[0].clear();
    check_us_[1].clear();
    steps_.assign(num_steps, StepState{calibrate ? Mode::undecided : Mode::team, Primitive::unknown, 0, 0});
  }
  // phase: 0 .. kWarm warm-up, then kWarm + 1 .. kWarm + 2 * kRuns timed (odd: team, even: alone); -1: decided
  const int phase = calibrate && calib_runs_ <= kWarm + 2 * kRuns ? calib_runs_ : -1;
  const bool timed = phase > kWarm;
  const bool checking = phase < 0 && check_runs_ < 2 * kCheck;
  const bool team_only = checking && check_runs_ % 2 == 1;  // the check's runs with every step on the team
  // A step alone: parallel_for inline (SerialScope) and oneDNN's OpenMP on one thread, restored however it ends.
  struct Alone {
    SerialScope scope;
    int threads;
    explicit Alone(int t) : threads(t) { cpu_set_num_threads(1); }
    ~Alone() { cpu_set_num_threads(threads); }
    Alone(const Alone&) = delete;
    Alone& operator=(const Alone&) = delete;
  };
  using clock = std::chrono::steady_clock;
  const bool sessions = cpu_team_sessions();
  bool record = false;
  for (const StepState& st : steps_) record = record || st.primitive == Primitive::unknown;
  auto step = [&](size_t i) {
    StepState& st = steps_[i];
    const bool trial = timed && (phase - kWarm) % 2 == 0 && st.team_us < kSmallUs;
    const bool serial = phase < 0 ? st.mode == Mode::serial && !team_only : trial;
    std::optional<Alone> alone;
    if (serial) alone.emplace(threads);
    const clock::time_point c0 = timed ? clock::now() : clock::time_point{};
    const int64_t primitives = record ? cpu_team_primitive_calls() : 0;
    run_step(i);
    alone.reset();
    if (record) st.primitive = cpu_team_primitive_calls() != primitives ? Primitive::team : Primitive::none;
    if (timed && (serial || (phase - kWarm) % 2 == 1)) {
      const float us = std::chrono::duration<float, std::micro>(clock::now() - c0).count();
      float& best = serial ? st.serial_us : st.team_us;
      if (best == 0 || us < best) best = us;
    }
  };
  const clock::time_point run0 = checking ? clock::now() : clock::time_point{};
  if (record || !sessions) {
    for (size_t i = 0; i < num_steps; ++i) step(i);
  } else {
    for (size_t i = 0; i < num_steps;) {
      size_t j = i;
      while (j < num_steps && steps_[j].primitive == Primitive::none) ++j;
      if (j - i >= 2) {  // one step alone gains nothing from a session: its one fork/join is the session's
        cpu_run_in_team([&] {
          for (size_t k = i; k < j; ++k) step(k);
        });
        i = j;
      } else {
        step(i++);
      }
    }
  }
  if (checking) {
    check_us_[check_runs_ % 2].push_back(std::chrono::duration<float, std::micro>(clock::now() - run0).count());
    if (++check_runs_ == 2 * kCheck) {
      const auto median = [](std::vector<float> v) {
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        return v[v.size() / 2];
      };
      if (!(median(check_us_[0]) < 0.97f * median(check_us_[1])))
        for (StepState& st : steps_) st.mode = Mode::team;
    }
  }
  if (phase >= 0 && ++calib_runs_ > kWarm + 2 * kRuns) {
    for (StepState& st : steps_)
      st.mode = st.serial_us > 0 && st.serial_us < 0.9f * st.team_us ? Mode::serial : Mode::team;
    if (serial_steps() == 0) check_runs_ = 2 * kCheck;  // nothing to check
  }
}

class CpuBackend final : public BackendImpl {
 public:
  Backend id() const override { return Backend::cpu; }
  void register_kernels(KernelRegistry& r) override { register_cpu_kernels(r); }
  void set_num_threads(int n) override { cpu_set_num_threads(n); }
  std::unique_ptr<StepExecutor> make_executor(const ExecutorOptions& o) const override {
    return std::make_unique<CpuExecutor>(o);
  }
  std::vector<std::pair<std::string, std::string>> info() const override {
    // spore's own kernels pick their ISA at run time too: the blocked conv / depthwise / pooling tiles (AVX-512 or
    // AVX2; SPORE_CONV_DIRECT_ISA=avx2 forces the latter), the quantized LLM tiles, and bf16 GEMM (vdpbf16ps or
    // widened to the f32 GEMM).
    const std::string own = fmt::format(
        "conv/pool {}, llm blockq {}, bf16 gemm {}", cpu::detail::pool_use_avx512() ? "avx512" : "avx2",
        cpu::blockq_use_avx512() ? "avx512" : "avx2", cpu::gemm_bf16_enabled() ? "avx512_bf16" : "widened to f32");
    return {{"simd_target", cpu_simd_target()},
            {"cpu_features", cpu_features()},
            {"onednn", onednn_version()},
            {"kernels", own}};
  }
};

}  // namespace

void register_cpu_backend() { register_backend(std::make_unique<CpuBackend>()); }

}  // namespace spore
