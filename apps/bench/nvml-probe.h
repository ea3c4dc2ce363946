// GPU board energy and power for `hearth bench`, read from NVML loaded with dlopen at run time:
// builds and CI need no NVML, and a machine without the driver reports "n/a". New reading: add
// its symbol to nvml-probe.cpp's table and a method here.
#pragma once

#include <optional>
#include <string>

namespace hearth::bench {

class NvmlProbe {
 public:
  // The process-wide probe of GPU 0 (NVML's index order), loaded on first use.
  static NvmlProbe& instance();
  // A probe through `library` (instance() uses libnvidia-ml.so.1; tests name others).
  explicit NvmlProbe(const char* library);
  ~NvmlProbe();

  bool available() const { return device_ != nullptr; }
  // The GPU's name, or why NVML is unavailable ("libnvidia-ml.so.1 not found", ...).
  const std::string& name() const { return name_; }
  const std::string& why_unavailable() const { return why_; }
  // One line for reports: the GPU's name, or "n/a (<why>)".
  std::string summary() const { return available() ? name_ : "n/a (" + why_ + ")"; }
  // Energy the board has used since the driver loaded, in joules (Volta and later).
  std::optional<double> energy_j() const;
  // Instantaneous board power in watts.
  std::optional<double> power_w() const;
  // Device memory in use (every process's, the driver's reservation included), in bytes.
  std::optional<unsigned long long> memory_used_bytes() const;

  NvmlProbe(const NvmlProbe&) = delete;
  NvmlProbe& operator=(const NvmlProbe&) = delete;

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;  // nvmlDevice_t
  int (*energy_)(void*, unsigned long long*) = nullptr;
  int (*power_)(void*, unsigned int*) = nullptr;
  int (*memory_)(void*, unsigned long long*) = nullptr;  // nvmlMemory_t: total, free, used
  int (*shutdown_)() = nullptr;
  std::string name_, why_;
};

}  // namespace hearth::bench
