#pragma once
/// @file
/// A compiled who/what model (programs/who_what_zh.rasp) graded against a grammar's gold roles:
/// at every word with a gold verb->subject partner, is the word position its "who" head wrote the
/// partner's; likewise "what" against verb->object and, when the program keeps one, "result"
/// against verb->result. The heads' answers are read where they write them, in the final residual
/// stream's `who`, `what` and `result` subspaces (model::CompiledInfo::residual, "who:3": word 3),
/// so removing a head (`removed`, zeroed as qkv ablate --mode zero) shows which answers depend on
/// it.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qkv/data/grammar.hpp"
#include "qkv/interp/ablation.hpp"
#include "qkv/model/compiled.hpp"
#include "qkv/model/load.hpp"

namespace qkv::interp {

/// Right answers out of the words scored, for "who" (verb->subject), "what" (verb->object) and
/// "result" (verb->result; 0 scored when the program has no `result` S-op).
struct RoleCounts {
  std::size_t who_right = 0, who = 0, what_right = 0, what = 0, result_right = 0, result = 0;
};

struct RoleScores {
  std::vector<std::pair<std::string, RoleCounts>> constructions;  ///< by construction name
  RoleCounts all;
  std::size_t sentences = 0;  ///< scored
  std::size_t too_long = 0;   ///< drawn but longer than the program's max_len words, not scored
};

/// Score `model` (compiled, `info` its program; S-ops `who` and `what` holding word positions) on
/// `sentences` sentences drawn from `grammar` with `seed`, its words as the program's tokens,
/// with the heads `removed` zeroed. ValueError when the program has no `who` or `what` S-op, the
/// grammar no verb->subject or verb->object relation, a word of the grammar is not one of the
/// program's tokens, or too few sentences fit in max_len words (after 100 x `sentences` tries).
RoleScores score_roles(model::LoadedModel& model, const model::CompiledInfo& info, const data::Grammar& grammar,
                       std::size_t sentences, std::uint64_t seed, const std::vector<HeadRef>& removed = {});

/// A Markdown table: one row per construction and the total, who, what (and result) right /
/// scored (%).
std::string format_role_scores(const RoleScores& scores);

}  // namespace qkv::interp
