// Small statistics over seeds. Empty inputs give nullopt, never NaN.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/analysis/analysis.h"

namespace ablate::analysis {

std::optional<double> Mean(const std::vector<double>& xs);

// Sample standard deviation (n - 1); nullopt with fewer than 2 values: one seed has no spread.
std::optional<double> SampleStd(const std::vector<double>& xs);

// Median where +infinity stands for "never": nullopt when the median itself is infinite.
std::optional<double> MedianOrNever(std::vector<double> xs);

// The x in [x0, x1] where the line through (log x0, y0), (log x1, y1) crosses y = 0.
double LogLinearRoot(double x0, double y0, double x1, double y1);

// " [lo, hi]" with 4 significant digits; "" without an interval. +infinity reads "never", and 0
// reads "none" when `zero_is_none` (max stable and good LR: below the smallest LR).
std::string IntervalText(const std::optional<Interval>& ci, bool zero_is_none = false);

// a <= b within a relative 1e-9, for LRs that went through text and back.
bool LessOrClose(double a, double b);

}  // namespace ablate::analysis
