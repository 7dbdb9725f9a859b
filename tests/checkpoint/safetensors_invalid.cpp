// tests/checkpoint/safetensors_invalid.cpp: the reader rejects corrupted,
// truncated and inconsistent files with a CheckpointError that names the file
// and the problem.
#include "catch2_compat.h"

#include <filesystem>

#include "checkpoint/checkpoint_test_util.h"
#include "engine/checkpoint/safetensors.h"

using xrun::CheckpointError;
using xrun::SafetensorsFile;
using xrun_test::raw_safetensors;
using xrun_test::ScratchDir;

namespace {

// Writes `bytes` to a file and expects open() to fail with `why` and the path.
void expect_rejected(const ScratchDir& dir, const std::string& bytes, const std::string& why) {
  const std::string path = dir.file("bad.safetensors");
  xrun_test::write_bytes(path, bytes);
  INFO("expecting: " << why);
  CHECK_THROWS_WITH(SafetensorsFile::open(path), Catch::Contains(path) && Catch::Contains(why));
  CHECK_THROWS_AS(SafetensorsFile::open(path), CheckpointError);
}

const std::string kEightBytes(8, '\x01');

}  // namespace

TEST_CASE("a hand-written minimal file is accepted", "[checkpoint]") {
  ScratchDir dir;
  const std::string path = dir.file("ok.safetensors");
  // Unpadded header, zero-size tensors at offset 0, keys out of offset order.
  xrun_test::write_bytes(
      path, raw_safetensors(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]},)"
                            R"("z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                            R"("a":{"dtype":"I16","shape":[3],"data_offsets":[0,6]}})",
                            std::string("\x01\x00\x02\x00\x03\x00\x04\x05", 8)));
  auto f = SafetensorsFile::open(path);
  CHECK(f.names() == std::vector<std::string>{"z", "a", "b"});
  CHECK(f.get("a").to_vector<int16_t>() == std::vector<int16_t>{1, 2, 3});
  CHECK(f.get("b").to_vector<uint8_t>() == std::vector<uint8_t>{4, 5});
}

TEST_CASE("missing and truncated files", "[checkpoint]") {
  ScratchDir dir;
  const std::string missing = dir.file("missing.safetensors");
  CHECK_THROWS_WITH(SafetensorsFile::open(missing),
                    Catch::Contains(missing) && Catch::Contains("No such file"));
  CHECK_THROWS_WITH(SafetensorsFile::open(dir.path().string()), Catch::Contains("not a regular file"));

  expect_rejected(dir, "", "shorter than the 8-byte header length");
  expect_rejected(dir, "\x10\x00\x00", "shorter than the 8-byte header length");

  // A valid file cut short anywhere is rejected.
  const std::string good_path = dir.file("good.safetensors");
  std::vector<float> data{1, 2, 3, 4};
  xrun::write_safetensors(good_path, {{"w", "F32", {4}, data.data(), 16}}, {{"k", "v"}});
  const std::string good = xrun_test::read_bytes(good_path);
  CHECK_NOTHROW(SafetensorsFile::open(good_path));
  expect_rejected(dir, good.substr(0, good.size() - 1), "[0, 16] beyond the 15-byte data section");
  expect_rejected(dir, good.substr(0, 20), "exceeds the 12 bytes after the length field");
  expect_rejected(dir, good + "x", "cover 16 bytes but the data section has 17");
}

TEST_CASE("bad header length and bad JSON", "[checkpoint]") {
  ScratchDir dir;
  std::string huge = std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8) + "{}";
  expect_rejected(dir, huge, "header length 18446744073709551615 exceeds");
  expect_rejected(dir, raw_safetensors("", ""), "does not start with '{'");
  expect_rejected(dir, raw_safetensors("[1,2]", ""), "does not start with '{'");
  expect_rejected(dir, raw_safetensors(R"({"a": {"dtype": "F32",)", ""), "not valid JSON");
  expect_rejected(dir, raw_safetensors("{\"a\xff\": 1}", ""), "not valid JSON");
  expect_rejected(dir, raw_safetensors(R"({"a": 3})", ""), "tensor \"a\" is not a JSON object");
  expect_rejected(dir, raw_safetensors(R"({"__metadata__": {"k": 1}})", ""),
                  "__metadata__ value of \"k\" is not a string");
  expect_rejected(dir, raw_safetensors(R"({"__metadata__": ["k"]})", ""), "__metadata__ is not a JSON object");
}

TEST_CASE("inconsistent tensor entries", "[checkpoint]") {
  ScratchDir dir;
  auto one = [](const std::string& entry) { return R"({"t":)" + entry + "}"; };
  expect_rejected(dir, raw_safetensors(one(R"({"shape":[2],"data_offsets":[0,8]})"), kEightBytes),
                  "tensor \"t\" has no string \"dtype\"");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F31","shape":[2],"data_offsets":[0,8]})"), kEightBytes),
                  "unknown dtype \"F31\"");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","data_offsets":[0,8]})"), kEightBytes),
                  "no array \"shape\"");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[2]})"), kEightBytes),
                  "no \"data_offsets\" pair");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})"), kEightBytes),
                  "no \"data_offsets\" pair");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), kEightBytes),
                  "shape is negative");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"), kEightBytes),
                  "shape is not an integer");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), kEightBytes),
                  "spanning 8 bytes, but F32 of its shape needs 12");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), kEightBytes),
                  "end before begin");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), kEightBytes),
                  "beyond the 8-byte data section");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), kEightBytes),
                  "bytes [0, 4) of the data section belong to no tensor");
  expect_rejected(dir, raw_safetensors(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), kEightBytes),
                  "cover 4 bytes but the data section has 8");
  expect_rejected(dir,
                  raw_safetensors(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                  R"("t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                  "ab"),
                  "names \"t\" twice");
}

TEST_CASE("overlapping offsets", "[checkpoint]") {
  ScratchDir dir;
  expect_rejected(dir,
                  raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                  kEightBytes),
                  "tensor \"b\" [4, 8) overlaps tensor \"a\" [0, 8)");
  expect_rejected(dir,
                  raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                  kEightBytes),
                  "overlaps");
  // A zero-size tensor placed inside another one is rejected, as the reference does.
  expect_rejected(dir,
                  raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                  kEightBytes),
                  "tensor \"e\" [4, 4) overlaps");
}
