// tests/report/html_check.h: small checks on the report's HTML: a tag-balance
// check (every element closed, in order; void elements and "/>" aside; every
// '&' an entity; no stray '<' in text), cutting out one section, counting
// marks and reading their numeric attributes.
#pragma once

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

namespace report_test {

inline std::string context_at(const std::string& html, size_t at) {
  return " at offset " + std::to_string(at) + ": \"" + html.substr(at, 60) + "\"";
}

// An entity at html[at] ('&'): "&name;" or "&#123;".
inline bool entity_at(const std::string& html, size_t at) {
  size_t i = at + 1;
  const bool numeric = i < html.size() && html[i] == '#';
  if (numeric) ++i;
  const size_t start = i;
  while (i < html.size() && (numeric ? std::isdigit(static_cast<unsigned char>(html[i]))
                                     : std::isalpha(static_cast<unsigned char>(html[i]))))
    ++i;
  return i > start && i < html.size() && html[i] == ';';
}

// "" when the markup is balanced, else what is wrong and where.
inline std::string markup_problem(const std::string& html) {
  static const std::set<std::string> void_elements = {"meta", "link", "br", "hr", "img", "input"};
  std::vector<std::string> open;
  size_t i = 0;
  while (i < html.size()) {
    if (html[i] == '&' && !entity_at(html, i)) return "a bare '&'" + context_at(html, i);
    if (html[i] != '<') {
      ++i;
      continue;
    }
    if (html.compare(i, 9, "<!DOCTYPE") == 0) {
      i = html.find('>', i) + 1;
      continue;
    }
    const size_t end = html.find('>', i);
    if (end == std::string::npos) return "a '<' never closed" + context_at(html, i);
    const std::string tag = html.substr(i + 1, end - i - 1);
    const bool closing = !tag.empty() && tag[0] == '/';
    size_t n = closing ? 1 : 0;
    while (n < tag.size() && std::isalnum(static_cast<unsigned char>(tag[n]))) ++n;
    const std::string name = tag.substr(closing ? 1 : 0, n - (closing ? 1 : 0));
    if (name.empty()) return "a '<' in text" + context_at(html, i);
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0)
      return "unbalanced quotes" + context_at(html, i);
    if (closing) {
      if (open.empty() || open.back() != name)
        return "</" + name + "> closes <" + (open.empty() ? "nothing" : open.back()) + ">" +
               context_at(html, i);
      open.pop_back();
    } else if (!void_elements.count(name) && tag.back() != '/') {
      open.push_back(name);
    }
    i = end + 1;
    if (!closing && (name == "style" || name == "script")) {  // raw text up to its end tag
      i = html.find("</" + name + ">", i);
      if (i == std::string::npos) return "<" + name + "> never closed";
    }
  }
  return open.empty() ? "" : "<" + open.back() + "> never closed";
}

inline size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size()))
    ++n;
  return n;
}

// The <section> whose id is `id`, up to its end ("" when none).
inline std::string section(const std::string& html, const std::string& id) {
  const size_t start = html.find("<section class=\"card\" id=\"" + id + "\"");
  if (start == std::string::npos) return "";
  return html.substr(start, html.find("</section>", start) + 10 - start);
}

// The <figure> captioned `caption` ("" when none).
inline std::string figure(const std::string& html, const std::string& caption) {
  const size_t at = html.find("<figcaption>" + caption + "</figcaption>");
  if (at == std::string::npos) return "";
  const size_t start = html.rfind("<figure", at);
  return html.substr(start, html.find("</figure>", at) + 9 - start);
}

// The numeric values of attribute `attr` on every element whose tag text
// contains `marker` (e.g. class="mark bin" and data-count).
inline std::vector<long> attribute_values(const std::string& html, const std::string& marker,
                                          const std::string& attr) {
  std::vector<long> out;
  for (size_t at = html.find(marker); at != std::string::npos; at = html.find(marker, at + 1)) {
    const size_t tag_start = html.rfind('<', at), tag_end = html.find('>', at);
    const std::string tag = html.substr(tag_start, tag_end - tag_start);
    const size_t a = tag.find(" " + attr + "=\"");
    if (a != std::string::npos) out.push_back(std::stol(tag.substr(a + attr.size() + 3)));
  }
  return out;
}

}  // namespace report_test
