// cuBLASLt's first algorithm for a described matmul within a workspace bound: the one heuristic
// query the cached plans of gemm-fp8.cu and gemm-half-lt.cpp make (C and D share a layout).
#pragma once

#include <cublasLt.h>

#include <cstdint>

namespace hearth::cuda {

inline cublasStatus_t lt_first_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t op,
                                    cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                    cublasLtMatrixLayout_t lc, uint64_t workspace_bytes,
                                    cublasLtMatmulAlgo_t* algo) {
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspace_bytes, sizeof workspace_bytes);
  cublasLtMatmulHeuristicResult_t heur = {};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found);
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
  if (st == CUBLAS_STATUS_SUCCESS) *algo = heur.algo;
  return st;
}

}  // namespace hearth::cuda
