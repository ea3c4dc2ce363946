// The x86 attention row loops by head size. Each ISA file writes its loops as templates on C,
// the head size in vectors, and fills this table with their instantiations for C = 1 .. kMax at
// compile time (no code runs at start-up, where the CPU may lack the file's ISA). A call looks
// its head size up once; a row is then straight-line code with q and the accumulators in
// registers. In an unnamed namespace like x86-simd-helpers.h: each ISA file gets its own copy.
#pragma once

#include <cstdint>
#include <utility>

namespace hearth::kernels::x86 {
namespace {

// Loops<Load, C> for the row type Load and C vectors a row: kValid (q8_0 rows take whole
// blocks only), and functions returning the loops, scores(), accumulate() and optionally
// scores_group() and accumulate_group() (GQA): functions, so that only the valid sizes are
// instantiated.
template <template <class, int> class Loops, class Load, int kMax>
struct RowLoopTable {
  using Scores = void (*)(const float* q, const uint8_t* k, int64_t k_stride, int64_t nk,
                          float scale, float* s);
  using Accumulate = void (*)(float* acc, float c, const float* p, const uint8_t* v,
                              int64_t v_stride, int64_t nk);
  using ScoresGroup = void (*)(const float* q, int64_t g, const uint8_t* k, int64_t k_stride,
                               int64_t nk, float scale, float* s, int64_t s_stride);
  using AccumulateGroup = void (*)(float* acc, const float* c, const float* p, int64_t p_stride,
                                   int64_t g, const uint8_t* v, int64_t v_stride, int64_t nk);
  Scores scores[kMax + 1] = {};
  Accumulate accumulate[kMax + 1] = {};
  ScoresGroup scores_group[kMax + 1] = {};
  AccumulateGroup accumulate_group[kMax + 1] = {};

  constexpr RowLoopTable() { fill(std::make_integer_sequence<int, kMax + 1>{}); }
  template <int... Cs>
  constexpr void fill(std::integer_sequence<int, Cs...>) {
    (set<Cs>(), ...);
  }
  template <int C>
  constexpr void set() {
    if constexpr (C > 0) {
      using L = Loops<Load, C>;
      if constexpr (L::kValid) {
        scores[C] = L::scores();
        accumulate[C] = L::accumulate();
        if constexpr (requires { L::scores_group(); }) scores_group[C] = L::scores_group();
        if constexpr (requires { L::accumulate_group(); })
          accumulate_group[C] = L::accumulate_group();
      }
    }
  }
  // The loops for head size hd in vectors of `width` floats: nullptr when it has none.
  Scores scores_for(int64_t hd, int width) const { return at(scores, hd, width); }
  Accumulate accumulate_for(int64_t hd, int width) const { return at(accumulate, hd, width); }
  ScoresGroup scores_group_for(int64_t hd, int width) const { return at(scores_group, hd, width); }
  AccumulateGroup accumulate_group_for(int64_t hd, int width) const {
    return at(accumulate_group, hd, width);
  }

 private:
  template <class F>
  static F at(const F (&list)[kMax + 1], int64_t hd, int width) {
    return hd % width == 0 && hd / width <= kMax ? list[hd / width] : nullptr;
  }
};

}  // namespace
}  // namespace hearth::kernels::x86
