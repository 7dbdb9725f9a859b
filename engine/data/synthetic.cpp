// engine/data/synthetic.cpp: generated images at any size, channel count and
// class count, made on the fly in get() from (seed, split, index), so it is
// deterministic, thread-safe and needs no memory per sample.
//   learnable = true: each class has a smooth template, a sum of a few
//   low-frequency plane waves per channel drawn from the seed alone (train
//   and test share them); a sample is the template at a random contrast plus
//   a random brightness shift and per-pixel noise, clamped to 0..255.
//   learnable = false: uniform noise pixels.
// Labels are balanced: each block of num_classes consecutive indices holds
// every class once, in an order drawn from (seed, split, block).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "engine/data/random.h"
#include "engine/data/sources.h"

namespace xrun::data {

namespace {

constexpr int kWaves = 3;            // plane waves per class and channel
constexpr float kNoise = 48.0f;      // per-pixel noise: triangular in +-kNoise
constexpr float kBrightness = 32.0f; // per-sample shift: uniform in +-kBrightness

float unit_float(uint64_t v) { return static_cast<float>(v >> 40) * (1.0f / 16777216.0f); }

struct Wave {
  float fx, fy;   // cycles per image width / height
  float phase;    // radians
  float amp;      // gray levels
};

class Synthetic final : public Dataset {
 public:
  Synthetic(const DataConfig& cfg, Split split, uint64_t seed, int64_t limit)
      : split_(split), seed_(seed), side_(cfg.image_size), channels_(cfg.channels),
        classes_(cfg.num_classes), learnable_(cfg.learnable) {
    if (channels_ < 1) throw DataError("synthetic: data.channels must be >= 1");
    if (classes_ < 1) throw DataError("synthetic: data.num_classes must be >= 1");
    const int64_t total = split == Split::train ? cfg.samples : cfg.test_samples;
    if (total < 1)
      throw DataError(std::string("synthetic: data.") +
                      (split == Split::train ? "samples" : "test_samples") + " must be >= 1");
    size_ = limit > 0 ? std::min(limit, total) : total;
    check_sample_count(size_, 8, split == Split::train ? "data.samples" : "data.test_samples");
    // Templates depend on the seed only, never on the split.
    uint64_t s = mix_seed(seed, 0x5e7e'c7a55e5ull);
    waves_.resize(static_cast<size_t>(classes_) * channels_ * kWaves);
    for (auto& w : waves_) {
      w.fx = 0.5f + 2.0f * unit_float(splitmix64(s));
      w.fy = -2.5f + 5.0f * unit_float(splitmix64(s));
      w.phase = 2.0f * std::numbers::pi_v<float> * unit_float(splitmix64(s));
      w.amp = 20.0f + 20.0f * unit_float(splitmix64(s));
    }
  }

  int64_t size() const override { return size_; }
  int channels() const override { return channels_; }
  int height() const override { return side_; }
  int width() const override { return side_; }
  int num_classes() const override { return classes_; }

  void get(int64_t index, uint8_t* chw, int32_t* label) const override {
    if (index < 0 || index >= size_)
      throw std::out_of_range("synthetic: sample " + std::to_string(index) + " of " +
                              std::to_string(size_));
    const uint64_t split_tag = split_ == Split::train ? 1 : 2;
    *label = balanced_label(index, split_tag);
    uint64_t s = mix_seed(seed_, split_tag, static_cast<uint64_t>(index), 0x5a3b1e);
    const size_t plane = static_cast<size_t>(side_) * side_;
    if (!learnable_) {
      const size_t n = plane * channels_;
      for (size_t i = 0; i < n; i += 8) {
        uint64_t v = splitmix64(s);
        for (size_t j = i; j < std::min(n, i + 8); ++j, v >>= 8) chw[j] = static_cast<uint8_t>(v);
      }
      return;
    }
    const float contrast = 0.6f + 0.6f * unit_float(splitmix64(s));
    const float shift = kBrightness * (2.0f * unit_float(splitmix64(s)) - 1.0f);
    // sin(a_x + b_y) = sin a_x cos b_y + cos a_x sin b_y: O(side) sines per wave.
    thread_local std::vector<float> sa, ca, sb, cb, row;
    sa.resize(kWaves * side_);
    ca.resize(kWaves * side_);
    sb.resize(kWaves * side_);
    cb.resize(kWaves * side_);
    row.resize(side_);
    const float two_pi = 2.0f * std::numbers::pi_v<float>;
    for (int c = 0; c < channels_; ++c) {
      const Wave* w = &waves_[(static_cast<size_t>(*label) * channels_ + c) * kWaves];
      for (int k = 0; k < kWaves; ++k)
        for (int i = 0; i < side_; ++i) {
          const float t = (i + 0.5f) / side_;
          const float a = two_pi * w[k].fx * t + w[k].phase, b = two_pi * w[k].fy * t;
          sa[k * side_ + i] = w[k].amp * std::sin(a);
          ca[k * side_ + i] = w[k].amp * std::cos(a);
          sb[k * side_ + i] = std::sin(b);
          cb[k * side_ + i] = std::cos(b);
        }
      uint8_t* out = chw + c * plane;
      uint64_t bits = 0;
      int left = 0;
      for (int y = 0; y < side_; ++y) {
        std::fill(row.begin(), row.end(), 0.0f);
        for (int k = 0; k < kWaves; ++k) {
          const float cy = cb[k * side_ + y], sy = sb[k * side_ + y];
          const float* sx = &sa[k * side_];
          const float* cx = &ca[k * side_];
          for (int x = 0; x < side_; ++x) row[x] += sx[x] * cy + cx[x] * sy;
        }
        for (int x = 0; x < side_; ++x) {
          if (left == 0) {
            bits = splitmix64(s);
            left = 4;
          }
          // Triangular noise: the sum of two uniform bytes, centred.
          const int u = static_cast<int>(bits & 0xff) + static_cast<int>((bits >> 8) & 0xff) - 255;
          bits >>= 16;
          --left;
          const float v = 128.5f + contrast * row[x] + shift + (kNoise / 255.0f) * u;
          out[static_cast<size_t>(y) * side_ + x] =
              static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));  // +0.5: rounds
        }
      }
    }
  }

  std::string describe() const override {
    return std::string("synthetic ") + split_name(split_) + ": " + std::to_string(size_) +
           " images " + std::to_string(channels_) + "x" + std::to_string(side_) + "x" +
           std::to_string(side_) + ", " + std::to_string(classes_) + " classes, " +
           (learnable_ ? "learnable patterns" : "pure noise") + ", seed " + std::to_string(seed_);
  }

 private:
  // Class of `index`: position index % classes in a per-block shuffle of
  // 0..classes-1 (Fisher-Yates driven by (seed, split, block)).
  int32_t balanced_label(int64_t index, uint64_t split_tag) const {
    const int64_t block = index / classes_;
    const int pos = static_cast<int>(index % classes_);
    uint64_t s = mix_seed(seed_, split_tag, static_cast<uint64_t>(block), 0x1abe1);
    thread_local std::vector<int32_t> perm;
    perm.resize(classes_);
    for (int i = 0; i < classes_; ++i) perm[i] = i;
    for (int i = classes_ - 1; i > 0; --i) {
      const auto j = static_cast<int>(uniform_below(i + 1, [&] { return splitmix64(s); }));
      std::swap(perm[i], perm[j]);
      if (i == pos) return perm[pos];  // later steps never touch positions >= i
    }
    return perm[pos];
  }

  Split split_;
  uint64_t seed_;
  int side_, channels_, classes_;
  bool learnable_;
  int64_t size_ = 0;
  std::vector<Wave> waves_;  // [class][channel][wave]
};

}  // namespace

std::unique_ptr<Dataset> open_synthetic(const DataConfig& cfg, Split split, uint64_t seed,
                                        int64_t limit) {
  return std::make_unique<Synthetic>(cfg, split, seed, limit);
}

}  // namespace xrun::data
