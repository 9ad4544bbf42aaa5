#include "qkv/autograd/gradcheck.hpp"

#include <cmath>
#include <sstream>

namespace qkv {

std::string GradcheckReport::str() const {
  std::ostringstream s;
  s.precision(6);
  for (const auto& r : inputs) {
    s << "input " << r.input << (r.ok ? " ok" : " FAILED") << ": worst d out[" << r.output_index
      << "]/d in[" << r.input_index << "] analytic " << r.analytic << " numeric " << r.numeric
      << " error " << r.error << " (" << r.ratio << " of tolerance)\n";
  }
  return s.str();
}

GradcheckReport gradcheck(const std::function<Variable<double>()>& f,
                          const std::vector<Variable<double>>& inputs, const GradcheckOptions& opt) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].requires_grad())
      throw ValueError("gradcheck: input " + std::to_string(i) + " (shape " +
                       shape_str(inputs[i].shape()) + ") does not require grad");

  // Analytic Jacobian, one row per output element: backward with a one-hot upstream gradient.
  Array<double> out0 = f().value();
  autograd::Tape::current().clear();
  const std::size_t n_out = out0.size();
  std::vector<std::vector<double>> analytic(inputs.size());  // [input][out * n_in + in]
  for (std::size_t i = 0; i < inputs.size(); ++i) analytic[i].assign(n_out * inputs[i].size(), 0.0);
  for (std::size_t j = 0; j < n_out; ++j) {
    for (const auto& x : inputs) x.zero_grad();
    Variable<double> y = f();
    Array<double> seed = zeros<double>(y.shape());
    seed.data()[j] = 1.0;
    if (y.requires_grad()) y.backward(seed);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].has_grad()) continue;
      const double* g = inputs[i].grad().data();
      std::copy(g, g + inputs[i].size(), analytic[i].begin() + j * inputs[i].size());
    }
  }
  for (const auto& x : inputs) x.zero_grad();

  GradcheckReport report;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    GradcheckInputReport r;
    r.input = i;
    r.ratio = -1;
    double* v = inputs[i].data();
    const std::size_t n_in = inputs[i].size();
    for (std::size_t e = 0; e < n_in; ++e) {
      const double saved = v[e];
      v[e] = saved + opt.eps;
      Array<double> plus = f().value();
      v[e] = saved - opt.eps;
      Array<double> minus = f().value();
      v[e] = saved;
      for (std::size_t j = 0; j < n_out; ++j) {
        const double numeric = (plus.data()[j] - minus.data()[j]) / (2 * opt.eps);
        const double a = analytic[i][j * n_in + e];
        const double err = std::fabs(a - numeric);
        double ratio = err / (opt.atol + opt.rtol * std::fabs(numeric));
        if (std::isnan(a) || std::isnan(numeric)) ratio = INFINITY;
        if (ratio > r.ratio) {
          r.ratio = ratio;
          r.error = err;
          r.analytic = a;
          r.numeric = numeric;
          r.output_index = j;
          r.input_index = e;
        }
      }
    }
    r.ok = r.ratio <= 1.0;
    report.ok = report.ok && r.ok;
    report.inputs.push_back(r);
  }
  return report;
}

GradcheckReport gradcheck(const std::function<Variable<double>(const std::vector<Variable<double>>&)>& f,
                          const std::vector<Array<double>>& inputs, const GradcheckOptions& opt) {
  std::vector<Variable<double>> vars;
  for (const auto& a : inputs) vars.emplace_back(a, true);
  return gradcheck([&] { return f(vars); }, vars, opt);
}

namespace {
[[noreturn]] void refuse_float() {
  throw ValueError(
      "gradcheck: the inputs are float32, but gradient checks need float64: with eps 1e-6, "
      "float32 rounding (about 1e-7 relative) swamps the central difference. Build the inputs "
      "and the model in double (qkv::Variable<double>, qkv::nn::Linear<double>, ...).");
}
}  // namespace

GradcheckReport gradcheck(const std::function<Variable<float>()>&, const std::vector<Variable<float>>&,
                          const GradcheckOptions&) {
  refuse_float();
}
GradcheckReport gradcheck(const std::function<Variable<float>(const std::vector<Variable<float>>&)>&,
                          const std::vector<Array<float>>&, const GradcheckOptions&) {
  refuse_float();
}

}  // namespace qkv
