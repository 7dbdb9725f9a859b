// engine/batch_input.h: a loader batch into the model's input, one rule for
// training and evaluation: images through Backend::load_batch (normalised,
// augmented on the device where the backend does), or a language model's
// token windows (data/tokens.h: TokenWindows) split into inputs and
// next-token targets through Backend::load_tokens. Also how many loss rows a
// batch makes (one per image, one per token).
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.h"
#include "engine/backend.h"
#include "engine/data/loader.h"
#include "engine/model/model.h"

namespace xrun {

class BatchInput {
 public:
  // `batch`: the largest batch the loader gives.
  BatchInput(const RunConfig& cfg, const Model& model, int batch);
  void load(Backend& backend, const data::HostBatch& b);
  int loss_rows(int count) const { return count * rows_per_sample_; }
  bool tokens() const { return cfg_.model.is_gpt2(); }

 private:
  const RunConfig& cfg_;
  int rows_per_sample_;
  std::vector<int32_t> inputs_, targets_;  // token windows split, made once
};

}  // namespace xrun
