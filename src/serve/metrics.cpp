#include "serve/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.h"

namespace spore::serve {

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string Metrics::label_text(const Labels& labels) {
  std::string s;
  for (const auto& [k, v] : labels) {
    if (!s.empty()) s += ',';
    s += k + "=\"" + escape_label_value(v) + '"';
  }
  return s;
}

std::vector<double> Metrics::latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 60.0};
}
std::vector<double> Metrics::token_buckets() {
  std::vector<double> b;
  for (double v = 1; v <= 16384; v *= 2) b.push_back(v);
  return b;
}

void Metrics::declare(const std::string& name, MetricType type, const std::string& help, std::vector<double> buckets) {
  std::lock_guard<std::mutex> lock(mu_);
  if (families_.count(name)) return;
  Family& f = families_[name];
  f.type = type;
  f.help = help;
  std::sort(buckets.begin(), buckets.end());
  f.buckets = std::move(buckets);
}

Metrics::Family& Metrics::family(const std::string& name) {
  auto it = families_.find(name);
  SPORE_ASSERT(it != families_.end(), "metric {} used before it was declared", name);
  return it->second;
}

void Metrics::add(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  family(name).series[label_text(labels)].value += v;
}

void Metrics::set(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  family(name).series[label_text(labels)].value = v;
}

void Metrics::observe(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name);
  SPORE_ASSERT(f.type == MetricType::histogram, "metric {} is not a histogram", name);
  Series& s = f.series[label_text(labels)];
  if (s.counts.empty()) s.counts.assign(f.buckets.size() + 1, 0);
  const size_t b = static_cast<size_t>(std::lower_bound(f.buckets.begin(), f.buckets.end(), v) - f.buckets.begin());
  s.counts[b] += 1;
  s.sum += v;
}

void Metrics::set_histogram(const std::string& name, const Labels& labels, const std::vector<int64_t>& cumulative,
                            double sum) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name);
  SPORE_ASSERT(f.type == MetricType::histogram && cumulative.size() == f.buckets.size() + 1,
               "metric {}: {} cumulative counts for {} buckets", name, cumulative.size(), f.buckets.size());
  Series& s = f.series[label_text(labels)];
  s.counts.assign(cumulative.size(), 0);
  for (size_t i = 0; i < cumulative.size(); ++i)
    s.counts[i] = static_cast<double>(cumulative[i] - (i ? cumulative[i - 1] : 0));
  s.has_sum = sum >= 0;
  s.sum = std::max(sum, 0.0);
}

void Metrics::add_collector(std::function<void(Metrics&)> fn) {
  std::lock_guard<std::mutex> lock(collect_mu_);
  collectors_.push_back(std::move(fn));
}

namespace {
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}
std::string with_label(const std::string& labels, const std::string& extra) {
  return "{" + labels + (labels.empty() ? "" : ",") + extra + "}";
}
}  // namespace

std::string Metrics::render() {
  {
    std::lock_guard<std::mutex> lock(collect_mu_);
    for (auto& c : collectors_) c(*this);
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == MetricType::counter ? "counter" : f.type == MetricType::gauge ? "gauge" : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    for (const auto& [labels, s] : f.series) {
      if (f.type != MetricType::histogram) {
        out += fmt::format("{}{} {}\n", name, labels.empty() ? "" : "{" + labels + "}", num(s.value));
        continue;
      }
      double cum = 0;
      for (size_t b = 0; b <= f.buckets.size(); ++b) {
        cum += b < s.counts.size() ? s.counts[b] : 0;
        const std::string le = b < f.buckets.size() ? num(f.buckets[b]) : "+Inf";
        out += fmt::format("{}_bucket{} {}\n", name, with_label(labels, "le=\"" + le + "\""), num(cum));
      }
      const std::string l = labels.empty() ? "" : "{" + labels + "}";
      if (s.has_sum) out += fmt::format("{}_sum{} {}\n", name, l, num(s.sum));
      out += fmt::format("{}_count{} {}\n", name, l, num(cum));
    }
  }
  return out;
}

double Metrics::value(const std::string& name, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name);
  auto it = f.series.find(label_text(labels));
  if (it == f.series.end()) return 0;
  if (f.type != MetricType::histogram) return it->second.value;
  double n = 0;
  for (double c : it->second.counts) n += c;
  return n;
}

}  // namespace spore::serve
