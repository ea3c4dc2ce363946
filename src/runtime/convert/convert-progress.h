// Progress display for convert/quantize: one redrawn bar on a terminal, one line per tensor
// when the output is a pipe or a log, nothing when quiet. Another style = another branch here.
#pragma once

#include <cstdio>

#include "runtime/convert/convert.h"

namespace hearth {

ConvertProgressFn console_progress(std::FILE* out, bool quiet);

}  // namespace hearth
