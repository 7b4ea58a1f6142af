// scurry: the UMAP connectivities (connectivities.hpp's fuzzy_simplicial_set) on the GPU.
//
// One thread per row finds rho and sigma (the same float64 binary search as the CPU path, shared
// through connectivities_row.hpp) and writes the row's memberships twice into a COO of 2 n k
// entries: as (i, j) and as its transpose (j, i). One radix sort of the 64-bit keys row * n + col
// brings each pair (A_ij, A_ji) together; the fuzzy union combines them, zeros are dropped and the
// CSR is built on the device, then copied to the host.
//
// Agreement with the CPU path: same structure (row pointers and column indices); values equal to
// the CPU's within float32 rounding of the memberships' exp (the device evaluates it in float64
// and rounds, glibc's expf is within 0.502 ulp), and sigma within the rare last-bit differences of
// CUDA's and glibc's float64 exp. The result does not depend on the launch configuration.
//
// Device memory: ~58 B per kNN entry at the peak (2 n k keys and values double-buffered for the
// sort, flags, the result's column indices), e.g. 1.1 GB at 1.3M cells x 15, 10 GB at 11.4M x 15.
#pragma once
#include "core/matrix.hpp"
#include "exec/context.hpp"
#include "graph/connectivities.hpp"
#include "graph/knn.hpp"

namespace scurry {

// obsp['connectivities'] from a host kNN result on ctx's GPU (InputError without a CUDA context or
// for the bad inputs the CPU path rejects).
CsrF fuzzy_simplicial_set_gpu(const Context& ctx, const Knn& knn, const ConnectivitiesOptions& opt = {});

}  // namespace scurry
