// Built without CUDA: regress_out and ComBat run on the CPU only.
#include "core/error.hpp"
#include "pp/combat.hpp"
#include "pp/regress_out.hpp"

namespace scurry {

void regress_out_design_gpu(const Context&, DenseF&, const DenseD&, double*) {
  fail_input("regress_out (gpu)", "this scurry was built without CUDA; use --device cpu");
}

void regress_out_categorical_gpu(const Context&, DenseF&, const std::vector<int32_t>&, int32_t, double*) {
  fail_input("regress_out (gpu)", "this scurry was built without CUDA; use --device cpu");
}

CombatResult combat_dense_gpu(const Context&, DenseF&, const std::vector<int32_t>&, int32_t, const DenseD&) {
  fail_input("combat (gpu)", "this scurry was built without CUDA; use --device cpu");
}

}  // namespace scurry
