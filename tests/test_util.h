// Helpers shared by the tests: reading files of the source tree.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::test {

inline std::string source_path(const std::string& rel) {
  return std::string(KILN_SOURCE_DIR) + "/" + rel;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The files with extension `ext` in a folder of the source tree, sorted.
inline std::vector<std::string> files_in(const std::string& rel_dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(source_path(rel_dir)))
    if (e.path().extension() == ext) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A .kir test file without its `//` lines (lit RUN lines and comments).
inline std::string strip_comment_lines(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("//", 0) != 0) out += line + "\n";
  return out;
}

}  // namespace kiln::test
