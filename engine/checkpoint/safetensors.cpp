// engine/checkpoint/safetensors.cpp: the safetensors writer (atomic: temp
// file, fsync, rename) and the validating, memory-mapped reader.
#include "engine/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping");

namespace xrun {
namespace {

using ordered_json = nlohmann::ordered_json;

// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A header nests 3 levels ({"name": {"shape": [...]}}); deeper values are
// refused while parsing, before anything recursive (printing a value in a
// message) can run out of stack on a hostile [[[[...]]]].
constexpr int kMaxHeaderDepth = 16;

struct DtypeInfo {
  const char* name;
  int bits;
};

// Every dtype of the reference implementation (safetensors 0.6).
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 8},     {"U8", 8},       {"I8", 8},       {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8},  {"I16", 16},     {"U16", 16},     {"F16", 16},    {"BF16", 16},
    {"I32", 32},     {"U32", 32},     {"F32", 32},     {"F64", 64},    {"I64", 64},
    {"U64", 64},     {"C64", 64},     {"F4", 4},       {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

std::string os_error(int err) { return std::strerror(err); }

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw CheckpointError("invalid safetensors file '" + path + "': " + what);
}

// Byte size without a file name; callers add context to the message.
size_t byte_size_or_throw(const std::string& dtype, std::span<const int64_t> shape) {
  int bits = safetensors_dtype_bits(dtype);
  if (bits == 0) throw CheckpointError("unknown dtype \"" + dtype + "\"");
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw CheckpointError("negative dimension " + std::to_string(d));
    if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / 64 / static_cast<uint64_t>(d))
      throw CheckpointError("tensor size overflows");
    numel *= static_cast<uint64_t>(d);
  }
  uint64_t total_bits = numel * static_cast<uint64_t>(bits);
  if (total_bits % 8 != 0)
    throw CheckpointError(std::to_string(numel) + " elements of " + dtype +
                          " do not fill whole bytes");
  if (total_bits / 8 > std::numeric_limits<size_t>::max())
    throw CheckpointError("tensor size overflows");
  return static_cast<size_t>(total_bits / 8);
}

// --- writing ----------------------------------------------------------------

// An open temporary file that is closed and unlinked unless committed.
class TempFile {
 public:
  TempFile(std::string final_path) : final_(std::move(final_path)), tmp_(final_ + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create", errno);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      // Linux writes at most ~2 GiB per call; chunk so partial writes stay simple.
      size_t chunk = std::min<size_t>(size, size_t{1} << 30);
      ssize_t n = ::write(fd_, p, chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write", errno);
      }
      if (n == 0) fail("cannot write", EIO);
      p += n;
      size -= static_cast<size_t>(n);
    }
  }

  // fsync, close, rename over the final path, then fsync the directory so the
  // rename itself survives a crash (best effort: some filesystems refuse).
  void commit() {
    if (::fsync(fd_) != 0) fail("cannot fsync", errno);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close", errno);
    if (::rename(tmp_.c_str(), final_.c_str()) != 0) {
      int err = errno;
      throw CheckpointError("cannot write checkpoint '" + final_ + "': cannot rename '" + tmp_ +
                            "' to it: " + os_error(err));
    }
    committed_ = true;
    std::string dir = final_;
    auto slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  [[noreturn]] void fail(const char* what, int err) {
    throw CheckpointError("cannot write checkpoint '" + final_ + "': " + what + " '" + tmp_ +
                          "': " + os_error(err));
  }
  std::string final_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// --- reading ----------------------------------------------------------------

int64_t json_nonnegative_int(const nlohmann::json& v, const std::string& path,
                             const std::string& where) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad_file(path, where + " is too large");
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < 0) bad_file(path, where + " is negative (" + std::to_string(i) + ")");
    return i;
  }
  bad_file(path, where + " is not an integer: " + v.dump());
}

// The header's JSON as nlohmann's own parser builds it (objects are
// std::maps), recording the top-level keys in file order and the first one
// given twice, and stopping at values nested deeper than kMaxHeaderDepth.
// (Not ordered_json, whose inserts are linear, nor parse() with a callback,
// which scans the enclosing object after every object: either made a header
// of 40000 tensors take seconds and a 100 MB one hours.)
class HeaderSax : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit HeaderSax(nlohmann::json& out) : dom_(out, true) {}

  std::vector<std::string> key_order;  // top-level keys, first occurrences
  std::string duplicate;               // the first top-level key seen twice
  bool too_deep = false;

  bool null() override { return dom_.null(); }
  bool boolean(bool v) override { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) override { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) override { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) override { return dom_.number_float(v, s); }
  bool string(string_t& v) override { return dom_.string(v); }
  bool binary(binary_t& v) override { return dom_.binary(v); }
  bool start_object(std::size_t n) override { return deeper() && dom_.start_object(n); }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      if (keys_.insert(k).second) key_order.push_back(k);
      else if (duplicate.empty()) duplicate = k;
    }
    return dom_.key(k);
  }
  bool end_object() override {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) override { return deeper() && dom_.start_array(n); }
  bool end_array() override {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::json::exception& e) override {
    return dom_.parse_error(position, token, e);  // throws it
  }

 private:
  bool deeper() {
    if (++depth_ <= kMaxHeaderDepth) return true;
    too_deep = true;
    return false;  // stops the parser
  }
  nlohmann::detail::json_sax_dom_parser<nlohmann::json> dom_;
  std::set<std::string> keys_;
  int depth_ = 0;
};

}  // namespace

int safetensors_dtype_bits(const std::string& dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.bits;
  return 0;
}

size_t safetensors_byte_size(const std::string& dtype, std::span<const int64_t> shape) {
  return byte_size_or_throw(dtype, shape);
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  auto bad_tensor = [&](const TensorView& t, const std::string& what) {
    throw CheckpointError("cannot write checkpoint '" + path + "': tensor \"" + t.name + "\": " +
                          what);
  };
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name.empty()) bad_tensor(t, "empty name");
    if (t.name == "__metadata__") bad_tensor(t, "the name __metadata__ is reserved");
    if (!seen.insert(t.name).second) bad_tensor(t, "duplicate name");
    size_t expected = 0;
    try {
      expected = byte_size_or_throw(t.dtype, t.shape);
    } catch (const CheckpointError& e) {
      bad_tensor(t, e.what());
    }
    if (t.bytes != expected)
      bad_tensor(t, std::to_string(t.bytes) + " bytes given, " + t.dtype + " of this shape needs " +
                        std::to_string(expected));
    if (t.bytes > 0 && t.data == nullptr) bad_tensor(t, "null data");
  }

  // Largest elements first, so each tensor is aligned to its element size.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return safetensors_dtype_bits(tensors[a].dtype) > safetensors_dtype_bits(tensors[b].dtype);
  });

  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  size_t offset = 0;
  for (size_t i : order) {
    const auto& t = tensors[i];
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("cannot write checkpoint '" + path +
                          "': a tensor name or metadata string is not valid UTF-8 (" + e.what() +
                          ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();  // the host is little-endian (static_assert above)

  TempFile file(path);
  file.write(&n, sizeof n);
  file.write(text.data(), text.size());
  for (size_t i : order)
    if (tensors[i].bytes > 0) file.write(tensors[i].data, tensors[i].bytes);
  file.commit();
}

// --- SafetensorsFile --------------------------------------------------------

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, size);
  }
};

int64_t SafetensorsFile::Entry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void SafetensorsFile::Entry::check_element_size(size_t size) const {
  int bits = safetensors_dtype_bits(dtype);
  size_t element = bits % 8 == 0 ? static_cast<size_t>(bits / 8) : 1;
  if (size != element)
    throw CheckpointError("checkpoint '" + path_ + "': tensor \"" + name + "\" is " + dtype + " (" +
                          std::to_string(element) + "-byte elements), read as " +
                          std::to_string(size) + "-byte elements");
}

void SafetensorsFile::Entry::copy_to(void* dst, size_t dst_bytes) const {
  if (dst_bytes != bytes)
    throw CheckpointError("checkpoint '" + path_ + "': tensor \"" + name + "\" has " +
                          std::to_string(bytes) + " bytes, destination holds " +
                          std::to_string(dst_bytes));
  if (bytes > 0) std::memcpy(dst, data, bytes);
}

const SafetensorsFile::Entry& SafetensorsFile::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw CheckpointError("checkpoint '" + path_ + "' has no tensor \"" + name + "\"");
  return entries_[it->second];
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw CheckpointError("cannot open checkpoint '" + path + "': " + os_error(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw CheckpointError("cannot stat checkpoint '" + path + "': " + os_error(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    bad_file(path, "not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  f.file_size_ = size;
  if (size < 8) {
    ::close(fd);
    bad_file(path, "the file is " + std::to_string(size) +
                       " bytes, shorter than the 8-byte header length");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (addr == MAP_FAILED)
    throw CheckpointError("cannot map checkpoint '" + path + "': " + os_error(map_err));
  f.mapping_ = std::make_shared<Mapping>();
  f.mapping_->addr = addr;
  f.mapping_->size = size;
  const auto* bytes = static_cast<const std::byte*>(addr);

  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > kMaxHeaderBytes)
    bad_file(path, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  if (header_len > size - 8)
    bad_file(path, "truncated: expected at least " + std::to_string(8 + header_len) +
                       " bytes, found " + std::to_string(size) + " (the header length " +
                       std::to_string(header_len) + " exceeds the " + std::to_string(size - 8) +
                       " bytes after the length field)");
  std::string_view text(reinterpret_cast<const char*>(bytes) + 8, header_len);
  if (text.empty() || text.front() != '{')
    bad_file(path, "the header does not start with '{' (not a safetensors file?)");

  // Parse, refusing duplicate top-level keys (JSON parsers keep only one)
  // and values nested too deep (HeaderSax).
  nlohmann::json header;
  HeaderSax sax(header);
  bool parsed = false;
  try {
    parsed = nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (sax.too_deep)
    bad_file(path, "the header nests values more than " + std::to_string(kMaxHeaderDepth) +
                       " levels deep");
  if (!parsed) bad_file(path, "the header is not valid JSON");
  if (!sax.duplicate.empty()) bad_file(path, "the header names \"" + sax.duplicate + "\" twice");
  if (!header.is_object()) bad_file(path, "the header is not a JSON object");

  const size_t data_start = 8 + static_cast<size_t>(header_len);
  const size_t data_size = size - data_start;

  uint64_t beyond_end = 0;  // the furthest end of a tensor past the data section
  std::string beyond;       // that tensor's entry
  for (const std::string& key : sax.key_order) {
    const nlohmann::json& value = header.at(key);
    if (key == "__metadata__") {
      if (!value.is_object()) bad_file(path, "__metadata__ is not a JSON object");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string())
          bad_file(path, "__metadata__ value of \"" + m.key() + "\" is not a string: " +
                             m.value().dump());
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + key + "\"";
    if (!value.is_object()) bad_file(path, where + " is not a JSON object");
    if (!value.contains("dtype") || !value["dtype"].is_string())
      bad_file(path, where + " has no string \"dtype\"");
    if (!value.contains("shape") || !value["shape"].is_array())
      bad_file(path, where + " has no array \"shape\"");
    if (!value.contains("data_offsets") || !value["data_offsets"].is_array() ||
        value["data_offsets"].size() != 2)
      bad_file(path, where + " has no \"data_offsets\" pair");

    Entry e;
    e.name = key;
    e.path_ = path;
    e.dtype = value["dtype"].get<std::string>();
    if (safetensors_dtype_bits(e.dtype) == 0)
      bad_file(path, where + " has unknown dtype \"" + e.dtype + "\"");
    for (const auto& d : value["shape"]) e.shape.push_back(json_nonnegative_int(d, path, where + " shape"));
    int64_t begin = json_nonnegative_int(value["data_offsets"][0], path, where + " data_offsets");
    int64_t end = json_nonnegative_int(value["data_offsets"][1], path, where + " data_offsets");
    if (end < begin)
      bad_file(path, where + " has data_offsets [" + std::to_string(begin) + ", " +
                         std::to_string(end) + "] with end before begin");
    if (static_cast<uint64_t>(end) > data_size && static_cast<uint64_t>(end) > beyond_end) {
      beyond_end = static_cast<uint64_t>(end);
      beyond = where + " has data_offsets [" + std::to_string(begin) + ", " +
               std::to_string(end) + "] beyond the " + std::to_string(data_size) +
               "-byte data section";
    }
    size_t expected = 0;
    try {
      expected = byte_size_or_throw(e.dtype, e.shape);
    } catch (const CheckpointError& err) {
      bad_file(path, where + ": " + err.what());
    }
    e.offset = static_cast<size_t>(begin);
    e.bytes = static_cast<size_t>(end - begin);
    if (e.bytes != expected)
      bad_file(path, where + " has data_offsets [" + std::to_string(begin) + ", " +
                         std::to_string(end) + "] spanning " + std::to_string(e.bytes) +
                         " bytes, but " + e.dtype + " of its shape needs " +
                         std::to_string(expected));
    f.entries_.push_back(std::move(e));
  }
  // A whole header whose tensors reach past the end: the file was cut short
  // (a copy in progress, a full disk), which is what to say first.
  if (beyond_end > 0)
    bad_file(path, "truncated: expected " + std::to_string(data_start + beyond_end) +
                       " bytes, found " + std::to_string(size) + " (" + beyond + ")");
  for (Entry& e : f.entries_) e.data = bytes + data_start + e.offset;

  // File order; then the tensors must tile the data section exactly.
  std::stable_sort(f.entries_.begin(), f.entries_.end(), [](const Entry& a, const Entry& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
  });
  size_t cursor = 0;
  const Entry* previous = nullptr;
  for (const auto& e : f.entries_) {
    if (e.offset < cursor)
      bad_file(path, "tensor \"" + e.name + "\" [" + std::to_string(e.offset) + ", " +
                         std::to_string(e.offset + e.bytes) + ") overlaps tensor \"" +
                         previous->name + "\" [" + std::to_string(previous->offset) + ", " +
                         std::to_string(previous->offset + previous->bytes) + ")");
    if (e.offset > cursor)
      bad_file(path, "bytes [" + std::to_string(cursor) + ", " + std::to_string(e.offset) +
                         ") of the data section belong to no tensor (gap before \"" + e.name +
                         "\")");
    cursor = e.offset + e.bytes;
    previous = &e;
  }
  if (cursor != data_size)
    bad_file(path, "the tensors cover " + std::to_string(cursor) + " bytes but the data section has " +
                       std::to_string(data_size));

  for (size_t i = 0; i < f.entries_.size(); ++i) {
    f.names_.push_back(f.entries_[i].name);
    f.index_[f.entries_[i].name] = i;
  }
  return f;
}

}  // namespace xrun
