// Picks the kernel table once per process: the best ISA this CPU supports, optionally capped by
// HEARTH_ISA (tests and A/B runs): a supported table's own name picks that table
// (ref|avx2|avx-vnni|avx512|neon|neon-dotprod), and an ISA level's name (ref|avx2|avx512|neon)
// otherwise caps the choice at that level. Tables themselves live in cpu/arch/.
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "kernels/cpu/kernel-table.h"
#if defined(__x86_64__)
#include "kernels/cpu/arch/x86/amx-gemm.h"
#endif

namespace hearth::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return "ref";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kNeon:
      return "neon";
  }
  return "?";
}

std::vector<const KernelTable*> supported_kernel_tables() {
  std::vector<const KernelTable*> out;
  for (const ArchTable& t : arch_kernel_tables())
    if (t.supported(cpu_features())) out.push_back(t.table);
  out.push_back(&ref_kernel_table());
  return out;
}

namespace {

// Rank within an architecture family; tables from another family never match a cap.
int isa_level(Isa isa) {
  return isa == Isa::kAvx512 ? 2 : isa == Isa::kRef ? 0 : 1;
}
bool is_x86(Isa isa) {
  return isa == Isa::kAvx2 || isa == Isa::kAvx512;
}

const KernelTable& pick_table() {
  const std::vector<const KernelTable*> tables = supported_kernel_tables();
  const char* want = std::getenv("HEARTH_ISA");
  if (!want || !*want) return *tables.front();
  for (const KernelTable* t : tables)
    if (std::strcmp(t->name, want) == 0) return *t;
  for (Isa cap : {Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (std::strcmp(isa_name(cap), want) != 0) continue;
    // Tables are best first: the first one at or below the cap, in the cap's family, wins.
    for (const KernelTable* t : tables) {
      const bool family_ok = t->isa == Isa::kRef || is_x86(t->isa) == is_x86(cap);
      if (family_ok && isa_level(t->isa) <= isa_level(cap)) return *t;
    }
  }
  std::string names;
  for (const KernelTable* t : tables) names += std::string(names.empty() ? "" : "|") + t->name;
  log_warn(std::string("HEARTH_ISA=") + want + " is not a table this CPU runs (" + names +
           ") nor an ISA level; using " + tables.front()->name);
  return *tables.front();
}

}  // namespace

const KernelTable& active_kernel_table() {
  static const KernelTable& table = pick_table();
  return table;
}

const PrefillGemm* prefill_gemm_for(const KernelTable& table) {
  // AMX implies AVX-512; a table capped below it (HEARTH_ISA=avx2) keeps its own kernels.
  if (table.isa != Isa::kAvx512) return nullptr;
#if defined(__x86_64__)
  static const PrefillGemm* gemm = amx::bf16_prefill_gemm();  // asks the OS for AMX once
  return gemm;
#else
  return nullptr;  // no matrix engine wired up on this architecture yet
#endif
}

std::optional<PrefillPrecision> prefill_precision(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return PrefillPrecision::kSingle;
    case DType::Q8_0:
    case DType::Q6_K:
      return PrefillPrecision::kSplitWeights;
    default:
      return std::nullopt;  // F32/F16/BF16: the exact f32 kernels (goldens ask for 1e-4)
  }
}

int64_t prefill_min_tokens(DType t, const MatrixEngineOptions& engine) {
  if (engine.min_tokens > 0) return engine.min_tokens;
  // 2048 x 2048, one thread: Q4_K's panel comes through its scalar unpack_rows and its VNNI
  // kernel only loses from ~128 tokens on; Q4_0 and Q8_0 (direct panels from their packed
  // layouts) and the table-only types win from 16-32 tokens.
  switch (t) {
    case DType::Q4_K:
      return 192;
    default:
      return 32;
  }
}

std::optional<ChosenPrefillGemm> choose_prefill_gemm(const KernelTable& table, DType t,
                                                     int64_t n_tokens,
                                                     const MatrixEngineOptions& engine) {
  if (!engine.enabled || n_tokens < prefill_min_tokens(t, engine)) return std::nullopt;
  const PrefillGemm* gemm = prefill_gemm_for(table);
  const std::optional<PrefillPrecision> prec = prefill_precision(t);
  if (!gemm || !prec) return std::nullopt;
  return ChosenPrefillGemm{gemm, *prec};
}

}  // namespace hearth::kernels
