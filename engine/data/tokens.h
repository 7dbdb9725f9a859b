// engine/data/tokens.h: token streams for language-model training (issue
// #25, model.arch = "gpt2"), one kind per data.source:
//   "tokens"    llm.c's .bin files (a 256 x int32 header: magic 20240520,
//               version 1 with uint16 tokens or 2 with uint32, the token
//               count; then the tokens), one file or a folder of shards,
//               read through mmap;
//   "text"      any UTF-8 file or folder of them, byte-level (vocabulary 256,
//               no tokenizer files), the first 90% of the bytes for training
//               and the rest for validation;
//   "synthetic" uniform tokens drawn from the seed, any length.
// And the cut into training windows, as llm.c's loader cuts a file: window
// w of a stream is tokens [wT, wT + T] (T inputs, the targets shifted by one
// token); batch i without shuffling is windows iB .. iB + B - 1, so row b
// holds tokens [(iB + b)T, (iB + b)T + T) and a run reads a file as llm.c
// and PyTorch's nanoGPT-style loops read it; with shuffling the windows'
// order is drawn per epoch from the seed as the image sources' is. Every
// file is checked when it is opened (magic, version, length, each token
// below the vocabulary, valid UTF-8): DataError naming the file and the
// byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace xrun::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;  // tokens
  virtual int vocab() const = 0;     // every token is below this
  // Tokens [start, start + count) as int32. Thread-safe.
  virtual void read(int64_t start, int64_t count, int32_t* out) const = 0;
  // Where one file ends and the next begins (token positions, ascending,
  // the last = size()): windows never cross them.
  virtual std::vector<int64_t> file_ends() const { return {size()}; }
  // One line for logs: "tokens train: 338025 tokens in 1 file from data/tiny_train.bin".
  virtual std::string describe() const = 0;
};

// Which set llm.c's naming puts a token file in: a "_"-separated part of
// its name (before the extension) equal to "train" or "val":
// "fineweb_train_000001.bin", "tiny_val.bin"; "medieval_x.bin" or
// "data_trainval.bin" is in neither. A name in both ("a_train_val.bin") is
// a DataError naming it.
enum class TokenFileSet { none, train, val };
TokenFileSet token_file_set(const std::string& file);

// llm.c's .bin token files: `path` a file or a folder. A folder's shards
// are its *.bin files in the training set (or the validation set for
// Split::test) by token_file_set, in name order; a file trains, and its
// validation is the file of the same name with the "train" part replaced
// by "val" where there is one (else the test split is empty: nullptr).
// `vocab`: every token must be below it (50257 for GPT-2's tokenizer).
std::unique_ptr<TokenSource> open_token_files(const std::string& path, Split split, int vocab);

// A UTF-8 file or a folder of files (regular files in name order, joined),
// as bytes: vocabulary 256; Split::train the first 90%, test the rest.
std::unique_ptr<TokenSource> open_text(const std::string& path, Split split);

// `count` tokens uniform in [0, vocab), drawn from `seed` (and the split),
// for throughput runs at any context length.
std::unique_ptr<TokenSource> synthetic_tokens(int64_t count, int vocab, uint64_t seed, Split split);

// Where each training window of `context` inputs starts in `src` (the
// window reads context + 1 tokens: its targets are the next token each),
// file by file, in order. DataError when not even one window fits.
std::vector<int64_t> window_starts(const TokenSource& src, int context, const std::string& what);


// The windows of a token source as a Dataset, so the batch loader
// (data/loader.h: worker threads, prefetch, rank slices, the epoch's
// permutation) deals them as it deals images: sample i is window i's
// context + 1 tokens as int32 (channels 1, height 1, width 4 (context + 1)
// bytes), label 0; num_classes() is the vocabulary. split_windows turns a
// loaded batch into the model's inputs and targets. With shuffle off the
// loader reads windows in file order, as llm.c's loader cuts a file.
class TokenWindows final : public Dataset {
 public:
  // At most `limit` windows (0 = all). DataError when none fits.
  TokenWindows(std::unique_ptr<TokenSource> src, int context, int64_t limit,
               const std::string& what);
  int64_t size() const override { return static_cast<int64_t>(starts_.size()); }
  int channels() const override { return 1; }
  int height() const override { return 1; }
  int width() const override { return 4 * (context_ + 1); }
  int num_classes() const override { return src_->vocab(); }
  void get(int64_t index, uint8_t* chw, int32_t* label) const override;
  std::string describe() const override;
  int context() const { return context_; }

 private:
  std::unique_ptr<TokenSource> src_;
  int context_;
  std::vector<int64_t> starts_;
};

// A batch of `count` loaded windows (TokenWindows samples, back to back)
// as inputs and targets, count x context int32 each.
void split_windows(const uint8_t* windows, int count, int context, int32_t* inputs,
                   int32_t* targets);

// The split of cfg's token source (tokens, text or synthetic) as windows
// of cfg.sequence_length tokens, every token below `vocab`; nullptr for a
// test split the source does not have (a token file without its val file).
std::unique_ptr<TokenWindows> open_token_windows(const DataConfig& cfg, Split split,
                                                 uint64_t seed, int vocab);

}  // namespace xrun::data
