// runner/roofline.cpp: see roofline.h.
#include "runner/roofline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace xrun::analysis {

namespace {

bool known(double v) { return std::isfinite(v) && v > 0; }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

Roofline make_roofline(const std::vector<KernelRecord>& layer_times,
                       const std::vector<LayerCostRecord>& costs, double peak_flops,
                       double peak_bytes_per_s) {
  Roofline r;
  const bool peaks = known(peak_flops) && known(peak_bytes_per_s);
  if (peaks) {
    r.peak_flops = peak_flops;
    r.peak_bytes_per_s = peak_bytes_per_s;
    r.ridge = peak_flops / peak_bytes_per_s;
  }
  // Costs per (layer, phase), in the costs' order: backward_data,
  // backward_weights and backward are all in profile.layers' "backward".
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, RooflinePoint> by_key;
  for (const LayerCostRecord& c : costs) {
    const std::pair<std::string, std::string> key{c.layer,
                                                  c.pass == "forward" ? "forward" : "backward"};
    auto [it, added] = by_key.try_emplace(key);
    if (added) {
      order.push_back(key);
      it->second.layer = key.first;
      it->second.phase = key.second;
    }
    it->second.flops += c.flops;
    it->second.bytes += c.bytes;
  }
  std::map<std::pair<std::string, std::string>, const KernelRecord*> times;
  for (const KernelRecord& k : layer_times) times[{k.name, k.phase}] = &k;
  for (const std::string phase : {"forward", "backward"}) {
    for (const auto& key : order) {
      if (key.second != phase) continue;
      const auto t = times.find(key);
      if (t == times.end() || t->second->calls <= 0 || !(t->second->total_ms > 0)) continue;
      RooflinePoint p = by_key.at(key);
      p.calls = t->second->calls;
      p.ms = t->second->total_ms / static_cast<double>(p.calls);
      p.achieved = p.flops / (p.ms / 1000.0);
      p.intensity = p.bytes > 0 ? p.flops / p.bytes : 0;
      if (peaks) {
        p.roof = std::min(peak_flops, p.intensity * peak_bytes_per_s);
        p.ms_at_roof = p.roof > 0 ? 1000.0 * p.flops / p.roof : 0;
        p.memory_bound = p.intensity < r.ridge;
        if (p.memory_bound) r.memory_bound_ms += p.ms;
      }
      r.ms += p.ms;
      r.points.push_back(p);
    }
  }
  return r;
}

Roofline make_roofline(const std::vector<KernelRecord>& layer_times,
                       const std::vector<LayerCostRecord>& costs, const RunSummary& summary) {
  const double ranks = summary.ranks > 1 ? static_cast<double>(summary.ranks) : 1.0;
  return make_roofline(layer_times, costs, summary.peak_flops / ranks,
                       summary.peak_bytes_per_s / ranks);
}

std::vector<RooflinePoint> furthest_below_roof(const Roofline& r, size_t n) {
  std::vector<RooflinePoint> out;
  for (const RooflinePoint& p : r.points)
    if (std::isfinite(p.ms_at_roof)) out.push_back(p);
  std::stable_sort(out.begin(), out.end(), [](const RooflinePoint& a, const RooflinePoint& b) {
    return a.ms - a.ms_at_roof > b.ms - b.ms_at_roof;
  });
  if (out.size() > n) out.resize(n);
  return out;
}

bool memory_bound_finding(const Roofline& r, FindingRecord& out, double threshold) {
  if (!std::isfinite(r.ridge) || !(r.ms > 0)) return false;
  const double share = r.memory_bound_ms / r.ms;
  if (!(share > threshold)) return false;
  double saving_ms = 0;
  const RooflinePoint* largest = nullptr;
  for (const RooflinePoint& p : r.points) {
    if (!p.memory_bound) continue;
    saving_ms += std::min(p.ms, 1000.0 * (p.bytes / 2) / r.peak_bytes_per_s);
    if (!largest || p.ms > largest->ms) largest = &p;
  }
  out.check = "memory_bound";
  out.value = share;
  out.message = fixed(100.0 * share, 0) + "% of the layer time (" + fixed(r.memory_bound_ms, 2) +
                " of " + fixed(r.ms, 2) +
                " ms per micro-batch) is in memory-bound passes (batch norm, adds, pooling: below "
                "the ridge point of " +
                fixed(r.ridge, 1) + " FLOP/byte), the largest " + largest->layer + " " +
                largest->phase + " (" + fixed(largest->ms, 2) +
                " ms); fusing each into its neighbour, so that the tensor between them is not "
                "written and read back (half of its least traffic), would save about " +
                fixed(saving_ms, 2) + " ms per micro-batch at the memory roof";
  return true;
}

}  // namespace xrun::analysis
