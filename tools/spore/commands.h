#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>
// The spore CLI: one file per subcommand (cmd_<name>.cpp), listed once in commands.cpp.
// Every command has --help, prints one clear line and exits non-zero on bad input.
namespace CLI {
class App;
}
namespace spore {
class Profiler;
}
namespace spore::parallel {
class Communicator;
}
namespace spore::train {
struct LmProgress;
struct LmRunOptions;
}

namespace spore::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);  // argv[0] is the command name
};

int cmd_info(int argc, char** argv);
int cmd_ops(int argc, char** argv);
int cmd_graph(int argc, char** argv);
int cmd_demo(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_train_lm(int argc, char** argv);
int cmd_plan_parallel(int argc, char** argv);
int cmd_finetune(int argc, char** argv);
int cmd_lora(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_check_ops(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_profile(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_serve(int argc, char** argv);

int main_dispatch(int argc, char** argv);

// spore train-lm's and spore finetune's shared flags (batch, steps, lr, schedule, clipping, evaluation, mode), and
// their progress (lm_common.cpp): a JSON object per reported step, evaluation or resume, or text lines (steps every
// log_every, rewritten in place on a terminal).
void add_lm_run_options(CLI::App& app, train::LmRunOptions& o);
void print_lm_progress(const train::LmProgress& p, bool json, bool tty, int64_t log_every);

// Data-parallel commands (mpirun -np N spore train ... --parallel data): starts the communicator and discards stdout
// on every rank but 0, so the job prints one run's output. An error on any rank ends the whole job (main_dispatch).
void start_data_parallel();
// This rank's communication so far, per operation: {"allreduce": {"calls", "bytes", "seconds", "gbps"}, ...} (the
// final --json line's "comm"), and as one line of text; empty when no communicator was started.
nlohmann::json comm_stats_json();
std::string comm_stats_text();
// A run over several ranks with --profile: one trace per rank (trace.json -> trace.rank0.json, ...), mergeable - each
// rank is its own process (pid rank + 1) and all count time from one instant of rank 0's clock (8 ping-pongs per
// rank estimate the offset). A collective over `c`, so every rank calls it; returns this rank's path.
std::string profile_per_rank(Profiler& prof, const std::string& path, parallel::Communicator& c);

}  // namespace spore::cli
