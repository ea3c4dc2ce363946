// NVML through dlopen (see nvml-probe.h). Only the handful of entry points `hearth bench` reads
// are resolved, by their versioned names; every call's status is checked, so a driver that
// lacks a counter yields "n/a" rather than a wrong number.
#include "nvml-probe.h"

#include <dlfcn.h>

namespace hearth::bench {

namespace {

constexpr int kNvmlSuccess = 0;  // NVML_SUCCESS

template <class Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

NvmlProbe& NvmlProbe::instance() {
  static NvmlProbe probe("libnvidia-ml.so.1");
  return probe;
}

NvmlProbe::NvmlProbe(const char* library) {
  const std::string lib = library ? library : "";
  lib_ = lib.empty() ? nullptr : dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    why_ = (lib.empty() ? std::string("no NVML library named") : lib) + " not found";
    return;
  }
  auto init = symbol<int (*)()>(lib_, "nvmlInit_v2");
  auto by_index = symbol<int (*)(unsigned, void**)>(lib_, "nvmlDeviceGetHandleByIndex_v2");
  auto get_name = symbol<int (*)(void*, char*, unsigned)>(lib_, "nvmlDeviceGetName");
  energy_ =
      symbol<int (*)(void*, unsigned long long*)>(lib_, "nvmlDeviceGetTotalEnergyConsumption");
  power_ = symbol<int (*)(void*, unsigned*)>(lib_, "nvmlDeviceGetPowerUsage");
  memory_ = symbol<int (*)(void*, unsigned long long*)>(lib_, "nvmlDeviceGetMemoryInfo");
  shutdown_ = symbol<int (*)()>(lib_, "nvmlShutdown");
  if (!init || !by_index || !shutdown_) {
    why_ = lib + " lacks nvmlInit_v2 / nvmlDeviceGetHandleByIndex_v2 / nvmlShutdown";
    shutdown_ = nullptr;  // never initialised: nothing to shut down
    return;
  }
  if (const int rc = init(); rc != kNvmlSuccess) {
    why_ = "nvmlInit_v2 failed (" + std::to_string(rc) + ")";
    shutdown_ = nullptr;
    return;
  }
  void* dev = nullptr;
  if (const int rc = by_index(0, &dev); rc != kNvmlSuccess || !dev) {
    why_ = "no NVML device 0 (" + std::to_string(rc) + ")";
    return;
  }
  char buf[96] = {};
  if (get_name && get_name(dev, buf, sizeof buf) == kNvmlSuccess) name_ = buf;
  if (name_.empty()) name_ = "NVML device 0";
  device_ = dev;
}

NvmlProbe::~NvmlProbe() {
  if (shutdown_) shutdown_();
  // The library stays mapped: other static destructors may still run NVML-free code after us,
  // and unloading a driver library at exit buys nothing.
}

std::optional<double> NvmlProbe::energy_j() const {
  unsigned long long mj = 0;
  if (!device_ || !energy_ || energy_(device_, &mj) != kNvmlSuccess) return std::nullopt;
  return double(mj) / 1000.0;
}

std::optional<double> NvmlProbe::power_w() const {
  unsigned mw = 0;
  if (!device_ || !power_ || power_(device_, &mw) != kNvmlSuccess) return std::nullopt;
  return double(mw) / 1000.0;
}

std::optional<unsigned long long> NvmlProbe::memory_used_bytes() const {
  unsigned long long m[3] = {};  // nvmlMemory_t {total, free, used}
  if (!device_ || !memory_ || memory_(device_, m) != kNvmlSuccess) return std::nullopt;
  return m[2];
}

}  // namespace hearth::bench
