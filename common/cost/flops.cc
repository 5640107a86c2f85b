#include "common/cost/flops.h"

#include "common/sweep/sweep.h"

namespace ablate::cost {

int64_t ParamCount(const v1::RunConfig& c, int64_t vocab) {
  const int64_t d = c.n_embd();
  const int64_t head = c.n_head() > 0 ? d / c.n_head() : 0;
  const int64_t b = c.bias() ? 1 : 0;
  // A norm has a gain, and a shift when the model has biases; a Linear(in, out) in*out weights
  // and out biases.
  auto norm = [&](int64_t dim, bool shift) { return dim * (shift ? 2 : 1); };
  auto linear = [&](int64_t in, int64_t out) { return in * out + b * out; };
  int64_t block = norm(d, b) + linear(d, 3 * d) + linear(d, d) + norm(d, b) + linear(d, 4 * d) +
                  linear(4 * d, d);
  if (c.qk_norm() != "none" && !c.qk_norm().empty()) {
    const bool shift = b && c.qk_norm() == "layernorm";
    block += 2 * norm(head, shift);
  }
  int64_t n = vocab * d + c.n_layer() * block + norm(d, b);
  if (!c.tie_embeddings()) n += vocab * d;
  return n;
}

double FlopsPerToken(const v1::RunConfig& c, int64_t vocab) {
  const double head = c.n_head() > 0 ? static_cast<double>(c.n_embd()) / c.n_head() : 0;
  return 6.0 * static_cast<double>(ParamCount(c, vocab)) +
         12.0 * c.n_layer() * c.n_head() * head * c.block_size();
}

int64_t TokensPerStep(const v1::RunConfig& c) {
  return static_cast<int64_t>(c.batch_size()) * c.grad_accum() * c.block_size();
}

double RunTokens(const v1::RunConfig& c) {
  return static_cast<double>(TokensPerStep(c)) * static_cast<double>(c.steps());
}

double RunFlops(const v1::RunConfig& c, int64_t vocab) {
  return RunTokens(c) * FlopsPerToken(c, vocab);
}

int64_t VocabOf(const v1::DataSpec& data) {
  return data.tokenizer().vocab() > 0 ? data.tokenizer().vocab() : sweep::kDefaultVocab;
}

}  // namespace ablate::cost
