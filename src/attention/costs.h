// costs.h: what one attention layer costs, by the paper's section 5.
//
// multiplies() counts scalar multiplications of a forward pass. Two conventions differ only
// for the dynamic projections and general bilinear:
//   Paper: what the paper's tables print. A dynamic projection counts only its generation,
//          n·d·h_in·h_out, not the n·m·h·h_in of applying it; general bilinear is printed as
//          2·h·n·d² + 2·n·m·d.
//   Full:  every multiply the computation does, as thx's layers do it.
#pragma once
#include <torch/torch.h>

#include "attention/config.h"

namespace thx {

enum class CostConvention { Paper, Full };

// The variant's formula (its registry row's).
double multiplies(const AttentionDims& d, int64_t n, int64_t m,
                  CostConvention convention = CostConvention::Paper);

// The formulas the registry rows name. Section 5 for the projected family (multi-head and the
// talking-heads variants; the P_l / P_w terms as the row has them, dynamic projections as
// Appendix A); section 6 for the general bilinear form.
double projected_multiplies(const AttentionDims& d, int64_t n, int64_t m, CostConvention convention);
double general_bilinear_multiplies(const AttentionDims& d, int64_t n, int64_t m, CostConvention convention);

// Parameters of a module, counted from its tensors.
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace thx
