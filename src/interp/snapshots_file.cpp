// snapshots.h5 (docs/snapshots.md): interp::Snapshots as an io::ArrayFile.
#include <cmath>

#include "qkv/data/text.hpp"
#include "qkv/interp/snapshots.hpp"
#include "qkv/io/array_file.hpp"

namespace qkv::interp {
namespace {

using io::IoError;
constexpr const char* kFormat = "qkv-snapshots";
constexpr std::int64_t kVersion = 1;

template <class T>
Shape shape_of(const Array<T>& a) {
  return Shape(a.shape().begin(), a.shape().end());
}

// Throws ShapeError unless `s` is a file load_snapshots would accept.
void check_consistent(const Snapshots& s) {
  auto fail = [](const std::string& what) { throw ShapeError("save_snapshots: " + what); };
  const std::size_t S = s.steps.size();
  if (s.inputs.dimension() != 2 || s.inputs.shape()[0] == 0) fail("inputs must be (N, T), N >= 1, found " + shape_str(s.inputs.shape()));
  const std::size_t N = s.inputs.shape()[0];
  if (s.input_labels.size() != s.inputs.size())
    fail(std::to_string(s.input_labels.size()) + " input labels for inputs " + shape_str(s.inputs.shape()));
  const bool s2s = s.decoder_inputs.dimension() == 2;
  if (s2s && (s.decoder_inputs.shape()[0] != N || s.decoder_labels.size() != s.decoder_inputs.size()))
    fail("decoder_inputs " + shape_str(s.decoder_inputs.shape()) + " with " + std::to_string(s.decoder_labels.size()) +
         " labels do not fit inputs " + shape_str(s.inputs.shape()));
  if (!s2s && !s.decoder_labels.empty()) fail("decoder labels without decoder_inputs");
  for (std::size_t i = 1; i < S; ++i)
    if (s.steps[i] <= s.steps[i - 1]) fail("steps must increase, found " + std::to_string(s.steps[i - 1]) + " then " + std::to_string(s.steps[i]));
  for (auto& l : s.layers) {
    const auto &w = l.weights.shape(), &c = l.scores.shape();
    if (l.weights.dimension() != 5 || w[0] != S || w[1] != N)
      fail(l.name + ": weights must be (S, N, H, Tq, Tk) with S = " + std::to_string(S) + ", N = " + std::to_string(N) +
           ", found " + shape_str(w));
    if (l.scores.dimension() != 3 || c[0] != S || c[1] != w[2] || c[2] != s.score_names.size())
      fail(l.name + ": scores must be (S, H, K) = " + shape_str(Shape{S, w[2], s.score_names.size()}) + ", found " + shape_str(c));
  }
}

IndexArray to_ids(const Array<std::int64_t>& a) {
  IndexArray ids = IndexArray::from_shape(a.shape());
  std::copy(a.begin(), a.end(), ids.begin());
  return ids;
}

Array<std::int64_t> from_ids(const IndexArray& a) {
  Array<std::int64_t> out = Array<std::int64_t>::from_shape(a.shape());
  std::copy(a.begin(), a.end(), out.begin());
  return out;
}

void expect_shape(const Shape& found, const Shape& want, const std::string& path, const std::string& what) {
  if (found != want) throw IoError("/" + path + ": expected " + what + " = " + shape_str(want) + ", found " + shape_str(found));
}

// Labels are shown on pages: they must be text (valid UTF-8).
std::vector<std::string> labels(const io::ArrayFile& f, const std::string& path, const Shape& shape, const std::string& what) {
  const io::StringArray& s = f.get<io::StringArray>(path, what);
  expect_shape(s.shape, shape, path, what);
  for (std::size_t i = 0; i < s.values.size(); ++i) {
    try {
      data::decode_utf8(s.values[i], "/" + path + "[" + std::to_string(i) + "]");
    } catch (const ValueError& e) {
      throw IoError(e.what());
    }
  }
  return s.values;
}

model::AttentionKind read_kind(const io::ArrayFile& f, const std::string& group) {
  const std::string kind = f.string_attribute(group, "kind");
  for (auto k : {model::AttentionKind::Self, model::AttentionKind::Causal, model::AttentionKind::Cross})
    if (kind == model::attention_kind_name(k)) return k;
  throw IoError("attribute 'kind' of /" + group + ": expected \"self\", \"causal\" or \"cross\", found \"" + kind + "\"");
}

Snapshots read(const io::ArrayFile& f) {
  Snapshots s;
  const auto& steps = f.get<Array<std::int64_t>>("steps", "(S) int64 steps");
  if (steps.dimension() != 1) throw IoError("/steps: expected (S) int64 steps, found " + io::describe(*f.find("steps")));
  s.steps.assign(steps.begin(), steps.end());
  for (std::size_t i = 0; i < s.steps.size(); ++i)
    if (s.steps[i] < 0 || (i && s.steps[i] <= s.steps[i - 1]))
      throw IoError("/steps: expected increasing steps >= 0, found " + std::to_string(s.steps[i]) + " at index " + std::to_string(i));
  const std::size_t S = s.steps.size();

  const auto& inputs = f.get<Array<std::int64_t>>("examples/inputs", "(N, T) int64");
  if (inputs.dimension() != 2 || inputs.shape()[0] == 0)
    throw IoError("/examples/inputs: expected (N, T) int64 with N >= 1, found " + io::describe(*f.find("examples/inputs")));
  s.inputs = to_ids(inputs);
  const std::size_t N = s.inputs.shape()[0], T = s.inputs.shape()[1];
  s.input_labels = labels(f, "examples/input_labels", Shape{N, T}, "(N, T) token labels");
  std::size_t Tt = 0;
  s.decoder_inputs = IndexArray::from_shape({0});
  if (f.find("examples/decoder_inputs")) {
    const auto& d = f.get<Array<std::int64_t>>("examples/decoder_inputs", "(N, Tt) int64");
    if (d.dimension() != 2 || d.shape()[0] != N)
      throw IoError("/examples/decoder_inputs: expected (N, Tt) int64 with N = " + std::to_string(N) + ", found " +
                    io::describe(*f.find("examples/decoder_inputs")));
    s.decoder_inputs = to_ids(d);
    Tt = d.shape()[1];
    s.decoder_labels = labels(f, "examples/decoder_labels", Shape{N, Tt}, "(N, Tt) token labels");
  }
  const io::StringArray& names = f.get<io::StringArray>("score_names", "(K) score names");
  if (names.shape.size() != 1) throw IoError("/score_names: expected (K) score names, found strings " + shape_str(names.shape));
  s.score_names = names.values;
  const std::size_t K = s.score_names.size();

  const std::vector<std::string> groups = f.children("layers");
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::string g = "layers/" + std::to_string(i);
    if (groups[i] != std::to_string(i))
      throw IoError("/layers holds '" + groups[i] + "' where group " + std::to_string(i) + " belongs (expected groups 0 to " +
                    std::to_string(groups.size() - 1) + ")");
    SnapshotLayer l;
    l.name = f.string_attribute(g, "name");
    l.kind = read_kind(f, g);
    const std::string wp = g + "/weights", sp = g + "/scores";
    l.weights = f.get<Array<float>>(wp, "(S, N, H, Tq, Tk) float32");
    const auto& w = l.weights.shape();
    const auto fits = [&](std::size_t t) { return t == T || (Tt && t == Tt); };
    if (l.weights.dimension() != 5 || w[0] != S || w[1] != N || w[2] == 0 || !fits(w[3]) || !fits(w[4]))
      throw IoError("/" + wp + ": expected (S, N, H, Tq, Tk) float32 with S = " + std::to_string(S) + " (/steps), N = " +
                    std::to_string(N) + ", H >= 1 and Tq, Tk the input length " + std::to_string(T) +
                    (Tt ? " or the decoder length " + std::to_string(Tt) : std::string()) + ", found " +
                    shape_str(shape_of(l.weights)));
    // Attention weights are probabilities: a NaN or a value outside [0, 1] is a damaged or edited file.
    for (std::size_t k = 0; k < l.weights.size(); ++k)
      if (!(l.weights.data()[k] >= 0.0f && l.weights.data()[k] <= 1.0f))
        throw IoError("/" + wp + ": element " + std::to_string(k) + " is " + std::to_string(l.weights.data()[k]) +
                      ": expected attention weights in [0, 1]");
    l.scores = f.get<Array<double>>(sp, "(S, H, K) float64");
    expect_shape(shape_of(l.scores), Shape{S, w[2], K}, sp, "(S, H, K) float64");
    for (std::size_t k = 0; k < l.scores.size(); ++k)  // NaN: a score that does not apply
      if (std::isinf(l.scores.data()[k])) throw IoError("/" + sp + ": element " + std::to_string(k) + " is infinite");
    s.layers.push_back(std::move(l));
  }
  return s;
}

}  // namespace

void save_snapshots(const std::string& path, const Snapshots& s) {
  check_consistent(s);
  io::ArrayFile f;
  f.format = kFormat;
  f.version = kVersion;
  Array<std::int64_t> steps = Array<std::int64_t>::from_shape({s.steps.size()});
  std::copy(s.steps.begin(), s.steps.end(), steps.begin());
  f.datasets.emplace_back("steps", std::move(steps));
  f.datasets.emplace_back("examples/inputs", from_ids(s.inputs));
  f.datasets.emplace_back("examples/input_labels", io::StringArray{shape_of(s.inputs), s.input_labels});
  if (s.decoder_inputs.dimension() == 2) {
    f.datasets.emplace_back("examples/decoder_inputs", from_ids(s.decoder_inputs));
    f.datasets.emplace_back("examples/decoder_labels", io::StringArray{shape_of(s.decoder_inputs), s.decoder_labels});
  }
  f.datasets.emplace_back("score_names", io::StringArray{Shape{s.score_names.size()}, s.score_names});
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const SnapshotLayer& l = s.layers[i];
    const std::string g = "layers/" + std::to_string(i);
    f.datasets.emplace_back(g + "/weights", l.weights);
    f.datasets.emplace_back(g + "/scores", l.scores);
    f.attributes.push_back({g, "name", l.name});
    f.attributes.push_back({g, "kind", std::string(model::attention_kind_name(l.kind))});
  }
  try {
    io::save_array_file(path, f);
  } catch (const IoError& e) {
    throw IoError(std::string("save_snapshots: ") + e.what());
  }
}

Snapshots load_snapshots(const std::string& path) {
  try {
    return read(io::load_array_file(path, kFormat, kVersion));
  } catch (const IoError& e) {
    const std::string what = e.what();
    // load_array_file names the path itself; the checks of read() do not.
    throw IoError("load_snapshots: " + (what.compare(0, path.size() + 2, path + ": ") == 0 ? what : path + ": " + what));
  }
}

}  // namespace qkv::interp
