#include "common/analysis/provenance.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/analysis/analysis.h"

namespace ablate::analysis {
namespace {

constexpr std::array<const char*, 5> kFields = {"device kind", "dtype", "torch version",
                                                "tokenizer", "shard count"};
constexpr size_t kShardField = 4;
// Enough hex digits to tell tokenizers apart in a line a person reads.
constexpr size_t kShaShown = 12;
// --require-uniform names this many mixed entries, then counts the rest.
constexpr size_t kMaxListed = 20;

std::string OrUnknown(const std::string& s) { return s.empty() ? "?" : s; }

std::string Show(const Provenance& p, size_t field) {
  switch (field) {
    case 0:
      return OrUnknown(p.device_kind);
    case 1:
      return OrUnknown(p.dtype);
    case 2:
      return absl::StrCat("torch ", OrUnknown(p.torch_version));
    case 3:
      return absl::StrCat("tokenizer ", OrUnknown(p.tokenizer_sha256.substr(0, kShaShown)));
    default:
      return p.shards > 0 ? absl::StrCat(p.shards, p.shards == 1 ? " shard" : " shards")
                          : std::string("? shards");
  }
}

bool Differ(const Provenance& a, const Provenance& b, size_t field) {
  switch (field) {
    case 0:
      return a.device_kind != b.device_kind;
    case 1:
      return a.dtype != b.dtype;
    case 2:
      return a.torch_version != b.torch_version;
    case 3:
      // Results from before the trainer recorded its tokenizer say nothing either way.
      return !a.tokenizer_sha256.empty() && !b.tokenizer_sha256.empty() &&
             a.tokenizer_sha256 != b.tokenizer_sha256;
    default:
      // 0: no dropout (the count does not matter) or a result from before it was recorded.
      return a.shards > 0 && b.shards > 0 && a.shards != b.shards;
  }
}

void Merge(const ProvenanceCounts& from, ProvenanceCounts* into) {
  for (const auto& [p, n] : from) (*into)[p] += n;
}

// The fields named in either list, in kFields order.
std::vector<std::string> Union(const std::vector<std::string>& a,
                               const std::vector<std::string>& b) {
  std::vector<std::string> out;
  for (const char* f : kFields) {
    if (std::find(a.begin(), a.end(), f) != a.end() || std::find(b.begin(), b.end(), f) != b.end())
      out.push_back(f);
  }
  return out;
}

// One side of a comparison: "qk_norm=none" and its runs (no label for a single cell).
struct Side {
  std::string label;
  ProvenanceCounts runs;
};

std::optional<MixedRuns> Check(const std::string& kind, const std::string& where,
                               const std::vector<Side>& sides) {
  ProvenanceCounts all;
  for (const auto& s : sides) Merge(s.runs, &all);
  MixedRuns m{kind, where, ProvenanceDifferences(all), ""};
  if (m.differs.empty()) return std::nullopt;
  std::vector<std::string> parts;
  for (const auto& s : sides) {
    const auto labels = ProvenanceLabels(s.runs, m.differs);
    if (labels.empty()) continue;
    parts.push_back(s.label.empty() ? absl::StrJoin(labels, " vs ")
                                    : absl::StrCat(s.label, " ", absl::StrJoin(labels, " + ")));
  }
  m.detail = absl::StrJoin(parts, " vs ");
  return m;
}

// "lr=0.01,n_layer=4,pos=rope": the context's axes and `more`, sorted like a cell key.
std::string Where(const std::string& context, std::vector<std::string> more) {
  if (!context.empty()) {
    for (absl::string_view part : absl::StrSplit(context, ',')) more.emplace_back(part);
  }
  std::sort(more.begin(), more.end());
  return absl::StrJoin(more, ",");
}

ProvenanceCounts CurveRuns(const Curve& c) {
  ProvenanceCounts out;
  for (const auto& p : c.points) Merge(p.provenance, &out);
  return out;
}

std::string Count(const std::vector<MixedRuns>& all, const std::string& kind, const char* one,
                  const char* many) {
  const auto n =
      std::count_if(all.begin(), all.end(), [&](const auto& m) { return m.kind == kind; });
  return n == 0 ? "" : absl::StrCat(n, " ", n == 1 ? one : many);
}

}  // namespace

Provenance ProvenanceOf(const ablate::v1::Run& run) {
  const auto& r = run.result();
  Provenance p{r.device_kind(), r.dtype(), r.torch_version(), r.tokenizer_sha256()};
  // Only dropout draws per shard; without it every shard count computes the same numbers.
  if (run.config().dropout() > 0) p.shards = r.shards();
  if (p.device_kind.empty()) {
    for (const char* kind : {"cuda", "mps", "cpu"}) {
      if (absl::StartsWith(r.device(), kind)) p.device_kind = kind;
    }
  }
  return p;
}

std::vector<std::string> ProvenanceDifferences(const ProvenanceCounts& runs) {
  std::vector<std::string> out;
  for (size_t f = 0; f < kFields.size(); ++f) {
    bool differs = false;
    for (auto a = runs.begin(); a != runs.end() && !differs; ++a) {
      for (auto b = std::next(a); b != runs.end() && !differs; ++b) {
        differs = Differ(a->first, b->first, f);
      }
    }
    if (differs) out.push_back(kFields[f]);
  }
  return out;
}

std::vector<std::string> ProvenanceLabels(const ProvenanceCounts& runs,
                                          const std::vector<std::string>& differs) {
  std::map<std::string, int> merged;
  for (const auto& [p, n] : runs) {
    std::vector<std::string> parts;
    for (size_t f = 0; f < kFields.size(); ++f) {
      // Listing everything (cells.csv), a shard count shows only where it matters (dropout).
      if (differs.empty() && f == kShardField && p.shards == 0) continue;
      if (differs.empty() || std::find(differs.begin(), differs.end(), kFields[f]) != differs.end())
        parts.push_back(Show(p, f));
    }
    merged[absl::StrJoin(parts, "/")] += n;
  }
  std::vector<std::string> out;
  for (const auto& [label, n] : merged) {
    out.push_back(absl::StrCat(label, " (", n, n == 1 ? " run)" : " runs)"));
  }
  return out;
}

std::string MixedRuns::Line() const { return absl::StrCat(kind, " ", where, ": ", detail); }

void FlagMixedRuns(Analysis* a) {
  const auto& o = a->options;
  for (auto& c : a->curves) {
    for (auto& p : c.points) {
      p.mixed = ProvenanceDifferences(p.provenance);
      if (p.mixed.empty()) continue;
      const std::string where = Where(c.context, {absl::StrCat(o.variant_axis, "=", c.variant),
                                                  absl::StrCat(o.moderator_axis, "=", c.moderator),
                                                  absl::StrCat(o.lr_axis, "=", p.lr_text)});
      a->mixed.push_back(*Check("cell", where, {{"", p.provenance}}));
    }
    c.mixed = ProvenanceDifferences(CurveRuns(c));
  }

  // Per (context, treated variant): what H1 (pairs at one LR), H2 (pairs of curves) and H3 (the
  // trend over the moderator) rest on.
  std::map<std::pair<std::string, std::string>, std::array<std::vector<std::string>, 3>> rests;
  for (const auto& context : a->contexts) {
    for (const auto& variant : a->variants) {
      if (variant == a->baseline) continue;
      auto& r = rests[{context, variant}];
      const std::string base_side = absl::StrCat(o.variant_axis, "=", a->baseline);
      const std::string treated_side = absl::StrCat(o.variant_axis, "=", variant);
      ProvenanceCounts trend_runs;
      std::vector<Side> trend_sides;
      bool finer = false;  // some cell, pair or pair of curves of this comparison is mixed
      for (const auto& m : a->moderators) {
        const Curve* base = a->FindCurve(context, a->baseline, m);
        const Curve* treated = a->FindCurve(context, variant, m);
        if (base == nullptr || treated == nullptr) continue;
        const std::string moderator = absl::StrCat(o.moderator_axis, "=", m);
        bool fine = false;  // a mixed cell of either curve, or a mixed pair at one LR
        for (const auto& pt : treated->points) {
          const Point* pb = base->PointAt(pt.lr);
          fine |= !pt.mixed.empty();
          if (pb == nullptr || pb->n == 0 || pt.n == 0) continue;
          auto pair =
              Check("pair", Where(context, {moderator, absl::StrCat(o.lr_axis, "=", pt.lr_text)}),
                    {{base_side, pb->provenance}, {treated_side, pt.provenance}});
          if (!pair) continue;
          r[0] = Union(r[0], pair->differs);
          fine = true;
          a->mixed.push_back(std::move(*pair));
        }
        for (const auto& pb : base->points) fine |= !pb.mixed.empty();
        const ProvenanceCounts base_runs = CurveRuns(*base), treated_runs = CurveRuns(*treated);
        auto curves = Check("curves", Where(context, {moderator}),
                            {{base_side, base_runs}, {treated_side, treated_runs}});
        if (curves) {
          r[1] = Union(r[1], curves->differs);
          for (auto& n : a->necessity) {
            if (n.context == context && n.variant == variant && n.moderator == m) {
              n.mixed = curves->differs;
            }
          }
          finer = true;
          // Listed only when no cell or pair shows it: the curves mix across LRs.
          if (!fine) a->mixed.push_back(std::move(*curves));
        }
        ProvenanceCounts here = base_runs;
        Merge(treated_runs, &here);
        Merge(here, &trend_runs);
        trend_sides.push_back({moderator, std::move(here)});
      }
      auto trend = Check("trend",
                         absl::StrCat(base_side, " vs ", variant, " across ", o.moderator_axis,
                                      context.empty() ? "" : absl::StrCat(" [", context, "]")),
                         trend_sides);
      if (trend) {
        r[2] = trend->differs;
        if (!finer) a->mixed.push_back(std::move(*trend));
      }
    }
  }
  for (auto& v : a->verdicts) {
    auto it = rests.find({v.context, v.variant});
    if (it == rests.end()) continue;
    v.mixed = it->second[v.hypothesis == "H1" ? 0 : (v.hypothesis == "H2" ? 1 : 2)];
    if (!v.mixed.empty()) {
      absl::StrAppend(&v.line, " [rests on mixed runs: ", absl::StrJoin(v.mixed, ", "), " differ]");
    }
  }

  if (a->mixed.empty()) return;
  std::vector<std::string> differs, counts;
  for (const auto& m : a->mixed) differs = Union(differs, m.differs);
  for (const auto& [kind, one, many] : {std::tuple{"cell", "cell", "cells"},
                                        {"pair", "compared pair", "compared pairs"},
                                        {"curves", "pair of curves", "pairs of curves"},
                                        {"trend", "trend", "trends"}}) {
    const std::string c = Count(a->mixed, kind, one, many);
    if (!c.empty()) counts.push_back(c);
  }
  a->notes.push_back(absl::StrCat("mixed provenance: ", absl::StrJoin(counts, ", "),
                                  " rest on runs that differ in ", absl::StrJoin(differs, ", "),
                                  " (each listed below); --require-uniform makes this an error"));
}

absl::Status RequireUniform(const Analysis& a) {
  if (a.mixed.empty()) return absl::OkStatus();
  std::vector<std::string> differs, lines;
  for (const auto& m : a.mixed) {
    differs = Union(differs, m.differs);
    if (lines.size() < kMaxListed) lines.push_back(absl::StrCat("  ", m.Line()));
  }
  if (a.mixed.size() > kMaxListed) {
    lines.push_back(absl::StrCat("  ... and ", a.mixed.size() - kMaxListed, " more"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("runs compared are not uniform: they differ in ", absl::StrJoin(differs, ", "),
                   " (", a.mixed.size(), " mixed):\n", absl::StrJoin(lines, "\n")));
}

}  // namespace ablate::analysis
