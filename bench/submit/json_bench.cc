// The store's JSON paths timed against the alternatives, on messages shaped as the store holds
// them (issue #37: measure before choosing the JSON reader):
//   - a ListRuns page of 1,000 finished runs: each run's result (RunResult) and its config, stored
//     as a delta over its sweep's base (migration 0014), merged over the base parsed once;
//   - a Lease's whole spec (base + delta), 1,000 times;
//   - a 100,000-run submit's JSON: each run's delta written (the writer), and the same specs
//     written whole.
// Each line: the store's hand-written code (server/store/proto_json.h), protobuf's util
// converter (JsonStringToMessage / MessageToJsonString), and nlohmann::json's parse alone (a tree,
// not yet a message: a lower bound for a reader built on it). Median of 5.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/strings/str_cat.h"
#include "common/sweep/sweep.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "server/store/pg_codec.h"
#include "server/store/proto_json.h"

namespace {

using namespace ablate;  // NOLINT(build/namespaces)
using Clock = std::chrono::steady_clock;

double MedianMs(const std::function<void()>& fn) {
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

void Line(const char* what, double ours, double protobuf, double nlohmann) {
  std::printf("%-44s %9.1f ms %11.1f ms (%4.1fx) ", what, ours, protobuf, protobuf / ours);
  if (nlohmann > 0) {
    std::printf("%11.1f ms\n", nlohmann);
  } else {
    std::printf("%14s\n", "-");  // a writer: nlohmann would build a tree first
  }
}

// The specs a submit of `lrs` x `seeds` runs stores, with the data sets resolved as the server
// resolves them (paths, SHA-256s, sizes).
std::vector<v1::RunSpec> Specs(int lrs, int seeds) {
  std::string lr, seed;
  for (int i = 0; i < lrs; ++i) absl::StrAppend(&lr, i ? ", " : "", 1e-5 * (i + 1));
  for (int i = 0; i < seeds; ++i) absl::StrAppend(&seed, i ? ", " : "", i);
  const std::string yaml = absl::StrCat(
      "name: bench\ndata: {train: \"synthetic:100\", val: \"synthetic:10\"}\n"
      "fixed: {n_embd: 64, n_head: 2, block_size: 64, batch_size: 8, steps: 1000}\n"
      "grid:\n  lr: [",
      lr, "]\n  seed: [", seed, "]\n  weight_decay: [0.0, 0.1]\n");
  sweep::Limits limits;
  limits.max_runs = 1000000;
  auto parsed = sweep::ParseSweep(yaml, "bench.yaml", limits);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    std::exit(1);
  }
  std::vector<v1::RunSpec> out;
  auto s = sweep::ForEachRun(*parsed, limits, [&](v1::RunSpec&& run) {
    run.mutable_data()->set_train_sha256(std::string(64, 'a'));
    run.mutable_data()->set_val_sha256(std::string(64, 'b'));
    run.mutable_data()->set_train_bytes(123456789);
    run.mutable_data()->set_val_bytes(12345678);
    out.push_back(std::move(run));
    return absl::OkStatus();
  });
  if (!s.ok()) std::exit(1);
  return out;
}

v1::RunResult Result(int i) {
  v1::RunResult r;
  r.set_initial_loss(10.83);
  r.set_final_train_loss(3.2 + i * 1e-4);
  r.set_final_val_loss(3.3 + i * 1e-4);
  r.set_final_val_ppl(27.1);
  r.set_min_val_loss(3.25);
  r.set_steps_to_threshold(812);
  r.set_steps_done(1000);
  r.set_tokens_per_second(181234.5);
  r.set_wall_seconds(95.25);
  r.set_device("cuda:0 (NVIDIA H100 80GB HBM3)");
  r.set_device_kind("cuda");
  r.set_device_name("NVIDIA H100 80GB HBM3");
  r.set_dtype("bfloat16");
  r.set_torch_version("2.6.0");
  r.set_tokenizer_sha256(std::string(64, 'c'));
  r.set_shards(1);
  for (const char* p : {"attn_entropy", "max_attn_logit", "kurtosis", "grad_norm"}) {
    (*r.mutable_final_probes())[p] = 1.5 + i;
  }
  r.mutable_final_checkpoint()->set_step(1000);
  r.mutable_final_checkpoint()->set_sha256(std::string(64, 'd'));
  r.mutable_final_checkpoint()->set_size_bytes(1 << 20);
  return r;
}

}  // namespace

int main() {
  namespace pu = google::protobuf::util;
  pu::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;
  pu::JsonPrintOptions print;
  print.preserve_proto_field_names = true;

  // ---- A ListRuns page of 1,000 runs, and 1,000 Leases ----
  const std::vector<v1::RunSpec> page_specs = Specs(50, 10);  // 50 x 10 x 2 = 1,000 runs
  const v1::RunSpec& base = page_specs[0];
  const std::string base_json = server::pg::ToJson(base);
  const auto delta = server::pg::JsonDelta::Make(base, "config");
  std::vector<std::string> results, configs, owns, wholes;
  for (size_t i = 0; i < page_specs.size(); ++i) {
    results.push_back(server::pg::ToJson(Result(static_cast<int>(i))));
    std::string own;
    delta->Append(page_specs[i], &own);
    owns.push_back(own);
    configs.push_back(nlohmann::json::parse(own).value("config", nlohmann::json::object()).dump());
    wholes.push_back(server::pg::ToJson(page_specs[i]));
  }
  std::printf("%zu runs; base spec %zu bytes, a run's delta ~%zu, result ~%zu\n\n",
              page_specs.size(), base_json.size(), owns[1].size(), results[1].size());
  std::printf("%-44s %12s %25s %14s\n", "", "hand-written", "protobuf (x hand-written)",
              "nlohmann parse");

  v1::RunConfig base_config = base.config();
  Line("ListRuns page: 1,000 results + configs", MedianMs([&] {
         for (size_t i = 0; i < results.size(); ++i) {
           v1::Run run;
           server::pg::MergeMessageJson(results[i], run.mutable_result());
           *run.mutable_config() = base_config;
           server::pg::MergeMessageJson(configs[i], run.mutable_config());
         }
       }),
       MedianMs([&] {
         for (size_t i = 0; i < results.size(); ++i) {
           v1::Run run;
           (void)pu::JsonStringToMessage(results[i], run.mutable_result(), parse);
           v1::RunConfig own;
           (void)pu::JsonStringToMessage(configs[i], &own, parse);
           *run.mutable_config() = base_config;
           run.mutable_config()->MergeFrom(own);
         }
       }),
       MedianMs([&] {
         for (size_t i = 0; i < results.size(); ++i) {
           auto r = nlohmann::json::parse(results[i]);
           auto c = nlohmann::json::parse(configs[i]);
         }
       }));
  Line("1,000 Leases: base + delta -> RunSpec", MedianMs([&] {
         for (const auto& own : owns) {
           v1::RunSpec spec;
           server::pg::MergeMessageJson(base_json, &spec);
           server::pg::MergeDeltaJson(own, "config", &spec);
         }
       }),
       MedianMs([&] {
         for (const auto& own : owns) {
           v1::RunSpec spec, mine;
           (void)pu::JsonStringToMessage(base_json, &spec, parse);
           (void)pu::JsonStringToMessage(own, &mine, parse);
           spec.MergeFrom(mine);
         }
       }),
       MedianMs([&] {
         for (const auto& own : owns) {
           auto b = nlohmann::json::parse(base_json);
           b.merge_patch(nlohmann::json::parse(own));
         }
       }));
  Line("1,000 whole specs (rows before 0014) read", MedianMs([&] {
         for (const auto& w : wholes) {
           v1::RunSpec spec;
           server::pg::MergeMessageJson(w, &spec);
         }
       }),
       MedianMs([&] {
         for (const auto& w : wholes) {
           v1::RunSpec spec;
           (void)pu::JsonStringToMessage(w, &spec, parse);
         }
       }),
       MedianMs([&] {
         for (const auto& w : wholes) auto j = nlohmann::json::parse(w);
       }));

  // ---- The page's decoding before and after the one merge (issue #37) ----
  // Before: SQL picked the config delta and the merged grid point, C++ merged the config over the
  // sweep's base config and parsed the grid point through a holder message. Now: the run's whole
  // delta merged over the base's config and grid point (pg::MergeRunSpec).
  std::vector<std::string> grids;
  for (const auto& own : owns) grids.push_back(nlohmann::json::parse(own)["grid_values"].dump());
  v1::RunSpec trimmed;
  *trimmed.mutable_config() = base.config();
  *trimmed.mutable_grid_values() = base.grid_values();
  auto decode_before = [&] {
    for (size_t i = 0; i < owns.size(); ++i) {
      v1::Run run;
      (void)server::pg::FromJson(results[i], run.mutable_result());
      *run.mutable_config() = base_config;
      server::pg::MergeMessageJson(configs[i], run.mutable_config());
      v1::RunSpec holder;
      (void)server::pg::FromJson(absl::StrCat("{\"grid_values\":", grids[i], "}"), &holder);
      run.mutable_grid_values()->swap(*holder.mutable_grid_values());
    }
  };
  auto decode_after = [&] {
    for (size_t i = 0; i < owns.size(); ++i) {
      v1::Run run;
      (void)server::pg::FromJson(results[i], run.mutable_result());
      v1::RunSpec spec = trimmed;
      server::pg::MergeDeltaJson(owns[i], "config", &spec);
      run.mutable_config()->Swap(spec.mutable_config());
      run.mutable_grid_values()->swap(*spec.mutable_grid_values());
    }
  };
  // Interleaved, the fastest of 9 each: the two are close, and a shared machine's load moves.
  double before = 1e9, after = 1e9;
  for (int i = 0; i < 9; ++i) {
    before = std::min(before, MedianMs(decode_before));
    after = std::min(after, MedianMs(decode_after));
  }
  std::printf("\nListRuns page of 1,000 decoded: %.1f ms before the one merge, %.1f ms with it\n",
              before, after);

  // ---- A 100,000-run submit's JSON ----
  const std::vector<v1::RunSpec> big = Specs(500, 100);  // 500 x 100 x 2 = 100,000 runs
  const auto big_delta = server::pg::JsonDelta::Make(big[0], "config");
  std::printf("\n%zu-run submit\n", big.size());
  std::string out;
  Line("100,000 run deltas written (JsonDelta)", MedianMs([&] {
         for (const auto& run : big) {
           out.clear();
           big_delta->Append(run, &out);
         }
       }),
       MedianMs([&] {
         // protobuf's writer has no delta: each spec whole, the work a delta would start from.
         for (const auto& run : big) {
           out.clear();
           (void)pu::MessageToJsonString(run, &out, print);
         }
       }),
       0);
  Line("100,000 whole specs written", MedianMs([&] {
         for (const auto& run : big) {
           out.clear();
           server::pg::AppendMessageJson(run, &out);
         }
       }),
       MedianMs([&] {
         for (const auto& run : big) {
           out.clear();
           (void)pu::MessageToJsonString(run, &out, print);
         }
       }),
       0);
  std::vector<std::string> big_owns;
  for (const auto& run : big) {
    out.clear();
    big_delta->Append(run, &out);
    big_owns.push_back(out);
  }
  const std::string big_base = server::pg::ToJson(big[0]);
  Line("100,000 runs read back (GetSweep's ListRuns)", MedianMs([&] {
         v1::RunSpec b;
         server::pg::MergeMessageJson(big_base, &b);
         for (const auto& own : big_owns) {
           v1::RunSpec spec = b;
           server::pg::MergeDeltaJson(own, "config", &spec);
         }
       }),
       MedianMs([&] {
         v1::RunSpec b;
         (void)pu::JsonStringToMessage(big_base, &b, parse);
         for (const auto& own : big_owns) {
           v1::RunSpec spec = b, mine;
           (void)pu::JsonStringToMessage(own, &mine, parse);
           spec.MergeFrom(mine);
         }
       }),
       MedianMs([&] {
         for (const auto& own : big_owns) auto j = nlohmann::json::parse(own);
       }));
  return 0;
}
