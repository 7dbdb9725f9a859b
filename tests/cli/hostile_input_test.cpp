// tests/cli/hostile_input_test.cpp: what a hostile or careless user tried on
// the xrun binary (issue #10, part 6), one case per defect found: each runs
// the real binary on real files and asserts the exit code, the message and
// that no stored byte was lost.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "catch2_compat.h"
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_util.h"

using Catch::Contains;
using Catch::StartsWith;
using xrun_test::CliFixture;
using xrun_test::run_args;
using xrun_test::read_bytes;
using xrun_test::shell_quote;
using xrun_test::tiny_experiment;

namespace {

// A two-step CPU run: seconds, not minutes.
std::string quick(const std::string& name, const std::string& train_extra = "") {
  return tiny_experiment(name, "steps = 2\neval = false\n" + train_extra);
}


// A store holding one complete run, and its bytes.
std::string stored_run(const CliFixture& f) {
  const std::string file = f.write_experiment("one.toml", quick("one"));
  const auto r = f.xrun(run_args(f, file));
  INFO(r.output);
  REQUIRE(r.status == 0);
  return read_bytes(f.db());
}

// Runs `xrun ARGS REDIRECTIONS` in a subshell: its standard error (and
// whatever the redirections leave on standard output) comes back.
xrun_test::CommandResult xrun_shell(const CliFixture& f, const std::string& args_and_redirections) {
  return xrun_test::run_command("( cd " + shell_quote(f.dir.str()) + " && " +
                                shell_quote(xrun_test::xrun_binary()) + " " +
                                args_and_redirections + " )");
}

// Runs the binary with standard output and standard error kept apart.
struct SplitResult {
  int status;
  std::string out, err;
};
SplitResult xrun_split(const CliFixture& f, const std::string& args) {
  const std::string err_file = f.dir.file("stderr.txt");
  const auto r = xrun_test::run_command("( cd " + shell_quote(f.dir.str()) + " && " +
                                        shell_quote(xrun_test::xrun_binary()) + " " + args +
                                        " 2>" + shell_quote(err_file) + " )");
  return {r.status, r.output, read_bytes(err_file)};
}

}  // namespace

TEST_CASE("hostile: train.checkpoint never overwrites the store, the experiment or a foreign file", "[cli][hostile]") {
  CliFixture f;
  const std::string before = stored_run(f);
  const std::string file = f.write_experiment("ck.toml", quick("ck"));

  // The store itself (and its WAL companions) by any spelling of its path.
  for (const std::string& target : {f.db(), f.dir.file("./results.db"), f.db() + "-wal"}) {
    auto r = f.xrun(run_args(f, file) + " --set " + shell_quote("train.checkpoint=\"" + target + "\""));
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("would overwrite the result store"));
  }
  // The experiment file.
  auto self = f.xrun(run_args(f, file) + " --set " + shell_quote("train.checkpoint=\"" + file + "\""));
  CHECK(self.status == 2);
  CHECK_THAT(self.output, Contains("would overwrite the experiment file"));
  // An existing file that is not an xrun checkpoint, and a directory.
  xrun_test::write_bytes(f.dir.file("notes.txt"), "precious");
  auto foreign = f.xrun(run_args(f, file) + " --set train.checkpoint='\"notes.txt\"'");
  CHECK(foreign.status == 2);
  CHECK_THAT(foreign.output, Contains("notes.txt exists and is not an xrun checkpoint"));
  CHECK(read_bytes(f.dir.file("notes.txt")) == "precious");
  std::filesystem::create_directory(f.dir.file("ckdir"));
  auto dir = f.xrun(run_args(f, file) + " --set train.checkpoint='\"ckdir\"'");
  CHECK(dir.status == 2);
  CHECK_THAT(dir.output, Contains("is a directory"));

  // Nothing was trained or written by any of them.
  CHECK(read_bytes(f.db()) == before);
  CHECK(read_bytes(file) == quick("ck"));

  // An xrun checkpoint may be replaced: the same run twice.
  const std::string ckpt = " --set train.checkpoint='\"run.safetensors\"'";
  REQUIRE(f.xrun(run_args(f, file) + ckpt).status == 0);
  auto again = f.xrun(run_args(f, file) + ckpt + " --force");
  INFO(again.output);
  CHECK(again.status == 0);
  CHECK(f.sql("SELECT count(*) FROM runs WHERE status = 'complete'") == "3");
}

TEST_CASE("hostile: a zip sweep has the grid's 10,000-run cap", "[cli][hostile]") {
  CliFixture f;
  std::string seeds;
  for (int i = 0; i <= 10000; ++i) {
    if (i) seeds += ',';
    seeds += std::to_string(i);
  }
  const std::string file = f.write_experiment(
      "zip.toml", quick("zip") + "[sweep]\nmode = \"zip\"\ntrain.seed = [" + seeds + "]\n");
  auto r = f.xrun("plan " + shell_quote(file));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("the zip has 10001 runs, more than 10000"));
}

TEST_CASE("hostile: a corrupt store is found before training, and nothing is trained", "[cli][hostile]") {
  CliFixture f;
  stored_run(f);
  // Garbage in the middle of the steps table's b-tree page: the header and
  // schema still read, so only an integrity check finds it.
  const std::string page = f.sql("SELECT rootpage FROM sqlite_master WHERE name = 'steps'");
  {
    std::fstream db(f.db(), std::ios::in | std::ios::out | std::ios::binary);
    db.seekp((std::stol(page) - 1) * 4096 + 8);
    db << std::string(64, '\xff');
  }
  const std::string damaged = read_bytes(f.db());
  const std::string file = f.write_experiment("two.toml", quick("two"));
  auto r = f.xrun(run_args(f, file));
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("is damaged") && Contains("nothing trained") && Contains(".recover"));
  CHECK_THAT(r.output, !Contains("\n\n"));  // SQLite's lines joined into one message
  CHECK_FALSE(Contains("run 1/1").match(r.output));
  CHECK(read_bytes(f.db()) == damaged);
}

TEST_CASE("hostile: SIGTERM and SIGHUP stop a run like Ctrl-C: stored interrupted, 128 + signal", "[cli][hostile]") {
  for (const int sig : {SIGTERM, SIGHUP}) {
    INFO("signal " << sig);
    CliFixture f;
    const std::string file =
        f.write_experiment("long.toml", xrun_test::small_experiment("long"));
    const pid_t pid = xrun_test::spawn_xrun(f, file);
    REQUIRE(xrun_test::wait_for_steps(f, 3, pid));
    kill(pid, sig);
    CHECK(xrun_test::wait_exit(pid) == 128 + sig);
    CHECK(f.sql("SELECT status FROM runs") == "interrupted");
    CHECK_THAT(f.sql("SELECT error FROM runs"), Contains("interrupted before step"));
    CHECK(std::stoi(f.sql("SELECT count(*) FROM steps")) >= 3);
  }
}

TEST_CASE("hostile: CSV cells a spreadsheet would run as formulas are neutralised, numbers kept", "[cli][hostile]") {
  CliFixture f;
  const std::string file = f.write_experiment("f.toml", quick("f"));
  REQUIRE(f.xrun(run_args(f, file) + " --set " + shell_quote("store.label=\"=HYPERLINK(1)\"")).status == 0);
  REQUIRE(f.xrun(run_args(f, file) + " --set " + shell_quote("store.label=\"@SUM(A1)\"")).status == 0);
  // A label that reads as a number is a number to a spreadsheet, not a formula.
  REQUIRE(f.xrun(run_args(f, file) + " --set " + shell_quote("store.label=\"-1.5\"")).status == 0);
  for (const std::string cmd : {"export --format csv", "runs --format csv"}) {
    auto r = f.xrun(cmd + " --db " + shell_quote(f.db()));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.output, Contains(",'=HYPERLINK(1),") && Contains(",'@SUM(A1),") && Contains(",-1.5,"));
    CHECK_THAT(r.output, !Contains(",=HYPERLINK") && !Contains(",@SUM") && !Contains(",'-1.5"));
  }
}

TEST_CASE("hostile: a --where key that is no column and no setting is exit 2, naming the closest", "[cli][hostile]") {
  CliFixture f;
  stored_run(f);
  const std::string db = " --db " + shell_quote(f.db());
  for (const std::string cmd : {"runs", "export", "report -o r.html", "compare --by label"}) {
    auto r = f.xrun(cmd + " --where stauts=complete" + db);
    INFO(cmd << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("unknown key 'stauts'") && Contains("did you mean 'status'"));
  }
  auto setting = f.xrun("runs --where train.batchsize=16" + db);
  CHECK(setting.status == 2);
  CHECK_THAT(setting.output, Contains("did you mean 'train.batch_size'"));
  // Known keys still filter.
  auto ok = f.xrun("runs --where status=complete --where train.batch_size=16 --format csv" + db);
  CHECK(ok.status == 0);
  CHECK_THAT(ok.output, Contains(",one,"));
}

TEST_CASE("hostile: an experiment file that is a device or too large is refused, exit 2", "[cli][hostile]") {
  CliFixture f;
  auto zero = f.xrun("plan /dev/zero");
  CHECK(zero.status == 2);
  CHECK_THAT(zero.output, Contains("/dev/zero: is not a regular file"));
  std::string big = "name = \"big\"\n";
  while (big.size() <= (1 << 20)) big += "# " + std::string(1000, 'x') + "\n";
  const std::string file = f.write_experiment("big.toml", big);
  auto r = f.xrun("plan " + shell_quote(file));
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("larger than 1024 KiB"));
  auto dir = f.xrun("plan " + shell_quote(f.dir.str()));
  CHECK(dir.status == 2);
  CHECK_THAT(dir.output, Contains("is a directory, not an experiment file"));
}

TEST_CASE("hostile: a write error on standard output is exit 1, not a silent 0", "[cli][hostile]") {
  CliFixture f;
  stored_run(f);
  const std::string db = " --db " + shell_quote(f.db());
  for (const std::string& cmd :
       {"runs --format csv" + db, "show 1" + db, "export --format json" + db,
        "plan " + shell_quote(xrun_test::source_path("experiments/quickstart.toml"))}) {
    auto r = xrun_shell(f, cmd + " > /dev/full");
    INFO(cmd << "\n" << r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains("writing to standard output failed"));
  }
}

TEST_CASE("hostile: show prints '-' and JSON null for a run that stored no figures", "[cli][hostile]") {
  CliFixture f;
  const std::string file = f.write_experiment("gone.toml", R"(name = "gone"
[data]
source = "idx"
path = "no-such-dir"
[train]
device = "cpu"
steps = 2
[measure]
warmup_steps = 1
)");
  REQUIRE(f.xrun(run_args(f, file)).status == 1);
  auto text = f.xrun("show 1 --db " + shell_quote(f.db()));
  INFO(text.output);
  CHECK(text.status == 0);
  CHECK_THAT(text.output, Contains("no figures: the run ended (failed)"));
  CHECK_THAT(text.output, !Contains("0.0 img/s") && !Contains("0.0000") && !Contains("0.00%"));
  auto json = f.xrun("show 1 --json --db " + shell_quote(f.db()));
  REQUIRE(json.status == 0);
  const auto j = nlohmann::json::parse(json.output);
  CHECK(j.at("throughput").is_null());
  CHECK(j.at("step_ms_median").is_null());
  CHECK(j.at("final_loss").is_null());
  auto table = f.xrun("runs --db " + shell_quote(f.db()));
  CHECK_THAT(table.output, Contains("failed") && !Contains(" 0.0 "));
}

TEST_CASE("hostile: names and labels are printable, one line and bounded", "[cli][hostile]") {
  CliFixture f;
  struct Case {
    std::string name, label, expect;
  } cases[] = {
      {"a\\u0000b", "", "name: expected printable text, found a control character (\\u0000)"},
      {"ok", "two\\nlines", "store.label: expected printable text, found a control character (\\u000A)"},
      {"ok", std::string(129, 'L'), "store.label: expected at most 128 bytes, found a string of 129"},
      {std::string(129, 'N'), "", "name: expected at most 128 bytes"},
  };
  for (const auto& c : cases) {
    std::string toml = "name = \"" + c.name + "\"\n";
    if (!c.label.empty()) toml += "[store]\nlabel = \"" + c.label + "\"\n";
    const std::string file = f.write_experiment("n.toml", toml);
    auto r = f.xrun("plan " + shell_quote(file));
    INFO(toml << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains(c.expect));
  }
  // Free text may span lines; an accented or CJK label is fine.
  const std::string ok = f.write_experiment(
      "ok.toml", "name = \"ok\"\ndescription = \"line one\\nline two\"\n[store]\nlabel = \"Grafikkarte-Ü 東京\"\n");
  CHECK(f.xrun("plan " + shell_quote(ok)).status == 0);
}

TEST_CASE("hostile: messages say what is wrong in the user's words", "[cli][hostile]") {
  CliFixture f;
  const std::string db = " --db " + shell_quote(f.db());

  auto bogus = f.xrun("bogus");
  CHECK(bogus.status == 2);
  CHECK_THAT(bogus.output, Contains("unknown command 'bogus'") && Contains("commands: plan, run"));
  CHECK_THAT(f.xrun("rnu x.toml").output, Contains("did you mean 'run'?"));

  const auto doctor = xrun_split(f, "doctor --require tpu");
  CHECK(doctor.status == 2);
  CHECK(doctor.out.empty());
  CHECK_THAT(doctor.err, Contains("--require tpu: unknown device (expected cpu or cuda)"));

  const std::string file = f.write_experiment("m.toml", quick("m"));
  auto label = f.xrun(run_args(f, file) + " --set store.label='<script>'");
  CHECK(label.status == 2);
  CHECK_THAT(label.output, Contains("--set store.label=<script>") &&
                               Contains("put text in quotes: --set 'store.label=\"...\"'"));
  for (const std::string only : {"''", "x", "1,", "-1", "99999999999"}) {
    auto r = f.xrun(run_args(f, file) + " --only " + only);
    INFO(only << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("--only"));
  }
  CHECK_FALSE(std::filesystem::exists(f.db()));

  auto passwd = f.xrun(run_args(f, file) + " --set data.source='\"idx\"' --set data.path='\"/etc/passwd\"'");
  CHECK(passwd.status == 1);
  CHECK_THAT(f.sql("SELECT error FROM runs"), Contains("'/etc/passwd' is a file, not a directory"));

  for (const std::string cmd : {"show d", "show 1x", "trace zz"}) {
    auto r = f.xrun(cmd + db);
    INFO(cmd << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("is not a run: give its id (a number) or at least the first 4"));
  }

  std::filesystem::create_directory(f.dir.file("adir"));
  auto run_dir = f.xrun("run " + shell_quote(file) + " --db adir");
  CHECK(run_dir.status == 2);
  CHECK_THAT(run_dir.output, Contains("--db adir is a directory; give a file (adir/xrun.db)"));
  auto runs_dir = f.xrun("runs --db adir");
  CHECK(runs_dir.status == 1);
  CHECK_THAT(runs_dir.output, Contains("adir is a directory, not a result store file"));
}

TEST_CASE("hostile: plan refuses the devices run refuses, or says run would refuse them here", "[cli][hostile]") {
  CliFixture f;
  const std::string file =
      f.write_experiment("gpu.toml", "name = \"gpu\"\n[train]\ndevice = \"cuda:99\"\nprecision = \"fp16\"\n");
  auto plan = f.xrun("plan " + shell_quote(file));
  auto run = f.xrun("run " + shell_quote(file) + " --db " + shell_quote(f.db()));
  INFO(plan.output << "\n" << run.output);
  CHECK(run.status == 2);
  CHECK_THAT(run.output, Contains("cuda:99"));
  // Either plan fails the same way (a machine with GPUs), or it plans the
  // file for another machine and notes that run would refuse it here.
  if (plan.status == 2) {
    CHECK_THAT(plan.output, Contains("device cuda:99: this machine has"));
  } else {
    CHECK(plan.status == 0);
    CHECK_THAT(plan.output, Contains("`xrun run` on this machine would refuse it") && Contains("cuda:99"));
  }
}

TEST_CASE("hostile: a read-only command on an empty file leaves it empty", "[cli][hostile]") {
  CliFixture f;
  xrun_test::write_bytes(f.db(), "");
  for (const std::string cmd : {"runs", "show 1", "export", "report -o r.html"}) {
    auto r = f.xrun(cmd + " --db " + shell_quote(f.db()));
    INFO(cmd << "\n" << r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains("an empty database, not an xrun store"));
    CHECK(std::filesystem::file_size(f.db()) == 0);
  }
  CHECK(std::distance(std::filesystem::directory_iterator(f.dir.path()),
                      std::filesystem::directory_iterator()) == 1);  // no -wal, -shm, report
}

TEST_CASE("hostile: the runs table aligns labels of any script by terminal columns", "[cli][hostile]") {
  CliFixture f;
  const std::string file = f.write_experiment("w.toml", quick("w"));
  for (const std::string label : {"plain", "Grafikkarte-Ü", "東京-box", "a-very-long-label-that-is-cut"})
    REQUIRE(f.xrun(run_args(f, file) + " --force --set " + shell_quote("store.label=\"" + label + "\"")).status == 0);
  auto r = f.xrun("runs --db " + shell_quote(f.db()));
  REQUIRE(r.status == 0);
  // The column after the label ("cpu") starts at the same terminal column on
  // every row: count UTF-8 code points, East Asian ones twice.
  std::istringstream lines(r.output);
  std::string line;
  std::set<size_t> columns;
  int rows = 0;
  while (std::getline(lines, line)) {
    const size_t at = line.find(" cpu ");
    if (at == std::string::npos) continue;
    ++rows;
    size_t width = 0;
    for (size_t i = 0; i < at;) {
      const auto b = static_cast<unsigned char>(line[i]);
      const size_t len = b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
      width += len == 3 ? 2 : 1;  // the CJK characters here are 3 bytes, 2 columns
      i += len;
    }
    columns.insert(width);
  }
  CHECK(rows == 4);
  CHECK(columns.size() == 1);
}

TEST_CASE("hostile: invalid UTF-8 written into a store by another program is shown, not a crash", "[cli][hostile]") {
  CliFixture f;
  stored_run(f);
  REQUIRE(xrun_test::run_command("sqlite3 " + shell_quote(f.db()) +
                                 " \"UPDATE runs SET label = CAST(X'66ff6f' AS TEXT)\"").status == 0);
  const std::string db = " --db " + shell_quote(f.db());
  auto runs = f.xrun("runs --format json" + db);
  INFO(runs.output);
  REQUIRE(runs.status == 0);
  CHECK(nlohmann::json::parse(runs.output).at(0).at("label") == "f\xEF\xBF\xBDo");  // U+FFFD
  auto show = f.xrun("show 1 --json" + db);
  CHECK(show.status == 0);
  CHECK_NOTHROW(nlohmann::json::parse(show.output));
  CHECK(f.xrun("export --format json" + db).status == 0);
  CHECK(f.xrun("report -o r.html" + db).status == 0);
}

namespace {

// A shell command line run in the scratch directory.
xrun_test::CommandResult in_dir(const CliFixture& f, const std::string& command) {
  return xrun_test::run_command("cd " + shell_quote(f.dir.str()) + " && { " + command + "; }");
}

}  // namespace

TEST_CASE("hostile: -o naming the store being read is refused, by path, symlink or hard link", "[cli][hostile]") {
  CliFixture f;
  const std::string before = stored_run(f);
  std::filesystem::create_symlink(f.db(), f.dir.file("link.db"));
  std::filesystem::create_hard_link(f.db(), f.dir.file("hard.db"));
  const std::string db = " --db " + shell_quote(f.db());
  for (const std::string cmd : {"export", "export --format json", "report", "trace 1"})
    for (const std::string& target : {std::string("results.db"), std::string("./results.db"), f.db(),
                                     std::string("link.db"), std::string("hard.db")}) {
      auto r = f.xrun(cmd + db + " -o " + shell_quote(target));
      INFO(cmd << " -o " << target << "\n" << r.output);
      CHECK(r.status == 2);
      CHECK_THAT(r.output, Contains("is the result store being read"));
    }
  CHECK(read_bytes(f.db()) == before);
  CHECK(std::filesystem::is_symlink(f.dir.file("link.db")));
  // Another file is written as before.
  auto other = f.xrun("export" + db + " -o runs.csv");
  CHECK(other.status == 0);
  CHECK_THAT(read_bytes(f.dir.file("runs.csv")), StartsWith("id,uuid,"));
}

TEST_CASE("hostile: -o writes through a FIFO, a device, a symlink and - instead of replacing them", "[cli][hostile]") {
  CliFixture f;
  stored_run(f);
  const std::string db = " --db " + shell_quote(f.db());
  auto is = [](const std::string& path, mode_t type) {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0 && (st.st_mode & S_IFMT) == type;
  };

  // A FIFO: its reader gets the CSV and the FIFO stays (a reader left
  // waiting on a replaced FIFO is ended by timeout).
  REQUIRE(::mkfifo(f.dir.file("out.fifo").c_str(), 0600) == 0);
  auto fifo = in_dir(f, "timeout 20 cat out.fifo > got.csv & " +
                                shell_quote(xrun_test::xrun_binary()) + " export" + db +
                                " -o out.fifo; rc=$?; wait; exit $rc");
  INFO(fifo.output);
  CHECK(fifo.status == 0);
  CHECK(is(f.dir.file("out.fifo"), S_IFIFO));
  CHECK_THAT(read_bytes(f.dir.file("got.csv")), StartsWith("id,uuid,"));

  // A symlink, dangling or not: its target is written, the link kept.
  std::filesystem::create_directory(f.dir.file("real"));
  xrun_test::write_bytes(f.dir.file("real/old.csv"), "old");
  std::filesystem::create_symlink("real/old.csv", f.dir.file("link.csv"));
  std::filesystem::create_symlink("real/new.json", f.dir.file("dangling.json"));
  CHECK(f.xrun("export" + db + " -o link.csv").status == 0);
  CHECK(f.xrun("export --format json" + db + " -o dangling.json").status == 0);
  CHECK(is(f.dir.file("link.csv"), S_IFLNK));
  CHECK(is(f.dir.file("dangling.json"), S_IFLNK));
  CHECK_THAT(read_bytes(f.dir.file("real/old.csv")), StartsWith("id,uuid,"));
  CHECK_NOTHROW(nlohmann::json::parse(read_bytes(f.dir.file("real/new.json"))));
  CHECK(f.xrun("report" + db + " -o link.csv").status == 0);
  CHECK(is(f.dir.file("link.csv"), S_IFLNK));
  CHECK_THAT(read_bytes(f.dir.file("real/old.csv")), Contains("<html"));

  // "-": standard output, no file named "-".
  auto dash = xrun_split(f, "export" + db + " -o -");
  CHECK(dash.status == 0);
  CHECK_THAT(dash.out, StartsWith("id,uuid,"));
  auto page = xrun_split(f, "report" + db + " -o -");
  CHECK(page.status == 0);
  CHECK_THAT(page.out, Contains("<html"));
  CHECK_THAT(page.err, Contains("wrote -"));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("-")));
  // A link to a magic link (as /dev/stdout is): standard output, link kept.
  std::filesystem::create_symlink("/proc/self/fd/1", f.dir.file("stdout-link"));
  auto linked = xrun_split(f, "export" + db + " -o stdout-link");
  CHECK(linked.status == 0);
  CHECK_THAT(linked.out, StartsWith("id,uuid,"));
  CHECK(is(f.dir.file("stdout-link"), S_IFLNK));

  // A device node (as root, a private /dev/null: the real one is never put
  // at risk by this test).
  if (::geteuid() == 0) {
    REQUIRE(::mknod(f.dir.file("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0);
    for (const std::string cmd : {"export", "report", "export --format json"}) {
      auto r = f.xrun(cmd + db + " -o null");
      INFO(cmd << "\n" << r.output);
      CHECK(r.status == 0);
      CHECK(is(f.dir.file("null"), S_IFCHR));
    }
  }
}

TEST_CASE("hostile: stored text with control characters is escaped on the terminal, kept in JSON and CSV", "[cli][hostile]") {
  CliFixture f;
  const std::string file = f.write_experiment("esc.toml", quick("esc"));
  for (const char* label : {"a", "b"})
    REQUIRE(f.xrun(run_args(f, file) + " --force --set store.label=" + label).status == 0);
  // What another program (or a merged store) may hold.
  const std::string evil = "'x' || char(27) || ']0;pwned' || char(7) || char(27) || '[2J' || char(155) || 'y'";
  REQUIRE(xrun_test::run_command("sqlite3 " + shell_quote(f.db()) + " " +
                                 shell_quote("UPDATE runs SET label = " + evil + " WHERE label = 'b';"
                                             " UPDATE runs SET error = 'e' || char(27) || '[31m' ||"
                                             " char(10) || 'second line';"
                                             " UPDATE run_environment SET value = " + evil +
                                             " WHERE key = 'device_name'")).status == 0);
  const std::string db = " --db " + shell_quote(f.db());
  for (const std::string cmd : {"runs", "show 1", "show 2", "compare --by label",
                                "compare --by label --format markdown"}) {
    auto r = xrun_split(f, cmd + db);
    INFO(cmd << "\n" << r.out << r.err);
    CHECK(r.status == 0);
    CHECK(r.out.find('\x1b') == std::string::npos);
    CHECK(r.out.find('\x07') == std::string::npos);
    CHECK(r.out.find("\xc2\x9b") == std::string::npos);
    CHECK(r.err.find('\x1b') == std::string::npos);
    // The runs table cuts labels at 14 columns.
    CHECK_THAT(r.out, Contains(cmd == "runs" ? "x\\e]0;pwned" : "x\\e]0;pwned\\x07\\e[2J\\u009by"));
  }
  CHECK_THAT(xrun_split(f, "show 1" + db).out, Contains("e\\e[31m\\nsecond line"));
  // JSON and CSV carry the text as it is stored (their own escaping).
  auto json = xrun_split(f, "runs --format json" + db);
  REQUIRE(json.status == 0);
  CHECK(nlohmann::json::parse(json.out).at(1).at("label") == "x\x1b]0;pwned\x07\x1b[2J\xc2\x9by");
  CHECK(xrun_split(f, "runs --format csv" + db).out.find("x\x1b]0;pwned") != std::string::npos);
}

TEST_CASE("hostile: --cpu-threads-per-run beyond train.threads' limit is exit 2, nothing stored", "[cli][hostile]") {
  CliFixture f;
  const std::string file = f.write_experiment("t.toml", quick("t"));
  for (const std::string n : {"100000", "2147483647", "-1"}) {
    auto r = f.xrun(run_args(f, file) + " --cpu-threads-per-run " + n);
    INFO(n << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("--cpu-threads-per-run " + n + ": expected 0 to 1024"));
  }
  CHECK_FALSE(std::filesystem::exists(f.db()));
  auto ok = f.xrun(run_args(f, file) + " --cpu-threads-per-run 1");
  INFO(ok.output);
  CHECK(ok.status == 0);
}

TEST_CASE("hostile: model.weights or train.checkpoint naming a FIFO is refused at once, exit 2", "[cli][hostile]") {
  CliFixture f;
  const std::string file = f.write_experiment("t.toml", quick("t"));
  REQUIRE(::mkfifo(f.dir.file("w.fifo").c_str(), 0600) == 0);
  for (const std::string key : {"model.weights", "train.checkpoint"}) {
    // timeout: a blocking open of the FIFO would wait for ever.
    auto r = in_dir(f, "timeout -k 5 20 " + shell_quote(xrun_test::xrun_binary()) + " " +
                               run_args(f, file) + " --set " + shell_quote(key + "=\"w.fifo\""));
    INFO(key << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains(key + " = \"w.fifo\": w.fifo is a FIFO (named pipe), not a safetensors file"));
  }
  CHECK_FALSE(std::filesystem::exists(f.db()));
}

TEST_CASE("hostile: an experiment file that is a FIFO is read once, also by run --parallel", "[cli][hostile]") {
  CliFixture f;
  const std::string toml = quick("fifo") + "[sweep]\ntrain.seed = [1, 2]\n";
  f.write_experiment("t.toml", toml);
  REQUIRE(::mkfifo(f.dir.file("exp.fifo").c_str(), 0600) == 0);
  // The writer gives the bytes once, as a pipe does; timeout: a child that
  // opens the FIFO again would wait for ever.
  auto r = in_dir(f, "cat t.toml > exp.fifo & timeout -k 5 120 " +
                             shell_quote(xrun_test::xrun_binary()) + " " +
                             run_args(f, f.dir.file("exp.fifo")) + " --parallel 2");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(f.sql("SELECT count(*) FROM runs WHERE status = 'complete'") == "2");
  CHECK(f.sql("SELECT group_concat(file) FROM experiments") == f.dir.file("exp.fifo"));
}

TEST_CASE("hostile: a --db that is a FIFO is refused at once by every command that opens it",
          "[cli][hostile]") {
  CliFixture f;
  const std::string file = f.write_experiment("t.toml", quick("t"));
  REQUIRE(::mkfifo(f.dir.file("s.fifo").c_str(), 0600) == 0);
  const std::string xrun = shell_quote(xrun_test::xrun_binary());
  // timeout: SQLite's blocking open of the FIFO would wait for ever (124).
  for (const std::string cmd : {"runs", "show 1", "export --format csv", "report -o r.html",
                                "compare --by label"}) {
    auto r = in_dir(f, "timeout -k 5 20 " + xrun + " " + cmd + " --db s.fifo");
    INFO(cmd << "\n" << r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains("s.fifo is not a regular file"));
  }
  auto r = in_dir(f, "timeout -k 5 20 " + xrun + " run " + shell_quote(file) + " --db s.fifo");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("--db s.fifo is not a regular file"));
}

TEST_CASE("hostile: doctor --peak --threads past train.threads' limit is exit 2, not a libgomp crash",
          "[cli][hostile]") {
  CliFixture f;
  for (const char* threads : {"100000", "32768", "1025", "-1"}) {
    const auto r = f.xrun(std::string("doctor --peak --threads ") + threads + " --db " +
                          shell_quote(f.db()));
    INFO(threads << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("give 1 to 1024, as train.threads"));
  }
  CHECK_FALSE(std::filesystem::exists(f.db()));
}

TEST_CASE("hostile: doctor --allreduce checks memory and descriptors before it starts",
          "[cli][hostile][distributed]") {
  CliFixture f;
  // 64 ranks x 4 GiB, twice: 512 GiB, more than any machine these tests run on.
  auto r = f.xrun("doctor --allreduce --ranks 64 --max-mb 4096");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("needs about 512.0 GiB") && Contains("lower --ranks or --max-mb"));
  // 40 ranks in one process: a connection between every two.
  r = xrun_test::run_command("cd " + shell_quote(f.dir.str()) + " && ulimit -n 256 && " +
                             shell_quote(xrun_test::xrun_binary()) +
                             " doctor --allreduce --ranks 40 --max-mb 1");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK_THAT(r.output, Contains("--ranks 40 needs about 4744 open file descriptors") &&
                           Contains("the limit is 256 (ulimit -n)"));
}

TEST_CASE("hostile: data.samples = 1e11 is refused naming the key and the size, not a bad_alloc",
          "[cli][hostile]") {
  CliFixture f;
  const std::string file = f.write_experiment("many.toml", quick("many"));
  const auto r = f.xrun(run_args(f, file) + " --set data.samples=100000000000");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK_THAT(r.output, Contains("data.samples = 100000000000: indexing that many samples takes "
                                "100000000000 x 8 bytes") &&
                           !Contains("bad_alloc"));
  CHECK(f.sql("SELECT status FROM runs") == "failed");
}
