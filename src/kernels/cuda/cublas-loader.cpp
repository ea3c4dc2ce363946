// cublas-loader.h's forwarders. Linked normally, libcublasLt's ~400k relocations and its static
// initialisers ran before main in every process (65-75 ms warm on the H200 host; cold, a few
// hundred MB of the 540 MB library read from disk), though decode and short prompts never call
// it. Now only the first prefill GEMM (or the backend's preload thread) pays for it.
#include "kernels/cuda/cublas-loader.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>

namespace hearth::cuda {
namespace {

// cublasGemmEx has a C++ overload (cublas_api.h); the C one is the library's.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
#define HEARTH_FN(name) decltype(&::name)

// Every cuBLAS(Lt) function Hearth calls: X(library, name, pointer type).
#define HEARTH_CUBLAS_FUNCTIONS(X)                                                             \
  X(blas, cublasCreate_v2, HEARTH_FN(cublasCreate_v2))                                         \
  X(blas, cublasDestroy_v2, HEARTH_FN(cublasDestroy_v2))                                       \
  X(blas, cublasSetStream_v2, HEARTH_FN(cublasSetStream_v2))                                   \
  X(blas, cublasSgemm_v2, HEARTH_FN(cublasSgemm_v2))                                           \
  X(blas, cublasGemmEx, GemmExFn)                                                              \
  X(lt, cublasLtMatmul, HEARTH_FN(cublasLtMatmul))                                             \
  X(lt, cublasLtMatmulAlgoGetHeuristic, HEARTH_FN(cublasLtMatmulAlgoGetHeuristic))             \
  X(lt, cublasLtMatmulDescCreate, HEARTH_FN(cublasLtMatmulDescCreate))                         \
  X(lt, cublasLtMatmulDescSetAttribute, HEARTH_FN(cublasLtMatmulDescSetAttribute))             \
  X(lt, cublasLtMatmulPreferenceCreate, HEARTH_FN(cublasLtMatmulPreferenceCreate))             \
  X(lt, cublasLtMatmulPreferenceDestroy, HEARTH_FN(cublasLtMatmulPreferenceDestroy))           \
  X(lt, cublasLtMatmulPreferenceSetAttribute, HEARTH_FN(cublasLtMatmulPreferenceSetAttribute)) \
  X(lt, cublasLtMatrixLayoutCreate, HEARTH_FN(cublasLtMatrixLayoutCreate))

struct Api {
#define HEARTH_CUBLAS_POINTER(lib, name, type) type name = nullptr;
  HEARTH_CUBLAS_FUNCTIONS(HEARTH_CUBLAS_POINTER)
#undef HEARTH_CUBLAS_POINTER
  std::string error;
};

Api g_api;
std::once_flag g_once;

// The major versions built against: another major may differ in ABI.
std::string library_name(const char* stem, int major) {
  return "lib" + std::string(stem) + ".so." + std::to_string(major);
}

void open_libraries() {
  const std::string lt_name = library_name("cublasLt", CUBLAS_VER_MAJOR);
  const std::string blas_name = library_name("cublas", CUBLAS_VER_MAJOR);
  // Never closed: cuBLAS handles may live until exit. RTLD_LAZY: symbols bound at first call.
  void* lt = dlopen(lt_name.c_str(), RTLD_LAZY | RTLD_LOCAL);
  void* blas = lt ? dlopen(blas_name.c_str(), RTLD_LAZY | RTLD_LOCAL) : nullptr;
  if (!lt || !blas) {
    const char* why = dlerror();
    g_api.error = "cannot load cuBLAS (" + (lt ? blas_name : lt_name) +
                  "): " + (why ? why : "not found") + "; prefill GEMMs need it";
    return;
  }
  Api api;
#define HEARTH_CUBLAS_LOOKUP(lib, name, type)                                            \
  api.name = reinterpret_cast<type>(dlsym(lib, #name));                                  \
  if (!api.name) {                                                                       \
    g_api.error = "cuBLAS: " #name " not found in " + (lib == lt ? lt_name : blas_name); \
    return;                                                                              \
  }
  HEARTH_CUBLAS_FUNCTIONS(HEARTH_CUBLAS_LOOKUP)
#undef HEARTH_CUBLAS_LOOKUP
  g_api = api;
}

// The loaded table, or null (the forwarders then return CUBLAS_STATUS_NOT_INITIALIZED).
const Api* api() {
  return cublas_load().empty() ? &g_api : nullptr;
}

}  // namespace

const std::string& cublas_load() {
  std::call_once(g_once, open_libraries);
  return g_api.error;
}

}  // namespace hearth::cuda

// The forwarders: the same declarations as cublas_api.h / cublasLt.h (a mismatch fails to
// compile: two C functions of one name).
using hearth::cuda::api;
#define HEARTH_FORWARD(name, ...) \
  const auto* a = api();          \
  return a ? a->name(__VA_ARGS__) : CUBLAS_STATUS_NOT_INITIALIZED

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  HEARTH_FORWARD(cublasCreate_v2, handle);
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  HEARTH_FORWARD(cublasDestroy_v2, handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  HEARTH_FORWARD(cublasSetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k,
                                           const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C,
                                           int ldc) {
  HEARTH_FORWARD(cublasSgemm_v2, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
                 ldc);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  HEARTH_FORWARD(cublasGemmEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
                 beta, C, Ctype, ldc, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* A,
                                           cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
  HEARTH_FORWARD(cublasLtMatmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc,
                 algo, workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  HEARTH_FORWARD(cublasLtMatmulAlgoGetHeuristic, handle, desc, Adesc, Bdesc, Cdesc, Ddesc,
                 preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute_type,
                                                     cudaDataType_t scale_type) {
  HEARTH_FORWARD(cublasLtMatmulDescCreate, desc, compute_type, scale_type);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  HEARTH_FORWARD(cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  HEARTH_FORWARD(cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  HEARTH_FORWARD(cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  HEARTH_FORWARD(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  HEARTH_FORWARD(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}

}  // extern "C"
