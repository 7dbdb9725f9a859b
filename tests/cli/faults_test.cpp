// tests/cli/faults_test.cpp: faults injected into real xrun processes (issue
// #10, part 4): a disk that fills during a run, stores that cannot be used,
// a dataset changed under a sweep, SIGKILL and resume, and several xrun
// processes writing one store at once. Each asserts the exit code, a message
// that says what and where, and that every run stored before the fault keeps
// its rows byte for byte and the file passes PRAGMA integrity_check.
#include <sys/mount.h>

#include "catch2_compat.h"
#include <set>

#include "cli_util.h"
#include "skip.h"

using Catch::Contains;
using xrun_test::CliFixture;
using xrun_test::run_args;
using xrun_test::read_bytes;
using xrun_test::shell_quote;
using xrun_test::tiny_experiment;

namespace {


// The rows of one run in every per-run table, as text: equal before and
// after a fault means not a byte of that run was lost or changed.
std::string run_rows(const CliFixture& f, int run) {
  const std::string r = std::to_string(run);
  std::string rows;
  for (const std::string& q :
       {"SELECT group_concat(uuid || status || config_hash || coalesce(throughput, ''), '|') FROM runs WHERE id = " + r,
        "SELECT group_concat(step || ':' || loss || ':' || step_ms, '|') FROM steps WHERE run = " + r,
        "SELECT group_concat(key || '=' || value, '|') FROM run_params WHERE run = " + r,
        "SELECT group_concat(phase || host_ms, '|') FROM phases WHERE run = " + r,
        "SELECT group_concat(key || '=' || value, '|') FROM run_environment WHERE run = " + r})
    rows += f.sql(q) + "\n";
  return rows;
}

std::string quick(const std::string& name, int steps = 2) {
  return tiny_experiment(name, "steps = " + std::to_string(steps) + "\neval = false\n");
}

// A small tmpfs mounted on a folder of the scratch dir (root only).
class SmallDisk {
 public:
  SmallDisk(const CliFixture& f, const std::string& size) : dir_(f.dir.file("disk")) {
    std::filesystem::create_directory(dir_);
    ok_ = ::geteuid() == 0 &&
          ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~SmallDisk() {
    if (ok_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return ok_; }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  // Fills the disk with a file, leaving about `free_kib` KiB.
  void fill_leaving(int free_kib) const {
    const auto space = std::filesystem::space(dir_);
    const auto size = space.available > static_cast<uintmax_t>(free_kib) * 1024
                          ? space.available - static_cast<uintmax_t>(free_kib) * 1024
                          : 0;
    xrun_test::write_bytes(file("filler"), std::string(size, '\0'));
  }

 private:
  std::string dir_;
  bool ok_ = false;
};

}  // namespace

TEST_CASE("faults: the disk fills during a run: exit 1, disk full said, earlier runs intact", "[cli][faults]") {
  CliFixture f;
  SmallDisk disk(f, "1m");
  if (!disk.ok()) {
    XRUN_SKIP("mounting a tmpfs needs root");
  }
  const std::string db = disk.file("r.db");
  const std::string first = f.write_experiment("first.toml", quick("first"));
  REQUIRE(f.xrun("run " + shell_quote(first) + " --db " + shell_quote(db)).status == 0);
  CliFixture view;  // to read the tmpfs store with the fixture's helpers
  std::filesystem::copy_file(db, view.db());
  const std::string before = run_rows(view, 1);

  // Room for the run's row, not for its steps.
  disk.fill_leaving(96);
  const std::string big = f.write_experiment("big.toml", quick("big", 400));
  auto r = f.xrun("run " + shell_quote(big) + " --db " + shell_quote(db));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains(db) && Contains("the disk is full"));
  // It stopped at the first failed write instead of training on.
  CHECK_THAT(r.output, !Contains("step 400/400"));

  // A trace written to the full disk leaves no truncated file, and an older
  // file of that name keeps its bytes.
  // (Written after the filler goes: the failed run may have taken the last
  // bytes, and "old" written to a full disk would be an empty file.)
  std::filesystem::remove(disk.file("filler"));
  xrun_test::write_bytes(disk.file("trace.json"), "old");
  REQUIRE(read_bytes(disk.file("trace.json")) == "old");
  disk.fill_leaving(8);
  const std::string traced = f.write_experiment(
      "traced.toml", tiny_experiment("traced", "steps = 8\neval = false",
                                     "[profile]\ncupti = \"trace\"\ntrace_steps = 6\nlayers = true\n"));
  CliFixture trace_store;
  REQUIRE(trace_store.xrun("run " + shell_quote(traced) + " --db " + shell_quote(trace_store.db())).status == 0);
  auto t = trace_store.xrun("trace 1 --db " + shell_quote(trace_store.db()) + " -o " +
                            shell_quote(disk.file("trace.json")));
  INFO(t.output);
  CHECK(t.status == 1);
  CHECK_THAT(t.output, Contains("trace.json") && Contains("the disk is full"));
  CHECK(read_bytes(disk.file("trace.json")) == "old");

  // Space again: the store is sound, the first run as it was, and the next
  // `xrun run` marks the cut-off run interrupted and trains it.
  std::filesystem::remove(disk.file("filler"));
  std::filesystem::copy_file(db, view.db(), std::filesystem::copy_options::overwrite_existing);
  for (const char* ext : {"-wal", "-shm"})
    if (std::filesystem::exists(db + ext))
      std::filesystem::copy_file(db + ext, view.db() + ext, std::filesystem::copy_options::overwrite_existing);
  CHECK(view.sql("PRAGMA integrity_check") == "ok");
  CHECK(run_rows(view, 1) == before);
  auto again = f.xrun("run " + shell_quote(big) + " --db " + shell_quote(db) + " --set train.steps=3");
  INFO(again.output);
  CHECK(again.status == 0);
  CHECK_THAT(again.output, Contains("marked interrupted"));
}

TEST_CASE("faults: stores xrun cannot use are refused with the reason, and left as they were", "[cli][faults]") {
  CliFixture f;
  const std::string file = f.write_experiment("e.toml", quick("e"));
  REQUIRE(f.xrun(run_args(f, file)).status == 0);
  const std::string good = read_bytes(f.db());

  struct Case {
    std::string name, bytes, run_message, read_message;
  } cases[] = {
      {"corrupt.db", "SQLite format 3" + std::string(1, '\0') + std::string(4000, '\x5a'),
       "not an SQLite database", "not an SQLite database"},
      {"text.db", "just some text, not a database at all, long enough to have a header.......",
       "not an SQLite database", "not an SQLite database"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string path = f.dir.file(c.name);
    xrun_test::write_bytes(path, c.bytes);
    auto run = f.xrun("run " + shell_quote(file) + " --db " + shell_quote(path));
    CHECK(run.status == 1);
    CHECK_THAT(run.output, Contains(path) && Contains(c.run_message));
    auto runs = f.xrun("runs --db " + shell_quote(path));
    CHECK(runs.status == 1);
    CHECK_THAT(runs.output, Contains(path) && Contains(c.read_message));
    CHECK(read_bytes(path) == c.bytes);
  }

  // A SQLite database that is not xrun's.
  const std::string foreign = f.dir.file("foreign.db");
  REQUIRE(xrun_test::run_command("sqlite3 " + shell_quote(foreign) +
                                 " 'CREATE TABLE invoices (id INTEGER); INSERT INTO invoices VALUES (7)'").status == 0);
  const std::string foreign_bytes = read_bytes(foreign);
  for (const std::string& cmd : {"run " + shell_quote(file), std::string("runs"), std::string("show 1")}) {
    auto r = f.xrun(cmd + " --db " + shell_quote(foreign));
    INFO(cmd << "\n" << r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains("not an xrun store") && Contains("invoices"));
  }
  CHECK(read_bytes(foreign) == foreign_bytes);

  // A store written by a newer xrun.
  const std::string newer = f.dir.file("newer.db");
  std::filesystem::copy_file(f.db(), newer);
  REQUIRE(xrun_test::run_command("sqlite3 " + shell_quote(newer) + " 'PRAGMA user_version = 999'").status == 0);
  const std::string newer_bytes = read_bytes(newer);
  for (const std::string& cmd : {"run " + shell_quote(file), std::string("runs")}) {
    auto r = f.xrun(cmd + " --db " + shell_quote(newer));
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains("schema version 999 is newer than this xrun"));
  }
  CHECK(read_bytes(newer) == newer_bytes);

  // A read-only directory: reading works, training says why it cannot.
  xrun_test::ReadOnlyDir read_only(f.dir.str());
  if (!read_only.ok()) {
    XRUN_SKIP("the read-only part: " << read_only.why());
  }
  for (const std::string cmd : {"runs", "show 1", "export --format json", "compare --by label"}) {
    auto r = f.xrun(cmd + " --db " + shell_quote(f.db()));
    INFO(cmd << "\n" << r.output);
    CHECK(r.output.find("readonly") == std::string::npos);
    CHECK(r.output.find("sqlite error") == std::string::npos);
    if (cmd != "compare --by label") CHECK(r.status == 0);  // compare: one run, nothing to pair
  }
  CliFixture elsewhere;  // merge takes a store in a read-only directory as an input
  auto merged = elsewhere.xrun("merge --into " + shell_quote(elsewhere.db()) + " " + shell_quote(f.db()));
  INFO(merged.output);
  CHECK(merged.status == 0);
  CHECK(elsewhere.sql("SELECT count(*) FROM runs") == "1");
  auto blocked = f.xrun(run_args(f, file) + " --force");
  INFO(blocked.output);
  CHECK(blocked.status == 1);
  CHECK_THAT(blocked.output, Contains("the store cannot be written: its file or directory is read-only"));
  CHECK(read_bytes(f.db()) == good);
}

TEST_CASE("faults: a dataset file truncated between the runs of a sweep fails the later runs only", "[cli][faults]") {
  CliFixture f;
  // A small IDX dataset: 64 images of 8x8, 10 classes.
  std::filesystem::create_directory(f.dir.file("data"));
  auto be32 = [](uint32_t v) {
    return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  };
  std::string images = be32(0x803) + be32(64) + be32(8) + be32(8), labels = be32(0x801) + be32(64);
  for (int i = 0; i < 64; ++i) {
    for (int p = 0; p < 64; ++p) images += char((i * 13 + p * 7) & 0xff);
    labels += char(i % 10);
  }
  for (const char* split : {"train", "t10k"}) {
    xrun_test::write_bytes(f.dir.file(std::string("data/") + split + "-images-idx3-ubyte"), images);
    xrun_test::write_bytes(f.dir.file(std::string("data/") + split + "-labels-idx1-ubyte"), labels);
  }
  const std::string file = f.write_experiment("idx.toml", R"(name = "idx"
[model]
arch = "resnet18"
[data]
source = "idx"
path = "data"
image_size = 16
[train]
device = "cpu"
batch_size = 16
steps = 3
eval = false
[measure]
warmup_steps = 1
[sweep]
train.seed = [1, 2]
)");
  REQUIRE(f.xrun(run_args(f, file) + " --only 0").status == 0);
  const std::string before = run_rows(f, 1);
  // Cut the images file mid-record, as a copy still in progress would.
  xrun_test::write_bytes(f.dir.file("data/train-images-idx3-ubyte"), images.substr(0, 1000));
  auto r = f.xrun(run_args(f, file));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(f.sql("SELECT error FROM runs WHERE id = 2"),
             Contains("train-images-idx3-ubyte") && Contains("truncated") && Contains("1000 bytes"));
  CHECK(run_rows(f, 1) == before);
  CHECK(f.sql("PRAGMA integrity_check") == "ok");
}

TEST_CASE("faults: SIGKILL mid-run, then xrun run again: interrupted, resumed, store sound", "[cli][faults]") {
  CliFixture f;
  const std::string file = f.write_experiment(
      "k.toml", xrun_test::small_experiment("k", "[sweep]\ntrain.seed = [1, 2]\n"));
  REQUIRE(f.xrun(run_args(f, file) + " --only 0 --set train.epochs=1").status == 0);
  const std::string before = run_rows(f, 1);
  const pid_t pid = xrun_test::spawn_xrun(f, file, {"--only", "1"});
  REQUIRE(xrun_test::wait_for_steps(f, 50, pid));
  kill(pid, SIGKILL);
  CHECK(xrun_test::wait_exit(pid) == 128 + SIGKILL);
  CHECK(f.sql("PRAGMA integrity_check") == "ok");
  CHECK(f.sql("SELECT status FROM runs WHERE id = 2") == "running");

  auto r = f.xrun(run_args(f, file) + " --set train.epochs=1");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Contains("1 run(s) left running by an ended xrun process marked interrupted"));
  CHECK(f.sql("SELECT status FROM runs WHERE id = 2") == "interrupted");
  CHECK(f.sql("SELECT count(*) FROM runs WHERE status = 'complete'") == "2");
  CHECK(run_rows(f, 1) == before);
  CHECK(f.sql("PRAGMA integrity_check") == "ok");
}

TEST_CASE("faults: two and four xrun processes write one store at once, nothing lost or locked", "[cli][faults]") {
  SECTION("four processes, four experiments") {
    CliFixture f;
    std::vector<pid_t> pids;
    for (int i = 0; i < 4; ++i) {
      const std::string name = "c" + std::to_string(i);
      const std::string file = f.write_experiment(name + ".toml", quick(name, 12));
      pids.push_back(xrun_test::spawn_xrun(f, file, {}, name + ".log"));
    }
    for (size_t i = 0; i < pids.size(); ++i) {
      const int rc = xrun_test::wait_exit(pids[i]);
      const std::string log = read_bytes(f.dir.file("c" + std::to_string(i) + ".log"));
      INFO(log);
      CHECK(rc == 0);
      CHECK(log.find("locked") == std::string::npos);
    }
    CHECK(f.sql("SELECT count(*) FROM runs WHERE status = 'complete'") == "4");
    CHECK(f.sql("SELECT count(*) FROM steps") == "48");  // 4 x 12, every step
    CHECK(f.sql("SELECT count(DISTINCT run) FROM steps") == "4");
    CHECK(f.sql("PRAGMA integrity_check") == "ok");
  }
  SECTION("two processes, one sweep: each config trained once") {
    CliFixture f;
    const std::string file = f.write_experiment(
        "s.toml", quick("s", 12) + "[sweep]\ntrain.seed = [1, 2, 3, 4]\n");
    const pid_t a = xrun_test::spawn_xrun(f, file, {}, "a.log");
    const pid_t b = xrun_test::spawn_xrun(f, file, {}, "b.log");
    const int ra = xrun_test::wait_exit(a), rb = xrun_test::wait_exit(b);
    const std::string logs = read_bytes(f.dir.file("a.log")) + read_bytes(f.dir.file("b.log"));
    INFO(logs);
    CHECK(ra == 0);
    CHECK(rb == 0);
    CHECK(logs.find("locked") == std::string::npos);
    // Four configs, each complete exactly once, whichever process took it.
    CHECK(f.sql("SELECT count(*) FROM runs") == "4");
    CHECK(f.sql("SELECT count(DISTINCT config_hash) FROM runs WHERE status = 'complete'") == "4");
    CHECK(f.sql("SELECT count(*) FROM steps") == "48");
    CHECK(f.sql("PRAGMA integrity_check") == "ok");
  }
}
