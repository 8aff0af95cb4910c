// The per-type table of the mixers: one row per MambaType with its config fields, conv, state and
// output shapes, weights and per-token inputs. The shared code (MixerConfig, MixerParams, plans,
// checks, the CLI's and the tests' random data) reads these rows instead of switching on the type.
#include <cmath>
#include <string>

#include "attn/checked.hpp"
#include "attn/error.hpp"
#include "attn/mamba.hpp"

namespace attn {

namespace {

using Dim = MixerTypeInfo::Dim;
using Weight = MixerTypeInfo::Weight;
using Input = MixerTypeInfo::Input;
using When = Input::When;
using C = MixerConfig;
using P = MixerParams;
using I = MixerInputs;

int one(const C&) { return 1; }
int head_k_dim(const C& c) { return c.head_k_dim; }
int heads(const C& c) { return c.num_heads; }
int64_t heads64(const C& c) { return c.num_heads; }
int64_t d_inner64(const C& c) { return c.d_inner; }
int channels_if_conv(const C& c) { return c.d_conv > 0 ? c.d_inner : 0; }
MixerShape d_inner_shape(const C& c) { return {c.d_inner}; }
MixerShape d_state_shape(const C& c) { return {c.d_state}; }
MixerShape heads_shape(const C& c) { return {c.num_heads}; }
MixerShape conv_shape(const C& c) { return {c.conv_dim()}; }
MixerShape heads_dk_shape(const C& c) { return {c.num_heads, c.head_k_dim}; }
MixerShape heads_dv_shape(const C& c) { return {c.num_heads, c.head_v_dim}; }
MixerShape channel_states(const C& c) { return {c.d_inner, c.d_state}; }
MixerShape key_value_states(const C& c) { return {c.num_heads, c.head_k_dim, c.head_v_dim}; }

// `field` = d must divide `of` = n (d > 0 is its own Dim check, made first).
void divides(int d, int n, const char* field, const char* of) {
  require(d > 0 && n % d == 0, field, d, std::string("a divisor of ") + of + "=" + std::to_string(n));
}

// Mamba-1 and `custom` (a custom mixer's state is shaped like Mamba-1's; its backend defines the rest).
const std::vector<Dim> kChannelDims = {{"d_inner", &C::d_inner, true, nullptr},
                                       {"d_state", &C::d_state, true, nullptr},
                                       {"d_conv", &C::d_conv, true, nullptr}};

std::vector<MixerTypeInfo> make_table() {
  std::vector<MixerTypeInfo> t;
  t.push_back({MambaType::mamba1, kChannelDims, nullptr, channels_if_conv, true, channel_states, d_inner_shape, false,
               "channels", nullptr,
               {{"A", &P::A, [](const C& c) { return int64_t(c.d_inner) * c.d_state; }, false, -2.0f, -0.05f},
                {"D", &P::D, d_inner64, true, -1.0f, 1.0f},
                {"dt_bias", &P::dt_bias, d_inner64, true, -3.0f, -1.0f}},  // softplus → Δ ~ 0.05..0.3
               {{"x", &I::x, d_inner_shape, false, When::always, -1, 1},
                {"dt", &I::dt, d_inner_shape, false, When::always, -1, 1},
                {"B", &I::B, d_state_shape, false, When::always, -1, 1},
                {"C", &I::C, d_state_shape, false, When::always, -1, 1},
                {"z", &I::z, d_inner_shape, true, When::always, -2, 2}}});
  t.push_back({MambaType::mamba2,
               {{"num_heads", &C::num_heads, true, nullptr},
                {"head_dim", &C::head_dim, true, nullptr},
                {"d_inner", &C::d_inner, false,
                 [](const C& c) {
                   return int(checked_product("num_heads * head_dim", {c.num_heads, c.head_dim}, 2147483647,
                                              "the default d_inner"));
                 }},
                {"d_state", &C::d_state, true, nullptr},
                {"n_groups", &C::n_groups, true, one},
                {"d_conv", &C::d_conv, true, nullptr}},
               [](const C& c) {
                 require(c.d_inner == c.num_heads * c.head_dim, "d_inner", c.d_inner,
                         "num_heads * head_dim = " + std::to_string(c.num_heads * c.head_dim));
                 divides(c.n_groups, c.num_heads, "n_groups", "num_heads");
               },
               [](const C& c) { return c.d_inner + 2 * c.n_groups * c.d_state; }, true,
               [](const C& c) { return MixerShape{c.num_heads, c.head_dim, c.d_state}; }, d_inner_shape, true, "heads",
               nullptr,
               {{"A", &P::A, heads64, false, -2.0f, -0.05f},
                {"D", &P::D, heads64, true, -1.0f, 1.0f},
                {"dt_bias", &P::dt_bias, heads64, true, -3.0f, -1.0f}},
               {{"x", &I::x, conv_shape, false, When::always, -1, 1},
                {"dt", &I::dt, heads_shape, false, When::always, -1, 1},
                {"z", &I::z, d_inner_shape, true, When::always, -2, 2}}});
  t.push_back({MambaType::short_conv,
               {{"d_inner", &C::d_inner, true, nullptr}, {"d_conv", &C::d_conv, true, nullptr}},
               nullptr, channels_if_conv, false, [](const C&) { return MixerShape{0}; }, d_inner_shape, false, "heads",
               nullptr, {},
               // BCx = B | C | x before the conv; once convolved, x = conv(B ⊙ x) and C comes apart.
               {{"BCx (x)", &I::x, [](const C& c) { return MixerShape{3 * int64_t(c.d_inner)}; }, false, When::raw, -1, 1},
                {"x", &I::x, d_inner_shape, false, When::convolved, -1, 1},
                {"C", &I::C, d_inner_shape, false, When::convolved, -1, 1}}});
  t.push_back({MambaType::linear_attention,
               {{"num_heads", &C::num_heads, true, nullptr},
                {"head_k_dim", &C::head_k_dim, true, nullptr},
                {"head_v_dim", &C::head_v_dim, true, head_k_dim}},
               nullptr, [](const C&) { return 0; }, false, key_value_states, heads_dv_shape, true, "heads", nullptr,
               {{"A", &P::A, heads64, false, -0.25f, -0.01f}},  // per-token decay ~0.78..0.99
               {{"q (x)", &I::x, heads_dk_shape, false, When::always, -0.5f, 0.5f},
                {"k", &I::k, heads_dk_shape, false, When::always, -0.5f, 0.5f},
                {"v", &I::v, heads_dv_shape, false, When::always, -1, 1}}});
  t.push_back({MambaType::gdn_attention,
               {{"num_heads", &C::num_heads, true, nullptr},
                {"num_k_heads", &C::num_k_heads, true, heads},
                {"head_k_dim", &C::head_k_dim, true, nullptr},
                {"head_v_dim", &C::head_v_dim, true, head_k_dim},
                {"d_conv", &C::d_conv, true, nullptr}},
               [](const C& c) { divides(c.num_k_heads, c.num_heads, "num_k_heads", "num_heads"); },
               [](const C& c) { return 2 * c.num_k_heads * c.head_k_dim + c.num_heads * c.head_v_dim; }, true,
               key_value_states, heads_dv_shape, true, "heads",
               [](const C& c) { return 1.0f / std::sqrt(float(c.head_k_dim)); },
               {{"A", &P::A, heads64, false, -1.5f, -0.05f}, {"dt_bias", &P::dt_bias, heads64, true, -2.0f, 0.0f}},
               {{"qkv (x)", &I::x, conv_shape, false, When::always, -1, 1},
                {"a (dt)", &I::dt, heads_shape, false, When::always, -1, 1},
                {"b", &I::b, heads_shape, false, When::always, -2, 2}}});
  t.push_back({MambaType::custom, kChannelDims, nullptr, channels_if_conv, true, channel_states, d_inner_shape, false,
               "heads", nullptr, {}, {}});
  for (std::size_t i = 0; i < t.size(); ++i)  // rows in MambaType order: mixer_type_info indexes them
    require(t[i].type == MambaType(i), "mixer table row " + std::to_string(i), to_string(t[i].type),
            std::string(to_string(MambaType(i))));
  require(t.size() == all_mamba_types().size(), "mixer table rows", t.size(), "one per MambaType");
  return t;
}

}  // namespace

const MixerTypeInfo& mixer_type_info(MambaType type) {
  static const std::vector<MixerTypeInfo> table = make_table();
  if (std::size_t(type) < table.size()) return table[std::size_t(type)];
  throw Error("mamba_type=" + std::to_string(int(type)) + " invalid: expected a type of the mixer table");
}

MixerShape::MixerShape(std::initializer_list<int64_t> extents) {
  require(extents.size() <= 3, "MixerShape rank", extents.size(), "<= 3");
  for (int64_t e : extents) dims[rank++] = e;
}

int64_t MixerShape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

std::vector<int64_t> MixerShape::after(int64_t leading) const {
  std::vector<int64_t> v{leading};
  v.insert(v.end(), dims, dims + rank);
  return v;
}

}  // namespace attn
