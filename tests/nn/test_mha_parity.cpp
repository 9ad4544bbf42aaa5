// Parity with torch.nn.MultiheadAttention(batch_first=True): tests/fixtures/mha_torch.txt is written
// by tools/make_mha_fixture.py (torch is not needed to run this test).

#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "nn_test_util.hpp"
#include "qkv/nn/multi_head_attention.hpp"

using namespace qkv;
using namespace qkv::nn;

namespace {

// "<name> <ndim> <dims...> <values...>" per line; '#' starts a comment line.
std::map<std::string, Array<double>> load_fixture(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path << " (regenerate with tools/make_mha_fixture.py)");
  std::map<std::string, Array<double>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string name;
    std::size_t ndim = 0;
    s >> name >> ndim;
    Shape shape(ndim);
    for (auto& d : shape) s >> d;
    Array<double> a = Array<double>::from_shape(shape);
    for (auto& v : a) s >> v;
    REQUIRE_MESSAGE(!s.fail(), "bad fixture line for " << name);
    out.emplace(name, std::move(a));
  }
  return out;
}

Mask to_mask(const Array<double>& a) {
  Mask m = Mask::from_shape(a.shape());
  for (std::size_t i = 0; i < a.size(); ++i) m.data()[i] = a.data()[i] != 0.0;
  return m;
}

// Rows [i*E, (i+1)*E) of a packed (3E, ...) tensor.
Array<double> rows(const Array<double>& a, std::size_t i, std::size_t E) {
  Shape s = a.shape();
  s[0] = E;
  Array<double> out = Array<double>::from_shape(s);
  const std::size_t n = out.size();
  std::copy(a.data() + i * n, a.data() + (i + 1) * n, out.data());
  return out;
}

template <class T>
void set(Variable<T>& p, const Array<double>& value) {
  REQUIRE(p.shape() == value.shape());
  p.value() = cast<T>(value);
}

// Load PyTorch's parameters: in_proj_weight rows [0,E) -> w_q, [E,2E) -> w_k, [2E,3E) -> w_v (or
// the separate q/k/v_proj_weight when kdim/vdim != E), in_proj_bias likewise, out_proj -> w_o.
template <class T>
void load_torch(MultiHeadAttention<T>& m, const std::map<std::string, Array<double>>& f, const std::string& c) {
  const std::size_t E = m.options().embed_dim;
  Linear<T>* proj[3] = {m.w_q.get(), m.w_k.get(), m.w_v.get()};
  const char* sep[3] = {".q_proj_weight", ".k_proj_weight", ".v_proj_weight"};
  for (std::size_t i = 0; i < 3; ++i) {
    if (f.count(c + ".in_proj_weight"))
      set(proj[i]->weight, rows(f.at(c + ".in_proj_weight"), i, E));
    else
      set(proj[i]->weight, f.at(c + sep[i]));
    set(proj[i]->bias, rows(f.at(c + ".in_proj_bias"), i, E));
  }
  set(m.w_o->weight, f.at(c + ".out_proj_weight"));
  set(m.w_o->bias, f.at(c + ".out_proj_bias"));
}

template <class T>
void run_parity(AttentionImpl impl, double tol) {
  auto f = load_fixture(std::string(QKV_SOURCE_DIR) + "/tests/fixtures/mha_torch.txt");
  const std::size_t n_cases = 3;
  CHECK(f.size() > n_cases);

  SUBCASE("self attention with key_padding_mask") {
    MultiHeadAttentionOptions o;
    o.embed_dim = 8;
    o.num_heads = 2;
    o.impl = impl;
    MultiHeadAttention<T> m(o);
    load_torch(m, f, "self");
    Variable<T> x(cast<T>(f.at("self.x")));
    MultiHeadAttentionArgs<T> args;
    args.key_padding_mask = KeyPaddingMask::ignore_where(to_mask(f.at("self.key_padding_mask")));  // PyTorch's polarity
    args.need_weights = true;
    auto out = m.forward(x, x, x, args);
    CHECK(test::max_abs_diff(out.output.value(), f.at("self.out")) < tol);
    CHECK(test::max_abs_diff(out.weights.value(), f.at("self.weights_avg")) < tol);
    args.average_attn_weights = false;
    CHECK(test::max_abs_diff(m.forward(x, x, x, args).weights.value(), f.at("self.weights")) < tol);

    // PyTorch's boolean attn_mask says "true = may NOT attend"; qkv's says "true = may attend".
    MultiHeadAttentionArgs<T> margs;
    margs.attn_mask = AttentionMask<T>::ignore_where(to_mask(f.at("selfm.attn_mask")));  // PyTorch's polarity
    CHECK(test::max_abs_diff(m.forward(x, x, x, margs).output.value(), f.at("selfm.out")) < tol);
  }
  SUBCASE("cross attention with kdim, vdim != embed_dim") {
    MultiHeadAttentionOptions o;
    o.embed_dim = 6;
    o.num_heads = 3;
    o.kdim = 4;
    o.vdim = 5;
    o.impl = impl;
    MultiHeadAttention<T> m(o);
    load_torch(m, f, "cross");
    MultiHeadAttentionArgs<T> args;
    args.key_padding_mask = KeyPaddingMask::ignore_where(to_mask(f.at("cross.key_padding_mask")));
    args.need_weights = true;
    auto out = m.forward(Variable<T>(cast<T>(f.at("cross.q"))), Variable<T>(cast<T>(f.at("cross.k"))),
                         Variable<T>(cast<T>(f.at("cross.v"))), args);
    CHECK(test::max_abs_diff(out.output.value(), f.at("cross.out")) < tol);
    CHECK(test::max_abs_diff(out.weights.value(), f.at("cross.weights_avg")) < tol);
  }
}

}  // namespace

TEST_CASE("MultiHeadAttention: PyTorch parity, float64, fused") { run_parity<double>(AttentionImpl::Fused, 1e-10); }
TEST_CASE("MultiHeadAttention: PyTorch parity, float64, composite") { run_parity<double>(AttentionImpl::Composite, 1e-10); }
TEST_CASE("MultiHeadAttention: PyTorch parity, float32, fused") { run_parity<float>(AttentionImpl::Fused, 1e-5); }
TEST_CASE("MultiHeadAttention: PyTorch parity, float32, composite") { run_parity<float>(AttentionImpl::Composite, 1e-5); }
