// tests/fuzz/fuzz_tokens.cpp: libFuzzer target for the token streams
// (engine/data/tokens.cpp): the input becomes an llm.c token file (or a
// UTF-8 text file) in a scratch directory; the split is opened and its
// windows cut as training cuts them (TokenWindows), then the first and last
// windows read, or (shuffled, or rank 1 of two) the first batch of an epoch
// dealt by the batch loader, as training reads it.
//
// Input layout:
//   byte 0      flags: bit 0 text (else a token file), bit 1 the validation
//               split (the file is then written as both ..._train.bin and
//               ..._val.bin), bit 2 shuffle, bit 3 two ranks (rank 1 reads),
//               bits 4-5 vocabulary (50257, 256, 65536, 1), bits 6-7 batch
//               (1..4)
//   byte 1      context: 1 + (byte % 16)
//   the rest    the file
// A bad file must end in a DataError; any other exception, a crash, a
// token outside the vocabulary, a sanitizer report or a leak is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/loader.h"
#include "engine/data/tokens.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xrun::data;
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  const int context = 1 + data[1] % 16;
  const bool text = flags & 1, test = flags & 2, shuffle = flags & 4, two = flags & 8;
  static constexpr int kVocab[] = {50257, 256, 65536, 1};
  const int vocab = kVocab[(flags >> 4) & 3];
  const int batch = 1 + ((flags >> 6) & 3);

  const std::string dir = xrun_fuzz::scratch_file("tokens");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directory(dir);
  const std::string train = dir + (text ? "/a.txt" : "/f_train.bin");
  xrun_fuzz::write_file(train, data + 2, size - 2);
  if (test && !text) xrun_fuzz::write_file(dir + "/f_val.bin", data + 2, size - 2);
  const Split split = test ? Split::test : Split::train;
  try {
    auto src = text ? open_text(train, split) : open_token_files(train, split, vocab);
    if (!src) return 0;  // no validation file: no test split
    (void)src->describe();
    const int64_t vocab_size = src->vocab();
    const TokenWindows windows(std::move(src), context, 0, "data.path");
    const auto check = [&](const uint8_t* samples, int count) {
      std::vector<int32_t> x(static_cast<size_t>(count) * context), y(x.size());
      split_windows(samples, count, context, x.data(), y.data());
      for (size_t k = 0; k < x.size(); ++k)
        if (x[k] < 0 || x[k] >= vocab_size || y[k] < 0 || y[k] >= vocab_size) std::abort();
    };
    if (shuffle || two) {
      LoaderOptions o;
      o.batch_size = batch;
      o.workers = 0;  // on this thread
      o.shuffle = shuffle;
      o.seed = 7;
      o.rank = two ? 1 : 0;
      o.ranks = two ? 2 : 1;
      Loader loader(windows, o);
      loader.start_epoch(1);
      if (loader.batches_per_epoch() > 0) {
        const HostBatch* b = loader.next();
        if (!b) std::abort();
        check(b->images, b->count);
        loader.release(b);
      }
    } else {
      std::vector<uint8_t> sample(static_cast<size_t>(windows.width()));
      for (const int64_t i : {int64_t{0}, windows.size() - 1}) {
        int32_t label = 0;
        windows.get(i, sample.data(), &label);
        check(sample.data(), 1);
      }
    }
  } catch (const DataError& e) {
    xrun_fuzz::expected("tokens", e.what());
  } catch (const std::exception& e) {
    xrun_fuzz::unexpected("tokens", e.what());
  }
  return 0;
}
