// CUDA weight preparation (cuda-weights.h): checks, pinned double-buffered upload, repack into
// the kernels' layout, the lazy e4m3 copy. The backend (cuda-backend.cpp) only keeps the result.
#include "backend/cuda/cuda-weights.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/gemm-fp8.h"
#include "tensor/dtype.h"

namespace hearth {

namespace {

constexpr size_t kStageBytes = size_t(64) << 20;  // per pinned staging buffer (two of them)

Status cuda_status(cudaError_t e, const std::string& what) {
  return e == cudaSuccess ? Status::ok() : Status::error(what + ": " + cudaGetErrorString(e));
}

}  // namespace

uint64_t cuda_weight_device_bytes(const TensorView& h, bool fp8_prefill) {
  if (!cuda::supports_dtype(h.dtype) || h.shape.empty() || h.shape.size() > 2) return h.nbytes;
  const uint64_t packed = cuda::packed_layout(h.dtype, h.rows(), h.cols()).total_bytes;
  const uint64_t e4m3 = fp8_prefill ? cuda::weight_e4m3_bytes(h.dtype, h.rows(), h.cols()) : 0;
  return packed + e4m3;
}

Status make_e4m3_copy(PreparedWeight& pw, const std::string& name, bool fp8_prefill,
                      cudaStream_t s) {
  pw.fp8_tried = true;
  const cuda::DeviceWeight& d = pw.dw;
  const size_t bytes = cuda::weight_e4m3_bytes(d.dtype, d.rows, d.cols);
  if (bytes == 0 || !fp8_prefill) return Status::ok();
  const float* scale = nullptr;
  HEARTH_TRY(cuda_status(cudaMalloc(&pw.fp8_mem, bytes), "e4m3 copy of " + name));
  HEARTH_TRY(cuda_status(
      cuda::launch_weight_to_e4m3(d.dtype, d.body, d.rows, d.cols, pw.fp8_mem, &scale, s),
      "e4m3 copy of " + name));
  pw.dw.w8 = static_cast<const uint8_t*>(pw.fp8_mem);
  pw.dw.w8_scale = scale;
  return Status::ok();
}

WeightUploader::~WeightUploader() {
  for (int i = 0; i < 2; ++i) {
    if (stage_[i]) cudaFreeHost(stage_[i]);
    if (done_[i]) cudaEventDestroy(done_[i]);
  }
}

Status WeightUploader::init() {
  for (int i = 0; i < 2; ++i) {
    HEARTH_TRY(cuda_status(cudaMallocHost(reinterpret_cast<void**>(&stage_[i]), kStageBytes),
                           "pinned staging"));
    HEARTH_TRY(cuda_status(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "event"));
  }
  return Status::ok();
}

Result<std::shared_ptr<PreparedWeight>> WeightUploader::upload(const TensorView& h, int device,
                                                               cudaStream_t s) {
  if (!cuda::supports_dtype(h.dtype))
    return Status::error(h.name + ": dtype " + dtype_name(h.dtype) + " has no CUDA kernels");
  if (h.shape.empty() || h.shape.size() > 2 || h.numel() <= 0)
    return Status::error(h.name + ": CUDA weights must be 1-D or 2-D, got " +
                         shape_string(h.shape));
  const int64_t rows = h.rows(), cols = h.cols();
  const auto rb = row_bytes(h.dtype, uint64_t(cols));
  if (!rb)
    return Status::error(h.name + ": row of " + std::to_string(cols) +
                         " elements is not a whole number of " + dtype_name(h.dtype) + " blocks");
  const uint64_t raw_bytes = *rb * uint64_t(rows);
  if (h.nbytes < raw_bytes || !h.data)
    return Status::error(h.name + ": holds " + std::to_string(h.nbytes) + " bytes, shape needs " +
                         std::to_string(raw_bytes));

  const cuda::PackedLayout layout = cuda::packed_layout(h.dtype, rows, cols);
  // Owns the device memory from here on, whatever fails below.
  std::shared_ptr<PreparedWeight> pw(new PreparedWeight, [](PreparedWeight* p) {
    cudaFree(p->mem);
    cudaFree(p->fp8_mem);
    delete p;
  });
  pw->device = device;
  HEARTH_TRY(cuda_status(cudaMalloc(&pw->mem, layout.total_bytes), "weight " + h.name));
  uint8_t* raw = static_cast<uint8_t*>(pw->mem);
  if (layout.needs_repack)
    HEARTH_TRY(
        cuda_status(cudaMalloc(reinterpret_cast<void**>(&raw), raw_bytes), "weight " + h.name));
  std::unique_ptr<uint8_t, void (*)(uint8_t*)> raw_owner(layout.needs_repack ? raw : nullptr,
                                                         [](uint8_t* p) { cudaFree(p); });
  // Double-buffered: memcpy from the mapped file into one pinned buffer while the other's DMA
  // to the device runs.
  const auto* src = static_cast<const uint8_t*>(h.data);
  int slot = 0;
  for (uint64_t off = 0; off < raw_bytes; off += kStageBytes, slot ^= 1) {
    const size_t n = size_t(std::min<uint64_t>(kStageBytes, raw_bytes - off));
    HEARTH_TRY(cuda_status(cudaEventSynchronize(done_[slot]), "staging"));
    std::memcpy(stage_[slot], src + off, n);
    HEARTH_TRY(cuda_status(cudaMemcpyAsync(raw + off, stage_[slot], n, cudaMemcpyHostToDevice, s),
                           "upload"));
    HEARTH_TRY(cuda_status(cudaEventRecord(done_[slot], s), "staging"));
  }
  if (layout.needs_repack) {
    HEARTH_TRY(cuda_status(
        cuda::launch_repack(h.dtype, raw, static_cast<uint8_t*>(pw->mem), rows, cols, s),
        "repack " + h.name));
    // The raw copy is freed when raw_owner goes: the repack must have read it by then.
    HEARTH_TRY(cuda_status(cudaStreamSynchronize(s), "repack"));
  }
  pw->dw = cuda::make_device_weight(h.dtype, rows, cols, static_cast<uint8_t*>(pw->mem));
  return pw;
}

}  // namespace hearth
