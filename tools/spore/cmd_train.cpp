// spore train: trains a zoo model (simplenet, simplenet_bn, lenet, mlp, transformer) on MNIST / Fashion-MNIST / digits
// with train::Model, in PyNative or graph mode, printing per-epoch loss, test accuracy and throughput.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/thread_pool.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "parallel/communicator.h"
#include "runtime/profiler.h"
#include "tools/spore/commands.h"
#include "train/model.h"
#include "train/models.h"

namespace spore::cli {
namespace {

// Step-level log lines (--log-every), plain or JSON.
class StepLog : public train::Callback {
 public:
  StepLog(int64_t every, bool json) : every_(every), json_(json) {}
  void on_step_end(train::RunContext& c) override {
    if (c.step % every_ != 0) return;
    if (json_)
      std::cout << nlohmann::json{{"epoch", c.epoch + 1}, {"step", c.step}, {"loss", c.loss}, {"lr", c.lr}}.dump()
                << std::endl;
    else
      std::cout << fmt::format("  step {} loss {:.5f} lr {:.4g}", c.step, c.loss, c.lr) << std::endl;
  }

 private:
  int64_t every_;
  bool json_;
};

}  // namespace

int cmd_train(int argc, char** argv) {
  CLI::App app("spore train: train a model (train::Model) and report loss, test accuracy and samples/s per epoch",
               "spore train");
  std::string model_name = "simplenet", dataset, optimizer = "momentum", mode = "graph", ckpt_dir;
  int64_t epochs = 1, batch = 64, log_every = 0, limit_train = 0, limit_test = 0;
  int threads = 0;
  uint64_t seed = 0;
  double lr = 0.01, weight_decay = 0.0, clip_norm = 0.0;
  bool json = false, no_progress = false;
  app.add_option("--model", model_name,
                 "simplenet | simplenet_bn (BatchNorm after the conv) | lenet | mlp | transformer (a token per image "
                 "row)")
      ->check(CLI::IsMember({"simplenet", "simplenet_bn", "lenet", "mlp", "transformer"}));
  app.add_option("--dataset", dataset, "mnist:DIR | fashion-mnist:DIR | digits:FILE")->required();
  app.add_option("--epochs", epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  int64_t accum = 1;
  app.add_option("--accum", accum,
                 "gradient accumulation: A batches' mean gradient per optimizer step (A must divide the batches per "
                 "epoch; with --loss-scale only under --parallel data)")
      ->check(CLI::PositiveNumber);
  app.add_option("--optimizer", optimizer, "momentum | sgd | adam | adamw")
      ->check(CLI::IsMember({"momentum", "sgd", "adam", "adamw"}));
  app.add_option("--lr", lr, "learning rate")->check(CLI::PositiveNumber);
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  app.add_option("--lr-schedule", lr_schedule, "constant | cosine (to 0 over all steps) | step (x0.1 every 2 epochs)")
      ->check(CLI::IsMember({"constant", "cosine", "step"}));
  app.add_option("--warmup-steps", warmup_steps, "linear warm-up over the first N steps")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", weight_decay, "weight decay")->check(CLI::NonNegativeNumber);
  app.add_option("--clip-norm", clip_norm, "clip gradients to this global norm (0: off)")->check(CLI::NonNegativeNumber);
  app.add_option("--mode", mode, "graph | pynative")->check(CLI::IsMember({"graph", "pynative"}));
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "seed of the initial weights and the shuffles");
  app.add_option("--ckpt-dir", ckpt_dir, "write <model>_epoch<E>.safetensors here after every epoch");
  int64_t ckpt_every = 0;
  app.add_option("--ckpt-every", ckpt_every,
                 "also write <model>_step<S>.safetensors to --ckpt-dir every K optimizer steps (mid-epoch; --resume "
                 "from one continues with the next batch, bit-identical to an uninterrupted run)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "one JSON object per epoch, then {\"final\": true, ...}");
  app.add_option("--log-every", log_every, "also log the loss every K steps")->check(CLI::NonNegativeNumber);
  app.add_option("--limit-train", limit_train, "use only the first N training samples")->check(CLI::NonNegativeNumber);
  app.add_option("--limit-test", limit_test, "use only the first N test samples")->check(CLI::NonNegativeNumber);
  app.add_flag("--no-progress", no_progress, "no progress bar");
  std::string amp_level = "O0", amp_dtype = "bf16", loss_scale = "none";
  app.add_option("--amp-level", amp_level,
                 "mixed precision: O0 (f32), O1 (matmul/linear/conv in --amp-dtype), O2 (all but norms, softmax, "
                 "reductions and losses), O3 (all); f32 master weights and optimizer state")
      ->check(CLI::IsMember({"O0", "O1", "O2", "O3"}));
  app.add_option("--amp-dtype", amp_dtype, "the low dtype of --amp-level: bf16 | f16")
      ->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--loss-scale", loss_scale,
                 "none | dynamic[:INIT] (INIT default 2^24; halves on overflow, doubles after 2000 good steps) | "
                 "fixed:S (a step whose gradients overflow is skipped)");
  std::string parallel_mode = "stand_alone", grad_reduce = "mean", resume;
  int64_t grad_shards = 0;
  app.add_option("--parallel", parallel_mode,
                 "stand_alone | data: data parallel over the ranks of `mpirun -np N spore train ...` (bit-identical "
                 "for every N given --grad-shards; batches without a remainder)")
      ->check(CLI::IsMember({"stand_alone", "data"}));
  app.add_option("--grad-shards", grad_shards,
                 "data parallel: cut each batch into M fixed shards whose gradients are summed in one tree order "
                 "(default: the rank count); N ranks need N | M and M/N a power of two")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grad-reduce", grad_reduce, "data parallel: mean (the shards' gradient sum / M) | sum")
      ->check(CLI::IsMember({"mean", "sum"}));
  double bucket_mb = 25;
  bool sync_bn = false;
  app.add_option("--bucket-mb", bucket_mb,
                 "data parallel: allreduce the gradients in buckets of about this many MiB, each as soon as backward "
                 "has produced it, overlapping the rest of backward (0: one allreduce after backward); bits unchanged")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--sync-bn", sync_bn,
               "data parallel: BatchNorm's batch statistics over the global batch (SyncBatchNorm), allreduced across "
               "the ranks; needs one shard per rank (--grad-shards = the rank count)");
  app.add_option("--resume", resume, "a checkpoint of this model to continue from (its epoch counts toward --epochs)");
  std::string profile_path;
  app.add_option(
      "--profile", profile_path,
      "record every kernel of the first epoch's training steps: write a Chrome trace (Perfetto) to this file and print "
      "the top ops by time to stderr (data parallel: FILE.rank<R>.json per rank, allreduces as \"comm\" spans)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  SPORE_CHECK(!sync_bn || parallel_mode == "data", ErrorCode::invalid_argument,
              "--sync-bn synchronises BatchNorm across data-parallel ranks: it needs --parallel data");
  set_threads(threads);
  train::LossScale ls;
  {
    const size_t colon = loss_scale.find(':');
    ls.kind = loss_scale.substr(0, colon);
    SPORE_CHECK(ls.kind == "none" || ls.kind == "dynamic" || ls.kind == "fixed", ErrorCode::invalid_argument,
                "--loss-scale '{}': expected none, dynamic[:INIT] or fixed:S", loss_scale);
    ls.scale = ls.kind == "dynamic" ? 16777216.0 : 1.0;
    if (colon != std::string::npos) {
      char* end = nullptr;
      const std::string v = loss_scale.substr(colon + 1);
      ls.scale = std::strtod(v.c_str(), &end);
      SPORE_CHECK(!v.empty() && end && *end == '\0' && ls.scale > 0, ErrorCode::invalid_argument,
                  "--loss-scale '{}': the scale must be a number > 0", loss_scale);
    } else {
      SPORE_CHECK(ls.kind != "fixed", ErrorCode::invalid_argument, "--loss-scale fixed needs a scale: fixed:S");
    }
  }

  const train::TrainTestSplit split = train::load_dataset_spec(dataset, limit_train, limit_test);
  const Shape& xs = split.train.x.shape();
  nn::set_seed(seed);
  std::unique_ptr<nn::Cell> net = train::make_model(model_name, {xs[1], xs[2], xs[3]});
  std::unique_ptr<train::Optimizer> opt =
      train::make_optimizer(optimizer, train::trainable_names(*net), lr, weight_decay);
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  train::ModelOptions mo;
  mo.mode = mode;
  mo.seed = seed;
  mo.clip_norm = clip_norm;
  mo.amp_level = amp_level;
  mo.amp_dtype = amp_dtype == "f16" ? DType::f16 : DType::bf16;
  mo.loss_scale = ls;
  mo.grad_accumulation = accum;
  const bool data_parallel = parallel_mode == "data";
  if (data_parallel) {
    mo.parallel = {.parallel_mode = "data_parallel",
                   .grad_shards = grad_shards,
                   .gradients_mean = grad_reduce == "mean",
                   .bucket_mb = bucket_mb,
                   .sync_bn = sync_bn};
    start_data_parallel();
  }
  train::Model model(*net, train::loss_of(ce), *opt, {"accuracy"}, mo);
  if (!resume.empty()) model.load_checkpoint(resume);
  // Data parallel: every batch splits into the shards (a short last batch would not).
  const data::Dataset train_ds =
      data::Dataset::from_tensors(split.train.x, split.train.y).shuffle(seed).batch(batch, data_parallel);
  const data::Dataset test_ds = data::Dataset::from_tensors(split.test.x, split.test.y).batch(std::max<int64_t>(batch, 256));
  const int64_t n_train = split.train.x.dim(0), n_test = split.test.x.dim(0);
  SPORE_CHECK(train_ds.batches_per_epoch() % accum == 0, ErrorCode::invalid_argument,
              "--accum {}: it must divide the {} batches per epoch (an optimizer step never spans two epochs)", accum,
              train_ds.batches_per_epoch());
  {
    const int64_t steps = train_ds.batches_per_epoch() / accum * epochs;
    std::shared_ptr<train::LrSchedule> sched = lr_schedule == "cosine" ? train::cosine_lr(lr, steps)
                                               : lr_schedule == "step"
                                                   ? train::step_lr(lr, 2 * train_ds.batches_per_epoch() / accum, 0.1)
                                                   : train::constant_lr(lr);
    if (warmup_steps > 0) sched = train::warmup_lr(warmup_steps, sched);
    opt->set_schedule(sched);
  }
  const std::string amp_note =
      amp_level == "O0" ? std::string()
                        : fmt::format(", amp {} {}{}", amp_level, amp_dtype,
                                      ls.kind == "none" ? std::string() : fmt::format(", loss scale {} {:g}", ls.kind, ls.scale));
  const std::string dp_note =
      data_parallel
          ? fmt::format(", data parallel on {} rank(s) ({}), {} gradient shards ({})", model.communicator()->size(),
                        parallel::transport_version(*model.communicator()), model.grad_shards(), grad_reduce)
          : std::string();
  if (!json)
    std::cout << fmt::format("{} on {} ({} train, {} test), {} mode, {} lr {}, batch {}, {} threads{}{}\n", model_name,
                             split.description, n_train, n_test, mode, opt->name(), lr, batch, num_threads(), amp_note,
                             dp_note);

  std::vector<std::shared_ptr<train::Callback>> callbacks;
  if (log_every > 0) callbacks.push_back(std::make_shared<StepLog>(log_every, json));
  if (!json && !no_progress) callbacks.push_back(std::make_shared<train::ProgressBar>(nullptr, 100));
  struct MeanLoss : train::Callback {
    double loss = 0;
    void on_epoch_end(train::RunContext& c) override { loss = c.metrics["loss"]; }
  };
  // A run that diverges (O3 f16 without loss scaling may) says so once, when it starts, and counts the steps.
  struct NonFinite : train::Callback {
    int64_t steps = 0;
    std::string hint;
    void on_step_end(train::RunContext& c) override {
      if (std::isfinite(c.loss)) return;
      if (steps++ == 0)
        std::cerr << fmt::format("spore train: warning: the loss is {} at step {} (epoch {}): training diverged{}\n",
                                 c.loss, c.step, c.epoch + 1, hint);
    }
  };
  auto nonfinite = std::make_shared<NonFinite>();
  if (amp_level != "O0" && ls.kind == "none") nonfinite->hint = "; --loss-scale dynamic, or --amp-dtype bf16, may help";
  callbacks.push_back(nonfinite);
  auto mean_loss = std::make_shared<MeanLoss>();
  callbacks.push_back(mean_loss);
  // Every K optimizer steps, a mid-epoch checkpoint (collective under data parallel: every rank reaches it).
  struct StepCheckpoint : train::Callback {
    train::Model* model = nullptr;
    std::string dir, name;
    int64_t every = 0, last = -1;
    void on_step_end(train::RunContext& c) override {
      if (c.step == last || c.step % every != 0 || c.step == 0) return;
      last = c.step;
      std::filesystem::create_directories(dir);
      model->save_checkpoint(
          (std::filesystem::path(dir) / fmt::format("{}_step{}.safetensors", name, c.step)).string());
    }
  };
  if (ckpt_every > 0) {
    SPORE_CHECK(!ckpt_dir.empty(), ErrorCode::invalid_argument, "--ckpt-every needs --ckpt-dir");
    auto sc = std::make_shared<StepCheckpoint>();
    sc->model = &model;
    sc->dir = ckpt_dir;
    sc->name = model_name;
    sc->every = ckpt_every;
    callbacks.push_back(sc);
  }

  std::unique_ptr<Profiler> prof;
  if (!profile_path.empty()) prof = std::make_unique<Profiler>();
  if (prof && data_parallel) profile_path = profile_per_rank(*prof, profile_path, *model.communicator());
  double total_s = 0;
  std::string last_ckpt;
  std::map<std::string, double> m;
  const int64_t first_epoch = model.epoch();
  SPORE_CHECK(first_epoch < epochs, ErrorCode::invalid_argument,
              "--resume {}: the checkpoint is at epoch {}, nothing is left of --epochs {}", resume, first_epoch,
              epochs);
  for (int64_t e = first_epoch; e < epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    model.train(1, train_ds, callbacks);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_s += s;
    if (prof) {
      prof->write_chrome_trace(profile_path);
      std::cerr << prof->top_table(20) << "trace: " << profile_path << "\n";
      prof.reset();
    }
    m = model.eval(test_ds);
    const double sps = static_cast<double>(n_train) / s;
    if (!ckpt_dir.empty()) {
      std::filesystem::create_directories(ckpt_dir);
      last_ckpt = (std::filesystem::path(ckpt_dir) / fmt::format("{}_epoch{}.safetensors", model_name, e + 1)).string();
      model.save_checkpoint(last_ckpt);
    }
    const std::string scale_note =
        ls.kind == "none" ? std::string()
                          : fmt::format("  loss scale {:g}, {} overflow steps skipped", model.loss_scale(),
                                        model.overflow_steps());
    if (json) {
      nlohmann::json j{{"epoch", e + 1}, {"loss", mean_loss->loss}, {"accuracy", m.at("accuracy")},
                       {"test_loss", m.at("loss")}, {"samples_per_s", sps}};
      if (ls.kind != "none") {
        j["loss_scale"] = model.loss_scale();
        j["overflow_steps"] = model.overflow_steps();
      }
      std::cout << j.dump() << std::endl;
    } else {
      std::cout << fmt::format("epoch {}/{}: loss {:.5f}  test accuracy {:.4f}  test loss {:.5f}  {:.1f} samples/s{}\n",
                               e + 1, epochs, mean_loss->loss, m.at("accuracy"), m.at("loss"), sps, scale_note)
                << std::flush;
    }
  }
  const double sps = static_cast<double>(n_train * (epochs - first_epoch)) / total_s;
  nlohmann::json fin{{"final", true},
                     {"accuracy", m.at("accuracy")},
                     {"loss", m.at("loss")},
                     {"train_loss", mean_loss->loss},
                     {"samples_per_s", sps},
                     {"epochs", epochs},
                     {"steps", model.global_step()},
                     {"mode", mode},
                     {"model", model_name},
                     {"train_samples", n_train},
                     {"test_samples", n_test},
                     {"checkpoint", last_ckpt},
                     {"amp_level", amp_level},
                     {"amp_dtype", amp_level == "O0" ? "f32" : amp_dtype},
                     {"loss_scale_kind", ls.kind},
                     {"loss_scale", model.loss_scale()},
                     {"overflow_steps", model.overflow_steps()},
                     {"nonfinite_loss_steps", nonfinite->steps},
                     {"parallel", parallel_mode},
                     {"ranks", data_parallel ? model.communicator()->size() : 1},
                     {"grad_shards", model.grad_shards()},
                     {"accum", accum}};
  if (const Plan* p = model.compiled_plan("step")) {  // what ran in which dtype: the step plan's ops by output dtype
    std::map<std::string, int64_t> by;
    for (const Node* n : p->graph().nodes())
      if (n->op != "input"_op && n->op != "constant"_op && !n->outputs.empty())
        ++by[std::string(dtype_name(n->outputs[0]->type.dtype))];
    fin["step_ops_per_dtype"] = by;
    if (!json) {
      std::string line;
      for (const auto& [k, v] : by) line += fmt::format("{}{} {}", line.empty() ? "" : ", ", v, k);
      std::cout << "training step ops by output dtype: " << line << "\n";
    }
  }
  if (data_parallel) {
    fin["comm"] = comm_stats_json();
    if (!json) std::cout << comm_stats_text() << "\n";
  }
  if (json)
    std::cout << fin.dump() << std::endl;
  else
    std::cout << fmt::format("final: test accuracy {:.4f}, test loss {:.5f}, {:.1f} samples/s{}\n", m.at("accuracy"),
                             m.at("loss"), sps, last_ckpt.empty() ? "" : ", checkpoint " + last_ckpt);
  return 0;
}

}  // namespace spore::cli
