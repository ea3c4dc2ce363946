// console_progress: the bar redraws in place (\r) and ends with a newline on the last tensor;
// line mode prints "[i/n] name type shape" so logs show what each tensor became.
#include "runtime/convert/convert-progress.h"

#include <unistd.h>

namespace hearth {

ConvertProgressFn console_progress(std::FILE* out, bool quiet) {
  if (quiet) return nullptr;
  const bool tty = isatty(fileno(out)) != 0;
  return [out, tty](const ConvertProgress& p) {
    const double frac = p.bytes_total ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
    if (tty) {
      constexpr int kWidth = 30;
      const int filled = int(frac * kWidth + 0.5);
      std::fprintf(out, "\r\033[K[%-*s] %3d%% %lld/%lld %s -> %s", kWidth,
                   std::string(size_t(filled), '#').c_str(), int(frac * 100 + 0.5),
                   (long long)p.index + 1, (long long)p.count, p.name.c_str(), p.type.c_str());
      if (p.index + 1 == p.count) std::fputc('\n', out);
    } else {
      std::fprintf(out, "[%lld/%lld] %-28s %-8s %s\n", (long long)p.index + 1, (long long)p.count,
                   p.name.c_str(), p.type.c_str(), p.shape.c_str());
    }
    std::fflush(out);
  };
}

}  // namespace hearth
