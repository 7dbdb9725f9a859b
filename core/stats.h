// core/stats.h: the one implementation of the order statistics xrun reports:
// quantiles (numpy's default linear interpolation), the median, and the
// count of outliers by median absolute deviation (beyond 5 scaled MADs of
// the median, a robust rule of xrun's own).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace xrun {

// The q-quantile (0..1) of values already in ascending order, by linear
// interpolation; 0 when empty.
inline double quantile_of_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

// The q-quantile (0..1) of `values` by linear interpolation; 0 when empty.
inline double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return quantile_of_sorted(values, q);
}

inline double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

// Values with |x - median| > 5 * 1.4826 * MAD (1.4826 scales the MAD to a
// standard deviation for normal data); none below 3 values.
inline int64_t count_outliers(const std::vector<double>& values) {
  if (values.size() < 3) return 0;
  const double med = median(values);
  std::vector<double> dev;
  dev.reserve(values.size());
  for (double x : values) dev.push_back(std::fabs(x - med));
  const double mad = 1.4826 * median(dev);
  if (mad <= 0) return 0;
  return std::count_if(values.begin(), values.end(),
                       [&](double x) { return std::fabs(x - med) > 5 * mad; });
}

}  // namespace xrun
