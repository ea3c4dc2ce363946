// Architectures without SIMD kernels in Hearth: no arch tables, the reference table runs.
// Porting to a new architecture = a cpu/arch/<arch>/ folder listing its tables instead.
#include "kernels/cpu/kernel-table.h"

namespace hearth::kernels {

std::vector<ArchTable> arch_kernel_tables() {
  return {};
}

}  // namespace hearth::kernels
