// Start-up timing for --verbose: milliseconds since this binary's static initialisation (the
// dynamic loader has mapped every library by then), and how long exec -> that point took.
#pragma once

namespace hearth::cli {

double ms_since_start();
// exec -> static initialisation, from /proc/self/stat (10 ms resolution); -1 without /proc.
double exec_to_start_ms();

}  // namespace hearth::cli
