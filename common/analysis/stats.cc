#include "common/analysis/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ablate::analysis {

std::optional<double> Mean(const std::vector<double>& xs) {
  if (xs.empty()) return std::nullopt;
  double sum = 0;
  for (double x : xs) sum += x;
  return sum / static_cast<double>(xs.size());
}

std::optional<double> SampleStd(const std::vector<double>& xs) {
  if (xs.size() < 2) return std::nullopt;
  const double mean = *Mean(xs);
  double sq = 0;
  for (double x : xs) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / static_cast<double>(xs.size() - 1));
}

std::optional<double> MedianOrNever(std::vector<double> xs) {
  if (xs.empty()) return std::nullopt;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  const double median = n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
  if (std::isinf(median)) return std::nullopt;
  return median;
}

double LogLinearRoot(double x0, double y0, double x1, double y1) {
  if (y0 == y1) return x0;
  const double t = y0 / (y0 - y1);
  return std::exp(std::log(x0) + t * (std::log(x1) - std::log(x0)));
}

std::string IntervalText(const std::optional<Interval>& ci, bool zero_is_none) {
  if (!ci) return "";
  auto end = [&](double x) {
    if (std::isinf(x)) return std::string("never");
    if (zero_is_none && x == 0) return std::string("none");
    return absl::StrFormat("%.4g", x);
  };
  return absl::StrCat(" [", end(ci->lo), ", ", end(ci->hi), "]");
}

bool LessOrClose(double a, double b) { return a <= b * (1 + 1e-9); }

}  // namespace ablate::analysis
