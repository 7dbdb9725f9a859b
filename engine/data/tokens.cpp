// engine/data/tokens.cpp: see tokens.h.
#include "engine/data/tokens.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/system_memory.h"
#include "engine/data/file_read.h"
#include "engine/data/loader.h"
#include "engine/data/random.h"
#include "engine/data/sources.h"

namespace xrun::data {

namespace {

namespace fs = std::filesystem;

constexpr int32_t kMagic = 20240520;  // llm.c's token files
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);

// A file mapped read-only for the life of the object.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const auto [fd, size] = open_regular_file(path);  // a FIFO refused, not waited on
    size_ = size;
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw DataError(path + ": cannot map (" + std::strerror(err) + ")");
      }
      data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

int32_t le32(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                              uint32_t{p[3]} << 24);
}

// One checked .bin shard.
struct Shard {
  std::unique_ptr<MappedFile> file;
  int width = 2;      // bytes per token: 2 (version 1) or 4 (version 2)
  int64_t count = 0;  // tokens
  uint32_t at(int64_t i) const {
    const uint8_t* p = file->data() + kHeaderBytes + static_cast<size_t>(i) * width;
    return width == 2 ? uint32_t{p[0]} | uint32_t{p[1]} << 8
                      : static_cast<uint32_t>(le32(p));
  }
};

Shard open_shard(const std::string& path, int vocab) {
  Shard s;
  s.file = std::make_unique<MappedFile>(path);
  const MappedFile& f = *s.file;
  if (f.size() < kHeaderBytes)
    throw DataError(path + ": " + std::to_string(f.size()) +
                    " bytes, shorter than llm.c's 1024-byte token-file header");
  const uint8_t* h = f.data();
  if (le32(h) != kMagic)
    throw DataError(path + ": offset 0: magic " + std::to_string(le32(h)) +
                    ", expected 20240520 (llm.c's token files; made by its data scripts)");
  const int32_t version = le32(h + 4);
  if (version != 1 && version != 2)
    throw DataError(path + ": offset 4: version " + std::to_string(version) +
                    ", expected 1 (uint16 tokens) or 2 (uint32 tokens)");
  s.width = version == 1 ? 2 : 4;
  const int32_t count = le32(h + 8);
  if (count < 0)
    throw DataError(path + ": offset 8: token count " + std::to_string(count) + " is negative");
  s.count = count;
  const size_t expected = kHeaderBytes + static_cast<size_t>(count) * s.width;
  if (f.size() != expected)
    throw DataError(path + ": " + std::to_string(f.size()) + " bytes, but its header promises " +
                    std::to_string(count) + " tokens of " + std::to_string(s.width) + " bytes (" +
                    std::to_string(expected) + " bytes): " +
                    (f.size() < expected ? "truncated" : "trailing bytes"));
  for (int64_t i = 0; i < s.count; ++i)
    if (s.at(i) >= static_cast<uint32_t>(vocab))
      throw DataError(path + ": offset " + std::to_string(kHeaderBytes + i * s.width) +
                      ": token " + std::to_string(s.at(i)) + " (token " + std::to_string(i) +
                      ") is not below the vocabulary size " + std::to_string(vocab));
  return s;
}

class TokenFiles final : public TokenSource {
 public:
  TokenFiles(std::vector<Shard> shards, int vocab, std::string split, std::string where)
      : shards_(std::move(shards)), vocab_(vocab), split_(std::move(split)), where_(std::move(where)) {
    for (const Shard& s : shards_) ends_.push_back((ends_.empty() ? 0 : ends_.back()) + s.count);
  }
  int64_t size() const override { return ends_.empty() ? 0 : ends_.back(); }
  int vocab() const override { return vocab_; }
  std::vector<int64_t> file_ends() const override { return ends_; }
  void read(int64_t start, int64_t count, int32_t* out) const override {
    auto k = static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), start) - ends_.begin());
    for (int64_t done = 0; done < count; ++start) {
      while (k < ends_.size() && start >= ends_[k]) ++k;
      if (k == ends_.size()) throw std::out_of_range("token read past the end");
      const int64_t base = k == 0 ? 0 : ends_[k - 1];
      out[done++] = static_cast<int32_t>(shards_[k].at(start - base));
    }
  }
  std::string describe() const override {
    return "tokens " + split_ + ": " + std::to_string(size()) + " tokens in " +
           std::to_string(shards_.size()) + (shards_.size() == 1 ? " file" : " files") +
           " from " + where_;
  }

 private:
  std::vector<Shard> shards_;
  std::vector<int64_t> ends_;
  int vocab_;
  std::string split_, where_;
};

// The first offset of `bytes` where UTF-8 is malformed, or -1.
int64_t first_bad_utf8(const std::vector<uint8_t>& bytes) {
  const size_t n = bytes.size();
  for (size_t i = 0; i < n;) {
    const uint8_t c = bytes[i];
    int more = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      more = 1, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      more = 2, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      more = 3, min = 0x10000;
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + more >= n) return static_cast<int64_t>(i);  // cut short at the end
    uint32_t cp = c & (0x3F >> more);
    for (int k = 1; k <= more; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
      cp = cp << 6 | (bytes[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return static_cast<int64_t>(i);
    i += static_cast<size_t>(more) + 1;
  }
  return -1;
}

class ByteTokens final : public TokenSource {
 public:
  ByteTokens(std::vector<uint8_t> bytes, std::string describe)
      : bytes_(std::move(bytes)), describe_(std::move(describe)) {}
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  int vocab() const override { return 256; }
  void read(int64_t start, int64_t count, int32_t* out) const override {
    if (start < 0 || start + count > size()) throw std::out_of_range("byte read past the end");
    for (int64_t i = 0; i < count; ++i) out[i] = bytes_[static_cast<size_t>(start + i)];
  }
  std::string describe() const override { return describe_; }

 private:
  std::vector<uint8_t> bytes_;
  std::string describe_;
};

class SyntheticTokens final : public TokenSource {
 public:
  SyntheticTokens(int64_t count, int vocab, uint64_t seed, std::string split)
      : count_(count), vocab_(vocab), seed_(seed), split_(std::move(split)) {}
  int64_t size() const override { return count_; }
  int vocab() const override { return vocab_; }
  // Token i hashed from (seed, split, i): any range, in any order, the same.
  void read(int64_t start, int64_t count, int32_t* out) const override {
    for (int64_t i = 0; i < count; ++i) {
      uint64_t s = mix_seed(seed_, split_ == "train" ? 1 : 2, static_cast<uint64_t>(start + i),
                            0x70c3);
      out[i] = static_cast<int32_t>(
          uniform_below(static_cast<uint64_t>(vocab_), [&] { return splitmix64(s); }));
    }
  }
  std::string describe() const override {
    return "synthetic tokens " + split_ + ": " + std::to_string(count_) + " uniform tokens below " +
           std::to_string(vocab_);
  }

 private:
  int64_t count_;
  int vocab_;
  uint64_t seed_;
  std::string split_;
};

std::vector<fs::path> regular_files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) out.push_back(e.path());
  if (ec) throw DataError(dir.string() + ": cannot list (" + ec.message() + ")");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TokenFileSet token_file_set(const std::string& file) {
  const std::string stem = fs::path(file).stem().string();
  bool train = false, val = false;
  size_t begin = 0;
  while (begin <= stem.size()) {
    size_t end = stem.find('_', begin);
    if (end == std::string::npos) end = stem.size();
    const std::string_view part(stem.data() + begin, end - begin);
    train = train || part == "train";
    val = val || part == "val";
    begin = end + 1;
  }
  if (train && val)
    throw DataError(file + ": named both a training and a validation file (llm.c's shards are "
                    "NAME_train_N.bin or NAME_val_N.bin): rename it");
  return train ? TokenFileSet::train : val ? TokenFileSet::val : TokenFileSet::none;
}

std::unique_ptr<TokenSource> open_token_files(const std::string& path, Split split, int vocab) {
  const bool train = split == Split::train;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const fs::path& f : regular_files_in(path)) {
      if (f.extension() != ".bin") continue;
      const TokenFileSet set = token_file_set(f.string());
      if (set == (train ? TokenFileSet::train : TokenFileSet::val)) files.push_back(f);
    }
    if (files.empty()) {
      if (!train) return nullptr;
      throw DataError(path + ": no NAME_train_N.bin token files (llm.c's shards: "
                             "NAME_train_000001.bin, NAME_val_000000.bin)");
    }
  } else if (fs::exists(path, ec)) {
    if (train) {
      files.push_back(path);
    } else {
      // NAME_train_N.bin's validation file is NAME_val_N.bin: the "_train_"
      // part of the name, not any "train" inside a word.
      if (token_file_set(path) != TokenFileSet::train) return nullptr;
      const std::string name = fs::path(path).filename().string();
      const std::string stem = fs::path(path).stem().string();
      size_t at = std::string::npos;
      for (size_t i = stem.find("train"); i != std::string::npos; i = stem.find("train", i + 1))
        if ((i == 0 || stem[i - 1] == '_') && (i + 5 == stem.size() || stem[i + 5] == '_')) at = i;
      std::string val_name = name;
      val_name.replace(at, 5, "val");
      const fs::path val = fs::path(path).parent_path() / val_name;
      if (!fs::exists(val, ec)) return nullptr;
      files.push_back(val);
    }
  } else {
    throw DataError(path + ": no such token file or folder (data.path)");
  }
  std::vector<Shard> shards;
  for (const fs::path& f : files) shards.push_back(open_shard(f.string(), vocab));
  return std::make_unique<TokenFiles>(std::move(shards), vocab, split_name(split), path);
}

std::unique_ptr<TokenSource> open_text(const std::string& path, Split split) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec))
    files = regular_files_in(path);
  else if (fs::exists(path, ec))
    files.push_back(path);
  else
    throw DataError(path + ": no such text file or folder (data.path)");
  if (files.empty()) throw DataError(path + ": a folder without files");
  // Text is read whole (each byte a token): refused before reading when it
  // cannot fit beside what the run itself needs.
  uintmax_t total = 0;
  for (const fs::path& f : files) {
    std::error_code size_ec;
    const uintmax_t size = fs::file_size(f, size_ec);
    if (!size_ec) total += size;
  }
  if (const int64_t available = available_memory_bytes();
      available > 0 && total > static_cast<uintmax_t>(available) / 2)
    throw DataError(path + ": " + std::to_string(total) + " bytes of text are read whole into memory, "
                    "more than half of the " + std::to_string(available) +
                    " bytes this machine has available (data.path; llm.c's token files are mapped, "
                    "not read: tokenize it first, or take fewer files)");
  std::vector<uint8_t> all;
  for (const fs::path& f : files) {
    std::vector<uint8_t> bytes = read_file_bytes(f.string());
    if (const int64_t bad = first_bad_utf8(bytes); bad >= 0)
      throw DataError(f.string() + ": offset " + std::to_string(bad) +
                      ": not UTF-8 (data.source = \"text\" reads UTF-8 text)");
    if (all.empty())
      all = std::move(bytes);  // one file: no copy
    else
      all.insert(all.end(), bytes.begin(), bytes.end());
  }
  const size_t cut = all.size() / 10 * 9 + all.size() % 10 * 9 / 10;  // 90%, without overflow
  const bool train = split == Split::train;
  // The training part keeps the buffer (cut short); the test part is a copy
  // of the last 10%.
  std::vector<uint8_t> part;
  if (train) {
    all.resize(cut);
    part = std::move(all);
  } else {
    part.assign(all.begin() + static_cast<std::ptrdiff_t>(cut), all.end());
  }
  const std::string what = "text " + std::string(split_name(split)) + ": " +
                           std::to_string(part.size()) + " bytes (" +
                           (train ? "the first 90%" : "the last 10%") + " of " +
                           std::to_string(files.size()) + (files.size() == 1 ? " file" : " files") +
                           " from " + path + ")";
  return std::make_unique<ByteTokens>(std::move(part), what);
}

std::unique_ptr<TokenSource> synthetic_tokens(int64_t count, int vocab, uint64_t seed, Split split) {
  if (count < 0 || vocab < 1) throw DataError("synthetic tokens: count and vocabulary must be positive");
  return std::make_unique<SyntheticTokens>(count, vocab, seed, split_name(split));
}

std::vector<int64_t> window_starts(const TokenSource& src, int context, const std::string& what) {
  std::vector<int64_t> starts;
  int64_t begin = 0;
  for (const int64_t end : src.file_ends()) {
    for (int64_t s = begin; s + context + 1 <= end; s += context) starts.push_back(s);
    begin = end;
  }
  if (starts.empty())
    throw DataError(what + ": " + src.describe() + " is shorter than one window of " +
                    std::to_string(context) + " tokens and its next-token target (" +
                    std::to_string(context + 1) + " tokens in one file)");
  return starts;
}



TokenWindows::TokenWindows(std::unique_ptr<TokenSource> src, int context, int64_t limit,
                           const std::string& what)
    : src_(std::move(src)), context_(context), starts_(window_starts(*src_, context, what)) {
  if (limit > 0 && limit < size()) starts_.resize(static_cast<size_t>(limit));
}

void TokenWindows::get(int64_t index, uint8_t* chw, int32_t* label) const {
  // The loader's buffers are 64-byte aligned and each sample is 4 (T + 1)
  // bytes: every window starts on an int32 boundary.
  src_->read(starts_.at(static_cast<size_t>(index)), context_ + 1,
             reinterpret_cast<int32_t*>(chw));
  *label = 0;
}

std::string TokenWindows::describe() const {
  return src_->describe() + ", " + std::to_string(size()) + " windows of " +
         std::to_string(context_) + " tokens";
}

void split_windows(const uint8_t* windows, int count, int context, int32_t* inputs,
                   int32_t* targets) {
  const auto* w = reinterpret_cast<const int32_t*>(windows);
  for (int b = 0; b < count; ++b) {
    const int32_t* row = w + static_cast<size_t>(b) * (context + 1);
    std::copy(row, row + context, inputs + static_cast<size_t>(b) * context);
    std::copy(row + 1, row + context + 1, targets + static_cast<size_t>(b) * context);
  }
}

std::unique_ptr<TokenWindows> open_token_windows(const DataConfig& cfg, Split split,
                                                 uint64_t seed, int vocab) {
  const int context = static_cast<int>(cfg.sequence_length);
  if (context < 1) throw DataError("data.sequence_length must be at least 1");
  const int64_t limit = split == Split::train ? cfg.limit : cfg.test_limit;
  const std::string what = std::string("data.path (") + split_name(split) + ")";
  std::unique_ptr<TokenSource> src;
  if (cfg.source == "synthetic") {
    const int64_t windows = split == Split::train ? cfg.samples : cfg.test_samples;
    // Each window: its start and its place in the shuffle.
    check_sample_count(limit > 0 ? std::min(limit, windows) : windows, 16,
                       split == Split::train ? "data.samples" : "data.test_samples");
    src = synthetic_tokens(windows * context + 1, vocab, seed, split);
  } else if (cfg.source == "text") {
    if (vocab < 256) throw DataError("text is read as bytes: the vocabulary must hold 256");
    src = open_text(cfg.path.empty() ? source_defaults("text").path : cfg.path, split);
  } else if (cfg.source == "tokens") {
    src = open_token_files(cfg.path.empty() ? source_defaults("tokens").path : cfg.path, split,
                           vocab);
    if (!src) return nullptr;
  } else {
    throw DataError("data.source '" + cfg.source + "' holds no tokens (tokens, text or synthetic)");
  }
  return std::make_unique<TokenWindows>(std::move(src), context, limit, what);
}

}  // namespace xrun::data
