// The Prometheus registry: text exposition format (HELP/TYPE lines, labels, escaping, cumulative histogram buckets
// with +Inf, _sum and _count), collectors refreshing gauges at scrape time, and concurrent updates.
#include <gtest/gtest.h>

#include <thread>

#include "serve/metrics.h"

namespace spore::serve {
namespace {

TEST(Metrics, CounterGaugeText) {
  Metrics m;
  m.declare("spore:requests_total", MetricType::counter, "Requests.");
  m.declare("spore:running", MetricType::gauge, "Running.");
  m.add("spore:requests_total", {{"model", "a"}});
  m.add("spore:requests_total", {{"model", "a"}}, 2);
  m.add("spore:requests_total", {{"model", "q\"x\\y\nz"}});
  m.set("spore:running", {{"model", "a"}}, 1.5);
  const std::string t = m.render();
  EXPECT_NE(t.find("# HELP spore:requests_total Requests.\n# TYPE spore:requests_total counter\n"), std::string::npos) << t;
  EXPECT_NE(t.find("spore:requests_total{model=\"a\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("spore:requests_total{model=\"q\\\"x\\\\y\\nz\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE spore:running gauge\nspore:running{model=\"a\"} 1.5\n"), std::string::npos) << t;
  EXPECT_DOUBLE_EQ(m.value("spore:requests_total", {{"model", "a"}}), 3);
}

TEST(Metrics, HistogramText) {
  Metrics m;
  m.declare("spore:ttft_seconds", MetricType::histogram, "TTFT.", {0.1, 1});
  m.observe("spore:ttft_seconds", {{"model", "a"}}, 0.05);
  m.observe("spore:ttft_seconds", {{"model", "a"}}, 0.1);  // le is inclusive
  m.observe("spore:ttft_seconds", {{"model", "a"}}, 0.5);
  m.observe("spore:ttft_seconds", {{"model", "a"}}, 7);
  const std::string t = m.render();
  EXPECT_NE(t.find("spore:ttft_seconds_bucket{model=\"a\",le=\"0.1\"} 2\n"
                   "spore:ttft_seconds_bucket{model=\"a\",le=\"1\"} 3\n"
                   "spore:ttft_seconds_bucket{model=\"a\",le=\"+Inf\"} 4\n"
                   "spore:ttft_seconds_sum{model=\"a\"} 7.65\n"
                   "spore:ttft_seconds_count{model=\"a\"} 4\n"),
            std::string::npos)
      << t;
}

TEST(Metrics, HistogramFromCumulativeCountsWithoutSum) {
  Metrics m;
  m.declare("spore:batch_size", MetricType::histogram, "Batch.", {1, 2, 4});
  m.set_histogram("spore:batch_size", {{"model", "a"}}, {5, 7, 7, 9}, -1);
  const std::string t = m.render();
  EXPECT_NE(t.find("spore:batch_size_bucket{model=\"a\",le=\"4\"} 7\n"
                   "spore:batch_size_bucket{model=\"a\",le=\"+Inf\"} 9\n"
                   "spore:batch_size_count{model=\"a\"} 9\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("spore:batch_size_sum"), std::string::npos);
}

TEST(Metrics, CollectorsRunAtRender) {
  Metrics m;
  m.declare("spore:waiting", MetricType::gauge, "Waiting.");
  int calls = 0;
  m.add_collector([&](Metrics& r) { r.set("spore:waiting", {{"model", "a"}}, ++calls); });
  EXPECT_NE(m.render().find("spore:waiting{model=\"a\"} 1\n"), std::string::npos);
  EXPECT_NE(m.render().find("spore:waiting{model=\"a\"} 2\n"), std::string::npos);
}

TEST(Metrics, ConcurrentUpdatesAreCounted) {
  Metrics m;
  m.declare("spore:c_total", MetricType::counter, "C.");
  m.declare("spore:h", MetricType::histogram, "H.", Metrics::latency_buckets());
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        m.add("spore:c_total", {{"model", "a"}});
        m.observe("spore:h", {{"model", "a"}}, 0.01);
        if (i % 100 == 0) (void)m.render();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_DOUBLE_EQ(m.value("spore:c_total", {{"model", "a"}}), 4000);
  EXPECT_DOUBLE_EQ(m.value("spore:h", {{"model", "a"}}), 4000);
}

}  // namespace
}  // namespace spore::serve
