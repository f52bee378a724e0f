// Helpers the file-format tests share: scratch files and folders in the temporary
// directory that are removed whatever happens, and byte-level file builders.
#pragma once
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace kvlab_test {

using namespace std::string_literals;

// A path in the temporary directory that no other test (or concurrent run) uses.
inline std::filesystem::path unique_temp_path(const std::string& stem) {
  static unsigned counter = 0;
  static const auto run = std::random_device{}();
  return std::filesystem::temp_directory_path() /
         ("kvlab_test_" + std::to_string(run) + "_" + std::to_string(counter++) + "_" + stem);
}

// A scratch file removed when the test ends, whatever happens.
class scratch_file {
public:
  explicit scratch_file(const std::string& stem) : path_(unique_temp_path(stem + ".npy")) {}
  ~scratch_file() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;

  const std::filesystem::path& path() const { return path_; }
  void write(const std::string& bytes) const {
    std::ofstream out(path_, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    BOOST_REQUIRE(out.good());
  }
  std::string contents() const {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

private:
  std::filesystem::path path_;
};

// A scratch directory removed with everything in it when the test ends, whatever happens.
class scratch_directory {
public:
  explicit scratch_directory(const std::string& stem = "dir") : path_(unique_temp_path(stem)) {
    std::filesystem::create_directory(path_);
  }
  ~scratch_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  scratch_directory(const scratch_directory&) = delete;
  scratch_directory& operator=(const scratch_directory&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path_ / name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    BOOST_REQUIRE(out.good());
    return path_ / name;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(path_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_))
      names.push_back(entry.path().filename().string());
    return names;
  }

private:
  std::filesystem::path path_;
};

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the `Error` that `action` throws ("" when it throws none).
template <class Error, class Action>
std::string message_of(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}

// A format 1.0 .npy file: magic, version, 2-byte header length, the dict padded with spaces
// and '\n' so the data starts at a multiple of 64 bytes (as np.save writes it), then the data.
inline std::string npy_version_1_file(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  return "\x93NUMPY\x01\x00"s + static_cast<char>(header.size() & 0xff) + static_cast<char>(header.size() >> 8) +
         header + data;
}

} // namespace kvlab_test
