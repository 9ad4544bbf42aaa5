#pragma once
/// @file
/// What CPU this is: its identity (vendor, family, model, from CPUID) and the instruction-set
/// features qkv's kernels choose by. Two machines of one identity run the same code paths and give
/// the same bits; another kind may round differently (docs/reliability.md, "Determinism").

#include <string>

namespace qkv::kernels {

/// "GenuineIntel family 6 model 143" / "AuthenticAMD family 26 model 2": the CPUID vendor and the
/// display family and model (base plus extended fields, as /proc/cpuinfo shows them); "unknown"
/// off x86-64.
std::string cpu_kind();
/// The processor's brand string ("Intel(R) Xeon(R) Processor"), "" when the CPU has none.
std::string cpu_brand();

/// Instruction sets qkv's kernels branch on (x86-64; false elsewhere).
struct CpuFeatures {
  bool avx2_fma = false;     ///< AVX2 and FMA
  bool avx512 = false;       ///< AVX-512 F, BW, VL, DQ, CD
  bool avx512_bf16 = false;  ///< AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16)
  bool amx_bf16 = false;     ///< AMX tiles with bf16 (TMUL); usable only where the OS enables them
};
/// This CPU's features (read once).
const CpuFeatures& cpu_features();
/// "AVX-512, AVX512-BF16, AMX-BF16" (what is present, comma-separated; "none" otherwise).
std::string cpu_features_text();

}  // namespace qkv::kernels
