// Calibration for static int8 quantization.
// The float graph is cloned with every f32 value that feeds a quantization candidate (input 0 of conv2d, linear,
// and matmul with a constant 2-D B: what quantize_static_int8 rewrites) added as an extra output, compiled once
// per input signature and run on each batch. Pass 1 records min/max per value; for percentile and entropy a
// second pass builds a histogram of the non-zero |x| over [0, max|x|] (fixed bins, so the result does not depend on batch
// order or sizes beyond the data itself). Ranges:
//   minmax      [min, max]
//   percentile  t = the opts.percentile-th percentile of |x| (symmetric), range [max(min,-t), min(max,t)]
//   entropy     t = TensorRT's threshold: the clip point whose 128-level quantized histogram has the least KL
//               divergence from the clipped histogram; range as for percentile.
// A range keeps min/max of the data on a side that does not need clipping (ReLU outputs stay [0, t]).
#include "runtime/calibrate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "ops/graph_ops.h"
#include "runtime/plan.h"

namespace spore {
namespace {

// Whether quantize_static_int8 could rewrite `n` (its activation input then needs a range).
bool is_candidate(const Node* n) {
  if (n->op == "conv2d"_op || n->op == "linear"_op) return true;
  if (n->op != "matmul"_op) return false;
  const Value* b = n->input(1);
  return b->producer->op == "constant"_op && b->type.rank() == 2;
}

struct Observed {
  std::string name;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  std::vector<double> hist;  // counts of |x| over [0, amax]
  int64_t count = 0;
  double amax() const { return std::max(std::fabs(min), std::fabs(max)); }
};

// Runs every batch through `g` (extra outputs from index `first`) and calls visit(k, tensor) per observed value.
class Runner {
 public:
  Runner(const Graph& g, size_t first) : graph_(g), first_(first) {}

  template <typename Visit>
  void run(const std::vector<std::vector<Tensor>>& batches, Visit&& visit) {
    for (size_t b = 0; b < batches.size(); ++b) {
      const auto& batch = batches[b];
      SPORE_CHECK(batch.size() == graph_.inputs().size(), ErrorCode::invalid_argument,
                  "[calibrate] batch {} has {} tensors, graph '{}' takes {} inputs", b, batch.size(), graph_.name(),
                  graph_.inputs().size());
      std::vector<Shape> shapes;
      for (size_t i = 0; i < batch.size(); ++i) {
        SPORE_CHECK(batch[i].dtype() == graph_.inputs()[i]->type.dtype, ErrorCode::dtype_mismatch,
                    "[calibrate] batch {} input {} (%{}) is {}, the graph expects {}", b, i, graph_.inputs()[i]->name,
                    dtype_name(batch[i].dtype()), graph_.inputs()[i]->type.str());
        shapes.push_back(batch[i].shape());
      }
      auto it = plans_.find(shapes);
      if (it == plans_.end()) {
        auto clone = graph_.clone();
        specialize_inputs(*clone, shapes);
        it = plans_.emplace(shapes, compile_plan(std::move(clone), {})).first;
      }
      const std::vector<Tensor> outs = it->second.run(batch);
      for (size_t k = first_; k < outs.size(); ++k) visit(k - first_, outs[k].contiguous());
    }
  }

 private:
  const Graph& graph_;
  size_t first_;
  std::map<std::vector<Shape>, Plan> plans_;
};

// MXNet / TensorRT smoothing: zero bins get eps, taken evenly from the non-zero ones. False when p has no mass.
bool smooth(std::vector<double>& p) {
  constexpr double eps = 1e-4;
  int64_t zeros = 0;
  for (double v : p) zeros += v == 0;
  const auto nonzeros = static_cast<int64_t>(p.size()) - zeros;
  if (nonzeros == 0) return false;
  const double eps1 = eps * static_cast<double>(zeros) / static_cast<double>(nonzeros);
  for (double& v : p) v += v == 0 ? eps : -eps1;
  for (double v : p)
    if (v <= 0) return false;
  return true;
}

double kl_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (double v : p) sp += v;
  for (double v : q) sq += v;
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double pi = p[i] / sp, qi = q[i] / sq;
    kl += pi * std::log(pi / qi);
  }
  return kl;
}

// TensorRT's entropy calibration on a histogram of |x|: for each candidate clip bin i >= levels, P is the
// histogram cut at i with the tail folded into its last bin, Q is hist[0:i] merged into `levels` groups and
// spread back over each group's non-empty bins; the threshold is the upper edge of the best i.
double entropy_threshold(const std::vector<double>& hist, double bin_width, int levels) {
  const int nbins = static_cast<int>(hist.size());
  if (nbins <= levels) return bin_width * nbins;
  double best_kl = std::numeric_limits<double>::infinity();
  int best = nbins;
  std::vector<double> suffix(nbins + 1, 0.0);
  for (int i = nbins - 1; i >= 0; --i) suffix[i] = suffix[i + 1] + hist[i];
  for (int i = levels; i <= nbins; ++i) {
    std::vector<double> p(hist.begin(), hist.begin() + i);
    p[i - 1] += suffix[i];
    std::vector<double> q(i, 0.0);
    const double merged = static_cast<double>(i) / levels;
    for (int j = 0; j < levels; ++j) {
      const int start = static_cast<int>(std::floor(j * merged));
      const int stop = j == levels - 1 ? i : static_cast<int>(std::floor((j + 1) * merged));
      double sum = 0;
      int nonzero = 0;
      for (int b = start; b < stop; ++b) {
        sum += hist[b];
        nonzero += hist[b] != 0;
      }
      if (nonzero == 0) continue;
      for (int b = start; b < stop; ++b)
        if (hist[b] != 0) q[b] = sum / nonzero;
    }
    if (!smooth(p) || !smooth(q)) continue;
    const double kl = kl_divergence(p, q);
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return bin_width * best;
}

double percentile_threshold(const std::vector<double>& hist, double bin_width, double percentile) {
  double total = 0;
  for (double v : hist) total += v;
  const double target = total * percentile / 100.0;
  double cum = 0;
  for (size_t b = 0; b < hist.size(); ++b) {
    cum += hist[b];
    if (cum >= target) return bin_width * static_cast<double>(b + 1);
  }
  return bin_width * static_cast<double>(hist.size());
}

}  // namespace

CalibMethod parse_calib_method(const std::string& s) {
  if (s == "minmax") return CalibMethod::minmax;
  if (s == "percentile") return CalibMethod::percentile;
  if (s == "entropy") return CalibMethod::entropy;
  SPORE_FAIL(ErrorCode::invalid_argument, "unknown calibration method '{}' (expected minmax, percentile or entropy)", s);
}

CalibrationTable calibrate(const Graph& g, const std::vector<std::vector<Tensor>>& batches, const CalibOptions& opts) {
  SPORE_CHECK(!batches.empty(), ErrorCode::invalid_argument, "[calibrate] graph '{}': no calibration batches", g.name());
  SPORE_CHECK(opts.bins >= 128, ErrorCode::invalid_argument, "[calibrate] bins must be >= 128, got {}", opts.bins);
  SPORE_CHECK(opts.percentile > 0 && opts.percentile <= 100, ErrorCode::invalid_argument,
              "[calibrate] percentile must be in (0, 100], got {}", opts.percentile);
  auto probe = g.clone();
  std::vector<Value*> outs = probe->outputs();
  const size_t first = outs.size();
  std::vector<Observed> obs;
  std::vector<bool> seen;
  for (Node* n : probe->nodes()) {
    if (!is_candidate(n)) continue;
    Value* v = n->input(0);
    if (v->type.dtype != DType::f32 || v->producer->op == "constant"_op) continue;
    if (seen.size() <= static_cast<size_t>(v->id)) seen.resize(static_cast<size_t>(v->id) + 1, false);
    if (seen[v->id]) continue;
    seen[v->id] = true;
    outs.push_back(v);
    obs.push_back({v->name});
  }
  CalibrationTable table;
  if (obs.empty()) return table;
  probe->set_outputs(outs);
  Runner runner(*probe, first);

  runner.run(batches, [&](size_t k, const Tensor& t) {
    Observed& o = obs[k];
    const float* x = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (!std::isfinite(x[i])) continue;  // inf/nan would make every range useless
      o.min = std::min(o.min, static_cast<double>(x[i]));
      o.max = std::max(o.max, static_cast<double>(x[i]));
    }
  });
  if (opts.method != CalibMethod::minmax) {
    for (auto& o : obs) o.hist.assign(static_cast<size_t>(opts.bins), 0.0);
    runner.run(batches, [&](size_t k, const Tensor& t) {
      Observed& o = obs[k];
      const double amax = o.amax();
      if (!(amax > 0)) return;
      const double per = opts.bins / amax;
      const float* x = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        // Exact zeros (ReLU outputs, image background: often most of the data) quantize exactly to the zero
        // point whatever the range, so they are left out; kept in, their spike in bin 0 is smeared over the
        // first quantization group by the KL search's Q and drives it to clip far too tightly (SimpleNet's
        // hidden ReLU output was clipped at 0.28 of a 2.34 range, costing 1.85 accuracy points).
        if (!std::isfinite(x[i]) || x[i] == 0.f) continue;
        const auto b = std::min<int64_t>(opts.bins - 1, static_cast<int64_t>(std::fabs(static_cast<double>(x[i])) * per));
        o.hist[static_cast<size_t>(b)] += 1;
        ++o.count;
      }
    });
  }
  for (const auto& o : obs) {
    if (!(o.min <= o.max)) continue;  // nothing finite observed: no range, the pass skips the node
    ActivationRange r{static_cast<float>(o.min), static_cast<float>(o.max)};
    if (opts.method != CalibMethod::minmax && o.count > 0) {
      const double width = o.amax() / opts.bins;
      const double t = opts.method == CalibMethod::percentile ? percentile_threshold(o.hist, width, opts.percentile)
                                                              : entropy_threshold(o.hist, width, 128);
      r.min = static_cast<float>(std::max(o.min, -t));
      r.max = static_cast<float>(std::min(o.max, t));
    }
    table[o.name] = r;
  }
  return table;
}

}  // namespace spore
