// runner/config_schema.h: the one table of experiment keys (type, default,
// allowed values, range, one-line doc) and the checks driven by it. Parsing,
// validation, defaults, the sweep and the key reference all read this table;
// a key exists only if it is listed here.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace xrun::schema {

enum class KeyType {
  boolean,
  integer,
  number,             // TOML float or integer, kept as double
  string,
  choice,             // a string from `choices`
  number_list,        // list of numbers, each in `range`
  choice_list,        // list of distinct strings from `choices`
  integer_or_auto,    // integer in `range`, or the string "auto"
  boolean_or_cached,  // true, false or the string "cached"
};

// Numeric bounds; an open bound excludes its value.
struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;
  bool bounded() const;
  bool contains(double v) const;
};

struct KeySpec {
  std::string key;  // dotted: "train.optimizer.lr"
  KeyType type = KeyType::string;
  std::string doc;  // one line, for the key reference
  nlohmann::json default_value;     // null when required or `depends`
  std::string depends;              // how a computed default is found ("" = static default)
  std::vector<std::string> choices;
  Range range;
  int length = 0;                   // number_list: exact length (0 = any)
  std::string pattern_doc;          // string keys with an extra rule: allowed values, for docs
  std::string (*extra_check)(const std::string&) = nullptr;  // string keys: "" or what is expected
  int max_bytes = 4096;     // string keys: longest value accepted (UTF-8 bytes)
  bool multiline = false;   // string keys: newlines and tabs allowed (free text)
  bool required = false;
  bool run_setting = true;  // part of a run's resolved config (false: sweep.mode)
  bool sweepable = true;    // may be a sweep axis

  // Fluent builders used by the table.
  KeySpec& def(nlohmann::json v) { default_value = std::move(v); return *this; }
  KeySpec& dep(std::string how) { depends = std::move(how); return *this; }
  KeySpec& one_of(std::vector<std::string> c) { choices = std::move(c); return *this; }
  KeySpec& at_least(double v) { range.min = v; range.min_open = false; return *this; }
  KeySpec& above(double v) { range.min = v; range.min_open = true; return *this; }
  KeySpec& at_most(double v) { range.max = v; range.max_open = false; return *this; }
  KeySpec& below(double v) { range.max = v; range.max_open = true; return *this; }
  KeySpec& len(int n) { length = n; return *this; }
  KeySpec& max_len(int bytes) { max_bytes = bytes; return *this; }
  KeySpec& free_text() { multiline = true; return *this; }
  KeySpec& rule(std::string doc_text, std::string (*check)(const std::string&)) {
    pattern_doc = std::move(doc_text); extra_check = check; return *this;
  }
  KeySpec& must() { required = true; return *this; }
  KeySpec& not_run() { run_setting = false; sweepable = false; return *this; }
  KeySpec& fixed() { sweepable = false; return *this; }
};

// Every key, in reference order (sections in file order, keys within).
const std::vector<KeySpec>& keys();
// The key named `dotted`, or nullptr.
const KeySpec* find(const std::string& dotted);
// True when `dotted` names a table ("train", "train.optimizer", "sweep").
bool is_section(const std::string& dotted);
// The sections, in reference order ("" = top level).
const std::vector<std::string>& sections();

// Closest known name to `unknown` (full dotted names and last segments
// compared, with transpositions), or "" when none is reasonably close.
// `tables` picks section names instead of keys; `sweep_axes` restricts keys
// to sweepable run settings.
std::string suggest(const std::string& unknown, bool tables, bool sweep_axes = false);

// Closest of `names` to `unknown` by edit distance (with transpositions), or
// "" when none is within max(2, length / 3) edits. For commands and columns.
std::string closest_name(const std::string& unknown, const std::vector<std::string>& names);

// A value that breaks a key's rule: the message and the node at fault (an
// array element, or the value itself).
struct ValueProblem {
  const toml::node* at;
  std::string message;  // "expected an integer >= 1 or \"auto\", found a string \"big\""
};

// Checks a TOML value against a key's type, choices and range and returns it
// as JSON (integers as int64, numbers as double). Throws ValueProblem.
nlohmann::json check_value(const KeySpec& spec, const toml::node& value);

// What a value of this key must be, for messages: "an integer >= 1 or \"auto\"".
std::string expected_text(const KeySpec& spec);
// A TOML-like rendering of a JSON value for messages and docs: 32, "fp16", [0.9, 0.999].
std::string render(const nlohmann::json& v);
// How a TOML node is described after "found": "a string \"big\"", "0", "a list".
std::string describe_node(const toml::node& n, bool with_type);
// A number in shortest form: 1, 0.001, 1e-08.
std::string format_number(double v);
// A float value as the double with the same shortest decimal text (0.4914f -> 0.4914).
double float_to_double(float f);

// Renders the key reference in Markdown.
std::string markdown();

}  // namespace xrun::schema
