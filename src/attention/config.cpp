#include "attention/config.h"

#include <atomic>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "attention/registry.h"
#include "common/error.h"

namespace thx {
namespace {

// Largest size of one attention parameter tensor we accept (4G elements): a guard against
// typos like h: 100000 that would otherwise try to allocate terabytes.
constexpr int64_t kMaxElements = int64_t{1} << 32;

}  // namespace

const char* variant_help() {
  static const std::string help = variant_choices(" | ");
  return help.c_str();
}

std::string AttentionDims::name() const {
  TORCH_CHECK(variant, "AttentionDims: not resolved (no variant)");
  return variant->name;
}
bool AttentionDims::has_P_l() const { return variant && variant->P_l; }
bool AttentionDims::has_P_w() const { return variant && variant->P_w; }

std::string AttentionDims::summary() const {
  std::string s = name();
  if (!variant->per_head) return s + fmt::format(" h={}", h);
  if (!variant->P_l && !variant->P_w) return s + fmt::format(" h={} d_k={} d_v={}", h, d_k, d_v);
  s += fmt::format(" h_k={} h={} h_v={} d_k={} d_v={}", h_k, h, h_v, d_k, d_v);
  std::vector<std::string> dyn;
  if (X_l) dyn.push_back("X_l");
  if (M_l) dyn.push_back("M_l");
  if (X_w) dyn.push_back("X_w");
  if (M_w) dyn.push_back("M_w");
  if (!dyn.empty()) s += fmt::format(" dynamic=[{}]", fmt::join(dyn, ","));
  return s;
}

namespace {

// The head counts and per-head sizes: h_k, h_v (which the variant may tie to h), d_k, d_v (by
// default d_model / heads, which must be whole).
void resolve_heads(const AttentionConfig& c, const VariantSpec& v, int64_t d_Y, const std::string& path,
                   AttentionDims& d) {
  auto key = [&](const char* k) { return path + "." + k; };
  // Head counts that the variant fixes to h may be written only as h.
  auto tied_to_h = [&](const char* k, const std::optional<int64_t>& x, const char* why) {
    if (x && *x != c.h)
      throw ConfigError(key(k), fmt::format("{} conflicts with {}.h = {}: {} ({} = h)", *x, path, c.h, why, k));
  };
  if (!v.per_head) {
    // e.g. section 6: P [d_X, d_M, h], Q [d_M, d_Y, h]; no per-head key or value sizes exist.
    for (auto [k, x] : {std::pair{"h_k", c.h_k}, std::pair{"h_v", c.h_v}, std::pair{"d_k", c.d_k},
                        std::pair{"d_v", c.d_v}})
      if (x) throw ConfigError(key(k), fmt::format("is not a setting of {}, which has only h; remove {}", v.name, k));
    d.h_k = d.h_v = c.h;
    return;
  }
  if (!v.h_k_tied.empty()) tied_to_h("h_k", c.h_k, v.h_k_tied.c_str());
  if (!v.h_v_tied.empty()) tied_to_h("h_v", c.h_v, v.h_v_tied.c_str());
  d.h_k = c.h_k.value_or(c.h);
  d.h_v = c.h_v.value_or(c.h);
  // The error names the head count (h_k or h_v where set, else h): the value that was written
  // (a --set, say), whose origin the message then gives, rather than the unset d_k.
  auto per_head = [&](const char* k, const char* hk, int64_t heads, int64_t model, const std::optional<int64_t>& x,
                      const std::optional<int64_t>& hk_set) {
    if (x) return *x;
    if (heads > model || model % heads != 0)
      throw ConfigError(key(hk_set ? hk : "h"),
                        fmt::format("{} heads leave {} unset with no whole default (d_model / {} = {} / {}); "
                                    "set {} explicitly, or a head count that divides {}",
                                    heads, key(k), hk, model, heads, key(k), model));
    return model / heads;
  };
  d.d_k = per_head("d_k", "h_k", d.h_k, d_Y, c.d_k, c.h_k);
  d.d_v = per_head("d_v", "h_v", d.h_v, d_Y, c.d_v, c.h_v);
}

// Dynamic projections (Appendix A) exist only on top of both talking-heads projections.
void resolve_dynamic(const AttentionConfig& c, const VariantSpec& v, const std::string& path, AttentionDims& d) {
  auto key = [&](const char* k) { return path + "." + k; };
  std::set<std::string> seen;
  for (size_t i = 0; i < c.dynamic.size(); ++i) {
    const std::string& p = c.dynamic[i];
    const std::string k = fmt::format("dynamic[{}]", i);
    if (!v.dynamic) {
      std::vector<std::string> able;
      for (const auto& r : variant_registry())
        if (r.dynamic) able.push_back(r.name);
      throw ConfigError(key("dynamic"), fmt::format("dynamic projections need {}.variant {}, not {}", path,
                                                    fmt::join(able, " or "), v.name));
    }
    if (!seen.insert(p).second) throw ConfigError(key(k.c_str()), fmt::format("'{}' is listed twice", p));
    if (p == "X_l") d.X_l = true;
    else if (p == "M_l") d.M_l = true;
    else if (p == "X_w") d.X_w = true;
    else if (p == "M_w") d.M_w = true;
    else
      throw ConfigError(key(k.c_str()),
                        fmt::format("'{}' is not a dynamic projection; allowed: X_l, M_l, X_w, M_w", p));
  }
}

// Shapes too large to allocate are typos, not experiments.
void check_sizes(const AttentionConfig& c, const VariantSpec& v, const std::string& path, const AttentionDims& d) {
  auto bounded = [&](const char* k, double elements) {
    if (elements > static_cast<double>(kMaxElements))
      throw ConfigError(path + "." + k, fmt::format("makes a parameter of {:.3g} elements (limit {:.3g}); "
                                                    "check the head counts and sizes", elements,
                                                    static_cast<double>(kMaxElements)));
  };
  const double dX = d.d_X, dM = d.d_M, dY = d.d_Y;
  if (!v.per_head) {
    bounded("h", dX * dM * d.h);
  } else {
    bounded(c.d_k ? "d_k" : "h_k", dX * d.d_k * d.h_k);
    bounded(c.d_v ? "d_v" : "h_v", dY * d.d_v * d.h_v);
    bounded("h", std::max(dX, dM) * d.h_k * d.h + std::max(dX, dM) * d.h * d.h_v);
  }
}

}  // namespace

namespace {
std::atomic<int64_t> g_resolves{0};
}  // namespace

int64_t resolve_count() { return g_resolves; }

AttentionDims resolve(const AttentionConfig& c, int64_t d_X, int64_t d_M, int64_t d_Y,
                      const std::string& path) {
  ++g_resolves;
  auto key = [&](const char* k) { return path + "." + k; };
  AttentionDims d;
  d.d_X = d_X, d.d_M = d_M, d.d_Y = d_Y;
  d.variant = find_variant(c.variant);
  if (!d.variant)
    throw ConfigError(key("variant"), fmt::format("'{}' is not a variant; allowed: {}", c.variant,
                                                  variant_choices(", ")));
  const VariantSpec& v = *d.variant;
  auto positive = [&](const char* k, int64_t x) {
    if (x < 1) throw ConfigError(key(k), fmt::format("{} is invalid: must be an integer >= 1", x));
  };
  positive("h", c.h);
  if (c.h_k) positive("h_k", *c.h_k);
  if (c.h_v) positive("h_v", *c.h_v);
  if (c.d_k) positive("d_k", *c.d_k);
  if (c.d_v) positive("d_v", *c.d_v);
  if (!(c.dropout >= 0.0 && c.dropout < 1.0))
    throw ConfigError(key("dropout"), fmt::format("{} is invalid: must be in [0, 1)", c.dropout));
  d.dropout = c.dropout;
  d.h = c.h;
  resolve_heads(c, v, d_Y, path, d);
  resolve_dynamic(c, v, path, d);
  check_sizes(c, v, path, d);
  return d;
}

}  // namespace thx
