// engine/batch_input.cpp: see batch_input.h.
#include "engine/batch_input.h"

#include "engine/data/tokens.h"

namespace xrun {

BatchInput::BatchInput(const RunConfig& cfg, const Model& model, int batch)
    : cfg_(cfg), rows_per_sample_(static_cast<int>(model.rows_per_sample())) {
  if (tokens()) {
    inputs_.resize(static_cast<size_t>(batch) * rows_per_sample_);
    targets_.resize(inputs_.size());
  }
}

void BatchInput::load(Backend& backend, const data::HostBatch& b) {
  if (tokens()) {
    data::split_windows(b.images, b.count, rows_per_sample_, inputs_.data(), targets_.data());
    backend.load_tokens(inputs_.data(), targets_.data(), b.count);
    return;
  }
  const BatchAugment augment{cfg_.data.random_crop, cfg_.data.hflip, b.draws};
  backend.load_batch(b.images, b.labels, b.count, cfg_.data.mean, cfg_.data.std,
                     b.draws ? &augment : nullptr);
}

}  // namespace xrun
