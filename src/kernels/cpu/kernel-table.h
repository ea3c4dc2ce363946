// The per-ISA kernel tables: for every runnable weight dtype, the activation type its dot
// product consumes, the dot kernel and the dequantizer. One table per ISA, picked once at
// start-up; adding an ISA = one table in cpu/arch/<arch>/ plus a line in its *-tables.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/cpu-features.h"
#include "base/thread-pool.h"
#include "kernels/ops.h"
#include "tensor/dtype.h"
#include "tensor/tensor-view.h"

namespace hearth::kernels {

// Ordered: on one architecture a higher value is a strictly larger instruction set.
enum class Isa : int { kRef = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3 };
const char* isa_name(Isa isa);

// dot(weight row w of n elements, activation row x in the weight's act type) -> y.
// Kernels compute `n_tok` tokens per call: x rows are x_stride bytes apart, results go to
// y[t * y_stride]. Taking several tokens lets one weight row load serve a tile of tokens.
using VecDotFn = void (*)(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,
                          float* y, int64_t y_stride);
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);
// One weight row against one activation row (the per-ISA row kernels, before dot_each_token or
// dot_via_dequantize widen them to a token tile). A function type, so a header declares a family
// of kernels in one line.
using RowDot = float(int64_t n, const void* w, const void* x);
// A VecDotFn's function type (a kernel that takes its token tiles itself), for the same reason.
using TileDot = void(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,
                     float* y, int64_t y_stride);
using RowDequantize = void(const void* src, float* dst, int64_t n);

// Activations for a packed layout, quantized once per call by the layout's quantizer in the
// format its act_type names. Q8_0: per token n int8 values, and per 32-block its f32 scale and
// 8 x the sum of its int8 values (so unsigned weight codes need no offset pass: the offset-8
// correction of 4-bit codes, ready to subtract). Q8_K: n int8 values, one f32 scale per
// 256-block (d's first n / 256 entries), and per 256-block eight words of s: words 0-1 hold the
// eight 32-element sums' high parts (sum >> 7, a signed byte each), words 2-3 their low 7 bits,
// words 4-7 zero; the split lets unsigned 6-bit mins meet the sums in byte dot products.
// I16: per token n int16 values (q holds 2n bytes a token: kMaxActCodeBytes), one f32 scale per
// 32-block, s unused (ref::quantize_i16_blocks). Split I16 (act_split_i16: the Q6_K layout):
// codes of at most kSplitI16CodeMax, each stored as a = 256 hi + lo with hi and lo signed
// bytes, q holding a token's n lo bytes then its n hi bytes, and s (n / 16 words) -32 x the sum
// of each 16 codes.
// Layouts with f32 activations (no quantize function) read x [T, n] as given.
inline constexpr int64_t kMaxActCodeBytes = 2;      // bytes per element of q's rows, whatever type
inline constexpr int64_t kActSumsPer32 = 2;         // words of s per 32 elements, whatever type
inline constexpr int32_t kSplitI16CodeMax = 32639;  // 127 x 256 + 127: splits into two s8
struct PackedActivations {
  const int8_t* q;   // [T, kMaxActCodeBytes * n] bytes, a token's codes at its row's start
  const float* d;    // [T, n / 32]
  const int32_t* s;  // [T, kActSumsPer32 * n / 32], a token's words at its row's start
  int64_t n_tokens;
  const float* x = nullptr;  // [T, n] f32 activations
};

// Token t's codes (row t of q): int8 rows use the first n bytes, int16 rows all 2n.
inline const int8_t* act_codes(const PackedActivations& x, int64_t t, int64_t n) {
  return x.q + t * kMaxActCodeBytes * n;
}
// Token t's sums (row t of s): Q8_0 uses the first n / 32 words, Q8_K 8 a 256-block, split
// I16 all n / 16.
inline const int32_t* act_sums(const PackedActivations& x, int64_t t, int64_t n) {
  return x.s + t * (kActSumsPer32 * n / 32);
}

// A weight layout the kernels prefer over the file's (cpu/packed.cpp drives it): rows
// interleaved in groups of group_rows, 64-byte aligned, packed once at load (and cached on disk
// by the CPU backend, keyed by `version`). Y rows are written for row groups [g0, g1).
struct PackedLayout {
  int version;
  int group_rows;
  bool (*can_pack)(int64_t d, int64_t n);
  uint64_t (*bytes)(int64_t d, int64_t n);
  void (*pack)(const void* src, uint8_t* dst, int64_t g0, int64_t g1, int64_t n);
  void (*gemm)(const uint8_t* w, int64_t g0, int64_t g1, int64_t n, const PackedActivations& x,
               float* y, int64_t y_stride);
  // One token's activations x [n] -> q [n], d and s [n / 32] in act_type's rounding (see
  // PackedActivations); nullptr when the layout computes with f32 activations.
  void (*quantize)(const float* x, int64_t n, int8_t* q, float* d, int32_t* s);
  DType act_type;  // Q8_0, Q8_K or I16 with a quantizer (ref::quantize_* bits), else F32
  bool act_split_i16 = false;  // I16 codes split into bytes (see PackedActivations)
  // Rows [g * group_rows, (g + 1) * group_rows) back to f32, row-major into out
  // [group_rows, n]: exactly the dequantized source rows. Prefill GEMMs that want another
  // operand format (e.g. AMX tiles) build their panels from this, so the source file's pages
  // never have to be resident next to the packed copy.
  void (*unpack_rows)(const uint8_t* w, int64_t g, int64_t n, float* out);
};

struct TypeKernels {
  DType act_type = DType::F32;  // F32 = activations are used as they are
  VecDotFn dot = nullptr;       // nullptr: dtype not runnable
  DequantizeFn dequantize = nullptr;
  const PackedLayout* packed = nullptr;  // optional repacked layout (same results up to order)
};

inline constexpr int kMaxTypeId = 40;  // ggml ids 0..39 index the table (39: MXFP4)

struct KernelTable {
  Isa isa = Isa::kRef;
  const char* name = "ref";
  TypeKernels types[kMaxTypeId] = {};
  const TypeKernels& of(DType t) const {
    static const TypeKernels none;
    return uint32_t(t) < uint32_t(kMaxTypeId) ? types[uint32_t(t)] : none;
  }
};

// The scalar reference table (ref/ref-table.cpp). Always supported.
const KernelTable& ref_kernel_table();

// Tables this build has for its architecture, best first, with what each needs
// (cpu/arch/x86/x86-tables.cpp or cpu/arch/arm/arm-tables.cpp; the ref table is not listed).
struct ArchTable {
  const KernelTable* table;
  bool (*supported)(const CpuFeatures&);
};
std::vector<ArchTable> arch_kernel_tables();

// Every table this machine can run, best first, ending with ref (tests run them all).
std::vector<const KernelTable*> supported_kernel_tables();

// The table picked once at start-up: the best supported one, capped by HEARTH_ISA.
const KernelTable& active_kernel_table();

// The matmul driver (ops.h's matmul) over an explicit table, so tests can run every ISA.
// W {d, n} @ X [T, n] f32 -> Y [T, d] f32.
void matmul_with_table(const KernelTable& table, const TensorView& w, const float* x,
                       int64_t n_tokens, float* y, ThreadPool& pool);
// ops.h's matmul_grouped over an explicit table, without the prefill GEMM.
void matmul_grouped_with_table(const KernelTable& table, std::span<const MatmulIn> mats,
                               ThreadPool& pool);
// ops.h's moe_experts with every matrix in the file's layout through an explicit table.
void moe_experts_with_table(const KernelTable& table, const MoeExperts& m, const float* x,
                            int64_t T, const int32_t* ids, const float* weights, float* out,
                            bool accumulate, ThreadPool& pool);

// Prefill GEMM on a matrix engine (x86 AMX, cpu/arch/x86/amx-gemm.cpp): worth it from a few
// dozen tokens, where the weight rows can be expanded once into an L2-resident operand panel and
// then serve every token. The weight comes in as exact f32 rows from a RowSource (a packed
// layout's unpack_rows or the table's dequantizer), so one GEMM serves every dtype.
struct RowSource {
  // rows [r0, r0 + rows) -> out [rows, n] f32; r0 is a multiple of group_rows and rows is
  // group_rows except in the last group (d - r0). group_rows divides 16 (kRowSourceMaxGroup).
  void (*fill)(const void* ctx, int64_t r0, int64_t rows, int64_t n, float* out);
  const void* ctx;
  int64_t group_rows;
  // Set when the rows come from a packed matrix: a GEMM that knows this layout (and version)
  // may build its operands from the packed bytes directly instead of through fill.
  const PackedLayout* layout = nullptr;
  const uint8_t* packed = nullptr;
};

// How a weight dtype rounds into the engine's bf16 operands. kSingle: weights and activations
// each rounded once to bf16 (2^-9 relative), below the error of 4- and 5-bit quantization.
// kSplitWeights: weights as hi + lo bf16 (16 bits, 2 products), activations rounded once: for
// Q8_0/Q6_K whose own error is close to bf16's.
inline constexpr int64_t kRowSourceMaxGroup = 16;

enum class PrefillPrecision { kSingle, kSplitWeights };

struct PrefillGemm {
  const char* name;
  // W {d, n} (rows from src) @ X [T, n] f32 -> Y [T, d], row t at y + t * y_stride.
  void (*run)(const RowSource& src, int64_t d, int64_t n, PrefillPrecision prec, const float* x,
              int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool);
};

// The prefill GEMM for `table` when this CPU and OS can run one (nullptr otherwise).
// dispatch.cpp; its precision per weight dtype (nullopt: keep the table's exact kernels, e.g.
// F32/F16/BF16 weights whose goldens ask for 1e-4).
const PrefillGemm* prefill_gemm_for(const KernelTable& table);
std::optional<PrefillPrecision> prefill_precision(DType t);
// Token count from which matmul / matmul_packed use it for dtype t: where the engine's fixed
// cost (building the panel through unpack_rows / dequantize) drops below the table kernel's
// (measured per dtype, docs/performance.md); engine.min_tokens > 0 replaces it for all.
int64_t prefill_min_tokens(DType t, const MatrixEngineOptions& engine = {});
// What matmul and matmul_packed run for an n_tokens matmul of dtype t: the prefill GEMM (and
// the precision it rounds to) when the options allow it, the CPU has one, the dtype has a
// precision for it and n_tokens reaches the threshold; nullopt: the table's kernels.
struct ChosenPrefillGemm {
  const PrefillGemm* gemm;
  PrefillPrecision precision;
};
std::optional<ChosenPrefillGemm> choose_prefill_gemm(const KernelTable& table, DType t,
                                                     int64_t n_tokens,
                                                     const MatrixEngineOptions& engine);

// Runs table.dot over a token tile with a single-token kernel: for ISAs whose multi-token
// kernel is not specialised. Declared here so tables can share it.
template <RowDot* Dot>
void dot_each_token(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok, float* y,
                    int64_t y_stride) {
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int t = 0; t < n_tok; ++t) y[t * y_stride] = Dot(n, w, xb + uint64_t(t) * x_stride);
}

// A VecDotFn over tiles of tokens from kernels that each take a fixed count: Tiles are the tile
// kernels for 1, 2, ..., N tokens (N = the most whose accumulators fit in registers); n_tok is
// covered in tiles of N and one smaller remainder.
template <class Block, class Tile, Tile... Tiles>
void dot_token_tiles(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,
                     float* y, int64_t y_stride) {
  constexpr Tile kTiles[] = {Tiles...};
  constexpr int kMost = int(sizeof...(Tiles));
  const auto* blocks = static_cast<const Block*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int t0 = 0; t0 < n_tok; t0 += kMost) {
    const int nt = n_tok - t0 < kMost ? n_tok - t0 : kMost;
    kTiles[nt - 1](n, blocks, xb + uint64_t(t0) * x_stride, x_stride, y + t0 * y_stride, y_stride);
  }
}
// The tile kernels' type for weight blocks of type Block.
template <class Block>
using TokenTileFn = void (*)(int64_t n, const Block* w, const uint8_t* x, uint64_t x_stride,
                             float* y, int64_t y_stride);

// A weight type dotted against f32 activations through its dequantizer: the row is expanded
// kDequantChunk elements at a time into an L1-resident buffer, then each token of the tile takes
// an f32 dot against it. Used for weight types precise enough (Q8_0, Q6_K) that rounding the
// activations to 8 bits would double their error (docs/performance.md measures it). The buffer's
// round trip and a dot call per chunk cost compute: Q6_K and Q8_0 dequantize in registers
// instead (dot_q6_k_f32 / dot_q8_0_f32: 1B Q6_K decode 9.3-11.9 -> 15.2-17.5 tok/s on 2 AVX-512
// threads, 1.3-1.4 -> 8-9.4 on AVX2; AVX-512 runs Q8_0 and Q6_K through packed layouts with
// int16 activations instead).
// kBlock / kBlockBytes: elements and bytes per weight block.
inline constexpr int64_t kDequantChunk = 1024;  // a multiple of every block size (32, 256)
template <DequantizeFn Dq, RowDot* DotF32, int kBlock, int kBlockBytes>
void dot_via_dequantize(int64_t n, const void* w, const void* x, uint64_t x_stride, int n_tok,
                        float* y, int64_t y_stride) {
  static_assert(kDequantChunk % kBlock == 0);
  constexpr int kTile = 16;
  alignas(64) float buf[kDequantChunk];
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* xb = static_cast<const uint8_t*>(x);
  for (int t0 = 0; t0 < n_tok; t0 += kTile) {
    const int nt = n_tok - t0 < kTile ? n_tok - t0 : kTile;
    float acc[kTile] = {};
    for (int64_t i = 0; i < n; i += kDequantChunk) {
      const int64_t len = n - i < kDequantChunk ? n - i : kDequantChunk;
      Dq(wb + i / kBlock * kBlockBytes, buf, len);
      for (int t = 0; t < nt; ++t)
        acc[t] +=
            DotF32(len, buf, reinterpret_cast<const float*>(xb + uint64_t(t0 + t) * x_stride) + i);
    }
    for (int t = 0; t < nt; ++t) y[(t0 + t) * y_stride] = acc[t];
  }
}

}  // namespace hearth::kernels
