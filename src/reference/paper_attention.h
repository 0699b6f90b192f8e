// paper_attention.h: the paper's pseudocode, one torch::einsum per line, as the independent
// reference that the production layers in src/attention are tested against.
//
// It keeps the paper's layouts (heads last: Q[n,d_k,h_k], L[n,m,h]) with a batch dimension b
// in front, and none of the production code's layout choices, so that a shared mistake is
// unlikely. Bias and mask use the production interface ([b,h,n,m], broadcastable) and are
// applied to L, after the logits projection, as the interface defines.
//
// It is a layer of its own (src/reference, which uses only LibTorch): the tests use it as the
// reference, and `thx bench attention` times it beside the production layers. Nothing in it
// comes from src/attention.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>

namespace thx::paper {

// Parameters by their paper names ("P_q", "P_l", "P_Xl", "P", "Q", ...).
using Params = std::map<std::string, torch::Tensor>;

// Section 3.3, MultiHeadAttention: P_q, P_k, P_v, P_o.
torch::Tensor multi_head(const torch::Tensor& X, const torch::Tensor& M, const Params& p,
                         const torch::Tensor& bias = {}, const torch::Tensor& mask = {});

// Section 4, TalkingHeadsAttention, and Appendix A's dynamic projections for whichever of
// P_Xl, P_Ml, P_Xw, P_Mw are present. Without P_l (P_w) the logits (weights) line is skipped,
// which is the weights-only (logits-only) hybrid of Table 3.
torch::Tensor talking_heads(const torch::Tensor& X, const torch::Tensor& M, const Params& p,
                            const torch::Tensor& bias = {}, const torch::Tensor& mask = {});

// Section 6, GeneralBilinearMultiheadAttention: P [d_X,d_M,h], Q [d_M,d_Y,h].
torch::Tensor general_bilinear(const torch::Tensor& X, const torch::Tensor& M,
                               const torch::Tensor& P, const torch::Tensor& Q,
                               const torch::Tensor& bias = {}, const torch::Tensor& mask = {});

// Section 6's MultiHeadAttentionInefficient and TalkingHeadsAttentionInefficient: the GBMA
// parameters P and Q composed from the factored ones.
std::pair<torch::Tensor, torch::Tensor> compose_multi_head(const Params& p);
std::pair<torch::Tensor, torch::Tensor> compose_talking_heads(const Params& p);

}  // namespace thx::paper
