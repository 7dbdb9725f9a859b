// tests/checkpoint/safetensors_roundtrip.cpp: write then read safetensors
// files (several dtypes and shapes, metadata, layout), and the writer's
// refusals and atomicity (bad tensors, unwritable paths, a full disk leaves
// the old file intact and no temporary file behind).
#include <signal.h>
#include <sys/resource.h>

#include "catch2_compat.h"

#include <cstring>
#include <filesystem>
#include <numeric>

#include "checkpoint/checkpoint_test_util.h"
#include "engine/checkpoint/safetensors.h"

using xrun::CheckpointError;
using xrun::SafetensorsFile;
using xrun::TensorView;
using xrun_test::ScratchDir;

namespace {

uint64_t header_length(const std::string& path) {
  std::string bytes = xrun_test::read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return n;
}

template <class T>
TensorView view(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                const std::vector<T>& data) {
  return TensorView{name, dtype, std::move(shape), data.data(), data.size() * sizeof(T)};
}

}  // namespace

TEST_CASE("dtype sizes", "[checkpoint]") {
  CHECK(xrun::safetensors_dtype_bits("F32") == 32);
  CHECK(xrun::safetensors_dtype_bits("F16") == 16);
  CHECK(xrun::safetensors_dtype_bits("BF16") == 16);
  CHECK(xrun::safetensors_dtype_bits("I64") == 64);
  CHECK(xrun::safetensors_dtype_bits("I32") == 32);
  CHECK(xrun::safetensors_dtype_bits("U8") == 8);
  CHECK(xrun::safetensors_dtype_bits("BOOL") == 8);
  CHECK(xrun::safetensors_dtype_bits("F4") == 4);
  CHECK(xrun::safetensors_dtype_bits("f32") == 0);
  CHECK(xrun::safetensors_dtype_bits("") == 0);
  std::vector<int64_t> shape{2, 3, 4};
  CHECK(xrun::safetensors_byte_size("F32", shape) == 96);
  CHECK(xrun::safetensors_byte_size("I64", std::vector<int64_t>{}) == 8);
  CHECK(xrun::safetensors_byte_size("F16", std::vector<int64_t>{0, 7}) == 0);
  CHECK(xrun::safetensors_byte_size("F4", std::vector<int64_t>{6}) == 3);
  CHECK_THROWS_AS(xrun::safetensors_byte_size("F4", std::vector<int64_t>{3}), CheckpointError);
  CHECK_THROWS_AS(xrun::safetensors_byte_size("Q8", shape), CheckpointError);
  CHECK_THROWS_AS(xrun::safetensors_byte_size("F32", std::vector<int64_t>{-1}), CheckpointError);
  CHECK_THROWS_AS(xrun::safetensors_byte_size("F64", std::vector<int64_t>{1LL << 40, 1LL << 40}),
                  CheckpointError);
}

TEST_CASE("round trip of several dtypes, shapes and metadata", "[checkpoint]") {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");

  std::vector<float> weight(2 * 3 * 3 * 3);
  std::iota(weight.begin(), weight.end(), -10.0f);
  weight[5] = -0.0f;
  std::vector<uint16_t> half{0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00};  // 1, -2, 65504, 2^-24, inf
  std::vector<uint16_t> bf16{0x3F80, 0xBF80, 0x4049, 0x7F80, 0x0000, 0x8000};
  std::vector<int64_t> step{1234567890123LL};
  std::vector<int32_t> labels{-7, 0, 7, 2147483647, -2147483647 - 1};
  std::vector<uint8_t> pixels{0, 1, 2, 127, 128, 255, 9};
  std::vector<float> empty;
  std::map<std::string, std::string> meta{
      {"format", "pt"}, {"epoch", "12"}, {"note", "caf\xC3\xA9 \xE2\x9C\x93"}, {"empty", ""}};

  xrun::write_safetensors(path,
                          {view("pixels", "U8", {7}, pixels), view("conv.weight", "F32", {2, 3, 3, 3}, weight),
                           view("half", "F16", {5}, half), view("bf16", "BF16", {2, 3}, bf16),
                           view("step", "I64", {}, step), view("labels", "I32", {5, 1}, labels),
                           view("empty", "F32", {0, 4}, empty)},
                          meta);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK(header_length(path) % 8 == 0);

  auto f = SafetensorsFile::open(path);
  CHECK(f.metadata() == meta);
  REQUIRE(f.names().size() == 7);
  // Largest elements first (stable), so every tensor is aligned in the file.
  CHECK(f.names() == std::vector<std::string>{"step", "conv.weight", "labels", "empty", "half",
                                              "bf16", "pixels"});
  for (const auto& e : f.entries()) {
    int element = std::max(1, xrun::safetensors_dtype_bits(e.dtype) / 8);
    CHECK(e.offset % element == 0);
    CHECK(reinterpret_cast<uintptr_t>(e.data) % element == 0);
  }
  CHECK(f.contains("conv.weight"));
  CHECK_FALSE(f.contains("conv.bias"));

  const auto& w = f.get("conv.weight");
  CHECK(w.dtype == "F32");
  CHECK(w.shape == std::vector<int64_t>{2, 3, 3, 3});
  CHECK(w.numel() == 54);
  CHECK(w.bytes == 54 * 4);
  auto wv = w.to_vector<float>();
  CHECK(std::memcmp(wv.data(), weight.data(), weight.size() * 4) == 0);
  CHECK(std::signbit(wv[5]));

  CHECK(f.get("half").to_vector<uint16_t>() == half);
  CHECK(f.get("half").dtype == "F16");
  CHECK(f.get("bf16").to_vector<uint16_t>() == bf16);
  CHECK(f.get("bf16").shape == std::vector<int64_t>{2, 3});
  CHECK(f.get("step").shape.empty());
  CHECK(f.get("step").numel() == 1);
  CHECK(f.get("step").to_vector<int64_t>() == step);
  CHECK(f.get("labels").to_vector<int32_t>() == labels);
  CHECK(f.get("pixels").to_vector<uint8_t>() == pixels);
  CHECK(f.get("empty").bytes == 0);
  CHECK(f.get("empty").numel() == 0);
  CHECK(f.get("empty").to_vector<float>().empty());

  CHECK_THROWS_WITH(f.get("missing"), Catch::Contains("no tensor \"missing\"") && Catch::Contains(path));
  CHECK_THROWS_WITH(f.get("conv.weight").to_vector<double>(), Catch::Contains("4-byte elements"));
  std::vector<float> small(3);
  CHECK_THROWS_AS(w.copy_to(small.data(), small.size() * 4), CheckpointError);

  // Entries stay valid in copies after the original goes away.
  SafetensorsFile copy = f;
  f = SafetensorsFile::open(path);
  CHECK(copy.get("labels").to_vector<int32_t>() == labels);
}

TEST_CASE("empty checkpoint and no metadata", "[checkpoint]") {
  ScratchDir dir;
  const std::string path = dir.file("empty.safetensors");
  xrun::write_safetensors(path, {});
  auto f = SafetensorsFile::open(path);
  CHECK(f.names().empty());
  CHECK(f.metadata().empty());
  CHECK(f.file_size() == 16);  // 8 + "{}" padded to 8
}

TEST_CASE("overwriting replaces the file", "[checkpoint]") {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<float> a{1, 2, 3}, b{4, 5};
  xrun::write_safetensors(path, {view("a", "F32", {3}, a)}, {{"epoch", "1"}});
  xrun::write_safetensors(path, {view("b", "F32", {2}, b)}, {{"epoch", "2"}});
  auto f = SafetensorsFile::open(path);
  CHECK(f.names() == std::vector<std::string>{"b"});
  CHECK(f.metadata().at("epoch") == "2");
  CHECK(f.get("b").to_vector<float>() == b);
}

TEST_CASE("the writer refuses invalid tensors", "[checkpoint]") {
  ScratchDir dir;
  const std::string path = dir.file("bad.safetensors");
  std::vector<float> data(6);
  auto refused = [&](std::vector<TensorView> tensors, const std::string& why) {
    CHECK_THROWS_WITH(xrun::write_safetensors(path, tensors),
                      Catch::Contains(path) && Catch::Contains(why));
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  };
  refused({view("x", "F32", {2, 2}, data)}, "24 bytes given");
  refused({view("x", "F99", {6}, data)}, "unknown dtype");
  refused({view("x", "F32", {6}, data), view("x", "F32", {6}, data)}, "duplicate name");
  refused({view("", "F32", {6}, data)}, "empty name");
  refused({view("__metadata__", "F32", {6}, data)}, "reserved");
  refused({TensorView{"x", "F32", {6}, nullptr, 24}}, "null data");
  refused({view("x", "F32", {-6}, data)}, "negative dimension");
}

TEST_CASE("write errors name the file and the OS error", "[checkpoint]") {
  ScratchDir dir;
  std::vector<float> data{1, 2};
  std::vector<TensorView> tensors{view("x", "F32", {2}, data)};

  const std::string missing_dir = dir.file("no/such/dir/ckpt.safetensors");
  CHECK_THROWS_WITH(xrun::write_safetensors(missing_dir, tensors),
                    Catch::Contains(missing_dir) && Catch::Contains("No such file or directory"));

  const std::string not_a_dir = dir.file("plain_file");
  xrun_test::write_bytes(not_a_dir, "x");
  CHECK_THROWS_WITH(xrun::write_safetensors(not_a_dir + "/ckpt.safetensors", tensors),
                    Catch::Contains("Not a directory"));
}

TEST_CASE("a failed write leaves the previous file intact and no temporary file", "[checkpoint]") {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<float> old_data{1, 2, 3};
  xrun::write_safetensors(path, {view("old", "F32", {3}, old_data)}, {{"epoch", "1"}});
  const std::string before = xrun_test::read_bytes(path);

  // Simulate a full disk: a file size limit makes write() fail with EFBIG.
  std::vector<float> big(1 << 18);  // 1 MiB
  struct rlimit saved {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto saved_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = saved;
  limited.rlim_cur = 64 * 1024;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  std::string message;
  try {
    xrun::write_safetensors(path, {view("big", "F32", {1 << 18}, big)}, {{"epoch", "2"}});
  } catch (const CheckpointError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, saved_handler);

  CHECK_THAT(message, Catch::Contains(path) && Catch::Contains("File too large"));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  CHECK(xrun_test::read_bytes(path) == before);
  auto f = SafetensorsFile::open(path);
  CHECK(f.get("old").to_vector<float>() == old_data);
}
