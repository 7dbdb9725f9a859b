// tests/data/tokens_test.cpp: token streams (engine/data/tokens.h) on real
// files written here in llm.c's format: batches cut as llm.c's loader cuts
// a file (row b of batch i = tokens [(iB + b)T, (iB + b)T + T), targets one
// token on), shards that windows never cross and their validation files,
// version 2 (uint32) files, and every malformed file refused with the file
// and the byte offset; UTF-8 text as bytes split 90/10 with bad UTF-8
// refused where it is; synthetic tokens the same for any read; the windows
// dealt by the batch loader as training reads them (llm.c's cut, each
// epoch's permutation, rank slices that add up to one process's batch).
#include "catch2_compat.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <numeric>

#include "core/system_memory.h"
#include "data_test_util.h"
#include "engine/data/loader.h"
#include "engine/data/tokens.h"
#include "skip.h"

using namespace xrun::data;
using namespace xrun::data::testing;
using Catch::Contains;

namespace {

// An llm.c token file: the 256 x int32 header (magic, version, count), then
// the tokens as uint16 (version 1) or uint32 (version 2).
std::vector<uint8_t> token_file(const std::vector<uint32_t>& tokens, int version = 1,
                                int64_t claimed = -1, int32_t magic = 20240520) {
  std::vector<uint8_t> out(1024, 0);
  const auto put32 = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) out[at + k] = static_cast<uint8_t>(v >> (8 * k));
  };
  put32(0, static_cast<uint32_t>(magic));
  put32(4, static_cast<uint32_t>(version));
  put32(8, static_cast<uint32_t>(claimed >= 0 ? claimed : static_cast<int64_t>(tokens.size())));
  for (const uint32_t t : tokens)
    for (int k = 0; k < (version == 1 ? 2 : 4); ++k) out.push_back(static_cast<uint8_t>(t >> (8 * k)));
  return out;
}

std::vector<uint32_t> counting(size_t n, uint32_t from = 0) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "no DataError";
}

// Window `index` of `windows` as the model's inputs and targets: the sample
// the loader hands the trainer, split as the trainer splits it.
void window_io(const TokenWindows& windows, int64_t index, std::vector<int32_t>& x,
               std::vector<int32_t>& y) {
  std::vector<uint8_t> sample(static_cast<size_t>(windows.width()));
  int32_t label = -1;
  windows.get(index, sample.data(), &label);
  x.assign(static_cast<size_t>(windows.context()), 0);
  y.assign(x.size(), 0);
  split_windows(sample.data(), 1, windows.context(), x.data(), y.data());
}

}  // namespace

TEST_CASE("token files: windows as llm.c's loader cuts the file", "[data][tokens]") {
  TempDir dir;
  const std::string file = dir.file("tiny_train.bin");
  write_bytes(file, token_file(counting(50)));  // token k at position k
  const auto src = open_token_files(file, Split::train, 50257);
  REQUIRE(src);
  CHECK(src->size() == 50);
  CHECK_THAT(src->describe(), Contains("50 tokens in 1 file"));
  const int T = 4;
  CHECK(window_starts(*src, T, "data.path").size() == 12);  // (50 - 1) / 4: the last window [44, 48] ends before 49
  const TokenWindows windows(open_token_files(file, Split::train, 50257), T, 0, "data.path");
  REQUIRE(windows.size() == 12);
  std::vector<int32_t> x, y;
  for (int64_t w = 0; w < windows.size(); ++w) {
    window_io(windows, w, x, y);
    for (int t = 0; t < T; ++t) {
      INFO("window " << w << " position " << t);
      CHECK(x[t] == w * T + t);      // tokens[wT + t]
      CHECK(y[t] == w * T + t + 1);  // the next token
    }
  }
  // No validation file beside it: no test split.
  CHECK(open_token_files(file, Split::test, 50257) == nullptr);
}

TEST_CASE("token files: a folder of shards, windows inside each, validation by name",
          "[data][tokens]") {
  TempDir dir;
  write_bytes(dir.file("d_train_000001.bin"), token_file(counting(10, 100)));
  write_bytes(dir.file("d_train_000002.bin"), token_file(counting(7, 200)));
  write_bytes(dir.file("d_val_000000.bin"), token_file(counting(9, 300)));
  write_bytes(dir.file("notes.txt"), std::vector<uint8_t>{'h', 'i'});
  const auto train = open_token_files(dir.str(), Split::train, 1000);
  REQUIRE(train);
  CHECK(train->size() == 17);
  CHECK(train->file_ends() == std::vector<int64_t>{10, 17});
  CHECK_THAT(train->describe(), Contains("17 tokens in 2 files"));
  // T = 3, each window reading 4 tokens: shard 1 (10 tokens) has windows at
  // 0, 3, 6 (9 + 4 > 10), shard 2 (positions 10..16) at 10, 13 (16 + 4 > 17):
  // none crosses from one file into the next.
  CHECK(window_starts(*train, 3, "data.path") == std::vector<int64_t>{0, 3, 6, 10, 13});
  const TokenWindows windows(open_token_files(dir.str(), Split::train, 1000), 3, 0, "data.path");
  std::vector<int32_t> x, y;
  window_io(windows, 3, x, y);  // the first window of shard 2
  CHECK(x == std::vector<int32_t>{200, 201, 202});
  CHECK(y == std::vector<int32_t>{201, 202, 203});
  const auto val = open_token_files(dir.str(), Split::test, 1000);
  REQUIRE(val);
  CHECK(val->size() == 9);
  // One file names its validation file by replacing "train" with "val".
  const auto one = open_token_files(dir.file("d_train_000001.bin"), Split::test, 1000);
  CHECK(one == nullptr);  // d_val_000001.bin is not there
  write_bytes(dir.file("d_val_000001.bin"), token_file(counting(5)));
  REQUIRE(open_token_files(dir.file("d_train_000001.bin"), Split::test, 1000));
}

TEST_CASE("token files: the split is a whole part of the name, never a word that holds it",
          "[data][tokens]") {
  CHECK(token_file_set("/d/fineweb_train_000001.bin") == TokenFileSet::train);
  CHECK(token_file_set("tiny_val.bin") == TokenFileSet::val);
  CHECK(token_file_set("train.bin") == TokenFileSet::train);
  CHECK(token_file_set("medieval_train_000001.bin") == TokenFileSet::train);  // "val" inside a word
  CHECK(token_file_set("interval_000001.bin") == TokenFileSet::none);
  CHECK(token_file_set("data_trainval.bin") == TokenFileSet::none);
  CHECK(token_file_set("/x_val/retrain_1.bin") == TokenFileSet::none);  // the folder is not the name
  CHECK_THAT(error_of([] { token_file_set("/d/a_train_val.bin"); }),
             Contains("/d/a_train_val.bin: named both a training and a validation file"));

  // A folder holding only a training shard whose name contains "val": no
  // validation set (it used to validate on the training shard itself).
  TempDir dir;
  write_bytes(dir.file("medieval_train_000001.bin"), token_file(counting(10)));
  REQUIRE(open_token_files(dir.str(), Split::train, 1000));
  CHECK(open_token_files(dir.str(), Split::test, 1000) == nullptr);
  CHECK(open_token_files(dir.file("medieval_train_000001.bin"), Split::test, 1000) == nullptr);
  write_bytes(dir.file("medieval_val_000001.bin"), token_file(counting(4)));
  const auto val = open_token_files(dir.file("medieval_train_000001.bin"), Split::test, 1000);
  REQUIRE(val);
  CHECK(val->size() == 4);
  // A shard named for both sets is refused, not read twice.
  write_bytes(dir.file("data_train_val.bin"), token_file(counting(4)));
  CHECK_THAT(error_of([&] { open_token_files(dir.str(), Split::train, 1000); }),
             Contains("data_train_val.bin: named both"));
}

TEST_CASE("token files and text: a FIFO is refused at once, never waited on", "[data][tokens][errors]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe_train.bin");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(error_of([&] { open_token_files(fifo, Split::train, 50257); }),
             Contains(fifo + ": not a regular file"));
  CHECK_THAT(error_of([&] { open_text(fifo, Split::train); }), Contains(fifo + ": not a regular file"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5);
}

TEST_CASE("text: more text than memory can hold is refused before any of it is read",
          "[data][tokens][errors]") {
  // A sparse file: as large as the machine's memory, no disk used.
  TempDir dir;
  const std::string big = dir.file("big.txt");
  const int64_t available = xrun::available_memory_bytes();
  if (available <= 0) XRUN_SKIP("this machine does not say how much memory is available");
  {
    std::ofstream touch(big);
  }
  std::filesystem::resize_file(big, static_cast<uintmax_t>(available));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THAT(error_of([&] { open_text(big, Split::train); }),
             Contains(big + ": " + std::to_string(available) + " bytes of text are read whole") &&
                 Contains("tokenize it first"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 5);
}

TEST_CASE("token files: version 2 holds uint32 tokens", "[data][tokens]") {
  TempDir dir;
  write_bytes(dir.file("llama_train.bin"), token_file({70000, 1, 128000}, 2));
  const auto src = open_token_files(dir.file("llama_train.bin"), Split::train, 128256);
  std::vector<int32_t> all(3);
  src->read(0, 3, all.data());
  CHECK(all == std::vector<int32_t>{70000, 1, 128000});
}

TEST_CASE("token files: what is wrong is named with the file and the byte offset",
          "[data][tokens][errors]") {
  TempDir dir;
  const std::string f = dir.file("bad_train.bin");
  const auto open = [&] { open_token_files(f, Split::train, 50257); };
  write_bytes(f, token_file(counting(8), 1, -1, 20240521));
  CHECK_THAT(error_of(open), Contains(f + ": offset 0: magic 20240521, expected 20240520"));
  write_bytes(f, token_file(counting(8), 3));
  CHECK_THAT(error_of(open), Contains(f + ": offset 4: version 3"));
  std::vector<uint8_t> cut = token_file(counting(8));
  cut.resize(cut.size() - 3);
  write_bytes(f, cut);
  CHECK_THAT(error_of(open), Contains("header promises 8 tokens") && Contains("truncated"));
  write_bytes(f, token_file(counting(8), 1, 6));
  CHECK_THAT(error_of(open), Contains("trailing bytes"));
  write_bytes(f, std::vector<uint8_t>(100, 0));
  CHECK_THAT(error_of(open), Contains("shorter than llm.c's 1024-byte token-file header"));
  // Token 5 is 60000: not below GPT-2's 50257, at byte 1024 + 2 x 5.
  std::vector<uint32_t> tokens = counting(8);
  tokens[5] = 60000;
  write_bytes(f, token_file(tokens));
  CHECK_THAT(error_of(open), Contains(f + ": offset 1034: token 60000 (token 5) is not below "
                                          "the vocabulary size 50257"));
  CHECK_THAT(error_of([&] { open_token_files(dir.file("none.bin"), Split::train, 10); }),
             Contains("no such token file or folder"));
  TempDir empty;
  CHECK_THAT(error_of([&] { open_token_files(empty.str(), Split::train, 10); }),
             Contains("no NAME_train_N.bin token files"));
  // A file shorter than one window and its target.
  write_bytes(f, token_file(counting(8)));
  const auto src = open_token_files(f, Split::train, 50257);
  CHECK(window_starts(*src, 7, "data.path").size() == 1);
  CHECK_THAT(error_of([&] { window_starts(*src, 8, "data.path"); }),
             Contains("shorter than one window of 8 tokens") && Contains("9 tokens in one file"));
}

TEST_CASE("text: UTF-8 bytes, the first 90% to train, bad UTF-8 named by offset",
          "[data][tokens][text]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 10; ++i) text += "héllo wörld\n";  // 14 bytes a line: 140
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  write_bytes(dir.file("a.txt"), bytes);
  const auto train = open_text(dir.file("a.txt"), Split::train);
  const auto test = open_text(dir.file("a.txt"), Split::test);
  CHECK(train->vocab() == 256);
  CHECK(train->size() == 126);
  CHECK(test->size() == 14);
  std::vector<int32_t> first(3);
  train->read(0, 3, first.data());
  CHECK(first == std::vector<int32_t>{'h', 0xC3, 0xA9});  // é as its two bytes
  std::vector<int32_t> last(1);
  test->read(13, 1, last.data());
  CHECK(last[0] == '\n');
  CHECK_THAT(train->describe(), Contains("126 bytes (the first 90% of 1 file"));
  // A folder: its files in name order, joined.
  write_bytes(dir.file("b.txt"), std::vector<uint8_t>(60, 'z'));
  CHECK(open_text(dir.str(), Split::train)->size() == 180);
  // Latin-1 é (0xE9) alone at byte 3 is not UTF-8; nor is a cut sequence.
  write_bytes(dir.file("b.txt"), std::vector<uint8_t>{'c', 'a', 'f', 0xE9, '!'});
  CHECK_THAT(error_of([&] { open_text(dir.file("b.txt"), Split::train); }),
             Contains("b.txt: offset 3: not UTF-8"));
  write_bytes(dir.file("b.txt"), std::vector<uint8_t>{'o', 'k', 0xE2, 0x82});
  CHECK_THAT(error_of([&] { open_text(dir.file("b.txt"), Split::train); }), Contains("offset 2"));
  write_bytes(dir.file("b.txt"), std::vector<uint8_t>{0xED, 0xA0, 0x80});  // a surrogate
  CHECK_THAT(error_of([&] { open_text(dir.file("b.txt"), Split::train); }), Contains("offset 0"));
  CHECK_THAT(error_of([&] { open_text(dir.file("missing.txt"), Split::train); }),
             Contains("no such text file"));
}

TEST_CASE("synthetic tokens: below the vocabulary, the same for any read, per split",
          "[data][tokens]") {
  const auto a = synthetic_tokens(1000, 50257, 7, Split::train);
  const auto b = synthetic_tokens(1000, 50257, 7, Split::train);
  const auto other = synthetic_tokens(1000, 50257, 8, Split::train);
  const auto test = synthetic_tokens(1000, 50257, 7, Split::test);
  std::vector<int32_t> x(1000), y(1000), z(1000), t(1000), part(10);
  a->read(0, 1000, x.data());
  b->read(0, 1000, y.data());
  other->read(0, 1000, z.data());
  test->read(0, 1000, t.data());
  CHECK(x == y);
  CHECK(x != z);
  CHECK(x != t);
  a->read(500, 10, part.data());
  CHECK(std::equal(part.begin(), part.end(), x.begin() + 500));
  CHECK(*std::max_element(x.begin(), x.end()) < 50257);
  CHECK(*std::min_element(x.begin(), x.end()) >= 0);
  // Spread over the vocabulary: 1000 draws from 50257 values, few repeats.
  std::sort(x.begin(), x.end());
  CHECK(std::unique(x.begin(), x.end()) - x.begin() > 980);
}

namespace {

// What training reads: `windows` dealt by the batch loader (as the trainer
// sets it up for token windows) for one rank, every batch of `epochs`
// epochs as the model's inputs, batch after batch.
std::vector<std::vector<int32_t>> loaded_inputs(const TokenWindows& windows, int batch, bool shuffle,
                                                int rank, int ranks, int epochs) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = 2;
  o.seed = 9;
  o.shuffle = shuffle;
  o.rank = rank;
  o.ranks = ranks;
  o.drop_last = true;
  Loader loader(windows, o);
  const int T = windows.context();
  std::vector<std::vector<int32_t>> out;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loader.start_epoch(epoch);
    for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
      const HostBatch* b = loader.next();
      REQUIRE(b);
      REQUIRE(b->count == batch);
      std::vector<int32_t> x(static_cast<size_t>(batch) * T), y(x.size());
      split_windows(b->images, b->count, T, x.data(), y.data());
      loader.release(b);
      // The targets are the inputs one token on (counting tokens: +1).
      for (size_t k = 0; k < x.size(); ++k) REQUIRE(y[k] == x[k] + 1);
      out.push_back(std::move(x));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("token windows through the loader: llm.c's cut, each epoch's order, and ranks that "
          "together read one process's batch",
          "[data][tokens][loader][ranks]") {
  TempDir dir;
  write_bytes(dir.file("c_train.bin"), token_file(counting(200)));
  const int T = 4;  // 49 windows (199 / 4): window w is tokens [4w, 4w + 5)
  TokenWindows windows(open_token_files(dir.file("c_train.bin"), Split::train, 50257), T, 0,
                       "data.path");
  CHECK(windows.size() == 49);
  CHECK(windows.width() == 4 * (T + 1));
  CHECK(windows.num_classes() == 50257);
  // Shuffle off: llm.c's cut, 49 / (2 x 3) = 8 global batches, the last
  // window unused; rank r takes the r-th 3 windows of each.
  for (const int rank : {0, 1}) {
    const auto plain = loaded_inputs(windows, 3, false, rank, 2, 1);
    REQUIRE(plain.size() == 8);
    for (size_t i = 0; i < plain.size(); ++i)
      for (int k = 0; k < 3; ++k) {
        INFO("rank " << rank << ", batch " << i << ", row " << k);
        CHECK(plain[i][static_cast<size_t>(k) * T] == static_cast<int32_t>((6 * i + 3 * rank + k) * T));
      }
  }
  // Shuffled: each epoch the permutation drawn from (seed, epoch); 2 ranks
  // x batch 3 read, between them, what 1 rank x batch 6 reads, batch by
  // batch; an epoch takes each window at most once.
  const auto one = loaded_inputs(windows, 6, true, 0, 1, 2);
  const auto r0 = loaded_inputs(windows, 3, true, 0, 2, 2);
  const auto r1 = loaded_inputs(windows, 3, true, 1, 2, 2);
  REQUIRE(one.size() == 16);
  REQUIRE(r0.size() == 16);
  REQUIRE(r1.size() == 16);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> order(49);
    epoch_permutation(9, epoch, order.data(), 49);
    std::vector<int32_t> starts;
    for (size_t i = 0; i < 8; ++i) {
      const size_t at = static_cast<size_t>(epoch) * 8 + i;
      std::vector<int32_t> both = r0[at];
      both.insert(both.end(), r1[at].begin(), r1[at].end());
      CHECK(both == one[at]);
      for (int k = 0; k < 6; ++k) {
        CHECK(one[at][static_cast<size_t>(k) * T] == static_cast<int32_t>(order[6 * i + k] * T));
        starts.push_back(one[at][static_cast<size_t>(k) * T]);
      }
    }
    std::sort(starts.begin(), starts.end());
    CHECK(std::adjacent_find(starts.begin(), starts.end()) == starts.end());
    CHECK(starts.size() == 48);
  }
  CHECK(one[0] != one[8]);  // the epochs' orders differ
  // data.limit keeps the first windows only.
  TokenWindows few(open_token_files(dir.file("c_train.bin"), Split::train, 50257), T, 5,
                   "data.path");
  CHECK(few.size() == 5);
  CHECK_THAT(few.describe(), Contains("5 windows of 4 tokens"));
}
