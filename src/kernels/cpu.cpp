#include "qkv/kernels/cpu.hpp"

#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace qkv::kernels {

std::string cpu_kind() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return "unknown";
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
  if (!__get_cpuid(1, &a, &b, &c, &d)) return vendor;
  // The display family and model, as the SDM and APM define them (and /proc/cpuinfo prints).
  const unsigned base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
  const unsigned family = base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family;
  const unsigned model = base_family == 0x6 || base_family == 0xf ? base_model + (((a >> 16) & 0xf) << 4) : base_model;
  char out[64];
  std::snprintf(out, sizeof out, "%s family %u model %u", vendor, family, model);
  return out;
#else
  return "unknown";
#endif
}

std::string cpu_brand() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000004) return "";
  char brand[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
    std::memcpy(brand + 16 * i, &a, 4), std::memcpy(brand + 16 * i + 4, &b, 4);
    std::memcpy(brand + 16 * i + 8, &c, 4), std::memcpy(brand + 16 * i + 12, &d, 4);
  }
  std::string s(brand);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  return s;
#else
  return "";
#endif
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__)
    __builtin_cpu_init();
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512cd");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) f.amx_bf16 = ((d >> 22) & 1) && ((d >> 24) & 1);  // AMX-BF16, AMX-TILE
#endif
    return f;
  }();
  return features;
}

std::string cpu_features_text() {
  const CpuFeatures& f = cpu_features();
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(f.avx2_fma && !f.avx512, "AVX2+FMA");
  add(f.avx512, "AVX-512");
  add(f.avx512_bf16, "AVX512-BF16");
  add(f.amx_bf16, "AMX-BF16");
  return out.empty() ? "none" : out;
}

}  // namespace qkv::kernels
