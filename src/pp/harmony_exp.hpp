// scurry: the exp of Harmony's soft assignments (harmony.cpp), exposed for its accuracy test.
#pragma once

namespace scurry::detail {
// exp(x) for x <= 0: relative error < 2e-14 against libm for x >= -700; exactly 0 below -700. The
// R update runs the same code 4 doubles a step (the same bits).
double harmony_exp_neg(double x);
}  // namespace scurry::detail
