// engine/data/source_defaults.cpp: what each data source is natively (classes,
// channels, size, normalisation, where its files live), so the runner can
// resolve every default before any file is opened.
#include <stdexcept>

#include "engine/data/dataset.h"

namespace xrun::data {

SourceDefaults source_defaults(const std::string& source) {
  if (source == "cifar10")
    // Per-channel mean/std of the CIFAR-10 training set.
    return {10, 3, 32, {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f},
            "data/cifar-10-batches-bin"};
  if (source == "idx")
    // Fashion-MNIST training-set statistics; the Debian package's location.
    return {10, 1, 28, {0.2860f}, {0.3530f}, "/usr/share/datasets/fashion-mnist"};
  if (source == "synthetic")
    return {10, 3, 32, {0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}, ""};
  // The token sources (GPT-2): "classes" is the vocabulary; the image
  // fields are unused (one channel, the smallest size the schema takes).
  if (source == "tokens") return {50257, 1, 8, {0.0f}, {1.0f}, "data/tokens"};
  if (source == "text")  // bytes: a file of the Debian package fortunes-min
    return {256, 1, 8, {0.0f}, {1.0f}, "/usr/share/games/fortunes/literature"};
  throw std::invalid_argument("unknown data source '" + source + "'");
}

}  // namespace xrun::data
