// engine/model/model.h: what the trainer, the step runner and checkpoints
// need of a model, whichever family it is (engine/model/resnet.h for
// torchvision's ResNets, engine/model/gpt2.h for GPT-2): its state_dict
// entries, the forward and backward passes, the output logits the loss
// reads, initialisation, and per-layer hooks for profiling.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace xrun {

// One state_dict entry, in the reference library's order.
struct StateEntry {
  enum class Kind { parameter, running_stat, counter };
  std::string name;
  Kind kind = Kind::parameter;
  Tensor* tensor = nullptr;  // null for counters (num_batches_tracked)
  Tensor* grad = nullptr;    // parameters only
  std::vector<int64_t> dims; // canonical
};

// Called around every layer's forward and backward when per-layer profiling is
// on (NVTX ranges, host timers); empty = no cost.
struct LayerHooks {
  std::function<void(const std::string& layer)> begin;
  std::function<void()> end;
};

// begin() now, end() when it goes out of scope.
class LayerHookScope {
 public:
  LayerHookScope(const LayerHooks& hooks, const std::string& layer) : hooks_(hooks) {
    if (hooks_.begin) hooks_.begin(layer);
  }
  ~LayerHookScope() {
    if (hooks_.end) hooks_.end();
  }
  LayerHookScope(const LayerHookScope&) = delete;
  LayerHookScope& operator=(const LayerHookScope&) = delete;

 private:
  const LayerHooks& hooks_;
};

class Model {
 public:
  virtual ~Model() = default;
  // Called in backward() with a layer's parameters as soon as their
  // gradients are complete and nothing in the pass reads them any more.
  using ParamsReady = std::function<void(std::span<Tensor* const> params)>;

  virtual void forward(bool training) = 0;
  virtual void backward(const ParamsReady& ready = {}) = 0;
  virtual Tensor* logits() const = 0;  // [rows, classes], what the loss reads
  virtual Tensor* dlogits() const = 0;
  // Loss rows per sample: 1 for an image classifier, the tokens per
  // sequence for a language model (each predicts the next token).
  virtual int64_t rows_per_sample() const { return 1; }

  virtual const std::vector<StateEntry>& state() const = 0;
  int64_t parameter_count() const {
    int64_t n = 0;
    for (const auto& e : state())
      if (e.kind == StateEntry::Kind::parameter) n += e.tensor->numel();
    return n;
  }
  // The parameters the optimizer leaves out of the weight decay (none by
  // default: PyTorch's optimizers decay what they are given).
  virtual std::vector<Tensor*> undecayed_parameters() const { return {}; }
  virtual void init_parameters(uint64_t seed) = 0;
  // One line for messages: "resnet50 with 10 classes".
  virtual std::string describe() const = 0;
  // Names a reference state_dict may hold beside state() for a weight the
  // model ties to one of its entries (GPT-2's lm_head.weight is
  // transformer.wte.weight): {tied name, entry name}.
  struct TiedWeight {
    std::string name, same_as;
  };
  virtual std::vector<TiedWeight> tied_weights() const { return {}; }
  void set_layer_hooks(LayerHooks hooks) { hooks_ = std::move(hooks); }

  // BN's num_batches_tracked (ResNet): one counter for the whole model.
  int64_t num_batches_tracked = 0;

 protected:
  LayerHooks hooks_;
};

}  // namespace xrun
