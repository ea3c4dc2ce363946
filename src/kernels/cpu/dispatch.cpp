// Picks the kernel table once per process: the best ISA this CPU supports, optionally capped by
// HEARTH_ISA=ref|avx2|avx512|neon (tests and A/B runs). Tables themselves live in cpu/arch/.
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "kernels/cpu/kernel-table.h"

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
  for (Isa cap : {Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (std::strcmp(isa_name(cap), want) != 0) continue;
    // Tables are best first: the first one at or below the cap, in the cap's family, wins.
    for (const KernelTable* t : tables) {
      const bool family_ok = t->isa == Isa::kRef || is_x86(t->isa) == is_x86(cap);
      if (family_ok && isa_level(t->isa) <= isa_level(cap)) return *t;
    }
  }
  log_warn(std::string("HEARTH_ISA=") + want + " is not one of ref|avx2|avx512|neon; using " +
           tables.front()->name);
  return *tables.front();
}

}  // namespace

const KernelTable& active_kernel_table() {
  static const KernelTable& table = pick_table();
  return table;
}

}  // namespace hearth::kernels
