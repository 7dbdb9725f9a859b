// tests/checkpoint/safetensors_hostile.cpp: headers built to exhaust the
// reader (found by fuzzing and review, issue #10): values nested millions
// deep must be refused without running out of stack, and a header of very
// many tensors must open in time linear in its size.
#include "catch2_compat.h"

#include <chrono>

#include "checkpoint/checkpoint_test_util.h"
#include "engine/checkpoint/safetensors.h"

using xrun::CheckpointError;
using xrun::SafetensorsFile;
using xrun_test::raw_safetensors;
using xrun_test::ScratchDir;

TEST_CASE("values nested too deep are refused, not recursed into", "[checkpoint][hostile]") {
  ScratchDir dir;
  const std::string path = dir.file("deep.safetensors");
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  for (const std::string& header :
       {R"({"__metadata__":{"k":)" + deep + "}}",
        R"({"t":{"dtype":"U8","shape":[)" + deep + R"(],"data_offsets":[0,0]}})",
        R"({"t":)" + std::string(1'000'000, '[')}) {  // unterminated, and deep
    xrun_test::write_bytes(path, raw_safetensors(header, ""));
    CHECK_THROWS_AS(SafetensorsFile::open(path), CheckpointError);
    CHECK_THROWS_WITH(SafetensorsFile::open(path),
                      Catch::Contains(path) && Catch::Contains("more than 16 levels deep"));
  }
  // The deepest a real header goes is accepted.
  xrun_test::write_bytes(path, raw_safetensors(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "ab"));
  CHECK(SafetensorsFile::open(path).get("t").bytes == 2);
}

TEST_CASE("a header of 100000 tensors opens in linear time, in file order", "[checkpoint][hostile]") {
  // Before the fix each tensor cost a scan of all before it (ordered_json
  // inserts, then nlohmann's callback parser): 40000 tensors took seconds,
  // 100000 half a minute, a 100 MB header hours. Now about a second.
  ScratchDir dir;
  const std::string path = dir.file("many.safetensors");
  constexpr int kTensors = 100'000;
  std::string header = "{";
  for (int i = kTensors; i-- > 0;) {  // names in descending order: file order is not name order
    if (i + 1 < kTensors) header += ',';
    header += "\"t" + std::to_string(i);
    header += R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  }
  header += "}";
  xrun_test::write_bytes(path, raw_safetensors(header, ""));
  const auto start = std::chrono::steady_clock::now();
  const SafetensorsFile f = SafetensorsFile::open(path);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(f.names().size() == kTensors);
  CHECK(f.names().front() == std::string("t").append(std::to_string(kTensors - 1)));  // as written
  CHECK(f.names().back() == "t0");
  CHECK(seconds < 15);  // generous: sanitizers and a loaded machine included
}
