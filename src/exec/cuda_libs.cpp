// scurry: CUDA's math libraries (cuBLAS, cuSOLVER, cuFFT, NCCL) loaded on first use.
//
// Why: linked as DT_NEEDED, they load with every process, GPU or not, and cuBLASLt's constructors
// alone fault in ~22,000 pages: `scurry --version` took 0.12-0.19 s on a 2-vCPU VM, 80% of its
// 30,000 page faults in those libraries (perf record -e page-faults), a CPU `scurry run` at 20k
// cells ~3 s. Only the CUDA runtime (cudart, light) stays linked.
//
// How: each entry point scurry calls (the 30 below, listed by `nm -u` over every scurry library)
// is defined here with the header's own prototype (a mismatch is a compile error: a second C
// declaration of the same name), and forwards to the library's symbol, resolved once by dlopen
// of the library's SONAME (read from the toolkit's library at configure time: CMakeLists.txt
// passes SCURRY_SONAME_*) and dlsym; the usual search applies (LD_LIBRARY_PATH, RUNPATH,
// ld.so.cache). A library that cannot be loaded is a scurry::Error naming it and dlerror's reason,
// thrown at the first call (a GPU step; the CPU path never gets here).
#include "exec/cuda_libs.hpp"

#include <cublas_v2.h>
#include <cufft.h>
#include <cusolverDn.h>
#include <dlfcn.h>
#ifdef SCURRY_HAVE_NCCL
#include <nccl.h>
#endif

#include <atomic>
#include <mutex>
#include <string>

#include "core/error.hpp"

namespace scurry {
namespace {

struct Lib {
  explicit Lib(const char* so) : soname(so) {}
  const char* soname;
  std::once_flag once;
  void* handle = nullptr;
  std::string error;
  std::atomic<bool> loaded{false};
};

Lib g_cublas(SCURRY_SONAME_CUBLAS), g_cusolver(SCURRY_SONAME_CUSOLVER), g_cufft(SCURRY_SONAME_CUFFT);
#ifdef SCURRY_HAVE_NCCL
Lib g_nccl(SCURRY_SONAME_NCCL);
#endif

void* open_lib(Lib& lib) {
  std::call_once(lib.once, [&] {
    lib.handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle) {
      const char* e = dlerror();
      lib.error = e ? e : "unknown reason";
    } else {
      lib.loaded = true;
    }
  });
  if (!lib.handle) fail("cannot load CUDA's ", lib.soname, " (", lib.error, "): install the CUDA toolkit's libraries or set LD_LIBRARY_PATH");
  return lib.handle;
}

void* symbol(Lib& lib, const char* name) {
  void* h = open_lib(lib);
  dlerror();
  void* s = dlsym(h, name);
  if (!s) fail("CUDA's ", lib.soname, " has no symbol ", name, ": a newer library than scurry was built against?");
  return s;
}

}  // namespace

bool cuda_math_library_loaded(const std::string& which) {
  if (which == "cublas") return g_cublas.loaded;
  if (which == "cusolver") return g_cusolver.loaded;
  if (which == "cufft") return g_cufft.loaded;
#ifdef SCURRY_HAVE_NCCL
  if (which == "nccl") return g_nccl.loaded;
#endif
  return false;
}

}  // namespace scurry

// The forwarders: static (once, thread-safe) resolution, then a plain indirect call. (The pointer
// type is spelled from the parameters: cuBLAS overloads some names in C++.)
#define SCURRY_FORWARD(lib, ret, name, params, args)                                         \
  extern "C" ret name params {                                                               \
    using Fn = ret(*) params;                                                                \
    static const Fn fn = reinterpret_cast<Fn>(scurry::symbol(scurry::lib, #name));           \
    return fn args;                                                                          \
  }

// cuBLAS
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t streamId),
               (handle, streamId))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasGetProperty, (libraryPropertyType type, int* value), (type, value))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasSgemm_v2,
               (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta, float* C,
                int ldc),
               (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasDgemm_v2,
               (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                const double* alpha, const double* A, int lda, const double* B, int ldb, const double* beta,
                double* C, int ldc),
               (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasGemmEx,
               (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype,
                int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                cublasGemmAlgo_t algo),
               (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                computeType, algo))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasGemmStridedBatchedEx,
               (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA, const void* B,
                cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                int ldc, long long int strideC, int batchCount, cublasComputeType_t computeType,
                cublasGemmAlgo_t algo),
               (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                Ctype, ldc, strideC, batchCount, computeType, algo))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasSgemv_v2,
               (cublasHandle_t handle, cublasOperation_t trans, int m, int n, const float* alpha, const float* A,
                int lda, const float* x, int incx, const float* beta, float* y, int incy),
               (handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy))
SCURRY_FORWARD(g_cublas, cublasStatus_t, cublasSsyrk_v2,
               (cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t trans, int n, int k,
                const float* alpha, const float* A, int lda, const float* beta, float* C, int ldc),
               (handle, uplo, trans, n, k, alpha, A, lda, beta, C, ldc))

// cuSOLVER
SCURRY_FORWARD(g_cusolver, cusolverStatus_t, cusolverGetProperty, (libraryPropertyType type, int* value),
               (type, value))
SCURRY_FORWARD(g_cusolver, cusolverStatus_t, cusolverDnCreate, (cusolverDnHandle_t * handle), (handle))
SCURRY_FORWARD(g_cusolver, cusolverStatus_t, cusolverDnDestroy, (cusolverDnHandle_t handle), (handle))
SCURRY_FORWARD(g_cusolver, cusolverStatus_t, cusolverDnSetStream, (cusolverDnHandle_t handle, cudaStream_t streamId),
               (handle, streamId))
SCURRY_FORWARD(g_cusolver, cusolverStatus_t, cusolverDnDsyevd_bufferSize,
               (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, const double* A,
                int lda, const double* W, int* lwork),
               (handle, jobz, uplo, n, A, lda, W, lwork))
SCURRY_FORWARD(g_cusolver, cusolverStatus_t, cusolverDnDsyevd,
               (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, double* A, int lda,
                double* W, double* work, int lwork, int* info),
               (handle, jobz, uplo, n, A, lda, W, work, lwork, info))
SCURRY_FORWARD(g_cusolver, cusolverStatus_t, cusolverDnDsyevdx_bufferSize,
               (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cusolverEigRange_t range, cublasFillMode_t uplo,
                int n, const double* A, int lda, double vl, double vu, int il, int iu, int* meig, const double* W,
                int* lwork),
               (handle, jobz, range, uplo, n, A, lda, vl, vu, il, iu, meig, W, lwork))
SCURRY_FORWARD(g_cusolver, cusolverStatus_t, cusolverDnDsyevdx,
               (cusolverDnHandle_t handle, cusolverEigMode_t jobz, cusolverEigRange_t range, cublasFillMode_t uplo,
                int n, double* A, int lda, double vl, double vu, int il, int iu, int* meig, double* W, double* work,
                int lwork, int* info),
               (handle, jobz, range, uplo, n, A, lda, vl, vu, il, iu, meig, W, work, lwork, info))

// cuFFT
SCURRY_FORWARD(g_cufft, cufftResult, cufftGetVersion, (int* version), (version))
SCURRY_FORWARD(g_cufft, cufftResult, cufftPlan2d, (cufftHandle * plan, int nx, int ny, cufftType type),
               (plan, nx, ny, type))
SCURRY_FORWARD(g_cufft, cufftResult, cufftPlanMany,
               (cufftHandle * plan, int rank, int* n, int* inembed, int istride, int idist, int* onembed, int ostride,
                int odist, cufftType type, int batch),
               (plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch))
SCURRY_FORWARD(g_cufft, cufftResult, cufftSetStream, (cufftHandle plan, cudaStream_t stream), (plan, stream))
SCURRY_FORWARD(g_cufft, cufftResult, cufftExecR2C, (cufftHandle plan, cufftReal* idata, cufftComplex* odata),
               (plan, idata, odata))
SCURRY_FORWARD(g_cufft, cufftResult, cufftExecC2R, (cufftHandle plan, cufftComplex* idata, cufftReal* odata),
               (plan, idata, odata))
SCURRY_FORWARD(g_cufft, cufftResult, cufftExecD2Z,
               (cufftHandle plan, cufftDoubleReal* idata, cufftDoubleComplex* odata), (plan, idata, odata))
SCURRY_FORWARD(g_cufft, cufftResult, cufftDestroy, (cufftHandle plan), (plan))

// NCCL
#ifdef SCURRY_HAVE_NCCL
SCURRY_FORWARD(g_nccl, ncclResult_t, ncclGetVersion, (int* version), (version))
SCURRY_FORWARD(g_nccl, ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId), (uniqueId))
SCURRY_FORWARD(g_nccl, ncclResult_t, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),
               (comm, nranks, commId, rank))
SCURRY_FORWARD(g_nccl, ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist),
               (comm, ndev, devlist))
SCURRY_FORWARD(g_nccl, ncclResult_t, ncclAllReduce,
               (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                ncclComm_t comm, cudaStream_t stream),
               (sendbuff, recvbuff, count, datatype, op, comm, stream))
SCURRY_FORWARD(g_nccl, ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))
SCURRY_FORWARD(g_nccl, ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm))
SCURRY_FORWARD(g_nccl, const char*, ncclGetErrorString, (ncclResult_t result), (result))
#endif

namespace scurry {

std::string cuda_math_library_versions() {
  int v = 0;
  std::string out;
  auto add = [&](const char* name, int version) {
    if (!out.empty()) out += ", ";
    out += name;
    out += " ";
    out += std::to_string(version);
  };
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    fail("cublasGetProperty failed");
  add("cuBLAS", major * 10000 + minor * 100 + patch);
  if (cusolverGetProperty(MAJOR_VERSION, &major) != CUSOLVER_STATUS_SUCCESS ||
      cusolverGetProperty(MINOR_VERSION, &minor) != CUSOLVER_STATUS_SUCCESS ||
      cusolverGetProperty(PATCH_LEVEL, &patch) != CUSOLVER_STATUS_SUCCESS)
    fail("cusolverGetProperty failed");
  add("cuSOLVER", major * 10000 + minor * 100 + patch);
  if (cufftGetVersion(&v) != CUFFT_SUCCESS) fail("cufftGetVersion failed");
  add("cuFFT", v);
#ifdef SCURRY_HAVE_NCCL
  if (ncclGetVersion(&v) != ncclSuccess) fail("ncclGetVersion failed");
  add("NCCL", v);
#endif
  return out;
}

}  // namespace scurry
