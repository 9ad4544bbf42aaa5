#pragma once
/// @file
/// Removing attention heads at test time, through hooks on the per-head outputs (hook_z, before
/// the heads are merged and projected by w_o); nothing changes in a model without them.
///
///   zero ablation  z_h <- 0
///   mean ablation  z_h <- mean of z_h over a reference batch (every example and query position:
///                  one vector of D per head; also right for one-token decoding steps)
///
/// Both are  z_h <- m_h + xi_h (z_h - m_h)  with xi_h = 0 (removed) or 1 (kept), m_h = 0 or the
/// mean; with xi a parameter, d loss / d xi_h is the head importance of Michel et al. (2019),
/// "Are Sixteen Heads Really Better than One?", eq. 5: I_h = E_x |d L(x) / d xi_h|.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/data/tasks.hpp"
#include "qkv/nn/activation_cache.hpp"
#include "qkv/tensor/names.hpp"
#include "qkv/model/answer.hpp"
#include "qkv/model/evaluate.hpp"
#include "qkv/model/load.hpp"
#include "qkv/model/task_model.hpp"

namespace qkv::interp {

/// One head: attention layer `layer` (index in model order, as model::attention_layers) and head.
struct HeadRef {
  std::size_t layer = 0, head = 0;
  bool operator==(const HeadRef& o) const { return layer == o.layer && head == o.head; }
};
/// "L.H", as the command line writes heads.
std::string head_name(const HeadRef& h);
/// Heads of each attention layer of `model`, in model order.
std::vector<std::size_t> heads_per_layer(model::TaskModel& model);
/// Parse "0.1,1.3" (layer.head, comma-separated; "1.*" = every head of layer 1) against the
/// model's layers: ValueError naming the item and the valid range for an unknown layer or head,
/// a malformed item, a repeated head or an empty list.
std::vector<HeadRef> parse_heads(const std::string& list, const std::vector<std::size_t>& heads_per_layer);

enum class AblationMode { Zero, Mean };
/// "zero", "mean".
const NameTable<AblationMode>& ablation_mode_names();

/// Per attention layer: (H, D), the mean of each head's output hook_z over every example and query
/// position of `batch` (eval mode, no recording). What mean ablation puts in place of a head.
std::vector<Array<float>> head_means(model::TaskModel& model, const data::Batch& batch, std::size_t batch_size = 64);

/// While alive, hook_z of the affected layers replaces `heads` by zero or (Mean) by `means`
/// (head_means of a reference batch; required for Mean). The model is unchanged when it ends.
class HeadAblation {
 public:
  HeadAblation(model::TaskModel& model, const std::vector<HeadRef>& heads, AblationMode mode,
               const std::vector<Array<float>>* means = nullptr);

 private:
  nn::HookScope<float> scope_;
};

/// `batch` scored only at the tokens that have a partner under `relation` (one of
/// task.relation_names(), e.g. "verb->object", also written "verb-object": the verbs): targets
/// elsewhere become kIgnore. For
/// a masked model these are the masked verbs, so ablated_metrics on it asks how well the model
/// still predicts that role's tokens. ValueError naming the relation (with a did-you-mean) for an
/// unknown one or a task without relations.
data::Batch restrict_to_relation(const data::Task& task, const data::Batch& batch, const std::string& relation);

/// Held-out metrics of `batch` (model::evaluate) with `heads` ablated (none: the intact model).
model::EvalMetrics ablated_metrics(model::TaskModel& model, const data::Batch& batch, const std::vector<HeadRef>& heads,
                                   AblationMode mode, const std::vector<Array<float>>* means = nullptr);

struct AblationRow {
  std::vector<HeadRef> heads;  ///< what was removed (empty: the intact model)
  model::EvalMetrics metrics;
};
/// Every head removed alone, in model order.
std::vector<AblationRow> ablate_each(model::TaskModel& model, const data::Batch& batch, AblationMode mode,
                                     const std::vector<Array<float>>* means = nullptr);

/// Head importance (Michel et al. 2019): per layer and head, sum over mini-batches of
/// `batch_size` examples of |d loss / d xi_h| at xi = 1 for kept heads and 0 for `removed`, then
/// divided by the layer's L2 norm (their per-layer normalisation). Removed heads get +inf.
/// Parameter gradients are computed on the way and cleared.
std::vector<std::vector<double>> head_importance(model::TaskModel& model, const data::Batch& batch,
                                                 const std::vector<HeadRef>& removed, AblationMode mode,
                                                 const std::vector<Array<float>>* means = nullptr,
                                                 std::size_t batch_size = 32);

struct PrunePoint {
  std::vector<HeadRef> removed;  ///< every head removed so far, in removal order
  double fraction = 0;           ///< removed.size() / number of heads
  model::EvalMetrics metrics;    ///< on the evaluation batch
};
/// The pruning curve: from the intact model, repeatedly remove the `step` kept heads of least
/// importance (head_importance on `importance_batch`, recomputed after each removal, as Michel et
/// al.'s iterative pruning) and evaluate `eval_batch`, until every head is removed. Points:
/// 0, step, 2 step, ... heads removed, the last one all of them.
std::vector<PrunePoint> prune_curve(model::TaskModel& model, const data::Batch& importance_batch,
                                    const data::Batch& eval_batch, AblationMode mode,
                                    const std::vector<Array<float>>* means = nullptr, std::size_t step = 1);

/// A list of heads checked against the model's layers: field errors "<field>[i]" for a layer or
/// head out of range or a head listed twice.
void check_heads(const std::vector<HeadRef>& heads, const std::vector<std::size_t>& per_layer,
                 const std::string& field = "heads");

/// `qkv ablate`, the studio's held-out metrics and Python's qkv.ablate. The metrics are those of
/// the first `examples` test examples (0: all), restricted to `relation` when given; mean ablation
/// puts in each head's mean output over the validation set (head_means).
struct AblateRequest {
  /// Removed together; empty: nothing removed (the intact metrics only). Absent: each head removed
  /// alone (or, with `prune`, the pruning curve).
  std::optional<std::vector<HeadRef>> heads;
  AblationMode mode = AblationMode::Zero;
  std::size_t examples = 0;
  std::string relation;   ///< restrict_to_relation's name ("" = every scored token)
  bool prune = false;     ///< the pruning curve (prune_curve, importances on the validation set)
  std::size_t step = 1;   ///< heads removed per pruning step, >= 1
};
struct AblateResult {
  AblationMode mode = AblationMode::Zero;
  std::string relation;
  std::size_t examples = 0;
  model::EvalMetrics intact;
  std::optional<AblationRow> ablated;  ///< `heads` given and not empty
  std::vector<AblationRow> each;       ///< no `heads`, no `prune`: every head alone, model order
  std::vector<PrunePoint> curve;       ///< `prune`
};
/// What one model's requests can share (the studio keeps one per model): the means of mean
/// ablation, the intact metrics per (examples, relation), and the intact score of the last row
/// analysed with heads removed (toggling heads on one input runs the intact model once).
struct AblationCache {
  std::shared_ptr<const std::vector<Array<float>>> means;
  std::map<std::pair<std::size_t, std::string>, model::EvalMetrics> intact;
  std::string row_key;
  model::Score row_score;
};
/// The means of mean ablation (head_means over the validation set), made once per cache.
const std::vector<Array<float>>& cached_means(model::LoadedModel& model, AblationCache& cache);
/// Field errors: "data", "prune" (with heads), "step" (0), "heads" / "heads[i]", "relation".
AblateResult ablate(model::LoadedModel& model, const AblateRequest& request, AblationCache* cache = nullptr);
/// {"mode", "relation" (or null), "examples", "intact": metrics, then "ablated": {"heads":
/// [[layer, head], ...], metrics, "loss_change", "accuracy_change"}, or "each": [{"layer", "head",
/// metrics, changes}] (model order), or "curve": [{"removed": [[layer, head], ...], "fraction",
/// metrics}]}; metrics are "loss", "token_accuracy", "sequence_accuracy".
std::string to_json(const AblateResult& result);

}  // namespace qkv::interp
