#include "qkv/dist/data_parallel.hpp"

#include <algorithm>
#include <chrono>

#include "qkv/tensor/random.hpp"

namespace qkv::dist {
namespace {

// Adds the seconds `f` takes to `total`.
template <class F>
void timed(double& total, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void DataParallel::sum(double* values, std::size_t n) {
  if (size() > 1) timed(seconds_, [&] { comm_.allreduce_sum(values, n); });
}

bool DataParallel::any(bool flag) {
  if (size() == 1) return flag;
  double f = flag ? 1 : 0;
  sum(&f, 1);
  return f > 0;
}

void DataParallel::average_gradients(const std::vector<Variable<float>>& params) {
  if (size() == 1) return;
  timed(seconds_, [&] {
    constexpr std::size_t kBucket = std::size_t(1) << 22;  // floats per allreduce call
    std::size_t total = 0;
    for (auto& p : params) total += p.size();
    flat_.resize(total);
    std::size_t off = 0;
    for (auto& p : params) {
      if (p.has_grad())
        std::copy(p.grad().data(), p.grad().data() + p.size(), flat_.data() + off);
      else
        std::fill(flat_.data() + off, flat_.data() + off + p.size(), 0.0f);
      off += p.size();
    }
    for (std::size_t i = 0; i < total; i += kBucket) comm_.allreduce_sum(flat_.data() + i, std::min(kBucket, total - i));
    const float inv = 1.0f / float(size());
    off = 0;
    for (auto& p : params) {
      Array<float> g = Array<float>::from_shape(p.shape());
      for (std::size_t i = 0; i < p.size(); ++i) g.data()[i] = flat_[off + i] * inv;
      p.zero_grad();
      p.accumulate_grad(std::move(g), "allreduce");
      off += p.size();
    }
  });
}

std::uint64_t parameter_checksum(const nn::Module<float>& model) {
  std::uint64_t h = 0;
  for (auto& p : model.parameters()) {
    const auto* bits = reinterpret_cast<const std::uint32_t*>(p.data());
    for (std::size_t i = 0; i < p.size(); ++i) h = hash64(h, bits[i]);
  }
  return h;
}

DataParallel::SyncReport DataParallel::check_in_sync(const nn::Module<float>& model) {
  if (size() == 1) return {};
  std::vector<std::uint64_t> sums;
  timed(seconds_, [&] { sums = comm_.allgather(parameter_checksum(model)); });
  for (std::size_t r = 1; r < sums.size(); ++r)
    if (sums[r] != sums[0]) return {int(r), sums[r], sums[0]};
  return {};
}

}  // namespace qkv::dist
