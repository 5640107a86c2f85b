// A small, portable random generator for data sampling and the synthetic corpus.
//
// std::uniform_int_distribution is implementation-defined, so the same seed could give different
// batches on libstdc++ and libc++; this generator (xoshiro256**, seeded by splitmix64) gives the
// same stream everywhere, and its whole state is four integers a checkpoint can hold.
#pragma once

#include <array>
#include <cstdint>

namespace ablate::train {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& word : state_) {
      seed += 0x9e3779b97f4a7c15ULL;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
  }

  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, n). The modulo bias is below 2^-40 for the n we use (token counts), which is
  // far below anything a training curve could show, so we skip rejection sampling.
  uint64_t Below(uint64_t n) { return Next() % n; }

  const std::array<uint64_t, 4>& state() const { return state_; }
  void set_state(const std::array<uint64_t, 4>& state) { state_ = state; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> state_;
};

}  // namespace ablate::train
