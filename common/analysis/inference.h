// The statistical tests and distributions the verdicts and intervals use
// (docs/report.md#verdicts-as-tests). Pure functions, written here so the report needs no
// statistics library: Student's t, the F distribution, the normal quantile, Holm's step-down
// adjustment, an exact stratified test of two proportions (divergences of two variants over several
// LRs) and a sample-size rule.
#pragma once

#include <cstdint>
#include <vector>

namespace ablate::analysis {

// The regularised incomplete beta function I_x(a, b), x in [0, 1], a, b > 0.
double RegularizedBeta(double x, double a, double b);

// P(T <= t) for Student's t with `dof` degrees of freedom (dof > 0).
double StudentTCdf(double t, double dof);

// The two-sided p-value of a t statistic: P(|T| >= |t|).
double TwoSidedP(double t, double dof);

// P(F <= f) for the F distribution with (d1, d2) degrees of freedom.
double FCdf(double f, double d1, double d2);

// P(Z <= z) for the standard normal.
double NormalCdf(double z);

// The p-quantile of the standard normal and of Student's t, p in (0, 1).
double NormalQuantile(double p);
double StudentTQuantile(double p, double dof);

// Holm's step-down adjustment: adjusted[i] <= alpha for exactly the hypotheses Holm's procedure
// rejects at level alpha, controlling the family-wise error rate over all of `p`.
std::vector<double> HolmAdjust(const std::vector<double>& p);

// One stratum of a 2 x 2 comparison: `n_base` and `n_treated` seeds, `events` of all of them had
// the event (diverged, ended above the good limit), `base_events` of those the baseline's.
struct Stratum {
  int n_base = 0;
  int n_treated = 0;
  int events = 0;
  int base_events = 0;
};

// The exact conditional test that the baseline has the event more (or less) often than the
// treated variant, over strata: given each stratum's margins, under "no difference" the
// baseline's count in each is hypergeometric, and their sum has the convolution of those laws
// (Cochran-Mantel-Haenszel's statistic, exactly). Strata whose margins leave nothing to chance
// (no event, every seed an event) add nothing.
struct ExactTest {
  double p_greater = 1;  // P(sum >= observed): the baseline has the event more often
  double p_less = 1;     // P(sum <= observed)
  double p_two_sided = 1;
  int informative = 0;  // strata where the count could vary
};
ExactTest StratifiedExact(const std::vector<Stratum>& strata);

// The fewest seeds per cell for which a two-sided two-sample t-test at level alpha / comparisons
// (Bonferroni over a family of that many) detects a mean difference `effect` with probability
// `power`, seed noise `sigma` (a normal approximation to the noncentral t, with t's critical
// value). Capped at `cap` (returned when even that many would not do).
int SeedsForPower(double sigma, double effect, double alpha, double power, int comparisons = 1,
                  int cap = 1000);

// A deterministic generator for resampling: the same numbers on every platform and standard
// library (std::uniform_int_distribution's are implementation-defined, and a report must not
// change between the laptop and a Linux box). SplitMix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  int Below(int n);  // uniform in [0, n), n >= 1
 private:
  uint64_t state_;
};

// The q-quantile (q in [0, 1]) of `xs` by linear interpolation between order statistics
// (type 7); xs is sorted in place. Infinite values take part as values. xs must not be empty.
double Quantile(std::vector<double>& xs, double q);

}  // namespace ablate::analysis
