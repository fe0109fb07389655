// Two-sample chi-square tests of sampled outcomes (speculative decoding keeps distributions).
#pragma once

#include <cmath>
#include <map>
#include <utility>

namespace inflight::testing {

// Two-sample chi-square statistic of equal-size samples of outcomes (cells seen fewer than 10
// times in both pooled into one) and its degrees of freedom.
template <typename Key>
std::pair<double, int> ChiSquareTwoSample(const std::map<Key, int>& a,
                                          const std::map<Key, int>& b) {
  std::map<Key, std::pair<int, int>> both;
  for (auto& [k, v] : a) both[k].first = v;
  for (auto& [k, v] : b) both[k].second = v;
  double chi2 = 0;
  int cells = 0, pooled_a = 0, pooled_b = 0;
  auto add = [&](int x, int y) {
    const double e = (x + y) / 2.0;
    chi2 += (x - e) * (x - e) / e + (y - e) * (y - e) / e;
    ++cells;
  };
  for (auto& [k, v] : both) {
    if (v.first + v.second < 10) {
      pooled_a += v.first;
      pooled_b += v.second;
    } else {
      add(v.first, v.second);
    }
  }
  if (pooled_a + pooled_b > 0) add(pooled_a, pooled_b);
  return {chi2, cells - 1};
}

// The chi-square distribution's 99.9% quantile (Wilson-Hilferty approximation).
inline double ChiSquareCritical999(int df) {
  const double z = 3.09, h = 2.0 / (9.0 * df);
  return df * std::pow(1 - h + z * std::sqrt(h), 3);
}

}  // namespace inflight::testing
